"""Kafka transactions in cluster mode (issue 17), on 3 brokers and a real ZooKeeper, with
confluent-kafka's transactional producer: one transaction spanning partitions led by different
brokers commits or aborts on all of them; a consume-transform-produce loop commits its offsets
with its output; the coordinator's SIGKILL neither loses a prepared commit nor leaves an open
transaction holding read_committed consumers back (another broker takes the transactional id
over from ZooKeeper and finishes or times it out); a stale producer is fenced at the partition
leaders too.

Every wait is for a condition with a deadline (the clients' own timeouts where they block)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bayou.protocols.kafka.codes import ApiKey
from bayou.storage.txnindex import AbortedIndex, AbortedTxn
from support.cluster import Cluster
from support.kafka import KafkaConn, fetch_part, produce, read_values, stored, txn_batch

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev dependency")

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def bootstrap(cluster: Cluster, *ids: int) -> str:
    return ",".join(f"127.0.0.1:{cluster.brokers[i].port}" for i in ids or sorted(cluster.brokers))


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(cluster: Cluster, topic: str, partitions: int) -> None:
    """Created through Kafka's CreateTopics (replication factor 3), every partition's ISR full."""
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    for f in admin.create_topics([NewTopic(topic, partitions, 3)], operation_timeout=30).values():
        f.result(timeout=40)
    for p in range(partitions):
        cluster.wait(lambda p=p: len(cluster.isr(topic, p)) == 3, 60, f"a full ISR of partition {p}")


def producer(cluster: Cluster, txn_id: str, **extra: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": txn_id, "linger.ms": 1,
                  "transaction.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 1000, **extra})
    p.init_transactions(60)
    return p


def consumer(cluster: Cluster, isolation: str, group: str | None = None) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group or name("g"),
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "isolation.level": isolation, "topic.metadata.refresh.interval.ms": 1000})


def read(c: Consumer, topic: str, partitions: int, until: int | None = None,
         deadline_s: float = 60.0) -> dict[int, list[bytes]]:
    return read_values(c, topic, partitions, until, deadline_s=deadline_s)


async def _txn_coordinator(port: int, txn_id: str) -> int:
    conn = await KafkaConn.open(port)
    try:
        resp = await conn.call(ApiKey.FIND_COORDINATOR, key_type=1, coordinator_keys=[txn_id])
        c = resp.coordinators[0]
        assert c.error_code == ErrorCode.none, c
        return int(c.node_id)
    finally:
        await conn.close()


def txn_coordinator(cluster: Cluster, txn_id: str) -> int:
    """The broker every live broker names as ``txn_id``'s coordinator."""
    answers = {asyncio.run(_txn_coordinator(cluster.brokers[i].port, txn_id)) for i in cluster.live()}
    assert len(answers) == 1, answers
    return answers.pop()


def test_one_transaction_over_partitions_led_by_every_broker(cluster: Cluster) -> None:
    """Committed, aborted and committed again across 3 partitions whose leaders differ: read
    committed sees the committed records of every partition once, read uncommitted all of them."""
    topic, parts = name("ktx"), 3
    create_topic(cluster, topic, parts)
    leaders = {cluster.leader(topic, p) for p in range(parts)}
    p = producer(cluster, name("id"))
    try:
        for round_, commit in (("c1", True), ("a", False), ("c2", True)):
            p.begin_transaction()
            for part in range(parts):
                for i in range(5):
                    p.produce(topic, f"{round_}-{part}-{i}".encode(), partition=part)
            if commit:
                p.commit_transaction(60)
            else:
                p.flush(60)
                p.abort_transaction(60)
    finally:
        p.flush(0)
    committed, uncommitted = consumer(cluster, "read_committed"), consumer(cluster, "read_uncommitted")
    try:
        got = read(committed, topic, parts, until=2 * 5 * parts)
        assert got == {part: [f"{r}-{part}-{i}".encode() for r in ("c1", "c2") for i in range(5)]
                       for part in range(parts)}
        assert read(committed, topic, parts) == got  # and nothing after
        every = read(uncommitted, topic, parts, until=3 * 5 * parts)
        assert every == {part: [f"{r}-{part}-{i}".encode() for r in ("c1", "a", "c2") for i in range(5)]
                         for part in range(parts)}
    finally:
        committed.close()
        uncommitted.close()
    # every replica indexed the abort (a follower as it copied the marker): whichever of them
    # leads later lists it to read_committed fetches, however old it is by then
    def indexed(broker_id: int, part: int) -> list[AbortedTxn]:
        return AbortedIndex(cluster.brokers[broker_id].data_dir / "topics" / topic / str(part)).load(0)

    for b in cluster.brokers:
        for part in range(parts):
            cluster.wait(lambda b=b, part=part: len(indexed(b, part)) == 1, 30,
                         f"the abort in broker {b}'s index of partition {part}")
            entry = indexed(b, part)[0]
            assert (entry.first_offset, entry.last_offset) == (6, 11), entry  # after 5 records and a marker
    print(f"partition leaders: {sorted(leaders)}")
    assert len(leaders) > 1, "the partitions' leaders should be spread over the brokers"


