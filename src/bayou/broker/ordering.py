"""Pipelined requests, appended in arrival order: the one signal between a connection's serve loop
(server/frames.py) and the produce path (broker/produce.py).

A connection that pipelines gets each request served as soon as the one before it has made every
append it began and waits only for what the append promises (the fsync under fsync=always, the
replicas under acks=all): the request is then *released*. Appends thus keep the order the client
sent them in (an idempotent producer's sequences arrive in order), while the waits of one
connection's requests overlap and share group commits, the way different connections' already
do. A request that appends nothing is released when it ends: everything else stays as strictly
ordered as before.

The produce path brackets each append: ``begin`` before, ``appended`` once the batch is in the
log (or the attempt failed). Outside a pipelining connection (no request in the context) both do
nothing.

A request that appends to several partitions concurrently (Kafka's Produce) counts them up front
(``expect``) and runs each under a ``slot``: the request is then released only once every
partition has appended or given up, even when one of them waits before its append (a producer
table rebuilt after a restart) while another has already appended.
"""

from __future__ import annotations

import asyncio
import contextvars


class Ordered:
    """One request of a pipelining connection: ``released`` resolves once every append it began
    is made."""

    __slots__ = ("expected", "outstanding", "released")

    def __init__(self, released: asyncio.Future[None]) -> None:
        self.released = released
        self.outstanding = 0
        self.expected = 0  # counted by ``expect``, not yet taken by a ``slot``

    def release(self) -> None:
        if not self.released.done():
            self.released.set_result(None)


class _Slot:
    __slots__ = ("claimed",)

    def __init__(self) -> None:
        self.claimed = False


_REQUEST: contextvars.ContextVar[Ordered | None] = contextvars.ContextVar("bayou_ordered", default=None)
_SLOT: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar("bayou_ordered_slot", default=None)


def serving(request: Ordered) -> contextvars.Context:
    """A context for ``request``'s task (a copy of the current one: the caller's login stays)."""
    ctx = contextvars.copy_context()
    ctx.run(_REQUEST.set, request)
    return ctx


def begin() -> None:
    """An append of the current request is about to be made (already counted when it is a
    ``slot``'s first)."""
    s = _SLOT.get()
    if s is not None and not s.claimed:
        s.claimed = True
        return
    r = _REQUEST.get()
    if r is not None:
        r.outstanding += 1


def expect(n: int) -> None:
    """The current request will run ``n`` slots: counted now, before any of them starts."""
    r = _REQUEST.get()
    if r is not None:
        r.outstanding += n
        r.expected += n


def skip(n: int) -> None:
    """``n`` of the slots ``expect`` counted will not run (their partitions are refused whole)."""
    r = _REQUEST.get()
    if r is not None and n > 0:
        taken = min(n, r.expected)
        r.expected -= taken
        r.outstanding -= taken
        if r.outstanding <= 0:
            r.release()


class slot:
    """One of the appends ``expect`` counted (enter it before the first await): its ``begin`` is
    the counted one; a slot left without an append gives its count back. Nothing outside a
    pipelining connection's request."""

    __slots__ = ("_slot", "_token")

    def __enter__(self) -> None:
        r = _REQUEST.get()
        if r is None:
            self._slot = None
            return
        if r.expected > 0:
            r.expected -= 1
        else:
            r.outstanding += 1
        self._slot = _Slot()
        self._token = _SLOT.set(self._slot)

    def __exit__(self, *exc: object) -> None:
        s = self._slot
        if s is None:
            return
        _SLOT.reset(self._token)
        if not s.claimed:
            appended()


def appended() -> None:
    """An append ``begin`` announced is made (or will not be): with none left, the request is
    released."""
    r = _REQUEST.get()
    if r is not None:
        r.outstanding -= 1
        if r.outstanding <= 0:
            r.release()


__all__ = ["Ordered", "appended", "begin", "expect", "serving", "skip", "slot"]
