"""A failed fsync (EIO) takes the partition's log offline: Linux reports a writeback error once
and may drop (or mark clean) the pages it could not write, so a later fsync of the same file
succeeds without them. Nothing past the durable offset may then be declared durable by a retry,
and no append is taken, until the log is opened again (a restart recovers it from disk).

The first two tests are the reviewer's of b38fdbb, the next two the reviewer's of 36f6fb5 (an
fsync in a cut: undone appends, a follower's truncation); each failed there: a later fsync made
the records the failed one covered durable."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import pytest

from bayou.broker.durability import GroupCommit
from bayou.errors import StorageError
from bayou.records import Record, decode_records, encode_batch
from bayou.storage import FsyncPolicy, LogConfig, PartitionLog
from bayou.storage import segment as segment_module

ALWAYS = LogConfig(fsync=FsyncPolicy.parse("always"), segment_bytes=2048, index_interval_bytes=128)
ALWAYS_BIG = LogConfig(fsync=FsyncPolicy.parse("always"), segment_bytes=1 << 20, index_interval_bytes=128)
_real_fsync = os.fsync
_real_write = os.write


def batch(i: int) -> bytes:
    return encode_batch([Record(f"v{i}".encode(), key=b"k", timestamp=1_000 + i)])


def _fail_first_fsync(m: pytest.MonkeyPatch, before: Callable[[], object] | None = None) -> dict[str, int]:
    """The first fsync fails with EIO; later ones succeed, as Linux's do after reporting it."""
    calls = {"n": 0}

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            if before is not None:
                before()
            raise OSError(5, "Input/output error")
        _real_fsync(fd)

    m.setattr(segment_module.os, "fsync", fsync)
    return calls


def test_a_failed_fsync_of_a_sealed_segment_is_not_made_good_by_the_group_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A produce's records are in a segment that rolls, and the roll's background fsync of it
    fails (logged). The produce's group commit must not fsync the segment again and call the
    records durable: it is refused."""

    async def scenario() -> None:
        log = PartitionLog(tmp_path / "p", ALWAYS)
        with ThreadPoolExecutor(2) as io:
            commits = GroupCommit(log, io)
            info = log.append(batch(0), defer=True)
            with monkeypatch.context() as m:
                calls = _fail_first_fsync(m)
                log.roll()  # as _maybe_roll does when the segment is full
                wait(log._roll_syncs)
                assert calls["n"] == 1 and log.durable_offset == 0
                with pytest.raises(StorageError, match="offline: an fsync failed"):
                    await commits.wait(info.last_offset + 1, info.drops)
                assert calls["n"] == 1  # never fsynced again
        assert log.durable_offset == 0
        log.close()

    asyncio.run(scenario())


def test_flush_does_not_retry_a_failed_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shutdown's flush retries after appends were undone (a full disk), but not after the
    fsync itself failed, even when an append made during that fsync was undone with it: the
    flush raises (no clean-shutdown marker) and nothing is durable."""
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0))
    log.append(batch(1), defer=True)
    with monkeypatch.context() as m:
        # the event loop appends while the I/O thread's fsync is in the kernel
        _fail_first_fsync(m, before=lambda: log.append(batch(2), defer=True))
        with pytest.raises(StorageError, match="Input/output"):
            log.flush()
        with pytest.raises(StorageError, match="offline"):
            log.flush()  # the next stop's attempt too
    assert log.durable_offset == 0
    log.close()


def test_after_a_failed_fsync_the_log_refuses_appends_until_it_is_opened_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends are refused with the storage error that names the cause and the remedy, the
    partition reports itself offline, reads go on; the log opened again (a restart) recovers from
    what the file holds and takes appends."""
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0))
    log.sync_to(1)
    log.append(batch(1))
    with monkeypatch.context() as m:
        calls = _fail_first_fsync(m)
        with pytest.raises(StorageError, match="Input/output"):
            log.sync_to(2)
        with pytest.raises(StorageError, match=r"is offline: an fsync failed .*restart the broker"):
            log.append(batch(2))
        with pytest.raises(StorageError, match="offline"):
            log.sync_to(2)
        log.sync_to(1)  # below the durable offset: nothing to make durable
        assert calls["n"] == 1
    assert log.durable_offset == 1 and log.next_offset == 2
    assert log.offline_reason is not None and "fsync failed" in log.offline_reason
    data = log.read(0, 1 << 20).data
    assert [r.value for r in decode_records(data, 0)] == [b"v0"]
    log.close()
    again = PartitionLog(tmp_path / "p", ALWAYS)
    assert again.offline_reason is None and again.next_offset == 2
    again.append(batch(2))
    again.sync_to(3)
    assert again.durable_offset == 3
    again.close()


def test_a_failed_index_fsync_takes_the_log_offline_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sealed segment's indexes are loaded without a check after a crash: their fsync failing is
    a failed fsync like the log file's (the roll's background sync reports it)."""
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0))
    log.sync_to(1)
    real = os.fsync
    seen: list[int] = []

    def fsync(fd: int) -> None:
        seen.append(fd)
        if len(seen) == 2:  # the roll's sync_to fsyncs the log file, then its indexes
            raise OSError(5, "Input/output error")
        real(fd)

    with monkeypatch.context() as m:
        m.setattr(segment_module.os, "fsync", fsync)
        log.append(batch(1))
        log.roll()
        wait(log._roll_syncs)
    assert log.fsync_error is not None
    with pytest.raises(StorageError, match="offline"):
        log.append(batch(2))
    log.close()


