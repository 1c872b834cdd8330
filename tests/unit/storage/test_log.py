"""PartitionLog on real files: offsets, reads, rolling, reopening, timestamps, truncation, fsync."""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.errors import CorruptRecord, OffsetOutOfRange, RecordTooLarge
from bayou.records import Compression, Record, batch_crc, decode_records, encode_batch, iter_batches
from bayou.storage import FsyncPolicy, LogConfig, PartitionLog
from bayou.storage.segment import segment_name

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=64)


def make_batch(n: int, *, start_ts: int = 1_000, value: bytes = b"v", step: int = 1,
               compression: Compression = Compression.NONE) -> bytes:
    return encode_batch([Record(value + str(i).encode(), key=b"k", timestamp=start_ts + i * step)
                         for i in range(n)], compression=compression)


def read_all(log: PartitionLog, start: int | None = None, max_bytes: int = 1 << 20) -> list[Record]:
    """Every record from ``start`` (default: log start) to the end, in as many reads as needed."""
    offset = log.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < log.next_offset:
        res = log.read(offset, max_bytes)
        assert res.data, f"no progress at offset {offset}"
        for p, _h in iter_batches(res.data):
            out.extend(r for r in decode_records(res.data, p) if r.offset >= offset)
        offset = res.next_offset
    return out


def open_log(path: Path, config: LogConfig = SMALL, **kw: bool) -> PartitionLog:
    return PartitionLog(path, config, **kw)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionLog]:
    lg = open_log(tmp_path / "p0")
    yield lg
    lg.close()


# -- appending --------------------------------------------------------------------------------


def test_empty_log(log: PartitionLog) -> None:
    assert (log.next_offset, log.log_start_offset, log.size_bytes, log.durable_offset) == (0, 0, 0, 0)
    assert len(log.segments) == 1
    assert log.active.path.name == segment_name(0) + ".log" == "00000000000000000000.log"
    res = log.read(0, 1000)
    assert (res.data, res.record_count, res.start_offset, res.next_offset) == (b"", 0, 0, 0)
    assert log.offset_for_timestamp(0) is None


def test_appends_assign_consecutive_offsets(log: PartitionLog) -> None:
    infos = []
    for n in (1, 3, 5, 1):
        b = bytearray(make_batch(n, start_ts=100 * n))
        struct.pack_into(">q", b, 0, 999_999)  # the producer's base offset is overwritten
        infos.append(log.append(b))
    assert [(i.base_offset, i.last_offset, i.record_count) for i in infos] == [
        (0, 0, 1), (1, 3, 3), (4, 8, 5), (9, 9, 1)]
    assert infos[2].max_timestamp == 500 + 4
    assert infos[0].size == len(make_batch(1))
    assert log.next_offset == 10
    assert log.size_bytes == sum(i.size for i in infos)
    assert [r.offset for r in read_all(log)] == list(range(10))
    # stored bytes are the producer's bytes with the base offset filled in
    res = log.read(1, 1 << 20)
    assert [h.base_offset for _p, h in iter_batches(res.data)] == [1, 4, 9]


def test_append_accepts_bytes_bytearray_and_compressed(log: PartitionLog) -> None:
    log.append(make_batch(2))
    log.append(bytearray(make_batch(2, compression=Compression.ZSTD)))
    log.append(make_batch(2, compression=Compression.GZIP))
    assert [r.value for r in read_all(log)] == [b"v0", b"v1"] * 3


def test_append_rejects_bad_batches_without_writing(log: PartitionLog) -> None:
    log.append(make_batch(1))
    size = log.size_bytes
    good = make_batch(3)
    with pytest.raises(CorruptRecord):
        log.append(good + b"\x00")  # length does not match the header
    with pytest.raises(CorruptRecord):
        log.append(good[:-1])
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecord):
        log.append(flipped)
    wrong_count = bytearray(good)
    struct.pack_into(">i", wrong_count, 23, 5)  # last_offset_delta 5 with 3 records
    struct.pack_into(">I", wrong_count, 17, batch_crc(wrong_count, 0, len(wrong_count)))
    with pytest.raises(CorruptRecord):
        log.append(wrong_count)
    with pytest.raises(CorruptRecord):
        log.append(b"\x00" * 10)
    assert (log.next_offset, log.size_bytes) == (1, size)
    # verify_crc=False is the caller's promise; the flipped batch goes in
    log.append(flipped, verify_crc=False)
    assert log.next_offset == 4


