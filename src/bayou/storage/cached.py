"""Reads that never wait for the disk: ``pread_cached`` takes bytes from the page cache or raises
``WouldBlock``, so the broker can serve a read on its event loop when the bytes are in memory (a
consumer at the tail reads what was just written) and hand it to an I/O thread only when they
are not. Linux's ``preadv2(RWF_NOWAIT)``; where the kernel or the file system lacks it, every
such read is refused and the thread serves all of them, as before."""

from __future__ import annotations

import errno
import os

from bayou.errors import WouldBlock

_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS}
MAX_BYTES = 256 * 1024  # the most one read on the event loop copies


def pread_cached(fd: int, size: int, position: int, *, in_file: bool = False) -> bytes:
    """What ``os.pread(fd, size, position)`` returns (fewer bytes at the end of the file), taken
    from the page cache, or WouldBlock: for bytes not all cached, and for more than
    ``MAX_BYTES`` (an event-loop read copies little). ``in_file``: the caller knows the range is
    written (no ``fstat`` for the file's size; were it cut meanwhile, the short read is WouldBlock
    and the thread's read tells)."""
    global _NOWAIT
    if _NOWAIT is None:
        raise WouldBlock
    if not in_file:
        size = min(size, os.fstat(fd).st_size - position)
    if size <= 0:
        return b""
    if size > MAX_BYTES:
        raise WouldBlock
    buf = bytearray(size)
    try:
        n = os.preadv(fd, [buf], position, _NOWAIT)
    except BlockingIOError:
        raise WouldBlock from None
    except OSError as exc:
        if exc.errno in _UNSUPPORTED:
            _NOWAIT = None  # this kernel or file system has no RWF_NOWAIT for buffered reads
            raise WouldBlock from None
        raise
    if n != size:  # part of the range is not cached (or the file was cut meanwhile)
        raise WouldBlock
    return bytes(buf)


__all__ = ["MAX_BYTES", "pread_cached"]
