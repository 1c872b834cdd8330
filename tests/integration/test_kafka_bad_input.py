"""Bad input on the Kafka front end gets Kafka's error code for it, over a real socket to a broker
subprocess: a malformed frame closes only its own connection, a refused batch stores nothing, and
the idempotent producer's replays are acknowledged and stored once while a gap is refused."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from kio.schema.errors import ErrorCode

from bayou.protocols.kafka import codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import SUPPORTED, ApiKey
from bayou.records.batch import refresh_crc
from support.brokers import BrokerProcess, LineConn
from support.kafka import KafkaConn, batch, fetch_part, frame, produce, running_broker, stored, txn_batch

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("kafka-bad")) as b:
        yield b


@pytest.fixture
async def conn(broker: BrokerProcess) -> AsyncIterator[KafkaConn]:
    c = await KafkaConn.open(broker.port)
    try:
        yield c
    finally:
        await c.close()


def name() -> str:
    return f"bad-{uuid.uuid4().hex[:10]}"


async def create(c: KafkaConn, topic: str, partitions: int = 1, **config: str) -> None:
    resp = await c.call(ApiKey.CREATE_TOPICS, timeout=5000, topics=[
        {"name": topic, "num_partitions": partitions, "replication_factor": 1,
         "configs": [{"name": k.replace("_", "."), "value": v} for k, v in config.items()]}])
    assert resp.topics[0].error_code == ErrorCode.none, resp






async def test_a_bad_crc_is_corrupt_message_and_stores_nothing(conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic)
    damaged = bytearray(batch(b"x"))
    damaged[-1] ^= 0x01
    assert (await produce(conn, topic, bytes(damaged))).error_code == ErrorCode.corrupt_message
    assert await stored(conn, topic) == []


async def test_a_batch_over_max_message_bytes_is_message_too_large(conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic, max_message_bytes="200")
    assert (await produce(conn, topic, batch(b"y" * 500))).error_code == ErrorCode.message_too_large
    assert (await produce(conn, topic, batch(b"small"))).error_code == ErrorCode.none
    assert await stored(conn, topic) == [b"small"]


async def test_unknown_topics_and_partitions(conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic, 2)
    assert (await produce(conn, name(), batch(b"x"))).error_code == ErrorCode.unknown_topic_or_partition
    assert (await produce(conn, topic, batch(b"x"), partition=2)).error_code == \
        ErrorCode.unknown_topic_or_partition
    meta = await conn.call(ApiKey.METADATA, topics=[{"name": "bad name!"}, {"name": name()}],
                           allow_auto_topic_creation=False)
    assert [t.error_code for t in meta.topics] == [ErrorCode.invalid_topic_exception,
                                                   ErrorCode.unknown_topic_or_partition]


async def test_a_produce_of_several_partitions_answers_each_in_order(conn: KafkaConn) -> None:
    """Partitions of one Produce, some refused among them (fsync=never: appended in turn, no task
    each): each answered in the request's order, only the good ones stored."""
    topic, other = name(), name()
    await create(conn, topic, 3)
    await create(conn, other)
    damaged = bytearray(batch(b"bad"))
    damaged[-1] ^= 0x01
    resp = await conn.call(ApiKey.PRODUCE, acks=1, timeout=5000, transactional_id=None, topic_data=[
        {"name": topic, "partition_data": [
            {"index": 2, "records": batch(b"p2")}, {"index": 9, "records": batch(b"x")},
            {"index": 0, "records": bytes(damaged)}, {"index": 1, "records": batch(b"p1", b"p1b")}]},
        {"name": other, "partition_data": [{"index": 0, "records": batch(b"o0")}]}])
    assert [(t.name, [(p.index, p.error_code) for p in t.partition_responses]) for t in resp.responses] == [
        (topic, [(2, ErrorCode.none), (9, ErrorCode.unknown_topic_or_partition),
                 (0, ErrorCode.corrupt_message), (1, ErrorCode.none)]),
        (other, [(0, ErrorCode.none)])]
    assert [await stored(conn, topic, p) for p in range(3)] == [[], [b"p1", b"p1b"], [b"p2"]]
    assert await stored(conn, other) == [b"o0"]


async def test_invalid_acks_and_acks_zero(conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic)
    assert (await produce(conn, topic, batch(b"x"), acks=2)).error_code == ErrorCode.invalid_required_acks
    body = build(codec.request_schema(ApiKey.PRODUCE, 9), acks=0, timeout=5000, topic_data=[
        {"name": topic, "partition_data": [{"index": 0, "records": batch(b"fire-and-forget")}]}])
    await conn.send(frame(ApiKey.PRODUCE, 9, 500, body))  # no response comes: the next is ApiVersions'
    versions = await conn.call(ApiKey.API_VERSIONS, 0)
    assert versions.error_code == ErrorCode.none
    assert await stored(conn, topic) == [b"fire-and-forget"]


