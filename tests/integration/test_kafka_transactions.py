"""Kafka transactions against confluent-kafka (librdkafka), over a broker subprocess (issue 17):
commit and abort as read_committed and read_uncommitted consumers see them, an open transaction
holding read_committed consumers back, fencing by a second producer of the same transactional id,
a consume-transform-produce loop whose offsets commit with its output, the coordinator's
timeout, and a SIGKILL mid-transaction: the open transaction is aborted after the restart and
what was committed before it stays. Records written in a transaction read back through the V1
protocol without the markers.

Every wait is for a condition with a deadline; the clients' own timeouts are the deadlines where
they block."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bayou.client import Client
from behaviour.adapters import CursusAdapter, IggyAdapter, TankAdapter, V1Adapter
from behaviour.harness import connected
from support.brokers import BrokerProcess
from support.kafka import read_values, running_broker

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev dependency")

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("kafka-txn")) as b:
        yield b


def bootstrap(b: BrokerProcess) -> str:
    return f"127.0.0.1:{b.port}"


def name(prefix: str = "tx") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create(b: BrokerProcess, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(b)})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=20).values():
        f.result(timeout=30)


def producer(b: BrokerProcess, txn_id: str, **extra: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap(b), "transactional.id": txn_id, "linger.ms": 1,
                  "transaction.timeout.ms": 60000, **extra})
    p.init_transactions(30)
    return p


def consumer(b: BrokerProcess, isolation: str, group: str | None = None, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap(b), "group.id": group or name("g"),
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "isolation.level": isolation, **extra})


def drain(c: Consumer, topic: str, until: int | None = None, idle_s: float = 2.0,
          deadline_s: float = 30.0) -> list[bytes]:
    """Values read from ``topic`` (partition 0): until ``until`` records, or until nothing more
    comes for ``idle_s`` after the end of the partition was reached."""
    return read_values(c, topic, 1, until, idle_s, deadline_s)[0]


def test_commit_and_abort_as_each_isolation_level_reads_them(broker: BrokerProcess) -> None:
    topic = name()
    create(broker, topic)
    p = producer(broker, name("id"))
    p.begin_transaction()
    for v in (b"c1", b"c2"):
        p.produce(topic, v, partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    for v in (b"a1", b"a2"):
        p.produce(topic, v, partition=0)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c3", partition=0)
    p.commit_transaction(30)
    committed = consumer(broker, "read_committed")
    uncommitted = consumer(broker, "read_uncommitted")
    try:
        assert drain(committed, topic, until=3) == [b"c1", b"c2", b"c3"]
        assert drain(committed, topic) == [b"c1", b"c2", b"c3"]  # and nothing after
        assert drain(uncommitted, topic, until=5) == [b"c1", b"c2", b"a1", b"a2", b"c3"]
    finally:
        committed.close()
        uncommitted.close()


def test_an_open_transaction_holds_read_committed_back_until_it_ends(broker: BrokerProcess) -> None:
    topic = name()
    create(broker, topic)
    plain = Producer({"bootstrap.servers": bootstrap(broker)})
    plain.produce(topic, b"before", partition=0)
    plain.flush(30)
    p = producer(broker, name("id"))
    p.begin_transaction()
    p.produce(topic, b"in-txn", partition=0)
    p.flush(30)
    plain.produce(topic, b"after", partition=0)  # past the open transaction's first record
    plain.flush(30)
    c = consumer(broker, "read_committed")
    try:
        assert drain(c, topic, idle_s=1.5) == [b"before"]
        p.commit_transaction(30)
        got = drain(c, topic, until=3)
        assert got == [b"before", b"in-txn", b"after"]
    finally:
        c.close()


def test_a_second_producer_of_the_same_id_fences_the_first(broker: BrokerProcess) -> None:
    topic, txn_id = name(), name("id")
    create(broker, topic)
    first = producer(broker, txn_id)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(30)
    second = producer(broker, txn_id)  # aborts the first's open transaction, bumps the epoch
    second.begin_transaction()
    second.produce(topic, b"live", partition=0)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as err:
        first.commit_transaction(30)  # its transaction was aborted, its epoch fenced
    assert err.value.args[0].fatal(), err.value
    c = consumer(broker, "read_committed")
    try:
        assert drain(c, topic) == [b"live"]
    finally:
        c.close()


def test_consume_transform_produce_commits_offsets_with_the_output(broker: BrokerProcess) -> None:
    source, sink, group = name("in"), name("out"), name("g")
    create(broker, source)
    create(broker, sink)
    plain = Producer({"bootstrap.servers": bootstrap(broker)})
    for i in range(20):
        plain.produce(source, f"m{i}".encode(), partition=0)
    plain.flush(30)
    p = producer(broker, name("id"))
    c = consumer(broker, "read_committed", group=group)
    c.subscribe([source])
    try:
        done = 0
        aborted_once = False
        deadline = time.monotonic() + 60
        while done < 20:
            assert time.monotonic() < deadline, f"transformed {done} of 20"
            msgs = [m for m in c.consume(10, 0.5) if not m.error()]
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                p.produce(sink, m.value().upper(), partition=0)
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
            # the first batch is aborted: its input must be read again, its output never seen
            if not aborted_once:
                p.abort_transaction(30)
                aborted_once = True
                c.seek(TopicPartition(source, 0, msgs[0].offset()))
                continue
            p.commit_transaction(30)
            done += len(msgs)
    finally:
        c.close()
    out = consumer(broker, "read_committed")
    try:
        assert drain(out, sink, until=20) == [f"M{i}".encode() for i in range(20)]
        assert drain(out, sink) == [f"M{i}".encode() for i in range(20)]
    finally:
        out.close()
    check = consumer(broker, "read_committed", group=group)
    try:
        committed = check.committed([TopicPartition(source, 0)], timeout=10)
        assert committed[0].offset == 20
    finally:
        check.close()


def test_an_open_transaction_is_aborted_when_its_timeout_passes(broker: BrokerProcess) -> None:
    topic, txn_id = name(), name("id")
    create(broker, topic)
    p = producer(broker, txn_id, **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic, b"abandoned", partition=0)
    p.flush(30)
    plain = Producer({"bootstrap.servers": bootstrap(broker)})
    plain.produce(topic, b"later", partition=0)
    plain.flush(30)
    c = consumer(broker, "read_committed")
    try:
        assert drain(c, topic, until=1, deadline_s=30) == [b"later"]  # after the abort
    finally:
        c.close()
    with pytest.raises(KafkaException):
        p.commit_transaction(10)  # the coordinator aborted it and fenced this epoch


def test_a_transaction_open_at_a_sigkill_is_aborted_after_the_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", fsync="always").start(timeout=90)
    try:
        topic, txn_id = name(), name("id")
        create(b, topic)
        p = producer(b, txn_id, **{"transaction.timeout.ms": 3000})
        p.begin_transaction()
        p.produce(topic, b"kept", partition=0)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"lost", partition=0)
        p.flush(30)
        b.kill()
        b.start(timeout=90)
        plain = Producer({"bootstrap.servers": bootstrap(b)})
        plain.produce(topic, b"after", partition=0)
        plain.flush(30)
        c = consumer(b, "read_committed")
        try:
            assert drain(c, topic, until=2, deadline_s=40) == [b"kept", b"after"]
            assert drain(c, topic) == [b"kept", b"after"]
        finally:
            c.close()
        again = producer(b, txn_id)  # the id goes on with a new epoch
        again.begin_transaction()
        again.produce(topic, b"next", partition=0)
        again.commit_transaction(30)
    finally:
        b.stop()


OTHERS = [V1Adapter, CursusAdapter, IggyAdapter, TankAdapter]


@pytest.mark.parametrize("reader", OTHERS, ids=[a.name for a in OTHERS])
def test_every_other_protocol_reads_the_records_and_never_a_marker(broker: BrokerProcess,
                                                                     reader: type) -> None:
    """Markers take an offset each, which the other protocols skip (a gap, as after compaction);
    aborted records are data to them, as to Kafka's read_uncommitted consumers."""
    topic = name()
    create(broker, topic)
    p = producer(broker, name("id"))
    p.begin_transaction()
    p.produce(topic, b"c1", partition=0)
    p.produce(topic, b"c2", partition=0)
    p.commit_transaction(30)  # marker at 2
    p.begin_transaction()
    p.produce(topic, b"a1", partition=0)
    p.flush(30)
    p.abort_transaction(30)  # marker at 4

    async def read() -> list[tuple[int, bytes]]:
        async with connected(reader, broker) as r:
            return [(x.offset, x.value) for x in await r.fetch_all(topic, 0)]

    assert asyncio.run(read()) == [(0, b"c1"), (1, b"c2"), (3, b"a1")]