def test_batch_over_max_batch_bytes_is_rejected(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(max_batch_bytes=200))
    ok = make_batch(1)
    lg.append(ok)
    with pytest.raises(RecordTooLarge):
        lg.append(encode_batch([Record(b"x" * 300)]))
    assert lg.next_offset == 1
    lg.close()


# -- reading ----------------------------------------------------------------------------------


def fill(log: PartitionLog, batches: int, per_batch: int = 5) -> list[int]:
    """Append ``batches`` equal-sized batches; return their sizes."""
    return [log.append(make_batch(per_batch, start_ts=10 * i)).size for i in range(batches)]


def test_read_starts_at_the_batch_holding_the_offset(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig())
    fill(lg, 4)
    for offset in range(20):
        res = lg.read(offset, 1 << 20)
        first = offset - offset % 5
        assert res.start_offset == first
        assert res.next_offset == 20
        assert res.record_count == 20 - first
        assert (res.log_start_offset, res.log_end_offset) == (0, 20)
        assert [h.base_offset for _p, h in iter_batches(res.data)] == list(range(first, 20, 5))
        # every batch is whole and intact
        assert sum(h.size for _p, h in iter_batches(res.data)) == len(res.data)
    lg.close()


def test_read_at_end_is_empty_and_past_end_or_negative_is_out_of_range(log: PartitionLog) -> None:
    fill(log, 2)
    res = log.read(10, 1 << 20)
    assert (res.data, res.start_offset, res.next_offset, res.record_count) == (b"", 10, 10, 0)
    assert res.log_end_offset == 10
    for bad in (11, 1000, -1):
        with pytest.raises(OffsetOutOfRange):
            log.read(bad, 1 << 20)


def test_max_bytes_is_respected_but_at_least_one_batch(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig())
    sizes = fill(lg, 6)
    s = sizes[0]
    assert len(set(sizes)) == 1
    assert len(lg.read(0, 1).data) == s  # smaller than one batch: still one whole batch
    assert len(lg.read(0, 0).data) == s
    assert len(lg.read(0, s).data) == s
    assert len(lg.read(0, 2 * s - 1).data) == s
    assert len(lg.read(0, 2 * s).data) == 2 * s  # exactly two fit
    assert len(lg.read(7, int(2.5 * s)).data) == 2 * s
    res = lg.read(7, int(2.5 * s))
    assert (res.start_offset, res.next_offset, res.record_count) == (5, 15, 10)
    assert len(lg.read(0, 100 * s).data) == 6 * s
    lg.close()


def test_one_batch_larger_than_max_bytes_and_the_read_chunk(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig())
    big = encode_batch([Record(os.urandom(1000)) for _ in range(1500)])  # ~1.5 MiB, above the 1 MiB scan
    lg.append(make_batch(1))
    lg.append(big)
    lg.append(make_batch(1))
    res = lg.read(1, 10)
    assert len(res.data) == len(big)
    assert res.record_count == 1500
    assert res.next_offset == 1501
    assert lg.read(1501, 10).start_offset == 1501
    assert len(read_all(lg, max_bytes=100)) == 1502
    lg.close()


def test_max_offset_excludes_batches_that_cross_it(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig())
    fill(lg, 3)  # [0-4] [5-9] [10-14]
    def offsets(offset: int, max_offset: int) -> list[int]:
        res = lg.read(offset, 1 << 20, max_offset=max_offset)
        return [h.base_offset for _p, h in iter_batches(res.data)]
    assert offsets(0, 10) == [0, 5]
    assert offsets(0, 9) == [0]  # batch 5-9 ends at 9 which is not below 9
    assert offsets(0, 11) == [0, 5]
    assert offsets(0, 15) == [0, 5, 10]
    assert offsets(0, 1000) == [0, 5, 10]  # beyond the end: the end wins
    assert offsets(0, 3) == []  # the first batch crosses it
    assert offsets(6, 10) == [5]
    res = lg.read(5, 1 << 20, max_offset=5)
    assert (res.data, res.record_count, res.next_offset) == (b"", 0, 5)
    res = lg.read(5, 1 << 20, max_offset=2)
    assert (res.data, res.record_count) == (b"", 0)
    lg.close()


