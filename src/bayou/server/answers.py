"""Answers in flight, broker-wide: the memory that fetch answers hold until they have left.

One fetch answer holds at most 64 MiB (``FETCH_MAX_BYTES``), but an answer is read into memory
before it is sent and stays there until the client has read it. Without a broker-wide bound, a
few hundred connections asking for 64 MiB each and never reading their answers held tens of
gigabytes (1,000 connections from one address are allowed). ``max_answer_bytes`` bounds them all:

* **Reserved before the reads.** A request that reads data for its answer (a Kafka Fetch, an Iggy
  poll, a TANK Consume, a Cursus or V1 consume) reserves the most its answer may hold from the
  server's answer budget (``Room.reserve``) after any long-poll wait and before its first read,
  so nothing is read beyond the budget. Requests wait in arrival order, holding nothing while
  they wait (no deadlock: a request never waits while it holds).
* **Kept at its size once built** (``Room.keep``): a consumer at the tail reserves its whole bound
  for the instant of its reads and then holds the few bytes it got. The batch an answer may take
  past its bound (Kafka's "at least one batch") is taken without waiting, so the budget can be
  passed by one batch per answer being built.
* **Released once written**: by the connection's serve loop (server/frames.py) after the reply has
  been handed to the socket and drained, or by the handler that writes its own answer (TANK).
* **A client must read its answers.** A reply the client does not read holds its bytes, so the
  write has a deadline (``CoalescingWriter.drain``): at least ``PROGRESS_BYTES_PER_S`` must leave
  in every ``request_timeout_s``, or the connection is closed (the mirror of the read rule).

``answer_room()`` is the room of the frame being served (a context variable the serve loop sets
once per connection, and per frame for frames served concurrently): None outside a served frame
(tests calling handlers directly, the broker's own reads), where nothing is reserved.
"""

from __future__ import annotations

from collections.abc import Coroutine
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bayou.server.base import ByteBudget


class Room:
    """What one request's answer holds of the answer budget (module docstring)."""

    __slots__ = ("budget", "held")

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        self.held = 0

    def claim(self, n: int) -> Coroutine[Any, Any, None] | None:
        """Hold ``n`` bytes before reading, giving back first what it held (so a request waiting
        for the budget holds nothing). None when held at once (no coroutine: every fetch makes a
        claim), else the wait to await."""
        self.release()
        if self.budget.try_acquire(n):
            self.held = min(n, self.budget.total)
            return None
        return self._acquire(n)

    async def _acquire(self, n: int) -> None:
        await self.budget.acquire(n)
        self.held = min(n, self.budget.total)

    async def reserve(self, n: int) -> None:
        """``claim``, awaited."""
        waiting = self.claim(n)
        if waiting is not None:
            await waiting

    def keep(self, n: int) -> None:
        """Hold what the answer built holds: less gives the rest back; more (the batch begun
        under the bound) is taken at once, without waiting (within the total, as acquire)."""
        n = min(n, self.budget.total)
        if n < self.held:
            self.budget.release(self.held - n)
        elif n > self.held:
            self.budget.take(n - self.held)
        self.held = n

    def release(self) -> None:
        if self.held:
            held, self.held = self.held, 0
            self.budget.release(held)


ROOM: ContextVar[Room | None] = ContextVar("bayou_answer_room", default=None)


def answer_room() -> Room | None:
    """The answer room of the frame being served, or None (nothing is reserved then)."""
    return ROOM.get()


__all__ = ["ROOM", "Room", "answer_room"]
