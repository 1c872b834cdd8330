"""File-system helpers: atomic replace (write temp, fsync, rename, fsync dir); the fsync of log
files, whose failure the log must tell from any other OSError."""

from __future__ import annotations

import os
from pathlib import Path


class FsyncFailed(OSError):
    """An fsync syscall failed: what it covered may not be on disk, and a later fsync of the same
    file cannot tell (Linux reports a writeback error once, and may have dropped the pages it
    could not write or marked them clean). ``PartitionLog`` then stops claiming durability
    (``PartitionLog.fsync_error``)."""


def fsync(fd: int) -> None:
    """``os.fsync``, its failure raised as FsyncFailed."""
    try:
        os.fsync(fd)
    except OSError as exc:
        raise FsyncFailed(exc.errno, exc.strerror) from exc


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)