def test_read_records_convenience(log: PartitionLog) -> None:
    fill(log, 3)
    recs = log.read_records(7, 4)
    assert [r.offset for r in recs] == [7, 8, 9, 10]
    assert [r.offset for r in log.read_records(12, 100)] == [12, 13, 14]
    assert [r.offset for r in log.read_records(0, 100, max_offset=10)] == list(range(10))
    assert log.read_records(15, 10) == []


def test_batch_header_at(log: PartitionLog) -> None:
    fill(log, 3)
    h = log.batch_header_at(7)
    assert h is not None and (h.base_offset, h.last_offset) == (5, 9)
    assert log.batch_header_at(15) is None


# -- rolling ----------------------------------------------------------------------------------


def test_segments_roll_by_size(log: PartitionLog, tmp_path: Path) -> None:
    infos = [log.append(make_batch(3, value=b"x" * 60)) for _ in range(20)]
    assert infos[0].size < 1024
    assert len(log.segments) > 3
    for seg, nxt in zip(log.segments, log.segments[1:], strict=False):
        assert 0 < seg.size <= 1024
        assert seg.next_offset == nxt.base_offset  # contiguous
        assert seg.path.name == segment_name(seg.base_offset) + ".log"
    names = sorted(p.name for p in (tmp_path / "p0").glob("*.log"))
    assert names == [segment_name(s.base_offset) + ".log" for s in log.segments]
    assert len(read_all(log)) == 60
    # reads stop at a segment boundary and pick up in the next one
    res = log.read(0, 1 << 20)
    assert res.next_offset == log.segments[1].base_offset


def test_a_batch_bigger_than_a_segment_gets_its_own(log: PartitionLog) -> None:
    log.append(make_batch(1))
    big = encode_batch([Record(b"y" * 3000)])
    info = log.append(big)
    log.append(make_batch(1))
    assert [s.base_offset for s in log.segments] == [0, 1, 2]
    assert log.segments[1].size == info.size > 1024
    assert [r.offset for r in read_all(log)] == [0, 1, 2]


def test_segments_roll_by_age(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(segment_ms=200))
    lg.append(make_batch(1))
    created = lg.active.created_ms
    assert created is not None and abs(created - time.time() * 1000) < 5000
    time.sleep(0.25)
    lg.append(make_batch(1))
    assert [s.base_offset for s in lg.segments] == [0, 1]
    assert lg.active.created_ms is not None and lg.active.created_ms >= created + 200
    lg.close()


def test_age_survives_reopen_via_file_time(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(segment_ms=60_000))
    lg.append(make_batch(1))
    lg.close()
    seg_path = tmp_path / (segment_name(0) + ".log")
    old = time.time() - 3600
    os.utime(seg_path, (old, old))
    lg = open_log(tmp_path, LogConfig(segment_ms=60_000))
    assert lg.active.created_ms is not None and lg.active.created_ms <= (old + 1) * 1000
    lg.append(make_batch(1))
    assert [s.base_offset for s in lg.segments] == [0, 1]
    lg.close()


def test_explicit_roll(log: PartitionLog) -> None:
    log.roll()  # empty active segment: nothing to roll
    assert len(log.segments) == 1
    fill(log, 1)
    log.roll()
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 5]
    assert log.active.size == 0 and log.next_offset == 5
    assert log.append(make_batch(1)).base_offset == 5


# -- reopening --------------------------------------------------------------------------------


@pytest.mark.parametrize("recover", [True, False])
def test_reopen_gives_same_state(tmp_path: Path, recover: bool) -> None:
    lg = open_log(tmp_path)
    for i in range(30):
        lg.append(make_batch(1 + i % 4, start_ts=i * 7, value=b"r" * 40))
    before = read_all(lg)
    bases = [s.base_offset for s in lg.segments]
    end = lg.next_offset
    lg.close()
    lg = open_log(tmp_path, recover=recover)
    assert lg.truncated_bytes == 0
    assert lg.next_offset == end == lg.durable_offset
    assert [s.base_offset for s in lg.segments] == bases
    assert read_all(lg) == before
    assert lg.append(make_batch(2)).base_offset == end
    lg.close()
    lg = open_log(tmp_path, recover=recover)
    assert lg.next_offset == end + 2
    assert read_all(lg)[: len(before)] == before
    lg.close()


