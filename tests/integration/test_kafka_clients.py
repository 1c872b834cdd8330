"""The Kafka front end against the real clients (issue 17): kcat, confluent-kafka (librdkafka),
kafka-python and aiokafka produce, consume, form groups, commit and administer topics against a
broker subprocess, through the V1 port (told apart by the first byte) and a --kafka listener.

Every wait is for a condition with a deadline; the clients' own timeouts are the deadlines where
they block."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from support.brokers import BrokerProcess, free_port
from support.kafka import KCAT, NO_KCAT, running_broker

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev dependency")
kafka = pytest.importorskip("kafka", reason="kafka-python is a dev dependency")
aiokafka = pytest.importorskip("aiokafka", reason="aiokafka is a dev dependency")

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

pytestmark = pytest.mark.timeout(180)

T = TypeVar("T")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    kafka_port = free_port()
    with running_broker(tmp_path_factory.mktemp("kafka"), "--kafka", f"127.0.0.1:{kafka_port}") as b:
        b.kafka_port = kafka_port  # type: ignore[attr-defined]
        yield b


def bootstrap(b: BrokerProcess) -> str:
    return f"127.0.0.1:{b.port}"  # the V1 port: Kafka by the first byte


def topic_name(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(check: Callable[[], T | None], what: str, deadline_s: float = 30.0) -> T:
    deadline = time.monotonic() + deadline_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def create(b: BrokerProcess, topic: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(b)})
    for f in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})],
                                 operation_timeout=20).values():
        f.result(timeout=30)


def consume(c: Any, n: int, deadline_s: float = 30.0) -> list[Any]:
    """``n`` messages from a confluent-kafka consumer (errors fail the test)."""
    got: list[Any] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < n:
        assert time.monotonic() < deadline, f"consumed {len(got)} of {n}"
        m = c.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append(m)
    return got


# -- kcat ------------------------------------------------------------------------------------------


def kcat(*args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run([KCAT or "kcat", *args], input=stdin, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


@pytest.mark.skipif(KCAT is None, reason=NO_KCAT)
def test_kcat_lists_produces_and_consumes(broker: BrokerProcess) -> None:
    b, topic = bootstrap(broker), topic_name("kcat")
    create(broker, topic, 2)
    listing = kcat("-b", b, "-L", "-t", topic)
    assert f'topic "{topic}" with 2 partitions' in listing, listing
    assert f"broker 0 at localhost:{broker.port}" in listing, listing  # the advertised listener
    kcat("-b", b, "-P", "-t", topic, "-p", "0", "-K", ":", "-H", "h=v", "-H", "trace=1",
         stdin=b"k1:v1\nk2:v2\nk3:v3\n")
    out = kcat("-b", b, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o %k=%s %h\n")
    assert out.splitlines() == ["0 k1=v1 h=v,trace=1", "1 k2=v2 h=v,trace=1", "2 k3=v3 h=v,trace=1"]
    assert kcat("-b", b, "-C", "-t", topic, "-p", "0", "-o", "-2", "-e", "-f", "%s\n").split() == ["v2", "v3"]
    assert kcat("-b", b, "-C", "-t", topic, "-p", "0", "-o", "1", "-c", "1", "-f", "%s\n").split() == ["v2"]


@pytest.mark.skipif(KCAT is None, reason=NO_KCAT)
def test_kcat_group_mode(broker: BrokerProcess) -> None:
    b, topic = bootstrap(broker), topic_name("kcatg")
    create(broker, topic, 2)
    kcat("-b", b, "-P", "-t", topic, "-p", "0", stdin=b"a\nb\n")
    kcat("-b", b, "-P", "-t", topic, "-p", "1", stdin=b"c\n")
    group = topic_name("g")
    out = kcat("-b", b, "-G", group, "-o", "beginning", "-c", "3", "-f", "%p:%s\n", "-X",
               "auto.commit.interval.ms=100", topic)
    assert sorted(out.split()) == ["0:a", "0:b", "1:c"]


# -- confluent-kafka (librdkafka) ------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_round_trip_every_codec(broker: BrokerProcess, codec: str) -> None:
    topic = topic_name(codec)
    create(broker, topic, 2)
    p = Producer({"bootstrap.servers": bootstrap(broker), "compression.type": codec, "linger.ms": 5})
    for i in range(50):
        p.produce(topic, key=b"k%d" % i, value=b"value %d " % i * 10, partition=i % 2,
                  headers=[("h", b"%d" % i)], timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap(broker), "group.id": topic_name("g"),
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        got = {m.key(): m for m in consume(c, 50)}
    finally:
        c.close()
    for i in range(50):
        m = got[b"k%d" % i]
        assert (m.value(), m.partition(), m.headers(), m.timestamp()[1]) == (
            b"value %d " % i * 10, i % 2, [("h", b"%d" % i)], 1_700_000_000_000 + i)


def test_confluent_kafka_idempotent_producer_stores_each_record_once(broker: BrokerProcess) -> None:
    topic = topic_name("idem")
    create(broker, topic, 3)
    p = Producer({"bootstrap.servers": bootstrap(broker), "enable.idempotence": True, "linger.ms": 2,
                  "compression.type": "zstd"})
    for i in range(300):
        p.produce(topic, value=b"%d" % i)
        if i % 50 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap(broker), "group.id": topic_name("g"),
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        values = sorted(int(m.value()) for m in consume(c, 300))
    finally:
        c.close()
    assert values == list(range(300))
    ends = [TopicPartition(topic, p) for p in range(3)]
    admin_c = Consumer({"bootstrap.servers": bootstrap(broker), "group.id": topic_name("w")})
    try:
        total = sum(admin_c.get_watermark_offsets(tp, timeout=10)[1] for tp in ends)
    finally:
        admin_c.close()
    assert total == 300  # nothing stored twice


def test_confluent_kafka_group_of_two_rebalances(broker: BrokerProcess) -> None:
    topic, group = topic_name("reb"), topic_name("g")
    create(broker, topic, 4)
    conf = {"bootstrap.servers": bootstrap(broker), "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
    a, bee = Consumer(conf), Consumer(conf)
    try:
        a.subscribe([topic])
        wait_for(lambda: a.poll(0.1) is None and len(a.assignment()) == 4, "the first member to own all 4")
        bee.subscribe([topic])

        def split() -> bool:
            a.poll(0.05)
            bee.poll(0.05)
            mine = {tp.partition for tp in a.assignment()}
            theirs = {tp.partition for tp in bee.assignment()}
            return bool(mine) and bool(theirs) and not (mine & theirs) and mine | theirs == {0, 1, 2, 3}

        wait_for(split, "the two members to share the 4 partitions")
        bee.close()
        wait_for(lambda: a.poll(0.1) is None and len(a.assignment()) == 4, "the survivor to own all 4 again")
    finally:
        a.close()


def test_confluent_kafka_commit_and_resume(broker: BrokerProcess) -> None:
    topic, group = topic_name("resume"), topic_name("g")
    create(broker, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap(broker)})
    for i in range(10):
        p.produce(topic, value=b"%d" % i)
    assert p.flush(30) == 0
    conf = {"bootstrap.servers": bootstrap(broker), "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    c = Consumer(conf)
    c.subscribe([topic])
    try:
        first = consume(c, 4)
        c.commit(message=first[-1], asynchronous=False)
        assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 4
    finally:
        c.close()
    again = Consumer(conf)
    again.subscribe([topic])
    try:
        assert [m.value() for m in consume(again, 6)] == [b"%d" % i for i in range(4, 10)]
    finally:
        again.close()


def test_confluent_kafka_admin(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}"})  # type: ignore[attr-defined]
    topic = topic_name("admin")
    for f in admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3600000"})]).values():
        f.result(timeout=30)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    other = topic_name()
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        admin.create_topics([NewTopic(other, 1, 3)])[other].result(timeout=30)
    for f in admin.create_partitions([NewPartitions(topic, 5)]).values():
        f.result(timeout=30)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 5
    resource = ConfigResource("topic", topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["segment.bytes"].value  # a default, shown too
    change = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(timeout=30)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "7200000"
    cluster = admin.describe_cluster().result(timeout=30)
    assert [(n.id, n.port) for n in cluster.nodes] == [(0, broker.kafka_port)]  # type: ignore[attr-defined]
    for f in admin.delete_topics([topic]).values():
        f.result(timeout=30)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, "the topic to be gone")


def test_confluent_kafka_lists_describes_and_deletes_groups(broker: BrokerProcess) -> None:
    topic, group = topic_name("groups"), topic_name("g")
    create(broker, topic, 1)
    c = Consumer({"bootstrap.servers": bootstrap(broker), "group.id": group, "client.id": "lister"})
    c.subscribe([topic])
    admin = AdminClient({"bootstrap.servers": bootstrap(broker)})
    try:
        wait_for(lambda: c.poll(0.1) is None and c.assignment(), "the member's assignment")
        listed = admin.list_consumer_groups().result(timeout=30)
        assert group in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert described.state.name == "STABLE"
        assert [m.client_id for m in described.members] == ["lister"]
        assert described.members[0].assignment.topic_partitions[0].topic == topic
    finally:
        c.close()
    wait_for(lambda: admin.describe_consumer_groups([group])[group].result(timeout=30).state.name == "EMPTY",
             "the group to be empty")
    admin.delete_consumer_groups([group])[group].result(timeout=30)


# -- kafka-python ----------------------------------------------------------------------------------


def test_kafka_python_admin_codecs_and_group(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    topic = topic_name("kp")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(broker))
    try:
        admin.create_topics([KpNewTopic(topic, 2, 1)])
        assert topic in admin.list_topics()
        codecs: list[str | None] = ["gzip", "snappy", "lz4", "zstd", None]
        for codec in codecs:
            p = KafkaProducer(bootstrap_servers=bootstrap(broker), compression_type=codec, acks="all")
            for i in range(4):
                p.send(topic, key=b"kp", value=b"%s %d|" % (str(codec).encode(), i) * 30,
                       headers=[("h", b"1")], partition=i % 2)
            p.flush(30)
            p.close()
        c = KafkaConsumer(topic, bootstrap_servers=bootstrap(broker), group_id=topic_name("g"),
                          auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < 20:
                assert time.monotonic() < deadline, f"consumed {len(got)} of 20"
                for recs in c.poll(timeout_ms=300).values():
                    got += recs
            c.commit()
            assert {r.value for r in got} == {b"%s %d|" % (str(codec).encode(), i) * 30
                                              for codec in codecs for i in range(4)}
            assert all(r.key == b"kp" and r.headers == [("h", b"1")] for r in got)
            assert sum(c.committed(tp) or 0 for tp in c.assignment()) == 20
        finally:
            c.close()
        admin.delete_topics([topic])
    finally:
        admin.close()


# -- aiokafka --------------------------------------------------------------------------------------


def test_aiokafka_producer_group_and_manual_commit(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTp

    topic, group = topic_name("aio"), topic_name("g")
    create(broker, topic, 1)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap(broker), enable_idempotence=True,
                             compression_type="gzip")
        await p.start()
        try:
            for i in range(6):
                await p.send_and_wait(topic, b"aio %d" % i, key=b"k", headers=[("h", b"a")])
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap(broker), group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < 3:
                assert time.monotonic() < deadline
                for recs in (await c.getmany(timeout_ms=300, max_records=3 - len(got))).values():
                    got += recs
            await c.commit({AioTp(topic, 0): got[-1].offset + 1})
            assert await c.committed(AioTp(topic, 0)) == 3
        finally:
            await c.stop()
        again = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap(broker), group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        await again.start()
        try:
            rest: list[Any] = []
            deadline = time.monotonic() + 30
            while len(rest) < 3:
                assert time.monotonic() < deadline
                for recs in (await again.getmany(timeout_ms=300)).values():
                    rest += recs
            assert [(r.value, r.key, list(r.headers)) for r in rest] == [
                (b"aio %d" % i, b"k", [("h", b"a")]) for i in range(3, 6)]
        finally:
            await again.stop()

    asyncio.run(run())

