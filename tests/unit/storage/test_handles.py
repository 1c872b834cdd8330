"""The bounded handle cache (storage/handles.py) and the logs that open files through it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from bayou.records.batch import encode_batch
from bayou.records.model import Record
from bayou.storage.config import LogConfig
from bayou.storage.handles import HandleCache
from bayou.storage.log import PartitionLog


def batch(value: bytes) -> bytes:
    return encode_batch([Record(value, key=b"k", timestamp=1_000)])


def own_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_many_logs_stay_within_the_bound(tmp_path: Path) -> None:
    cache = HandleCache(8)
    before = len(own_fds())
    logs = [PartitionLog(tmp_path / str(i), LogConfig(), handles=cache) for i in range(100)]
    for i, lg in enumerate(logs):
        lg.append(batch(f"v{i}".encode()))
    assert cache.open_count <= 8
    assert len(own_fds()) <= before + 8
    # every log still reads its own data (files reopened on use)
    for i, lg in enumerate(logs):
        assert lg.read_records(0, 10)[0].value == f"v{i}".encode()
    assert cache.open_count <= 8 and cache.evictions > 0
    for lg in logs:
        lg.close()
    assert cache.open_count == 0


def test_a_pinned_file_is_not_closed_under_a_reader(tmp_path: Path) -> None:
    cache = HandleCache(1)
    a = PartitionLog(tmp_path / "a", LogConfig(), handles=cache)
    b = PartitionLog(tmp_path / "b", LogConfig(), handles=cache)
    a.append(batch(b"from-a"))
    b.append(batch(b"from-b"))
    seg = a.active
    with seg.file.use() as fd:
        b.read_records(0, 1)  # would evict a's file if it were not pinned
        assert os.fstat(fd).st_ino == os.stat(seg.path).st_ino
        assert b"from-a" in os.pread(fd, 200, 0)
    assert cache.open_count <= 1  # back within the bound once unpinned


def test_a_leased_descriptor_of_a_deleted_log_is_freed_but_not_reused(tmp_path: Path) -> None:
    cache = HandleCache(4)
    lg = PartitionLog(tmp_path / "a", LogConfig(), handles=cache)
    lg.append(batch(b"x" * 4096))
    span = lg.locate(0, 1 << 20)
    assert span is not None
    path = lg.active.path
    lg.close()
    path.unlink()
    # the space is released at once: the descriptor now points at /dev/null, not the deleted file
    assert "(deleted)" not in os.readlink(f"/proc/self/fd/{span.fd}")
    assert os.pread(span.fd, 10, 0) == b""  # a send in flight reads end-of-file
    fresh = os.open(tmp_path / "other", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        assert fresh != span.fd  # the number is not reused while the lease lasts
    finally:
        os.close(fresh)


def test_a_deleted_segment_is_never_recreated_by_a_late_reader(tmp_path: Path) -> None:
    cache = HandleCache(1)
    lg = PartitionLog(tmp_path / "a", LogConfig(), handles=cache)
    lg.append(batch(b"x"))
    other = PartitionLog(tmp_path / "b", LogConfig(), handles=cache)
    other.append(batch(b"y"))  # a's file is evicted
    seg = lg.active
    seg.path.unlink()
    with pytest.raises(FileNotFoundError):
        seg.pread(10, 0)
    assert not seg.path.exists()


def test_closed_log_refuses_reads_and_appends(tmp_path: Path) -> None:
    from bayou.errors import StorageError

    lg = PartitionLog(tmp_path / "a", LogConfig())
    lg.append(batch(b"x"))
    lg.close()
    with pytest.raises(StorageError):
        lg.read(0, 100)
    with pytest.raises(StorageError):
        lg.append(batch(b"y"))


def test_roll_does_not_wait_for_the_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A segment roll used to fsync the sealed segment inside append (on the event loop, under
    the partition lock). It is fsynced in the background now, and still made durable."""
    lg = PartitionLog(tmp_path / "a", LogConfig(segment_bytes=256, fsync=LogConfig().fsync))
    lg.append(batch(b"x" * 200))
    real_fsync = os.fsync
    slow = threading.Event()

    def slow_fsync(fd: int) -> None:
        slow.set()
        time.sleep(0.5)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    t0 = time.monotonic()
    lg.append(batch(b"y" * 200))  # rolls
    took = time.monotonic() - t0
    assert len(lg.segments) == 2
    assert took < 0.4, f"append waited {took:.2f} s for the roll's fsync"
    deadline = time.monotonic() + 10
    while lg.durable_offset < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slow.is_set() and lg.durable_offset >= 1  # the sealed segment was made durable
    assert not lg.segments[0].dirty