def test_reopen_after_roll_keeps_empty_active_segment(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    fill(lg, 2)
    lg.roll()
    lg.close()
    lg = open_log(tmp_path)
    assert [s.base_offset for s in lg.segments] == [0, 10]
    assert lg.next_offset == 10
    assert lg.append(make_batch(1)).base_offset == 10
    lg.close()


def test_stale_temp_files_are_removed_on_open(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    fill(lg, 1)
    lg.close()
    (tmp_path / "x.tmp").write_bytes(b"junk")
    (tmp_path / (segment_name(0) + ".log.deleted")).write_bytes(b"junk")
    lg = open_log(tmp_path)
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("*.deleted"))
    assert lg.next_offset == 5
    lg.close()


# -- timestamps -------------------------------------------------------------------------------


TS_BATCHES = [
    [1000, 1005, 1003],
    [990, 1010],  # goes back in time
    [1010, 1010, 1011],
    [500],  # far back
    [2000, 1500, 2500],
    [1200],
    [3000, 10, 20],
    [2999],
]


def first_offset_at_or_after(all_ts: list[int], t: int) -> int | None:
    return next((i for i, ts in enumerate(all_ts) if ts >= t), None)


@pytest.mark.parametrize("config",
                         [LogConfig(), SMALL, LogConfig(segment_bytes=1024, index_interval_bytes=1)],
                         ids=["one-segment", "small-segments", "index-every-batch"])
def test_offset_for_timestamp_non_monotonic_across_segments(tmp_path: Path, config: LogConfig) -> None:
    lg = open_log(tmp_path, config)
    all_ts: list[int] = []
    for stamps in TS_BATCHES * 3:
        lg.append(encode_batch([Record(b"z" * 150, timestamp=t) for t in stamps]))
        all_ts.extend(stamps)
    if config.segment_bytes == 1024:
        assert len(lg.segments) > 3
    probes = sorted({t + d for t in all_ts for d in (-1, 0, 1)} | {-5, 0, 5000})
    for reopen in (False, True):
        if reopen:
            lg.close()
            lg = open_log(tmp_path, config)
        for t in probes:
            assert lg.offset_for_timestamp(t) == first_offset_at_or_after(all_ts, t), t
    lg.close()


# -- truncation -------------------------------------------------------------------------------


def test_truncate_to_within_the_active_segment(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(index_interval_bytes=1))
    fill(lg, 4)  # [0-4] [5-9] [10-14] [15-19]
    lg.flush()
    lg.truncate_to(12)  # the batch 10-14 straddles 12 and is kept
    assert lg.next_offset == 15
    assert lg.durable_offset == 15
    lg.truncate_to(10)
    assert lg.next_offset == 10
    assert [r.offset for r in read_all(lg)] == list(range(10))
    assert lg.append(make_batch(2)).base_offset == 10
    assert [r.offset for r in read_all(lg)] == list(range(12))
    lg.truncate_to(100)  # past the end: nothing
    assert lg.next_offset == 12
    lg.close()
    lg = open_log(tmp_path, LogConfig(index_interval_bytes=1))
    assert lg.truncated_bytes == 0 and lg.next_offset == 12
    assert [r.offset for r in read_all(lg)] == list(range(12))
    lg.close()


def test_truncate_to_across_segments(log: PartitionLog, tmp_path: Path) -> None:
    for _ in range(20):
        log.append(make_batch(3, value=b"x" * 60))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    cut = bases[2] + 1  # inside the third segment's first batch: it straddles and stays
    log.truncate_to(cut)
    assert [s.base_offset for s in log.segments] == bases[:3]
    assert log.next_offset == bases[2] + 3
    assert sorted(p.name for p in (tmp_path / "p0").glob("*.log")) == [
        segment_name(b) + ".log" for b in bases[:3]]
    assert not (tmp_path / "p0" / (segment_name(bases[3]) + ".index")).exists()
    log.truncate_to(bases[1])  # exactly a segment base: that segment goes entirely
    assert [s.base_offset for s in log.segments] == bases[:1]
    assert log.next_offset == bases[1]
    assert log.append(make_batch(1)).base_offset == bases[1]
    log.truncate_to(0)
    assert (log.next_offset, log.size_bytes, len(log.segments)) == (0, 0, 1)
    assert log.append(make_batch(1)).base_offset == 0
    assert [r.value for r in read_all(log)] == [b"v0"]


def test_truncate_then_timestamps_still_found(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(index_interval_bytes=1))
    lg.append(make_batch(2, start_ts=100))
    lg.append(make_batch(2, start_ts=900))
    lg.truncate_to(2)
    assert lg.offset_for_timestamp(500) is None
    lg.append(make_batch(2, start_ts=600))
    assert lg.offset_for_timestamp(500) == 2
    assert lg.offset_for_timestamp(101) == 1
    lg.close()


# -- durability -------------------------------------------------------------------------------


def test_flush_and_sync_to(log: PartitionLog) -> None:
    log.sync_to(0)  # nothing to wait for
    info = log.append(make_batch(3))
    assert log.durable_offset == 0
    log.sync_to(info.last_offset + 1)
    assert log.durable_offset == 3
    assert not log.active.dirty
    log.flush()  # nothing dirty: returns at once
    log.append(make_batch(2))
    log.flush()
    assert log.durable_offset == log.next_offset == 5


def test_group_commit_from_eight_threads(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(segment_bytes=64 * 1024, fsync=FsyncPolicy("always")))
    per_thread, threads = 25, 8
    errors: list[BaseException] = []
    acked: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker(t: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                info = lg.append(make_batch(4, value=f"t{t}-{i}-".encode()))
                lg.sync_to(info.last_offset + 1)
                assert lg.durable_offset >= info.last_offset + 1
                with lock:
                    acked.append(info.last_offset)
        except BaseException as exc:  # reported below
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in ts), "a sync_to caller never returned"
    assert errors == []
    total = per_thread * threads * 4
    assert len(acked) == per_thread * threads
    assert lg.next_offset == total
    assert lg.durable_offset == total
    assert all(not s.dirty for s in lg.segments)
    recs = read_all(lg)
    assert [r.offset for r in recs] == list(range(total))
    # each thread's batches are intact and in its own order
    for t in range(threads):
        mine = [r.value for r in recs if r.value.startswith(f"t{t}-".encode())]
        assert mine == [f"t{t}-{i}-{j}".encode() for i in range(per_thread) for j in range(4)]
    lg.close()


def test_concurrent_flush_callers_all_return(log: PartitionLog) -> None:
    fill(log, 3)
    ts = [threading.Thread(target=log.flush) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in ts)
    assert log.durable_offset == log.next_offset == 15


def test_failed_fsync_does_not_advance_durable_offset(log: PartitionLog) -> None:
    from bayou.errors import StorageError

    log.append(make_batch(1))
    log.flush()
    log.append(make_batch(1))
    seg = log.active
    real_file = seg.file
    fifo = log.dir / "fifo"
    os.mkfifo(fifo)  # fsync on a pipe fails with EINVAL: a real failing fsync, no mocks
    seg.file = log.handles.file(fifo, os.O_RDWR)
    try:
        with pytest.raises(StorageError):
            log.flush()
    finally:
        seg.file.discard()
        seg.file = real_file
        fifo.unlink()
    assert log.durable_offset == 1  # the second record was never made durable


def test_delete_removes_files(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "p")
    for _ in range(10):
        lg.append(make_batch(3, value=b"x" * 60))
    assert len(list((tmp_path / "p").iterdir())) > 3
    lg.delete()
    assert list((tmp_path / "p").iterdir()) == []


def test_a_short_write_is_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """os.write may take less than it was given: the append writes the rest, and the batches
    read back whole and in order (the write-through path, fsync not ``always``)."""
    real_write = os.write
    calls = {"n": 0}

    def seven_bytes_at_a_time(fd: int, data: bytes) -> int:
        calls["n"] += 1
        return real_write(fd, bytes(data)[:7])

    log = open_log(tmp_path / "p")
    monkeypatch.setattr(os, "write", seven_bytes_at_a_time)
    for i in range(5):
        log.append(make_batch(3, start_ts=1_000 + i, value=b"short%d" % i))
    monkeypatch.setattr(os, "write", real_write)
    assert calls["n"] > 5 * 10  # every batch took many writes
    assert [r.offset for r in read_all(log)] == list(range(15))
    assert [r.value for r in read_all(log)] == [b"short%d%d" % (i, j) for i in range(5) for j in range(3)]
    assert sum(os.stat(s.path).st_size for s in log.segments) == log.size_bytes
    log.close()
