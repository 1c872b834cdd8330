"""Produce and fetch, written once for every protocol and every producer x reader pair: exact
offsets, values and (where both sides carry them) keys, headers and timestamps; fetches from the
middle, at and past the log end; unknown topics and partitions."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from behaviour.adapters import ADAPTERS, Adapter, Fetched, Out, Rec, Rejected
from behaviour.adapters import Feature as F
from behaviour.harness import connected, for_each, for_pairs, pair, topic_name
from support.brokers import BrokerProcess

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


def records(n: int, tag: str, *, headers: bool = False) -> list[Out]:
    """Records every protocol can send: non-empty keys, values with no space or comma (V1)."""
    return [Out(f"value-{tag}-{i}".encode(), f"key-{i}".encode(),
                ((b"h", f"{i}".encode()), (b"trace", b"t" * (i + 1))) if headers else ()) for i in range(n)]


def view(sent: list[Out], first: int, producer: type[Adapter], reader: type[Adapter]) -> list[Rec]:
    """What ``reader`` must show of ``sent`` stored from offset ``first``."""
    keys = F.READ_KEYS in reader.features
    headers = F.HEADERS in reader.features and F.HEADERS in producer.features
    return [Rec(first + i, r.value, r.key if keys else None, r.headers if headers else ())
            for i, r in enumerate(sent)]


def shown(got: list[Rec], reader: type[Adapter]) -> list[Rec]:
    """``got`` without timestamps, and without headers where the reader cannot show those the
    producer sent (a record read through Iggy may carry conversion headers such as ``cursus.*``)."""
    return [Rec(r.offset, r.value, r.key, r.headers if F.HEADERS in reader.features else ()) for r in got]


async def produce_and_read(broker: BrokerProcess, producer: type[Adapter], reader: type[Adapter],
                           *, headers: bool = False) -> tuple[str, list[Out], list[Rec], int, int]:
    sent = records(5, producer.name, headers=headers)
    async with pair(broker, producer, reader) as (topic, p, r):
        before = int(time.time() * 1000)
        await p.produce(topic, 0, sent[:2])
        await p.produce(topic, 0, sent[2:])
        after = int(time.time() * 1000)
        got = await r.fetch_all(topic, 0)
    return topic, sent, got, before, after


@for_pairs(produce=(F.CREATE_TOPIC,))
async def test_what_one_protocol_produces_another_reads_exactly(
        broker: BrokerProcess, producer: type[Adapter], reader: type[Adapter]) -> None:
    _topic, sent, got, before, after = await produce_and_read(broker, producer, reader)
    if F.HEADERS in reader.features and F.HEADERS not in producer.features:
        got = [replace(r, headers=()) for r in got]  # conversion headers, not the producer's
    assert shown(got, reader) == view(sent, 0, producer, reader)
    if F.TIMESTAMPS in reader.features:
        assert all(before - 1 <= (r.timestamp_ms or 0) <= after + 1 for r in got), (before, got, after)


@for_pairs(produce=(F.CREATE_TOPIC, F.HEADERS), read=(F.HEADERS,))
async def test_headers_come_back_exactly(broker: BrokerProcess, producer: type[Adapter],
                                         reader: type[Adapter]) -> None:
    _topic, sent, got, _before, _after = await produce_and_read(broker, producer, reader, headers=True)
    assert shown(got, reader) == view(sent, 0, producer, reader)


@for_pairs(produce=(F.CREATE_TOPIC,))
async def test_fetch_from_an_offset_in_the_middle(broker: BrokerProcess, producer: type[Adapter],
                                                  reader: type[Adapter]) -> None:
    sent = records(6, "mid")
    async with pair(broker, producer, reader) as (topic, p, r):
        for i in range(0, 6, 2):
            await p.produce(topic, 0, sent[i:i + 2])  # three stored batches
        for start in (1, 3, 5):  # inside a batch, at a batch boundary's next, the last one
            got = await r.fetch_all(topic, 0, start)
            want = view(sent, 0, producer, reader)[start:]
            assert [(x.offset, x.value, x.key) for x in got] == [(x.offset, x.value, x.key) for x in want]


@for_each(F.CREATE_TOPIC)
async def test_fetch_at_and_past_the_log_end(broker: BrokerProcess, proto: type[Adapter]) -> None:
    topic = topic_name()
    async with connected(proto, broker) as a:
        await a.create_topic(topic, 1)
        await a.produce(topic, 0, records(3, "end"))
        at_end = await a.fetch(topic, 0, 3)
        assert at_end == Fetched(raw=at_end.raw), "at the log end: nothing, and no error"
        past = await a.fetch(topic, 0, 10)
        if proto.past_end == "empty":
            assert past.error is None and past.records == [], past
        else:
            assert past.error == "offset_out_of_range" and past.records == [], past
        # nothing changed: the three records are still all there is
        assert [r.offset for r in await a.fetch_all(topic, 0)] == [0, 1, 2]


@for_each()
async def test_fetch_from_an_unknown_topic(broker: BrokerProcess, proto: type[Adapter]) -> None:
    topic = topic_name("nosuch")
    async with connected(proto, broker) as a:
        got = await a.fetch(topic, 0, 0)
        if proto.unknown_topic_read == "empty":
            assert got.error is None and got.records == [], got
        else:
            assert got.error == "unknown_topic" and got.records == [], got
    # reading did not create it: the protocols that can tell still find no such topic
    for other in ADAPTERS:
        if other.unknown_topic_read == "error":
            async with connected(other, broker) as o:
                assert (await o.fetch(topic, 0, 0)).error == "unknown_topic", other.name


@for_pairs(produce=(F.CREATE_TOPIC,))
async def test_fetch_from_an_unknown_partition(broker: BrokerProcess, producer: type[Adapter],
                                               reader: type[Adapter]) -> None:
    async with pair(broker, producer, reader) as (topic, p, r):
        await p.produce(topic, 0, records(1, "p"))
        got = await r.fetch(topic, 3, 0)
        assert got.error == "unknown_partition" and got.records == [], got


@for_each(F.CREATE_TOPIC, F.CHOOSE_PARTITION)
async def test_produce_to_an_unknown_topic_or_partition_is_refused(broker: BrokerProcess,
                                                                  proto: type[Adapter]) -> None:
    topic = topic_name()
    async with connected(proto, broker) as a:
        with pytest.raises(Rejected) as unknown_topic:
            await a.produce(topic_name("nosuch"), 0, records(1, "x"))
        assert unknown_topic.value.kind == "unknown_topic", unknown_topic.value.raw
        await a.create_topic(topic, 2)
        with pytest.raises(Rejected) as unknown_partition:
            await a.produce(topic, 2, records(1, "x"))
        assert unknown_partition.value.kind == "unknown_partition", unknown_partition.value.raw
        await a.produce(topic, 1, records(1, "kept"))
        assert [(r.offset, r.value) for r in await a.fetch_all(topic, 1)] == [(0, b"value-kept-0")]
        assert await a.fetch_all(topic, 0) == []


@for_pairs(produce=(F.CREATE_TOPIC, F.CHOOSE_PARTITION))
async def test_partitions_are_separate_logs(broker: BrokerProcess, producer: type[Adapter],
                                           reader: type[Adapter]) -> None:
    async with pair(broker, producer, reader, 3) as (topic, p, r):
        for partition in (2, 0, 2):
            await p.produce(topic, partition, [Out(f"v-{partition}".encode(), b"k")])
        assert [(x.offset, x.value) for x in await r.fetch_all(topic, 2)] == [(0, b"v-2"), (1, b"v-2")]
        assert [(x.offset, x.value) for x in await r.fetch_all(topic, 0)] == [(0, b"v-0")]
        assert await r.fetch_all(topic, 1) == []