async def test_an_unserved_version_closes_only_that_connection(broker: BrokerProcess,
                                                               conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic)
    other = await KafkaConn.open(broker.port)
    try:
        newest = SUPPORTED[ApiKey.PRODUCE].max
        body = build(codec.request_schema(ApiKey.PRODUCE, newest), acks=1, timeout=5000, topic_data=[])
        data = bytearray(frame(ApiKey.PRODUCE, newest, 9, body))
        struct.pack_into(">h", data, 6, newest + 1)  # Produce v13 names topics by id: not served
        await other.send(bytes(data))
        assert await other.is_closed()
    finally:
        await other.close()
    assert (await produce(conn, topic, batch(b"still-here"))).error_code == ErrorCode.none


async def test_a_garbage_size_closes_the_connection_and_v1_still_answers(broker: BrokerProcess) -> None:
    c = await KafkaConn.open(broker.port)
    try:
        await c.send(b"\x06\xff\xff\xff")  # 117 MB: over the 100 MiB request cap
        assert await c.is_closed()
    finally:
        await c.close()
    v1 = await LineConn.open(broker.port)
    try:
        assert await v1.ask("V1|1|PING|") == "V1|1|OK"
    finally:
        await v1.close()


async def test_the_idempotent_producer_rules(conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic)
    init = await conn.call(ApiKey.INIT_PRODUCER_ID, transactional_id=None, transaction_timeout=60000,
                           producer_id=-1, producer_epoch=-1)
    assert init.error_code == ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch
    first = await produce(conn, topic, batch(b"a", b"b", producer_id=pid, epoch=epoch, sequence=0))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    replay = await produce(conn, topic, batch(b"a", b"b", producer_id=pid, epoch=epoch, sequence=0))
    assert replay.error_code == ErrorCode.none  # acknowledged, not stored again
    gap = await produce(conn, topic, batch(b"d", producer_id=pid, epoch=epoch, sequence=5))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    nxt = await produce(conn, topic, batch(b"c", producer_id=pid, epoch=epoch, sequence=2))
    assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 2)
    assert await stored(conn, topic) == [b"a", b"b", b"c"]
    # a new epoch (KIP-360 bump) starts at sequence 0; the old epoch is fenced
    bumped = await conn.call(ApiKey.INIT_PRODUCER_ID, transactional_id=None, transaction_timeout=60000,
                             producer_id=pid, producer_epoch=epoch)
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, epoch + 1)
    assert (await produce(conn, topic, batch(b"e", producer_id=pid, epoch=epoch + 1,
                                             sequence=0))).error_code == ErrorCode.none
    stale = await produce(conn, topic, batch(b"f", producer_id=pid, epoch=epoch, sequence=3))
    assert stale.error_code == ErrorCode.producer_fenced
    assert await stored(conn, topic) == [b"a", b"b", b"c", b"e"]








