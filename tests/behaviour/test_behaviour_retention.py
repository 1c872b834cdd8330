"""Retention through every protocol: a topic made with a tiny size limit loses its oldest
segments, every protocol sees the same log start, and a fetch below it gets the protocol's
documented answer (served from the log start, or an out-of-range error naming it).

The tests run on ``small_broker`` (conftest): 256-byte segments, a retention pass every 100 ms."""

from __future__ import annotations

import asyncio
import time

import pytest

from behaviour.adapters import Adapter, Out, V1Adapter
from behaviour.adapters import Feature as F
from behaviour.harness import connected, for_each, topic_name
from support.brokers import BrokerProcess

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]

LIMIT = 600  # bytes per partition: a few 256-byte segments stay
SENT = [Out(f"value-{i:03d}-".encode() + b"x" * 60, f"key-{i}".encode()) for i in range(24)]


async def fill_and_settle(a: Adapter, broker: BrokerProcess, topic: str) -> int:
    """Produce ``SENT`` through ``a``, one record per request (one stored batch each), then wait
    until retention has settled: the log start has moved and then stayed put over four retention
    passes (passes also run while the records go in, so the first move is not the last). The
    broker's view is watched through V1's ADMIN_DESCRIBE_TOPIC, which only reads metadata: a
    protocol reading the log while retention deletes segments meets the races of
    test_behaviour_retention_races. Returns the log start."""
    for r in SENT:
        await a.produce(topic, 0, [r])
    async with connected(V1Adapter, broker) as v1:
        deadline = time.monotonic() + 20
        start, since = await v1.log_start(topic, 0), time.monotonic()
        while start == 0 or time.monotonic() - since < 0.4:
            assert time.monotonic() < deadline, f"retention did not settle (log start {start})"
            await asyncio.sleep(0.05)
            now = await v1.log_start(topic, 0)
            if now != start:
                start, since = now, time.monotonic()
    return start


@pytest.fixture(scope="module")
def trimmed(small_broker: BrokerProcess) -> tuple[str, int]:
    """A topic made through V1 and trimmed by retention: (topic, log start)."""
    async def setup() -> tuple[str, int]:
        topic = topic_name("trimmed")
        async with connected(V1Adapter, small_broker) as a:
            await a.create_topic(topic, 1, retention_bytes=LIMIT)
            return topic, await fill_and_settle(a, small_broker, topic)
    return asyncio.run(setup())


def plain(recs: list[Out], first: int) -> list[tuple[int, bytes]]:
    return [(first + i, r.value) for i, r in enumerate(recs)]


@for_each(F.RETENTION)
async def test_a_size_limit_set_through_the_protocol_deletes_old_segments(
        small_broker: BrokerProcess, proto: type[Adapter]) -> None:
    topic = topic_name("limited")
    async with connected(proto, small_broker) as a:
        await a.create_topic(topic, 1, retention_bytes=LIMIT)
        start = await fill_and_settle(a, small_broker, topic)
        assert 0 < start < len(SENT)
        assert await a.log_start(topic, 0) == start
        got = await a.fetch_all(topic, 0, start)
        assert [(r.offset, r.value) for r in got] == plain(SENT[start:], start)


@for_each()
async def test_every_protocol_sees_the_log_start_and_answers_a_fetch_below_it(
        small_broker: BrokerProcess, trimmed: tuple[str, int], proto: type[Adapter]) -> None:
    topic, start = trimmed
    async with connected(proto, small_broker) as a:
        assert await a.log_start(topic, 0) == start
        below = await a.fetch(topic, 0, 0)
        if proto.below_start == "clamp":
            assert below.error is None and below.records, below
            assert (below.records[0].offset, below.records[0].value) == (start, SENT[start].value)
        else:
            assert below.records == [] and below.error == "offset_out_of_range", below
            assert below.earliest == start, below
        got = await a.fetch_all(topic, 0, start)
        assert [(r.offset, r.value) for r in got] == plain(SENT[start:], start)
