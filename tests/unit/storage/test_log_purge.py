"""Deleting records on request: PartitionLog.purge (everything, offsets never reused) and
delete_oldest_segments (the oldest N segments, never the active one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.errors import OffsetOutOfRange
from bayou.records import Record, decode_records, encode_batch, iter_batches
from bayou.storage import FsyncPolicy, LogConfig, PartitionLog
from bayou.storage.segment import segment_name

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=64, fsync=FsyncPolicy("never"))


def make_batch(n: int, value: bytes = b"v") -> bytes:
    return encode_batch([Record(value + b"%d" % i + b"x" * 40, key=b"k", timestamp=1_000 + i)
                         for i in range(n)])


def fill(log: PartitionLog, batches: int, per_batch: int = 3) -> None:
    for _ in range(batches):
        log.append(make_batch(per_batch))


def offsets(log: PartitionLog, start: int) -> list[int]:
    res = log.read(start, 1 << 20)
    return [r.offset for p, _h in iter_batches(res.data) for r in decode_records(res.data, p)
            if r.offset >= start]


def seg_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("*.log"))


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionLog]:
    lg = PartitionLog(tmp_path / "p0", SMALL)
    yield lg
    lg.close()


# -- purge ------------------------------------------------------------------------------------


def test_purge_keeps_offsets_and_empties_the_log(log: PartitionLog) -> None:
    fill(log, 20)
    assert len(log.segments) > 2
    end = log.next_offset
    log.purge()
    assert (log.log_start_offset, log.next_offset, log.size_bytes) == (end, end, 0)
    assert len(log.segments) == 1 and log._bases == [end]
    assert seg_files(log.dir) == [segment_name(end) + ".log"]
    assert log.durable_offset == end  # fsync=never, but nothing below ``end`` exists to lose
    assert log.offset_for_timestamp(0) is None
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 1000)
    with pytest.raises(OffsetOutOfRange):
        log.read(end - 1, 1000)
    res = log.read(end, 1000)
    assert (res.data, res.log_start_offset, res.log_end_offset) == (b"", end, end)

    info = log.append(make_batch(2))
    assert (info.base_offset, info.last_offset) == (end, end + 1)
    assert offsets(log, end) == [end, end + 1] and offsets(log, end + 1) == [end + 1]
    assert log.active.index.rel_offsets.tolist() == [0] and log.active.index.positions.tolist() == [0]
    fill(log, 20)  # rolls again from the new base
    assert offsets(log, end)[0] == end and log.log_start_offset == end


def test_purge_of_empty_or_already_purged_log_is_a_no_op(log: PartitionLog) -> None:
    log.purge()
    assert (log.log_start_offset, log.next_offset, seg_files(log.dir)) == (0, 0, [segment_name(0) + ".log"])
    fill(log, 2)
    log.purge()
    log.purge()
    assert (log.log_start_offset, log.next_offset, len(log.segments)) == (6, 6, 1)


def test_purge_keeps_an_empty_active_segment(log: PartitionLog) -> None:
    fill(log, 3)
    log.roll()  # the active segment is now empty, at the log end
    active = log.active
    log.purge()
    assert log.active is active and log.segments == [active]
    assert log.log_start_offset == log.next_offset == 9


@pytest.mark.parametrize("clean", [True, False])
def test_purge_survives_reopen(tmp_path: Path, clean: bool) -> None:
    lg = PartitionLog(tmp_path, SMALL)
    fill(lg, 20)
    end = lg.next_offset
    lg.purge()
    if clean:
        lg.close()
    lg2 = PartitionLog(tmp_path, SMALL, recover=not clean)
    try:
        assert (lg2.log_start_offset, lg2.next_offset, lg2.size_bytes) == (end, end, 0)
        assert lg2.append(make_batch(1)).base_offset == end
    finally:
        lg2.close()
        lg.close()
    lg3 = PartitionLog(tmp_path, SMALL, recover=True)
    try:
        assert (lg3.log_start_offset, lg3.next_offset) == (end, end + 1)
        assert offsets(lg3, end) == [end]
    finally:
        lg3.close()


def test_crash_between_new_segment_and_deletion_loses_nothing(tmp_path: Path) -> None:
    """purge creates the empty segment at the end before it deletes: a crash in between reopens
    as the unpurged log with an empty active segment, offsets unchanged."""
    lg = PartitionLog(tmp_path, SMALL)
    fill(lg, 5)
    end = lg.next_offset
    lg.close()
    (tmp_path / (segment_name(end) + ".log")).touch()
    lg = PartitionLog(tmp_path, SMALL)
    try:
        assert (lg.log_start_offset, lg.next_offset, lg.active.base_offset) == (0, end, end)
        assert lg.append(make_batch(1)).base_offset == end
        lg.purge()
        assert lg.log_start_offset == lg.next_offset == end + 1
    finally:
        lg.close()


def test_purged_segments_close_once_no_reader_holds_them(log: PartitionLog) -> None:
    """A removed segment's file is closed (its space freed) at once when idle; one that a read
    has pinned, or a zero-copy send has leased, stays readable until that reader lets go."""
    fill(log, 20)
    for sync in list(log._roll_syncs):  # the sealed segments' background fsyncs hold them too
        sync.result(10)
    held = list(log.segments)
    assert len(held) >= 4
    first = held[0].pread(held[0].size, 0)
    leased = held[0].lease_fd(60)  # a zero-copy send in flight
    with held[1].file.use() as pinned:  # a read in progress
        second = os.pread(pinned, held[1].size, 0)
        log.purge()
        assert os.pread(leased, len(first), 0) == first
        assert os.pread(pinned, len(second), 0) == second
        assert held[2].closed  # nobody held it
        assert not held[0].closed and not held[1].closed
    assert held[1].closed  # the read let go
    assert [s for _t, s in log._graveyard] == held[:2]
    held[0].file.release()  # the send is done
    assert held[0].closed
    log._close_buried()
    assert log._graveyard == []


# -- delete_oldest_segments -------------------------------------------------------------------


def test_delete_oldest_segments(log: PartitionLog) -> None:
    fill(log, 20)
    n = len(log.segments)
    bases = list(log._bases)
    assert log.delete_oldest_segments(0) == 0
    assert log.delete_oldest_segments(2) == 2
    assert log.log_start_offset == bases[2] and log._bases == bases[2:]
    assert seg_files(log.dir) == [segment_name(b) + ".log" for b in bases[2:]]
    with pytest.raises(OffsetOutOfRange):
        log.read(bases[2] - 1, 100)
    assert offsets(log, bases[2])[0] == bases[2]
    end = log.next_offset
    assert log.delete_oldest_segments(1000) == n - 3  # never the active one
    assert log.segments == [log.active] and log.log_start_offset == bases[-1]
    assert log.delete_oldest_segments(5) == 0
    assert log.next_offset == end and log.append(make_batch(1)).base_offset == end


def test_delete_oldest_segments_survives_reopen(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path, SMALL)
    fill(lg, 20)
    lg.delete_oldest_segments(3)
    start, end = lg.log_start_offset, lg.next_offset
    lg.close()
    lg = PartitionLog(tmp_path, SMALL)
    try:
        assert (lg.log_start_offset, lg.next_offset) == (start, end)
    finally:
        lg.close()


def test_delete_segments_below_keeps_the_segment_holding_the_offset(log: PartitionLog) -> None:
    """A follower taking its leader's log start: only segments whose records all lie below the
    offset go, never the active one."""
    fill(log, 20)
    bases = list(log._bases)
    assert len(bases) >= 4
    assert log.delete_segments_below(bases[0]) == 0
    assert log.delete_segments_below(bases[1] - 1) == 0  # inside the first segment: it stays
    assert log.delete_segments_below(bases[2] + 1) == 2
    assert log.log_start_offset == bases[2]
    assert log.delete_segments_below(log.next_offset + 100) == len(bases) - 3
    assert log.segments == [log.active] and log.log_start_offset == bases[-1]
