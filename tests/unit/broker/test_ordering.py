"""broker/ordering.py: when a pipelined request is released (every append it began is made), for
one append, for a request that counts its partitions up front, and outside any request."""

from __future__ import annotations

import asyncio

from bayou.broker import ordering


async def test_one_append_releases_its_request() -> None:
    seen = []

    async def body() -> None:
        ordering.begin()
        seen.append(r.released.done())
        ordering.appended()
        seen.append(r.released.done())

    r = ordering.Ordered(asyncio.get_running_loop().create_future())
    await asyncio.get_running_loop().create_task(body(), context=ordering.serving(r))
    assert seen == [False, True]


async def test_a_request_counting_its_partitions_is_released_by_the_last_one() -> None:
    refused_done = asyncio.Event()
    states: list[tuple[str, bool]] = []

    async def fast() -> None:
        with ordering.slot():
            ordering.begin()
            ordering.appended()
            states.append(("fast", r.released.done()))

    async def slow() -> None:
        with ordering.slot():
            await refused_done.wait()  # waits before its append (a rebuild, say)
            ordering.begin()
            ordering.appended()
            states.append(("slow", r.released.done()))

    async def refused() -> None:
        try:
            with ordering.slot():
                raise ValueError("unknown topic")
        finally:
            states.append(("refused", r.released.done()))
            refused_done.set()

    async def body() -> None:
        ordering.expect(3)
        await asyncio.gather(fast(), slow(), refused(), return_exceptions=True)

    r = ordering.Ordered(asyncio.get_running_loop().create_future())
    await asyncio.get_running_loop().create_task(body(), context=ordering.serving(r))
    assert states == [("fast", False), ("refused", False), ("slow", True)]


async def test_skipped_slots_count_down_and_nothing_happens_outside_a_request() -> None:
    async def body() -> None:
        ordering.expect(2)
        ordering.skip(1)
        assert not r.released.done()
        ordering.skip(1)
        assert r.released.done()

    r = ordering.Ordered(asyncio.get_running_loop().create_future())
    await asyncio.get_running_loop().create_task(body(), context=ordering.serving(r))
    ordering.begin()  # no request: nothing to count
    ordering.appended()
    with ordering.slot():
        pass
