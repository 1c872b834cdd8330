"""PartitionLog.locate: where the batches a read would return lie in one segment file (for
zero-copy serving with os.sendfile); the bytes at those positions are exactly what read returns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bayou.errors import OffsetOutOfRange, StorageError
from bayou.records import Record, encode_batch
from bayou.storage import LogConfig, PartitionLog
from bayou.storage.segment import Segment

CFG = LogConfig(segment_bytes=1024, index_interval_bytes=64)


def batch(i: int, n: int = 3) -> bytes:
    return encode_batch([Record(b"b%d-%d" % (i, j), timestamp=1000 + i) for j in range(n)])


def span_bytes(lg: PartitionLog, offset: int, max_bytes: int, **kw: int) -> bytes:
    span = lg.locate(offset, max_bytes, **kw)
    assert span is not None
    return b"".join(os.pread(span.fd, h.size, pos) for pos, h in span.batches)


@pytest.fixture
def lg(tmp_path: Path) -> PartitionLog:
    log = PartitionLog(tmp_path / "p", CFG)
    for i in range(40):
        log.append(batch(i))
    return log


def test_locate_matches_read(lg: PartitionLog) -> None:
    assert len(lg.segments) > 2
    for offset in (0, 1, 5, 30, 61, lg.next_offset - 1):
        for max_bytes in (1, 200, 10_000):
            expected = lg.read(offset, max_bytes).data
            assert span_bytes(lg, offset, max_bytes) == expected


def test_locate_stays_in_one_segment_and_respects_the_limit(lg: PartitionLog) -> None:
    span = lg.locate(0, 1 << 20)
    assert span is not None
    assert span.next_offset == lg.segments[1].base_offset  # never across a segment file
    limited = lg.locate(0, 1 << 20, max_offset=7)
    assert limited is not None and limited.next_offset <= 7
    assert lg.locate(lg.next_offset, 100) is None
    assert lg.locate(3, 100, max_offset=3) is None


def test_locate_below_the_log_start(lg: PartitionLog) -> None:
    lg.delete_oldest_segments(1)
    with pytest.raises(OffsetOutOfRange):
        lg.locate(0, 100)
    span = lg.locate(lg.log_start_offset, 100)
    assert span is not None and span.batches[0][1].base_offset == lg.log_start_offset


@pytest.mark.parametrize("error", [OSError(5, "Input/output error"), ValueError("closed")])
def test_locate_retries_a_failed_segment_once(lg: PartitionLog, monkeypatch: pytest.MonkeyPatch,
                                              error: Exception) -> None:
    """A segment that cannot be read (deleted meanwhile, EIO): one more try from the segment list
    as it is then; when that fails too, a StorageError (it used to recurse without bound)."""
    real = Segment.find_position
    failures = {"left": 1}

    def failing(self: Segment, *args: object, **kwargs: object) -> object:
        if failures["left"]:
            failures["left"] -= 1
            raise error
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Segment, "find_position", failing)
    assert span_bytes(lg, 5, 200) == lg.read(5, 200).data  # the retry found it
    failures["left"] = 2
    with pytest.raises(StorageError):
        lg.locate(5, 200)
    assert failures["left"] == 0  # two attempts, no more
    failures["left"] = 10**6
    with pytest.raises(StorageError):
        lg.locate(5, 200)
    assert failures["left"] == 10**6 - 2


def test_the_first_batch_base_follows_retention_purge_and_truncation(tmp_path: Path) -> None:
    """TANK's first available sequence comes from ``first_batch_base``, remembered between calls:
    it must follow every change of the log's start."""
    lg = PartitionLog(tmp_path / "p", CFG)
    assert lg.first_batch_base() is None
    for i in range(40):
        lg.append(batch(i))
    assert lg.first_batch_base() == lg.first_batch_base(nowait=True) == 0
    lg.delete_oldest_segments(1)  # retention
    assert lg.first_batch_base() == lg.log_start_offset > 0
    start = lg.log_start_offset
    lg.truncate_to(start + 2)  # a follower cut back, then written again: the first batch stays
    lg.append(batch(50))
    assert lg.first_batch_base() == start
    lg.purge()
    assert lg.first_batch_base() is None
    lg.append(batch(99))
    assert lg.first_batch_base() == lg.log_start_offset
    lg.close()