async def test_the_transaction_apis_refuse_what_kafka_refuses(conn: KafkaConn) -> None:
    topic, tx = name(), f"tx-{uuid.uuid4().hex[:8]}"
    await create(conn, topic)
    versions = await conn.call(ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    served = {k.api_key for k in versions.api_keys}
    assert {ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT} <= served
    too_long = await conn.call(ApiKey.INIT_PRODUCER_ID, transactional_id=tx, transaction_timeout=3_600_000,
                               producer_id=-1, producer_epoch=-1)
    assert too_long.error_code == ErrorCode.invalid_transaction_timeout
    init = await conn.call(ApiKey.INIT_PRODUCER_ID, transactional_id=tx, transaction_timeout=60000,
                           producer_id=-1, producer_epoch=-1)
    assert init.error_code == ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch

    async def add(p: int = pid, e: int = epoch, t: str = topic) -> ErrorCode:
        r = await conn.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=tx,
                            v3_and_below_producer_id=p, v3_and_below_producer_epoch=e,
                            v3_and_below_topics=[{"name": t, "partitions": [0]}])
        return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    async def end(commit: bool, e: int = epoch) -> ErrorCode:
        r = await conn.call(ApiKey.END_TXN, transactional_id=tx, producer_id=pid, producer_epoch=e,
                            committed=commit)
        return r.error_code

    # a transactional batch before its partition was added: nothing stored
    early = await produce(conn, topic, txn_batch(b"x", producer_id=pid, epoch=epoch, sequence=0),
                          transactional_id=tx)
    assert early.error_code == ErrorCode.invalid_txn_state
    assert await end(True) == ErrorCode.invalid_txn_state  # nothing begun: no commit
    assert await add(p=pid + 1) == ErrorCode.invalid_producer_id_mapping
    assert await add(e=epoch + 1) == ErrorCode.producer_fenced
    assert await add(t=name()) == ErrorCode.unknown_topic_or_partition
    offsets = await conn.call(ApiKey.TXN_OFFSET_COMMIT, transactional_id=tx, group_id="g", producer_id=pid,
                              producer_epoch=epoch, topics=[{"name": topic, "partitions": [
                                  {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}])
    assert offsets.topics[0].partitions[0].error_code == ErrorCode.invalid_txn_state  # group not added
    assert await add() == ErrorCode.none
    stale = await produce(conn, topic, txn_batch(b"x", producer_id=pid, epoch=epoch + 1, sequence=0),
                          transactional_id=tx)
    assert stale.error_code == ErrorCode.producer_fenced
    plain = await produce(conn, topic, txn_batch(b"a", producer_id=pid, epoch=epoch, sequence=0))
    assert plain.error_code == ErrorCode.invalid_txn_state  # a transactional batch needs its id
    ok = await produce(conn, topic, txn_batch(b"a", b"b", producer_id=pid, epoch=epoch, sequence=0),
                       transactional_id=tx)
    assert (ok.error_code, ok.base_offset) == (ErrorCode.none, 0)
    # open: read_committed stops before it, read_uncommitted sees it
    part = await fetch_part(conn, topic, 1)
    assert (part.high_watermark, part.last_stable_offset, part.records or b"") == (2, 0, b"")
    assert [r for r in await stored(conn, topic)] == [b"a", b"b"]
    assert await end(False) == ErrorCode.none
    assert await end(False) == ErrorCode.none  # a retried abort is answered as the first
    assert await end(True) == ErrorCode.invalid_txn_state
    part = await fetch_part(conn, topic, 1)
    assert (part.high_watermark, part.last_stable_offset) == (3, 3)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]
    # a control batch is the broker's to write
    marker = bytearray(batch(b"x"))
    marker[22] |= 0x30
    refresh_crc(marker)
    assert (await produce(conn, topic, bytes(marker))).error_code == ErrorCode.invalid_record
    # a second InitProducerId fences the first epoch
    again = await conn.call(ApiKey.INIT_PRODUCER_ID, transactional_id=tx, transaction_timeout=60000,
                            producer_id=-1, producer_epoch=-1)
    assert (again.producer_id, again.producer_epoch) == (pid, epoch + 1)
    assert await add() == ErrorCode.producer_fenced
    # every reader but read_committed Kafka sees the aborted records; none sees the marker
    assert await stored(conn, topic) == [b"a", b"b"]


async def test_requests_pipelined_are_answered_in_order(broker: BrokerProcess) -> None:
    c = await KafkaConn.open(broker.port)
    try:
        body = build(codec.request_schema(ApiKey.API_VERSIONS, 0))
        await c.send(b"".join(frame(ApiKey.API_VERSIONS, 0, i, body) for i in range(1, 21)))
        ids = [struct.unpack_from(">i", await c.recv())[0] for _ in range(20)]
        assert ids == list(range(1, 21))
    finally:
        await c.close()


async def test_a_long_poll_answers_at_its_max_wait(conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic)
    loop = asyncio.get_running_loop()
    started = loop.time()
    resp = await conn.call(ApiKey.FETCH, replica_id=-1, max_wait=300, min_bytes=1, max_bytes=1 << 20,
                           session_epoch=-1, topics=[{"topic": topic, "partitions": [
                               {"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                "last_fetched_epoch": -1, "log_start_offset": -1,
                                "partition_max_bytes": 1 << 20}]}])
    assert loop.time() - started >= 0.25
    assert resp.responses[0].partitions[0].records in (b"", None)


async def test_a_group_with_members_of_another_protocol_is_not_deleted(broker: BrokerProcess,
                                                                      conn: KafkaConn) -> None:
    topic = name()
    await create(conn, topic)
    v1 = await LineConn.open(broker.port)
    try:
        assert "generation=" in await v1.ask(f"V1|1|JOIN|v1-group-{topic} {topic} m1")
        resp = await conn.call(ApiKey.DELETE_GROUPS, groups_names=[f"v1-group-{topic}", "no-such-group"])
        assert [r.error_code for r in resp.results] == [ErrorCode.non_empty_group,
                                                        ErrorCode.group_id_not_found]
        listed = await conn.call(ApiKey.LIST_GROUPS)
        assert f"v1-group-{topic}" in {g.group_id for g in listed.groups}
    finally:
        await v1.close()
