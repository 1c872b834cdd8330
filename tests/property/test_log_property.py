"""Property tests for PartitionLog: random appends, reopens, rolls and truncations against a model."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayou.records import Compression, Record, decode_records, encode_batch, iter_batches
from bayou.storage import LogConfig, PartitionLog

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(min_value=1, max_value=6),
              st.integers(min_value=0, max_value=400)),
    st.tuples(st.just("reopen"), st.booleans(), st.just(0)),
    st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=100), st.just(0)),
    st.tuples(st.just("roll"), st.just(0), st.just(0)),
    st.tuples(st.just("flush"), st.just(0), st.just(0)),
)
CONFIGS = st.builds(
    LogConfig,
    segment_bytes=st.sampled_from([1024, 2048, 1 << 20]),
    index_interval_bytes=st.sampled_from([1, 100, 4096]),
)


class Model:
    """Batches as (base offset, values); truncate_to keeps a batch that straddles the cut."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[bytes], int]] = []  # base, values, timestamp

    @property
    def next_offset(self) -> int:
        if not self.batches:
            return 0
        base, values, _ts = self.batches[-1]
        return base + len(values)

    def append(self, values: list[bytes], ts: int = 0) -> int:
        base = self.next_offset
        self.batches.append((base, values, ts))
        return base

    def truncate_to(self, offset: int) -> None:
        self.batches = [batch for batch in self.batches if batch[0] < offset]

    def records(self) -> list[tuple[int, bytes]]:
        return [(b + i, v) for b, vs, _ts in self.batches for i, v in enumerate(vs)]

    def offset_for_timestamp(self, t: int) -> int | None:
        return next((b for b, _vs, ts in self.batches if ts >= t), None)


def read_back(log: PartitionLog, start: int = 0) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = start
    while offset < log.next_offset:
        res = log.read(offset, 700)
        assert res.data and res.start_offset <= offset
        for p, _h in iter_batches(res.data):
            out.extend((r.offset, r.value) for r in decode_records(res.data, p) if r.offset >= offset)
        offset = res.next_offset
    return out


def check(log: PartitionLog, model: Model) -> None:
    assert log.next_offset == model.next_offset
    assert read_back(log) == model.records()
    assert log.durable_offset <= log.next_offset
    stamps = {ts for _b, _vs, ts in model.batches}
    for t in sorted(stamps | {t + 1 for t in stamps} | {0}):
        assert log.offset_for_timestamp(t) == model.offset_for_timestamp(t), t


@SETTINGS
@given(config=CONFIGS, ops=st.lists(OPS, min_size=1, max_size=25),
       codec=st.sampled_from([Compression.NONE, Compression.LZ4]))
def test_log_matches_model(config: LogConfig, ops: list[tuple[str, int, int]], codec: Compression) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        log = PartitionLog(path, config)
        model = Model()
        counter = 0
        try:
            for kind, a, b in ops:
                if kind == "append":
                    values = [f"{counter}-{j}-".encode() + b"p" * b for j in range(a)]
                    counter += 1
                    # timestamps rise, except every third batch which goes back in time
                    ts = 1000 + counter * 10 - (25 if counter % 3 == 0 else 0)
                    info = log.append(encode_batch([Record(v, timestamp=ts) for v in values],
                                                   compression=codec))
                    assert info.base_offset == model.append(values, ts)
                    assert info.last_offset == info.base_offset + a - 1
                elif kind == "reopen":
                    log.close()
                    log = PartitionLog(path, config, recover=bool(a))
                    assert log.truncated_bytes == 0
                elif kind == "truncate":
                    offset = model.next_offset * a // 100
                    log.truncate_to(offset)
                    model.truncate_to(offset)
                elif kind == "roll":
                    log.roll()
                else:
                    log.flush()
                    assert log.durable_offset == log.next_offset
                check(log, model)
            # segments tile the offset space without gaps
            for seg, nxt in zip(log.segments, log.segments[1:], strict=False):
                assert seg.next_offset == nxt.base_offset
            log.close()
            log = PartitionLog(path, config)
            check(log, model)
        finally:
            log.close()


@SETTINGS
@given(sizes=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=12),
       cut=st.integers(min_value=0), garbage=st.binary(max_size=200),
       interval=st.sampled_from([1, 150, 4096]))
def test_torn_tail_recovers_to_the_longest_whole_prefix(sizes: list[int], cut: int, garbage: bytes,
                                                         interval: int) -> None:
    config = LogConfig(index_interval_bytes=interval)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        log = PartitionLog(path, config)
        model = Model()
        ends = []
        for i, n in enumerate(sizes):
            values = [f"b{i}-r{j}".encode() * 3 for j in range(n)]
            model.append(values, i)
            log.append(encode_batch([Record(v, timestamp=i) for v in values]))
            ends.append(log.active.size)
        seg = log.active.path
        log.close()
        size = seg.stat().st_size
        cut %= size + 1
        with seg.open("r+b") as f:
            f.truncate(cut)
            f.seek(cut)
            f.write(garbage)
        whole = sum(1 for e in ends if e <= cut)
        model.batches = model.batches[:whole]
        log = PartitionLog(path, config)
        try:
            kept = ends[whole - 1] if whole else 0
            assert log.truncated_bytes == cut + len(garbage) - kept
            check(log, model)
            assert log.append(encode_batch([Record(b"after")])).base_offset == model.append([b"after"])
            check(log, model)
            assert log.offset_for_timestamp(0) == 0
        finally:
            log.close()
