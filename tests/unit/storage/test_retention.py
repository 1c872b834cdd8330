"""Retention by size and by age: old segments go, the active one never does, the log start moves."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bayou.errors import OffsetOutOfRange
from bayou.records import Record, decode_records, encode_batch, iter_batches
from bayou.storage import LogConfig, PartitionLog
from bayou.storage.segment import segment_name

HOUR = 3600 * 1000


def append_segments(log: PartitionLog, segments: int, *, ts: int, per_segment: int = 3) -> None:
    """Fill ``segments`` segments of ``per_segment`` batches each (rolling explicitly)."""
    for _ in range(segments):
        for _ in range(per_segment):
            log.append(encode_batch([Record(b"x" * 100, timestamp=ts), Record(b"y" * 100, timestamp=ts)]))
        log.roll()


def offsets(log: PartitionLog) -> list[int]:
    out: list[int] = []
    offset = log.log_start_offset
    while offset < log.next_offset:
        res = log.read(offset, 1 << 20)
        for p, _h in iter_batches(res.data):
            out.extend(r.offset for r in decode_records(res.data, p))
        offset = res.next_offset
    return out


def seg_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_nothing_deleted_without_limits(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path, LogConfig(retention_ms=-1, retention_bytes=-1))
    append_segments(lg, 4, ts=0)
    assert lg.apply_retention(now=10**15) == 0
    assert lg.log_start_offset == 0 and len(lg.segments) == 5
    lg.close()


def test_retention_by_bytes(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path, LogConfig(retention_ms=-1, retention_bytes=2000))
    append_segments(lg, 6, ts=int(time.time() * 1000))
    lg.append(encode_batch([Record(b"active")]))
    seg_size = lg.segments[0].size
    total = lg.size_bytes
    assert seg_size < 2000 < total
    bases = [s.base_offset for s in lg.segments]
    deleted = lg.apply_retention()
    assert deleted >= 1
    kept = lg.segments
    assert [s.base_offset for s in kept] == bases[deleted:]
    # the oldest remaining segment could not go without dropping below the limit
    assert lg.size_bytes >= 2000
    assert lg.size_bytes - kept[0].size < 2000
    assert lg.log_start_offset == bases[deleted] > 0
    for b in bases[:deleted]:
        for suffix in (".log", ".index", ".timeindex"):
            assert not (tmp_path / (segment_name(b) + suffix)).exists()
    assert offsets(lg) == list(range(lg.log_start_offset, lg.next_offset))
    assert lg.apply_retention() == 0  # idempotent
    lg.close()


def test_retention_by_bytes_never_deletes_the_active_segment(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path, LogConfig(segment_bytes=1 << 20, retention_ms=-1, retention_bytes=1))
    append_segments(lg, 3, ts=0)
    lg.append(encode_batch([Record(b"z" * 5000)]))  # the active segment alone is over the limit
    end = lg.next_offset
    assert lg.apply_retention() == 3
    assert len(lg.segments) == 1
    assert lg.log_start_offset == lg.active.base_offset == end - 1
    assert lg.active.size > 1
    assert offsets(lg) == [end - 1]
    assert lg.apply_retention() == 0
    lg.close()


def test_retention_by_age(tmp_path: Path) -> None:
    now = 1_000 * HOUR
    lg = PartitionLog(tmp_path, LogConfig(retention_ms=HOUR, retention_bytes=-1))
    append_segments(lg, 2, ts=now - 3 * HOUR)  # expired
    append_segments(lg, 1, ts=now - HOUR // 2)  # young
    append_segments(lg, 1, ts=now - 5 * HOUR)  # expired, but behind a young one: kept (oldest first)
    lg.append(encode_batch([Record(b"active", timestamp=now - 10 * HOUR)]))
    bases = [s.base_offset for s in lg.segments]
    assert lg.apply_retention(now=now) == 2
    assert [s.base_offset for s in lg.segments] == bases[2:]
    assert lg.log_start_offset == bases[2]
    # an hour later the young one expires too, and then the old one behind it; never the active one
    assert lg.apply_retention(now=now + HOUR) == 2
    assert [s.base_offset for s in lg.segments] == bases[4:]
    assert lg.apply_retention(now=now + 100 * HOUR) == 0
    assert len(lg.segments) == 1 and lg.active.size > 0
    lg.close()


def test_retention_by_age_uses_the_newest_record(tmp_path: Path) -> None:
    now = 1_000 * HOUR
    lg = PartitionLog(tmp_path, LogConfig(retention_ms=HOUR))
    lg.append(encode_batch([Record(b"a", timestamp=now - 5 * HOUR)]))
    lg.append(encode_batch([Record(b"b", timestamp=now - 1000)]))  # keeps the segment young
    lg.roll()
    lg.append(encode_batch([Record(b"c", timestamp=now)]))
    assert lg.apply_retention(now=now) == 0
    assert lg.apply_retention(now=now + HOUR) == 1
    lg.close()


def test_read_below_log_start_is_out_of_range(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path, LogConfig(retention_bytes=1))
    append_segments(lg, 3, ts=0)
    lg.append(encode_batch([Record(b"active")]))
    lg.apply_retention()
    start = lg.log_start_offset
    assert start > 0
    for bad in (0, start - 1):
        with pytest.raises(OffsetOutOfRange):
            lg.read(bad, 1 << 20)
    res = lg.read(start, 1 << 20)
    assert (res.start_offset, res.log_start_offset, res.record_count) == (start, start, 1)
    assert lg.offset_for_timestamp(-1) == start
    lg.close()


def test_log_start_survives_reopen(tmp_path: Path) -> None:
    cfg = LogConfig(retention_bytes=1)
    lg = PartitionLog(tmp_path, cfg)
    append_segments(lg, 3, ts=0)
    lg.append(encode_batch([Record(b"active")]))
    lg.apply_retention()
    start, end = lg.log_start_offset, lg.next_offset
    files = seg_files(tmp_path)
    lg.close()
    lg = PartitionLog(tmp_path, cfg)
    assert (lg.log_start_offset, lg.next_offset) == (start, end)
    assert seg_files(tmp_path) == files
    with pytest.raises(OffsetOutOfRange):
        lg.read(start - 1, 100)
    assert offsets(lg) == [start]
    assert lg.append(encode_batch([Record(b"more")])).base_offset == end
    lg.close()


def test_retention_on_a_single_segment_is_a_no_op(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path, LogConfig(retention_ms=1, retention_bytes=1))
    lg.append(encode_batch([Record(b"x", timestamp=0)]))
    assert lg.apply_retention(now=10**15) == 0
    assert lg.log_start_offset == 0 and lg.next_offset == 1
    lg.close()