def test_consume_transform_produce_commits_its_offsets_in_cluster_mode(cluster: Cluster) -> None:
    """The offsets sent to each transaction (TxnOffsetCommit, at the group's coordinator) become
    the group's committed offsets when it commits, and not when it aborts."""
    source, sink, group = name("kin"), name("kout"), name("g")
    create_topic(cluster, source, 1)
    create_topic(cluster, sink, 2)
    plain = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    for i in range(30):
        plain.produce(source, f"m{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    p = producer(cluster, name("id"))
    c = consumer(cluster, "read_committed", group=group)
    c.subscribe([source])
    try:
        done, aborted_once = 0, False
        deadline = time.monotonic() + 120
        while done < 30:
            assert time.monotonic() < deadline, f"transformed {done} of 30"
            msgs = [m for m in c.consume(10, 0.5) if not m.error()]
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                p.produce(sink, m.value().upper(), partition=int(m.value()[1:]) % 2)
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 60)
            if not aborted_once:  # its input is read again, its output never seen
                p.abort_transaction(60)
                aborted_once = True
                c.seek(TopicPartition(source, 0, msgs[0].offset()))
                continue
            p.commit_transaction(60)
            done += len(msgs)
    finally:
        c.close()
    out = consumer(cluster, "read_committed")
    try:
        got = read(out, sink, 2, until=30)
        assert sorted(got[0] + got[1]) == sorted(f"M{i}".encode() for i in range(30))
        assert read(out, sink, 2) == got
    finally:
        out.close()
    check = consumer(cluster, "read_committed", group=group)
    try:
        def committed() -> int:
            return int(check.committed([TopicPartition(source, 0)], timeout=10)[0].offset)

        cluster.wait(lambda: committed() == 30, 30, "the group's committed offset 30")
    finally:
        check.close()


def test_a_prepared_commit_survives_its_coordinators_sigkill(cluster: Cluster) -> None:
    """The coordinator of a transaction with records on 3 partitions is SIGKILLed before the
    commit; the producer's commit goes to the broker that takes the id over, which reads the
    state from ZooKeeper and writes the markers: every record is read committed, once."""
    topic, parts, txn_id = name("ktxk"), 3, name("id")
    create_topic(cluster, topic, parts)
    p = producer(cluster, txn_id, **{"message.timeout.ms": 120000, "transaction.timeout.ms": 120000})
    p.begin_transaction()
    for part in range(parts):
        for i in range(10):
            p.produce(topic, f"{part}-{i}".encode(), partition=part)
    assert p.flush(60) == 0
    coordinator = txn_coordinator(cluster, txn_id)
    cluster.brokers[coordinator].kill()
    cluster.wait(lambda: coordinator not in cluster.live(), 60, f"broker {coordinator} gone from ZooKeeper")
    for part in range(parts):
        cluster.wait(lambda part=part: cluster.leader(topic, part) not in (coordinator, -1), 60,
                     f"a new leader of partition {part}")
    p.commit_transaction(120)
    assert txn_coordinator(cluster, txn_id) != coordinator
    c = consumer(cluster, "read_committed")
    try:
        got = read(c, topic, parts, until=10 * parts)
        assert got == {part: [f"{part}-{i}".encode() for i in range(10)] for part in range(parts)}
        assert read(c, topic, parts) == got
    finally:
        c.close()
    # the producer goes on with the new coordinator
    p.begin_transaction()
    p.produce(topic, b"after", partition=0)
    p.commit_transaction(60)


def test_an_open_transaction_of_a_dead_coordinator_is_timed_out_by_its_successor(cluster: Cluster) -> None:
    """A producer leaves a transaction open and its coordinator dies: the broker that takes the
    id over aborts it when its timeout passes, so read_committed consumers move past it (and a
    new producer of the same id is fenced from nothing)."""
    topic, txn_id = name("ktxt"), name("id")
    create_topic(cluster, topic, 1)
    p = producer(cluster, txn_id, **{"transaction.timeout.ms": 3000})
    p.begin_transaction()
    p.produce(topic, b"abandoned", partition=0)
    assert p.flush(60) == 0
    coordinator = txn_coordinator(cluster, txn_id)
    cluster.brokers[coordinator].kill()
    cluster.wait(lambda: coordinator not in cluster.live(), 60, f"broker {coordinator} gone from ZooKeeper")
    plain = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "message.timeout.ms": 60000})
    plain.produce(topic, b"later", partition=0)
    assert plain.flush(60) == 0
    c = consumer(cluster, "read_committed")
    try:
        assert read(c, topic, 1, until=1, deadline_s=90) == {0: [b"later"]}
    finally:
        c.close()
    again = producer(cluster, txn_id)  # the same id, a new epoch
    again.begin_transaction()
    again.produce(topic, b"next", partition=0)
    again.commit_transaction(60)
    c = consumer(cluster, "read_committed")
    try:
        assert read(c, topic, 1, until=2) == {0: [b"later", b"next"]}
    finally:
        c.close()


