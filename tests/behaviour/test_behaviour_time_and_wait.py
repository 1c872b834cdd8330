"""Fetching from a point in time, and long polls woken by a produce through any protocol, written
once for every producer x reader pair where the reader has the feature."""

from __future__ import annotations

import asyncio
import time

import pytest

from behaviour.adapters import Adapter, Out
from behaviour.adapters import Feature as F
from behaviour.harness import connected, for_each, for_pairs, pair, topic_name
from support.brokers import BrokerProcess

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


def values(tag: str, n: int) -> list[Out]:
    return [Out(f"{tag}-{i}".encode(), f"key-{i}".encode()) for i in range(n)]


async def clock_passes(ms: int) -> None:
    """Wait until the wall clock reaches ``ms`` (a few milliseconds at most)."""
    deadline = time.monotonic() + 5
    while time.time() * 1000 < ms:
        assert time.monotonic() < deadline, "the wall clock did not advance"
        await asyncio.sleep(0.001)


@for_pairs(produce=(F.CREATE_TOPIC,), read=(F.FETCH_BY_TIME,))
async def test_fetch_from_a_timestamp(broker: BrokerProcess, producer: type[Adapter],
                                      reader: type[Adapter]) -> None:
    async with pair(broker, producer, reader) as (topic, p, r):
        start = int(time.time() * 1000)
        await p.produce(topic, 0, values("early", 3))
        mark = int(time.time() * 1000) + 1  # after every early record's timestamp
        await clock_passes(mark)
        await p.produce(topic, 0, values("late", 2))
        late = await r.fetch_by_time(topic, 0, mark)
        assert [(x.offset, x.value) for x in late.records] == [(3, b"late-0"), (4, b"late-1")], late
        everything = await r.fetch_by_time(topic, 0, start - 60_000)
        assert [x.offset for x in everything.records] == [0, 1, 2, 3, 4]
        future = await r.fetch_by_time(topic, 0, int(time.time() * 1000) + 60_000)
        assert future.error is None and future.records == []


@for_pairs(produce=(F.CREATE_TOPIC,), read=(F.LONG_POLL,))
async def test_a_long_poll_is_woken_by_a_produce(broker: BrokerProcess, producer: type[Adapter],
                                                 reader: type[Adapter]) -> None:
    async with pair(broker, producer, reader) as (topic, p, r), connected(reader, broker) as other:
        await p.produce(topic, 0, values("before", 1))
        waiting = asyncio.create_task(r.long_poll(topic, 0, 1, wait_ms=30_000))
        try:
            # a round trip on another connection of the reader's protocol: the broker has had
            # time to take the poll, and nothing answered it yet
            assert (await other.fetch(topic, 0, 1)).records == []
            assert not waiting.done()
            await p.produce(topic, 0, values("wake", 1))  # (V1 appends one record per request)
            got = await asyncio.wait_for(waiting, 15)  # woken, far before the 30 s wait is over
        finally:
            waiting.cancel()
        assert got.error is None
        assert [(x.offset, x.value) for x in got.records] == [(1, b"wake-0")]


@for_each(F.CREATE_TOPIC, F.LONG_POLL)
async def test_a_long_poll_with_nothing_new_ends_empty(broker: BrokerProcess, proto: type[Adapter]) -> None:
    topic = topic_name()
    async with connected(proto, broker) as a:
        await a.create_topic(topic, 1)
        await a.produce(topic, 0, values("only", 1))
        started = time.monotonic()
        got = await asyncio.wait_for(a.long_poll(topic, 0, 1, wait_ms=400), 15)
        assert got.error is None and got.records == [], got
        assert time.monotonic() - started >= 0.3, "answered before the wait was over"