def _one_committed_record(broker: BrokerProcess) -> tuple[str, Producer]:
    """A new topic holding one committed transaction of one record (the record at 0, its commit
    marker at 1), and the transactional producer that wrote it."""
    topic = name()
    create(broker, topic)
    p = producer(broker, name("id"))
    p.begin_transaction()
    p.produce(topic, b"c1", partition=0)
    p.commit_transaction(30)
    return topic, p


def test_a_wait_for_messages_is_not_ended_by_a_trailing_marker(broker: BrokerProcess) -> None:
    """The SDK consumer's wait at the broker (WAIT_FOR_MESSAGES) counts records, not markers: a
    consumer past the last record of a committed transaction waits instead of being woken at
    once, again and again, by the marker after it."""
    topic, _producer = _one_committed_record(broker)  # the record at 0, the marker at 1
    with Client(f"127.0.0.1:{broker.iggy_port}") as c:
        assert c.wait_for_messages({topic: {0: 0}}, 5000) == 1
        started = time.monotonic()
        assert c.wait_for_messages({topic: {0: 1}}, 300) == 0
        assert time.monotonic() - started >= 0.25


def test_a_waiting_poll_is_not_ended_by_a_trailing_marker(broker: BrokerProcess) -> None:
    """POLL_BATCHES with a wait (the SDK consumer's poll of one partition) waits on records too: a
    poll from the marker after a committed transaction's last record waits its time, and the next
    transaction's record ends it."""
    topic, p = _one_committed_record(broker)  # the record at 0, the marker at 1
    with Client(f"127.0.0.1:{broker.iggy_port}") as c:
        assert c.fetch_arrow(topic, 0, 0, 10, max_wait_ms=5000).column("value").to_pylist() == [b"c1"]
        started = time.monotonic()
        assert c.fetch_arrow(topic, 0, 1, 10, max_wait_ms=300).num_rows == 0
        assert time.monotonic() - started >= 0.25
        p.begin_transaction()
        p.produce(topic, b"c2", partition=0)
        p.commit_transaction(30)  # the record at 2, the marker at 3
        got = c.fetch_arrow(topic, 0, 1, 10, max_wait_ms=5000)
        assert got.column("offset").to_pylist() == [2]
        assert got.column("value").to_pylist() == [b"c2"]