def test_a_fenced_producer_is_refused_by_the_partition_leaders(cluster: Cluster) -> None:
    """A second producer of the same transactional id bumps the epoch: the first one's next
    transaction fails (fenced), and nothing it sent is read committed."""
    topic, txn_id = name("ktxf"), name("id")
    create_topic(cluster, topic, 2)
    first = producer(cluster, txn_id)
    first.begin_transaction()
    first.produce(topic, b"one", partition=0)
    first.commit_transaction(60)
    second = producer(cluster, txn_id)
    with pytest.raises(KafkaException):
        first.begin_transaction()
        first.produce(topic, b"stale", partition=1)
        first.commit_transaction(30)
    second.begin_transaction()
    second.produce(topic, b"two", partition=1)
    second.commit_transaction(60)
    c = consumer(cluster, "read_committed")
    try:
        got = read(c, topic, 2, until=2)
        assert got == {0: [b"one"], 1: [b"two"]}
        assert read(c, topic, 2) == got
    finally:
        c.close()


async def _refusals(cluster: Cluster, topic: str, tx: str, coordinator: int) -> None:
    leader = cluster.leader(topic, 0)
    other = next(i for i in cluster.live() if i != coordinator)
    at = {i: await KafkaConn.open(cluster.brokers[i].port) for i in cluster.live()}
    try:
        elsewhere = await at[other].call(ApiKey.INIT_PRODUCER_ID, transactional_id=tx,
                                         transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
        assert elsewhere.error_code == ErrorCode.not_coordinator
        init = await at[coordinator].call(ApiKey.INIT_PRODUCER_ID, transactional_id=tx,
                                          transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
        assert init.error_code == ErrorCode.none
        pid, epoch = init.producer_id, init.producer_epoch

        async def add(broker_id: int) -> ErrorCode:
            r = await at[broker_id].call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=tx,
                                         v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                                         v3_and_below_topics=[{"name": topic, "partitions": [0]}])
            return ErrorCode(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)

        async def end(broker_id: int, commit: bool) -> ErrorCode:
            r = await at[broker_id].call(ApiKey.END_TXN, transactional_id=tx, producer_id=pid,
                                         producer_epoch=epoch, committed=commit)
            return ErrorCode(r.error_code)

        async def send(values: tuple[bytes, ...], e: int = epoch, txn_id: str | None = tx) -> Any:
            return await produce(at[leader], topic, txn_batch(*values, producer_id=pid, epoch=e, sequence=0),
                                 transactional_id=txn_id)

        # the leader checks with the coordinator's state: not added yet, no such id, a stale epoch
        assert (await send((b"x",))).error_code == ErrorCode.invalid_txn_state
        unknown = await send((b"x",), txn_id=f"{tx}-unknown")
        assert unknown.error_code == ErrorCode.invalid_producer_id_mapping
        assert await add(other) == ErrorCode.not_coordinator
        assert await add(coordinator) == ErrorCode.none
        assert (await send((b"x",), e=epoch + 1)).error_code == ErrorCode.producer_fenced
        assert await stored(at[leader], topic) == []
        ok = await send((b"a", b"b"))
        assert (ok.error_code, ok.base_offset) == (ErrorCode.none, 0)
        part = await fetch_part(at[leader], topic, 1)
        assert (part.high_watermark, part.last_stable_offset) == (2, 0)
        assert await end(other, False) == ErrorCode.not_coordinator
        assert await end(coordinator, False) == ErrorCode.none
        assert await end(coordinator, True) == ErrorCode.invalid_txn_state
        part = await fetch_part(at[leader], topic, 1)
        assert (part.high_watermark, part.last_stable_offset) == (3, 3)
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]
        # the aborted transaction's epoch is over: its producer's next batch is refused
        assert (await send((b"late",))).error_code == ErrorCode.invalid_txn_state
        assert await stored(at[leader], topic) == [b"a", b"b"]
    finally:
        for c in at.values():
            await c.close()


def test_the_transaction_apis_refuse_what_kafka_refuses_in_cluster_mode(cluster: Cluster) -> None:
    """Raw requests: NOT_COORDINATOR away from the transactional id's coordinator; the
    partition's leader refuses a transactional batch for a partition not added, an unknown id, a
    stale epoch; nothing refused is stored; the abort is listed to read_committed fetches."""
    topic = name("ktxr")
    create_topic(cluster, topic, 1)
    tx = name("id")
    asyncio.run(_refusals(cluster, topic, tx, txn_coordinator(cluster, tx)))
