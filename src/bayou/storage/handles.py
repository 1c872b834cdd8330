"""A bounded cache of open segment and index files, shared by every log of a store.

A broker may hold far more segment files than the process may keep open (50,000 partitions are
150,000 files), so files are opened on first use and the least recently used ones are closed
when the cache is full, as TANK opens partitions on first use.

A descriptor number must never be reused under a reader: a thread that preads a closed (and
reopened, for another file) descriptor would read another file's bytes. So:

- ``use()`` pins a file while the caller works with its descriptor; a pinned file is never
  closed (a file discarded while pinned is closed by its last unpin).
- ``lease(seconds)`` keeps the descriptor number valid without a pin, for zero-copy sends that
  hold the number across event-loop turns, until ``release()`` (leases are counted) or for
  ``seconds`` at most. A leased file is not evicted; a leased file that is discarded (its segment
  deleted) has its descriptor replaced at once by one of ``/dev/null`` (``dup2``), so the disk
  space is freed now and the number is only reused once the lease ends; a send still in flight
  then reads end-of-file, never another file's data.
- ``retire()`` discards a file as soon as nobody holds it: now when it is idle, else at the last
  unpin or lease release (retention: the space of a removed segment comes back as soon as no
  reader or send needs it).

The bound is soft: when every open file is pinned or leased the cache grows past it rather than
fail a read, and shrinks back as they are released.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import resource
import threading
import time
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger("bayou.storage")

# Descriptors left for sockets, state files and the rest when the cache size is derived.
MIN_OPEN_FILES = 16


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20) if soft != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= hard:
        return int(soft if soft != resource.RLIM_INFINITY else hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
        return int(soft)
    log.info("open-file limit raised from %d to %d", soft, hard)
    return int(hard)


def default_capacity() -> int:
    """Half the process's open-file limit: the other half is for connections and the rest."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)
    return max(MIN_OPEN_FILES, limit // 2)


class CachedFile:
    """One file of a segment, opened through its cache. Its state is guarded by the cache lock."""

    __slots__ = ("_cache", "_fd", "_lease_until", "_leases", "_pins", "discarded", "flags", "path",
                 "retiring")

    def __init__(self, cache: HandleCache, path: Path, flags: int) -> None:
        self._cache = cache
        self.path = path
        self.flags = flags
        self._fd = -1
        self._pins = 0
        self._lease_until = 0.0
        self._leases = 0
        self.discarded = False
        self.retiring = False

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    def use(self) -> CachedFile:
        """``with file.use() as fd``: the open descriptor, pinned for the block. Raises ValueError
        once discarded and OSError when the file cannot be opened. (The pin count lives in the
        file, so any number of threads may use it at once.)"""
        return self

    def __enter__(self) -> int:
        return self._cache._pin(self)

    def __exit__(self, *_exc: object) -> None:
        self._cache._unpin(self)

    def lease(self, seconds: float) -> int:
        """The open descriptor, kept valid (not closed, not reused) until ``release`` is called
        once for this lease, or for ``seconds`` at most."""
        return self._cache._lease(self, seconds)

    def release(self) -> None:
        """End one lease (its send is done)."""
        self._cache._release(self)

    def retire(self) -> bool:
        """Discard as soon as nobody holds the file; whether that was now."""
        return self._cache._retire(self)

    def close(self) -> None:
        """Close the descriptor if it is idle (the file is reopened on next use)."""
        self._cache._close(self, discard=False)

    def discard(self) -> None:
        """Close for good (the segment was deleted or its log closed): later use raises
        ValueError. Pinned: closed by the last unpin; leased: replaced by /dev/null now."""
        self._cache._close(self, discard=True)


class HandleCache:
    def __init__(self, capacity: int = 0) -> None:
        self.capacity = capacity if capacity > 0 else default_capacity()
        self._lock = threading.Lock()
        self._open: OrderedDict[CachedFile, None] = OrderedDict()  # least recently used first
        self._placeholders: list[tuple[float, int]] = []  # (lease end, /dev/null descriptor)
        self.opens = 0  # files opened (cache misses), for tests and stats
        self.evictions = 0

    def file(self, path: Path, flags: int) -> CachedFile:
        return CachedFile(self, path, flags)

    @property
    def open_count(self) -> int:
        return len(self._open) + len(self._placeholders)

    # -- called by CachedFile ------------------------------------------------------------------

    def _open_fd(self, f: CachedFile) -> int:
        if f.discarded:
            raise ValueError(f"{f.path} is closed")
        if f._fd < 0:
            f._fd = os.open(f.path, f.flags, 0o644)
            self.opens += 1
            self._open[f] = None
        else:
            self._open.move_to_end(f)
        return f._fd

    def _pin(self, f: CachedFile) -> int:
        with self._lock:
            fd = f._fd
            if fd >= 0:  # the hot path: already open
                f._pins += 1
                self._open.move_to_end(f)
                return fd
            fd = self._open_fd(f)
            f._pins += 1
            self._evict()
            return fd

    def _unpin(self, f: CachedFile) -> None:
        with self._lock:
            f._pins -= 1
            if f._pins:
                return
            if f.retiring and not self._leased(f):
                f.discarded = True
            if f.discarded:
                if f._fd >= 0 and f._lease_until <= time.monotonic():
                    self._really_close(f)
            elif len(self._open) > self.capacity:
                self._evict()

    def _lease(self, f: CachedFile, seconds: float) -> int:
        with self._lock:
            fd = self._open_fd(f)
            f._lease_until = max(f._lease_until, time.monotonic() + seconds)
            f._leases += 1
            self._evict()
            return fd

    def _release(self, f: CachedFile) -> None:
        with self._lock:
            if f._leases == 0:
                return
            f._leases -= 1
            if f._leases:
                return
            f._lease_until = 0.0
            if f.retiring:
                f.discarded = True
            if f._fd >= 0 and not f._pins and f.discarded:
                self._really_close(f)

    def _retire(self, f: CachedFile) -> bool:
        with self._lock:
            if f._pins or self._leased(f):
                f.retiring = True
                return False
            f.discarded = True
            if f._fd >= 0:
                self._really_close(f)
            return True

    @staticmethod
    def _leased(f: CachedFile) -> bool:
        return f._leases > 0 and f._lease_until > time.monotonic()

    def _close(self, f: CachedFile, *, discard: bool) -> None:
        with self._lock:
            if discard:
                f.discarded = True
            if f._fd < 0 or f._pins:
                return  # a discarded pinned file is closed by its last unpin
            now = time.monotonic()
            if f._lease_until > now:
                if discard:
                    self._replace_with_placeholder(f)
                return
            self._really_close(f)

    # -- internals (cache lock held) -----------------------------------------------------------

    def _really_close(self, f: CachedFile) -> None:
        self._open.pop(f, None)
        fd, f._fd = f._fd, -1
        try:
            os.close(fd)
        except OSError:
            log.exception("could not close %s", f.path)

    def _replace_with_placeholder(self, f: CachedFile) -> None:
        """Free the file now; keep its descriptor number (on /dev/null) until the lease ends."""
        self._open.pop(f, None)
        fd, f._fd = f._fd, -1
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)
        except OSError:
            log.exception("could not release %s early; it stays open until its lease ends", f.path)
        heapq.heappush(self._placeholders, (f._lease_until, fd))

    def _evict(self) -> None:
        now = time.monotonic()
        while self._placeholders and self._placeholders[0][0] <= now:
            _t, fd = heapq.heappop(self._placeholders)
            with contextlib.suppress(OSError):
                os.close(fd)
        excess = len(self._open) - self.capacity
        if excess <= 0:
            return
        for f in list(self._open):
            if excess <= 0:
                break
            if f._pins or f._lease_until > now:
                continue
            self._really_close(f)
            self.evictions += 1
            excess -= 1

    def sweep(self) -> None:
        """Close placeholders whose lease ended and idle files over the bound (periodically:
        the cache otherwise only shrinks when a file is used or released)."""
        with self._lock:
            self._evict()

    def close_all(self) -> None:
        """Close every idle file and every expired placeholder (tests, shutdown)."""
        with self._lock:
            now = time.monotonic()
            for f in list(self._open):
                if not f._pins and f._lease_until <= now:
                    self._really_close(f)
            self._evict()


_default: HandleCache | None = None
_default_lock = threading.Lock()


def default_cache() -> HandleCache:
    """The process-wide cache for logs opened without one (tests, tools)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = HandleCache()
        return _default
