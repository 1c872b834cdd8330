"""Records cross between the Kafka clients and the other four protocols: what confluent-kafka
produces (keys, values, headers, timestamps; compressed batches too), V1, Cursus, Iggy and TANK
read as their protocol shows it, and what each of them produces a Kafka consumer reads, offsets
and all. The other side is the behavioural suite's adapter of each protocol (bayou's codecs)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest

from behaviour.adapters import (
    CursusAdapter,
    Feature,
    IggyAdapter,
    Out,
    TankAdapter,
    V1Adapter,
)
from behaviour.harness import connected
from support.brokers import BrokerProcess
from support.kafka import running_broker

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev dependency")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(120)

OTHERS = [V1Adapter, CursusAdapter, IggyAdapter, TankAdapter]
TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("kafka-cross")) as b:
        yield b


def new_topic(b: BrokerProcess) -> str:
    topic = f"x-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.port}"})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    return topic


def consume(b: BrokerProcess, topic: str, n: int) -> list[confluent_kafka.Message]:
    """The first ``n`` messages of partition 0, read by a confluent-kafka consumer."""
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{b.port}", "group.id": f"g-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n:
            assert time.monotonic() < deadline, f"read {len(got)} of {n}"
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        c.close()
    return got


@pytest.mark.parametrize("reader", OTHERS, ids=[a.name for a in OTHERS])
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_what_confluent_kafka_produces_every_protocol_reads(broker: BrokerProcess, reader: type,
                                                            codec: str) -> None:
    topic = new_topic(broker)
    p = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "compression.type": codec,
                  "linger.ms": 5})
    for i in range(5):
        p.produce(topic, key=b"key-%d" % i, value=b"value-%d" % i, partition=0,
                  headers=[("h", b"%d" % i)], timestamp=TS + i)
    assert p.flush(30) == 0

    async def read() -> None:
        async with connected(reader, broker) as r:
            got = await r.fetch_all(topic, 0)
        assert [(x.offset, x.value) for x in got] == [(i, b"value-%d" % i) for i in range(5)]
        if Feature.READ_KEYS in reader.features:
            assert [x.key for x in got] == [b"key-%d" % i for i in range(5)]
        if Feature.HEADERS in reader.features:
            assert [x.headers for x in got] == [((b"h", b"%d" % i),) for i in range(5)]
        if Feature.TIMESTAMPS in reader.features:
            assert [x.timestamp_ms for x in got] == [TS + i for i in range(5)]

    asyncio.run(read())


@pytest.mark.parametrize("producer", OTHERS, ids=[a.name for a in OTHERS])
def test_what_every_protocol_produces_confluent_kafka_reads(broker: BrokerProcess, producer: type) -> None:
    topic = new_topic(broker)
    headers = Feature.HEADERS in producer.features
    sent = [Out(b"value-%d" % i, b"key-%d" % i, ((b"h", b"%d" % i),) if headers else ()) for i in range(5)]

    async def write() -> None:
        async with connected(producer, broker) as w:
            await w.produce(topic, 0, sent[:2])
            await w.produce(topic, 0, sent[2:])

    before = int(time.time() * 1000)
    asyncio.run(write())
    got = consume(broker, topic, 5)
    assert [(m.offset(), m.value()) for m in got] == [(i, b"value-%d" % i) for i in range(5)]
    assert [m.key() for m in got] == [b"key-%d" % i for i in range(5)]
    if headers:
        assert [m.headers() for m in got] == [[("h", b"%d" % i)] for i in range(5)]
    assert all(m.timestamp()[1] >= before - 60_000 for m in got)  # a real time, not 0 or -1


def test_a_tombstone_is_stored_as_kafka_sent_it_and_read_as_empty_elsewhere(broker: BrokerProcess) -> None:
    """A null value (Kafka's tombstone: a delete for compacted topics, Kafka Connect's delete
    records) and a null header value are Kafka records: stored as sent, a Kafka consumer reads
    them null again; V1, Cursus and TANK, which have no null, read them as empty values."""
    topic = new_topic(broker)
    p = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "linger.ms": 5})
    p.produce(topic, key=b"user-1", value=b"created", partition=0, timestamp=TS)
    p.produce(topic, key=b"user-1", value=None, partition=0, timestamp=TS + 1)
    p.produce(topic, key=b"user-2", value=b"v", partition=0, headers=[("h", None)], timestamp=TS + 2)
    assert p.flush(30) == 0
    got = consume(broker, topic, 3)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [
        (0, b"user-1", b"created"), (1, b"user-1", None), (2, b"user-2", b"v")]
    assert got[2].headers() == [("h", None)]

    async def read(reader: type) -> None:
        async with connected(reader, broker) as r:
            rows = await r.fetch_all(topic, 0)
        assert [(x.offset, x.value) for x in rows] == [(0, b"created"), (1, b""), (2, b"v")]
        if Feature.READ_KEYS in reader.features:
            assert [x.key for x in rows] == [b"user-1", b"user-1", b"user-2"]

    for reader in (V1Adapter, CursusAdapter, TankAdapter):
        asyncio.run(read(reader))

    async def read_iggy() -> None:  # Iggy has no empty payload: the record travels in bayou's envelope
        async with connected(IggyAdapter, broker) as r:
            rows = await r.fetch_all(topic, 0)
        assert [x.offset for x in rows] == [0, 1, 2] and rows[0].value == b"created"

    asyncio.run(read_iggy())