# -- a failed fsync in a cut (36f6fb5 review) ---------------------------------------------------


def test_a_failed_fsync_in_the_undo_of_unwritten_appends_is_not_made_good_by_the_retry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offset 0 is in the file but not fsynced; offset 1 is deferred. The group commit's write of
    offset 1 fails (full disk): drop_unwritten cuts it with truncate_to_position, whose fsync
    fails with EIO (the writeback error of offset 0's pages). sync_to then retries the fsync,
    which succeeds without those pages, and offset 0 is declared durable (a produce acked)."""
    log = PartitionLog(tmp_path / "p", ALWAYS_BIG)
    log.append(batch(0))               # write-through: in the page cache, not fsynced
    log.append(batch(1), defer=True)   # pending: written by the group commit's fsync
    assert log.durable_offset == 0
    fsyncs = {"n": 0}
    writes = {"failed": False}

    def write(fd: int, data: object) -> int:
        if not writes["failed"]:
            writes["failed"] = True
            raise OSError(errno.ENOSPC, "No space left on device")
        return _real_write(fd, data)  # type: ignore[arg-type]

    def fsync(fd: int) -> None:
        fsyncs["n"] += 1
        if fsyncs["n"] == 1:  # truncate_to_position's: the writeback error is reported here, once
            raise OSError(errno.EIO, "Input/output error")
        _real_fsync(fd)

    with monkeypatch.context() as m:
        m.setattr(segment_module.os, "write", write)
        m.setattr(segment_module.os, "fsync", fsync)
        with pytest.raises(StorageError):
            log.sync_to(1)  # the produce of offset 0 waits for this
    assert log.durable_offset == 0, "offset 0 acknowledged after its fsync failed"
    assert log.fsync_error is not None
    log.close()


def test_a_failed_fsync_in_a_truncation_is_not_made_good_by_the_next_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader turned follower cuts what diverged (truncate_to, fetcher._cut) while offset 0,
    below the cut, waits for its group commit. The cut's fsync reports offset 0's writeback
    error: the group commit's fsync must not then declare offset 0 durable. And the segment
    follows its file although the fsync failed (it used to keep counting the cut batch, so the
    next append's index entry and recent position pointed past the file's end)."""
    log = PartitionLog(tmp_path / "p", ALWAYS_BIG)
    log.append(batch(0))
    log.append(batch(1))
    with monkeypatch.context() as m:
        _fail_first_fsync(m)
        with pytest.raises(StorageError, match="Input/output"):
            log.truncate_to(1)
        assert os.stat(log.active.path).st_size == log.active.size, "segment size disagrees with the file"
        assert log.next_offset == 1
        with pytest.raises(StorageError, match="offline"):
            log.sync_to(1)
    assert log.durable_offset == 0, "offset 0 declared durable after its fsync failed"
    log.close()


def test_a_failed_index_fsync_in_flush_takes_the_log_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shutdown's flush fsyncs the active segment's indexes after its records: that fsync
    failing takes the log offline too, so the next flush does not succeed and leave a clean
    marker."""
    log = PartitionLog(tmp_path / "p", ALWAYS_BIG)
    for i in range(4):
        log.append(batch(i))  # index entries every 128 bytes: the offset index is dirty
    calls = {"n": 0}

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # the records' fsync, then the offset index's
            raise OSError(errno.EIO, "Input/output error")
        _real_fsync(fd)

    with monkeypatch.context() as m:
        m.setattr(segment_module.os, "fsync", fsync)
        with pytest.raises(StorageError, match="Input/output"):
            log.flush()
        assert log.fsync_error is not None
        with pytest.raises(StorageError, match="offline"):
            log.append(batch(4))
    log.close()
