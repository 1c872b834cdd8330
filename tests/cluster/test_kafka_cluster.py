"""The Kafka front end in cluster mode (issue 17, item 4), on 3 brokers and a real ZooKeeper:
Metadata names every broker's Kafka listener and each partition's leader, replicas and ISR; a
produce at a broker that does not lead the partition gets NOT_LEADER_OR_FOLLOWER; every broker
names the same group coordinator; and confluent-kafka's idempotent producer rides a SIGKILL of
the partition's leader with no acknowledged record lost or stored twice.

Every Kafka client connects to the brokers' V1 ports (Kafka by the first byte). Every wait is for
a condition with a deadline; the clients' own timeouts are the deadlines where they block."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bayou.protocols.kafka.codes import ApiKey
from bayou.records.batch import Record, encode_batch
from support.cluster import Cluster
from support.kafka import KafkaConn

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev dependency")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def bootstrap(cluster: Cluster, *ids: int) -> str:
    return ",".join(f"127.0.0.1:{cluster.brokers[i].port}" for i in ids or sorted(cluster.brokers))


def create_topic(cluster: Cluster, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """Created through Kafka's CreateTopics (replication factor 3), then every partition's ISR full."""
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster, 1)})
    for f in admin.create_topics([NewTopic(topic, partitions, 3, config=config or {})],
                                 operation_timeout=30).values():
        f.result(timeout=40)
    for p in range(partitions):
        cluster.wait(lambda p=p: len(cluster.isr(topic, p)) == 3, 60, f"a full ISR of partition {p}")


PartitionView = tuple[int, list[int], list[int]]  # leader, replicas, ISR


def kafka_view(cluster: Cluster, broker_id: int, topic: str
               ) -> tuple[dict[int, int], dict[int, PartitionView], int]:
    """Metadata through broker ``broker_id``: (broker id -> port, partition -> (leader, replicas,
    ISR), controller id)."""
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster, broker_id)})
    md = admin.list_topics(topic, timeout=20)
    brokers = {b.id: b.port for b in md.brokers.values()}
    parts = {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs))
             for p in md.topics[topic].partitions.values()}
    return brokers, parts, md.controller_id


def test_metadata_names_every_broker_and_each_partitions_leader(cluster: Cluster) -> None:
    topic = "kmeta"
    create_topic(cluster, topic, 3)
    ports = {i: b.port for i, b in cluster.brokers.items()}

    def agrees(broker_id: int) -> bool:
        brokers, parts, controller = kafka_view(cluster, broker_id, topic)
        truth = {p: (cluster.leader(topic, p), [1, 2, 3], sorted(cluster.isr(topic, p))) for p in range(3)}
        return brokers == ports and parts == truth and controller in ports

    for i in cluster.brokers:  # each broker's view, once it has read the state ZooKeeper has
        cluster.wait(lambda i=i: agrees(i), 30, f"broker {i}'s Metadata to match ZooKeeper")
    leaders = {cluster.leader(topic, p) for p in range(3)}
    assert leaders <= set(ports)


async def _raw_produce(port: int, topic: str, partition: int, acks: int) -> Any:
    conn = await KafkaConn.open(port)
    try:
        resp = await conn.call(ApiKey.PRODUCE, acks=acks, timeout=5000, topic_data=[
            {"name": topic, "partition_data": [
                {"index": partition,
                 "records": encode_batch([Record(value=b"v", timestamp=1)])}]}])
        return resp.responses[0].partition_responses[0]
    finally:
        await conn.close()


async def _coordinator(port: int, group: str) -> tuple[int, int]:
    conn = await KafkaConn.open(port)
    try:
        resp = await conn.call(ApiKey.FIND_COORDINATOR, key_type=0, coordinator_keys=[group])
        c = resp.coordinators[0]
        assert c.error_code == ErrorCode.none, c
        return c.node_id, c.port
    finally:
        await conn.close()


async def _join(port: int, group: str) -> ErrorCode:
    conn = await KafkaConn.open(port)
    try:
        resp = await conn.call(ApiKey.JOIN_GROUP, 5, group_id=group, session_timeout=10_000,
                               rebalance_timeout=10_000, member_id="", group_instance_id=None,
                               protocol_type="consumer",
                               protocols=[{"name": "range", "metadata": b""}], wait_s=20)
        return ErrorCode(resp.error_code)
    finally:
        await conn.close()


def test_produce_at_a_follower_is_not_leader_or_follower(cluster: Cluster) -> None:
    topic = "knotleader"
    create_topic(cluster, topic, 1)
    leader = cluster.leader(topic, 0)
    follower = next(i for i in cluster.brokers if i != leader)
    got = asyncio.run(_raw_produce(cluster.brokers[follower].port, topic, 0, acks=-1))
    assert got.error_code == ErrorCode.not_leader_or_follower, got
    got = asyncio.run(_raw_produce(cluster.brokers[leader].port, topic, 0, acks=-1))
    assert got.error_code == ErrorCode.none and got.base_offset == 0, got


def test_every_broker_names_the_same_group_coordinator(cluster: Cluster) -> None:
    for group in ("orders", "payments", "audit"):
        answers = {i: asyncio.run(_coordinator(b.port, group)) for i, b in cluster.brokers.items()}
        assert len(set(answers.values())) == 1, answers
        node, port = answers[1]
        assert cluster.brokers[node].port == port
        elsewhere = next(b for i, b in cluster.brokers.items() if i != node)
        assert asyncio.run(_join(elsewhere.port, group)) == ErrorCode.not_coordinator


async def _end_offset(port: int, topic: str) -> int:
    conn = await KafkaConn.open(port)
    try:
        resp = await conn.call(ApiKey.LIST_OFFSETS, replica_id=-1, isolation_level=0, topics=[
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": -1}]}])
        part = resp.topics[0].partitions[0]
        assert part.error_code == ErrorCode.none, part
        return int(part.offset)
    finally:
        await conn.close()


def test_acks_all_below_min_insync_is_not_enough_replicas_and_stores_nothing(cluster: Cluster) -> None:
    topic = "kminisr"
    create_topic(cluster, topic, 1, {"min.insync.replicas": "3"})
    leader = cluster.leader(topic, 0)
    port = cluster.brokers[leader].port
    assert asyncio.run(_raw_produce(port, topic, 0, acks=-1)).error_code == ErrorCode.none
    follower = next(i for i in cluster.brokers if i != leader)
    cluster.brokers[follower].kill()
    cluster.wait(lambda: follower not in cluster.isr(topic, 0), 30, "the killed follower out of the ISR")
    end = asyncio.run(_end_offset(port, topic))
    got = asyncio.run(_raw_produce(port, topic, 0, acks=-1))
    assert got.error_code == ErrorCode.not_enough_replicas, got
    assert asyncio.run(_end_offset(port, topic)) == end  # refused before anything was appended
    got = asyncio.run(_raw_produce(port, topic, 0, acks=1))  # the leader alone may still take it
    assert got.error_code == ErrorCode.none and got.base_offset == end, got


def test_a_consumer_group_commits_through_one_broker_and_resumes_through_another(cluster: Cluster) -> None:
    """The group's coordinator is found from whichever broker a member bootstraps from, and its
    committed offsets are the cluster's."""
    topic, group = "kgroup", "kgroup-readers"
    create_topic(cluster, topic, 3)
    p = Producer({"bootstrap.servers": bootstrap(cluster, 1), "acks": "all"})
    for i in range(90):
        p.produce(topic, value=b"%03d" % i, partition=i % 3)
    assert p.flush(60) == 0
    coordinator, _port = asyncio.run(_coordinator(cluster.brokers[1].port, group))
    first, second = (i for i in sorted(cluster.brokers) if i != coordinator)

    def read(broker_id: int, n: int) -> list[bytes]:
        c = Consumer({"bootstrap.servers": bootstrap(cluster, broker_id), "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        got: list[bytes] = []
        try:
            c.subscribe([topic])
            deadline = time.monotonic() + 60
            while len(got) < n:
                assert time.monotonic() < deadline, f"consumed {len(got)} of {n}"
                m = c.poll(0.5)
                if m is None:
                    continue
                assert m.error() is None, m.error()
                got.append(m.value())
            c.commit(asynchronous=False)
        finally:
            c.close()
        return got

    assert sorted(read(first, 90)) == [b"%03d" % i for i in range(90)]
    for i in range(90, 120):
        p.produce(topic, value=b"%03d" % i, partition=i % 3)
    assert p.flush(60) == 0
    assert sorted(read(second, 30)) == [b"%03d" % i for i in range(90, 120)]  # from the commits on


class Acked:
    """The delivery reports of a confluent-kafka producer: values acknowledged, and failures."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: list[bytes] = []
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is None:
                self.values.append(msg.value())
            else:
                self.errors.append(str(err))

    def count(self) -> int:
        with self.lock:
            return len(self.values)


def _read_all(cluster: Cluster, topic: str, deadline_s: float = 60.0) -> list[bytes]:
    """Every record of partition 0, read with confluent-kafka from the start to the high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "kfailover-check",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        _low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        last = -1
        deadline = time.monotonic() + deadline_s
        while last + 1 < high:
            assert time.monotonic() < deadline, f"read up to offset {last} of {high}"
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m.value())
            last = m.offset()
        return got
    finally:
        c.close()


def test_idempotent_producer_rides_a_leader_sigkill(cluster: Cluster) -> None:
    """N numbered records through confluent-kafka's idempotent producer (acks=all) into a
    partition with 3 replicas and min.insync.replicas 2; its leader is SIGKILLed a third of the
    way. Every acknowledged record is stored exactly once, and nothing is stored twice."""
    topic, n, window = "kfailover", 3000, 200
    create_topic(cluster, topic, 1, {"min.insync.replicas": "2"})
    old_leader = cluster.leader(topic, 0)
    acked = Acked()
    p = Producer({"bootstrap.servers": bootstrap(cluster), "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "message.timeout.ms": 120_000, "topic.metadata.refresh.interval.ms": 1000})
    killed_at = None
    try:
        for i in range(n):
            p.produce(topic, value=b"%06d" % i, partition=0, on_delivery=acked)
            # a window of records in flight, so the kill lands mid-stream: wait (with a
            # deadline) for the acknowledgements to catch up before sending more
            deadline = time.monotonic() + 90
            while i + 1 - (acked.count() + len(acked.errors)) > window:
                assert time.monotonic() < deadline, f"{acked.count()} acknowledged of {i + 1} sent"
                p.poll(0.05)
            if killed_at is None and acked.count() >= n // 3:
                cluster.brokers[old_leader].kill()
                killed_at = i
        assert p.flush(150) == 0, "records still undelivered"
    finally:
        p.flush(0)
    assert killed_at is not None
    new_leader = cluster.leader(topic, 0)
    assert new_leader not in (old_leader, -1)
    assert acked.errors == [], acked.errors[:5]
    stored = _read_all(cluster, topic)
    counts = Counter(stored)
    twice = [v for v, k in counts.items() if k > 1]
    assert twice == [], f"{len(twice)} records stored more than once, e.g. {twice[:5]}"
    missing = [v for v in acked.values if v not in counts]
    assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    assert len(acked.values) == n and len(stored) == n
    assert stored == sorted(stored)  # in the order produced, as an idempotent producer promises
    print(f"killed broker {old_leader} after {killed_at} sends; broker {new_leader} leads now; "
          f"{len(stored)} stored, each once")
