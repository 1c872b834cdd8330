"""Incremental fetch sessions (KIP-227) on the Kafka front end, over a real socket to a broker
subprocess: a session is made, answers only what changed, takes added and forgotten partitions,
refuses an unknown id or a stale epoch with Kafka's codes, ends on a final-epoch fetch, and shows
in /metrics. kafka-python (which uses sessions by default) reads through one, across a rebalance.

Every wait is for a condition with a deadline."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bayou.protocols.kafka.codes import ApiKey
from bayou.records.batch import Record, encode_batch
from support.brokers import BrokerProcess
from support.http import scrape, value
from support.kafka import KafkaConn, running_broker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("kafka-sessions")) as b:
        yield b


@pytest.fixture
async def conn(broker: BrokerProcess) -> AsyncIterator[KafkaConn]:
    c = await KafkaConn.open(broker.port)
    try:
        yield c
    finally:
        await c.close()


def name() -> str:
    return f"fs-{uuid.uuid4().hex[:10]}"


async def create(c: KafkaConn, topic: str, partitions: int) -> None:
    resp = await c.call(ApiKey.CREATE_TOPICS, timeout=5000, topics=[
        {"name": topic, "num_partitions": partitions, "replication_factor": 1}])
    assert resp.topics[0].error_code == ErrorCode.none, resp


async def produce(c: KafkaConn, topic: str, partition: int, value: bytes) -> None:
    resp = await c.call(ApiKey.PRODUCE, acks=1, timeout=5000, transactional_id=None, topic_data=[
        {"name": topic, "partition_data": [{"index": partition, "records": encode_batch(
            [Record(value=value, timestamp=int(time.time() * 1000))])}]}])
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none


def part(partition: int, offset: int) -> dict[str, Any]:
    return {"partition": partition, "fetch_offset": offset, "current_leader_epoch": -1,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}


async def fetch(c: KafkaConn, session_id: int, epoch: int, topics: list[dict[str, Any]],
                forgotten: list[dict[str, Any]] | None = None, max_wait_ms: int = 0) -> Any:
    return await c.call(ApiKey.FETCH, 12, replica_id=-1, max_wait=max_wait_ms, min_bytes=1,
                        max_bytes=1 << 20, isolation_level=0, session_id=session_id,
                        session_epoch=epoch, topics=topics, forgotten_topics_data=forgotten or [],
                        rack_id="")


def answered(resp: Any) -> dict[tuple[str, int], Any]:
    return {(t.topic, p.partition_index): p for t in resp.responses for p in t.partitions}


async def test_a_session_answers_only_what_changed(conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic, 3)
    for p in range(3):
        await produce(conn, topic, p, b"first-%d" % p)
    full = await fetch(conn, 0, 0, [{"topic": topic, "partitions": [part(p, 0) for p in range(3)]}])
    assert full.error_code == ErrorCode.none and full.session_id != 0
    sid = full.session_id
    assert sorted(answered(full)) == [(topic, 0), (topic, 1), (topic, 2)]
    # the client moves its offsets past what it read: only those partitions are sent
    moved = [part(p, 1) for p in range(3)]
    resp = await fetch(conn, sid, 1, [{"topic": topic, "partitions": moved}], max_wait_ms=50)
    assert resp.session_id == sid and answered(resp) == {}
    # a record on partition 1: the long poll answers it alone
    await produce(conn, topic, 1, b"second")
    resp = await fetch(conn, sid, 2, [], max_wait_ms=5000)
    got = answered(resp)
    assert list(got) == [(topic, 1)]
    assert got[(topic, 1)].high_watermark == 2 and b"second" in got[(topic, 1)].records
    # the session kept offset 1 for partition 1 (the client did not move it): the same record
    # again, now without a change of high watermark, is still answered (records)
    resp = await fetch(conn, sid, 3, [], max_wait_ms=0)
    assert list(answered(resp)) == [(topic, 1)]


async def test_added_and_forgotten_partitions(conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic, 2)
    await produce(conn, topic, 1, b"on-1")
    full = await fetch(conn, 0, 0, [{"topic": topic, "partitions": [part(0, 0)]}])
    sid = full.session_id
    assert sid != 0 and list(answered(full)) == [(topic, 0)]
    # partition 1 joins and 0 is forgotten in one incremental fetch
    resp = await fetch(conn, sid, 1, [{"topic": topic, "partitions": [part(1, 0)]}],
                       forgotten=[{"topic": topic, "partitions": [0]}])
    assert list(answered(resp)) == [(topic, 1)]
    await produce(conn, topic, 0, b"on-0")
    resp = await fetch(conn, sid, 2, [{"topic": topic, "partitions": [part(1, 1)]}], max_wait_ms=200)
    assert answered(resp) == {}  # 0 is no longer in the session


async def test_unknown_session_and_stale_epoch(conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic, 1)
    resp = await fetch(conn, 12345, 1, [])
    assert resp.error_code == ErrorCode.fetch_session_id_not_found and resp.session_id == 0
    assert list(resp.responses) == []
    sid = (await fetch(conn, 0, 0, [{"topic": topic, "partitions": [part(0, 0)]}])).session_id
    resp = await fetch(conn, sid, 7, [])
    assert resp.error_code == ErrorCode.invalid_fetch_session_epoch and list(resp.responses) == []
    # the session is still there at the epoch it expects
    resp = await fetch(conn, sid, 1, [])
    assert resp.error_code == ErrorCode.none and resp.session_id == sid
    # a final-epoch fetch closes it and is answered in full, without a session
    resp = await fetch(conn, sid, -1, [{"topic": topic, "partitions": [part(0, 0)]}])
    assert resp.session_id == 0 and list(answered(resp)) == [(topic, 0)]
    resp = await fetch(conn, sid, 2, [])
    assert resp.error_code == ErrorCode.fetch_session_id_not_found


async def test_sessions_show_in_metrics(broker: BrokerProcess, conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic, 4)
    before = value(scrape(broker.http_port), "bayou_kafka_fetch_sessions")
    full = await fetch(conn, 0, 0, [{"topic": topic, "partitions": [part(p, 0) for p in range(4)]}])
    sid = full.session_id
    samples = scrape(broker.http_port)
    assert value(samples, "bayou_kafka_fetch_sessions") == before + 1
    assert value(samples, "bayou_kafka_fetch_session_partitions") >= 4
    await fetch(conn, sid, -1, [])
    assert value(scrape(broker.http_port), "bayou_kafka_fetch_sessions") == before


def test_kafka_python_reads_through_a_session_across_a_rebalance(broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka", reason="kafka-python is a dev dependency")
    topic = name()
    bootstrap = f"127.0.0.1:{broker.port}"
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([kafka.admin.NewTopic(topic, 4, 1)])
    admin.close()
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)

    def send(start: int, stop: int) -> None:
        for i in range(start, stop):
            producer.send(topic, b"m%d" % i, partition=i % 4)
        producer.flush(30)

    def drain(consumers: list[Any], want: int, got: list[int]) -> None:
        deadline = time.monotonic() + 60
        while len(got) < want:
            assert time.monotonic() < deadline, f"read {len(got)} of {want}"
            for c in consumers:
                for records in c.poll(200).values():
                    got += [int(r.value[1:]) for r in records]

    group = name()
    conf = {"bootstrap_servers": bootstrap, "group_id": group, "auto_offset_reset": "earliest",
            "fetch_max_wait_ms": 100, "enable_incremental_fetch_sessions": True}
    first = kafka.KafkaConsumer(topic, **conf)
    got: list[int] = []
    send(0, 200)
    drain([first], 200, got)
    assert value(scrape(broker.http_port), "bayou_kafka_fetch_sessions") >= 1
    first.commit()  # (the client's own commit on rebalance is bounded by poll()'s timeout)
    # a second member takes half the partitions: the first one's session forgets them
    second = kafka.KafkaConsumer(topic, **conf)
    deadline = time.monotonic() + 60
    while len(second.assignment()) != 2 or len(first.assignment()) != 2:
        assert time.monotonic() < deadline, "the group did not rebalance"
        for c in (first, second):
            for records in c.poll(1000).values():
                got += [int(r.value[1:]) for r in records]
    first.commit()
    second.commit()
    send(200, 400)
    drain([first, second], 400, got)
    assert sorted(got) == list(range(400))  # each once: no record lost or read twice
    for c in (first, second):
        c.close()
    producer.close()
