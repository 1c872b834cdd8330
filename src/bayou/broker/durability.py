"""Waiting for an fsync under fsync=always: the group commit seen from the event loop.

Every acknowledged produce under fsync=always waits until the log is durable past its last
record. Instead of each request taking a thread of the I/O pool to wait in ``sync_to`` (a hand-off
to a thread and back per request), a partition keeps one list of waiters: the first starts an
fsync of everything appended so far in the I/O pool, the ones that arrive meanwhile wait for the
next, and each fsync's end wakes every waiter it covered. One thread hop per fsync, whatever the
number of requests it makes durable (one connection's pipelined requests or many connections').
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from bayou.errors import AppendsUndone, StorageError
from bayou.storage.log import PartitionLog

_UNDONE = "the append was undone: a write to the log failed"


class GroupCommit:
    """The waiters of one partition's log for ``durable_offset`` to pass their offsets."""

    __slots__ = ("_fsync", "_waiters", "io", "log")

    def __init__(self, log: PartitionLog, io: Executor) -> None:
        self.log = log
        self.io = io
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._fsync: asyncio.Future[None] | None = None

    async def wait(self, end: int, drops: int) -> None:
        """Return once every record below ``end`` is on disk; StorageError when the fsync failed
        (nothing it covered is durable: the caller's produce fails, as before; a failed write of
        later appends undoes them but leaves earlier waiters served), or when appends
        were undone since the log's ``drops`` count was ``drops`` (the caller's, read when it
        appended) from an offset below ``end``: its records may have been among them, and its
        offsets may now hold other records. Undos that cut only above ``end`` leave it waiting."""
        if self.log.drops != drops:
            kept = self.log.kept(end, drops)
            if kept is None:
                raise StorageError(_UNDONE)
            drops = kept
        if self.log.durable_offset >= end:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, drops, fut))
        if self._fsync is None:
            self._start()
        await fut

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        target = self.log.next_offset
        self._fsync = fut = loop.run_in_executor(self.io, self.log.sync_to, target)
        fut.add_done_callback(self._done)

    def _done(self, fut: asyncio.Future[None]) -> None:
        self._fsync = None
        exc = None if fut.cancelled() else fut.exception()
        undone: StorageError = StorageError(_UNDONE)
        if isinstance(exc, AppendsUndone):  # what was written before the undone appends is durable
            undone, exc = exc, None
        log = self.log
        durable = log.durable_offset
        left = []
        for end, appended_at, waiter in self._waiters:
            if waiter.done():
                continue  # its request went away
            if exc is not None:
                waiter.set_exception(exc)
                continue
            kept = log.kept(end, appended_at)  # the current count, or None: undone
            if kept is None:
                waiter.set_exception(undone)
            elif end <= durable:
                waiter.set_result(None)
            else:
                left.append((end, kept, waiter))
        self._waiters = left
        if left:
            self._start()


__all__ = ["GroupCommit"]
