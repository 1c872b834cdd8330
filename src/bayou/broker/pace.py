"""Loops over the items of one request let the event loop's other tasks in.

A request may list many items (partitions, topics, groups, members) and the work for each is
small and often never suspends: a read from the page cache, a lookup, an entry of the answer.
One request listing 100,000 of them held the event loop, and so every other connection, for a
second or more (a 1.6 MB Kafka ListOffsets 1.1 s, a 0.8 MB DescribeGroups 1.5 s), and a frame may
be 100 MiB. Every such loop counts its items on a ``Pace``, which yields after ``YIELD_EVERY``;
the loops of the requests every consumer and producer sends (a fetch, a wait, a consume, a
produce) count inline with the same constant instead, since awaiting a ``Pace`` per item costs a
coroutine each (3-5 % of a one-partition request).
"""

from __future__ import annotations

import asyncio

YIELD_EVERY = 64  # items of one request's loop between two turns given to the event loop


class Pace:
    """One request's count of items done; ``await pace()`` after each (``pace(n)``: n items)."""

    __slots__ = ("_left",)

    def __init__(self) -> None:
        self._left = YIELD_EVERY

    async def __call__(self, n: int = 1) -> None:
        self._left -= n
        if self._left <= 0:
            self._left = YIELD_EVERY
            await asyncio.sleep(0)
