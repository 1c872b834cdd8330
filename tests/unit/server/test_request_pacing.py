"""One request listing many items (partitions, topics, groups) must not hold the event loop, and so
every other connection, for the whole of its work: a 1.6 MB Kafka ListOffsets of 100,000
partitions held it 1.1 s, a 0.8 MB DescribeGroups 1.5 s, and a Kafka frame may be 100 MiB.

Each handler's loop over the request's items yields every YIELD_EVERY items (broker/pace.py),
and the Kafka front end reads a large frame and writes a wide answer in the parse pool
(server/workers.py), off the event loop. Another task counts its turns meanwhile."""

from __future__ import annotations

import re
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

import bayou.broker.pace as pace_module
import bayou.protocols.cursus.requests as cursus_requests
import bayou.server.cursus.produce as cursus_produce
import bayou.server.cursus.service as cursus_service
import bayou.server.iggy.produce as iggy_produce
import bayou.server.iggy.service as iggy_service
import bayou.server.kafka as kafka_server
from bayou.broker import YIELD_EVERY, Broker, BrokerConfig, authz
from bayou.broker.groups.coordinator import CURSUS_POLICY, GroupCoordinator
from bayou.errors import OffsetRegression
from bayou.protocols.iggy import codec as iggy_codec
from bayou.protocols.iggy import messages as im
from bayou.protocols.iggy.codec import encode_request_frame
from bayou.protocols.iggy.codes import Command, Status
from bayou.protocols.iggy.framing import Dialect, LegacyFrameReader
from bayou.protocols.kafka import codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import ApiKey
from bayou.protocols.kafka.framing import RequestHeader
from bayou.protocols.tank import codec as tank_codec
from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, encode_bundle
from bayou.protocols.tank.codes import TankError
from bayou.records.batch import Record, encode_batch
from bayou.server import tank_store
from bayou.server.cursus import Advertised as CursusAdvertised
from bayou.server.cursus import ConnState, CursusService
from bayou.server.iggy import IggyService
from bayou.server.iggy.users import TooManyGrants
from bayou.server.kafka import KafkaService
from bayou.server.kafka_context import Advertised, Session, code_of
from bayou.server.tank import TankConnection, TankService
from bayou.server.workers import OFF_LOOP_BYTES
from bayou.storage import FsyncPolicy, LogConfig, fsutil
from support.cursus import build_batch
from support.cursus import message as cursus_message
from support.loop import turns_during
from support.tank import TankConn, start_tank, tank_port

N = 3_000  # items a request lists: about N / YIELD_EVERY turns for the others
WHERE = Advertised(0, "localhost", 9092)


@pytest.fixture
async def broker(tmp_path: Path) -> Any:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(fsync=FsyncPolicy("never"))))
    await b.start()
    await b.create_topic("t", 8)
    yield b
    await b.stop()


def frame(key: ApiKey, version: int, **fields: Any) -> bytes:
    body = build(codec.request_schema(key, version), **fields)
    header = RequestHeader(key, version, 7, "pacing", codec.request_is_flexible(key, version), 0)
    return codec.encode_request(header, body)[4:]


def thread_spy(threads: dict[str, str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, noting in ``threads[name]`` the thread that last ran it."""
    def run(*args: Any, **kwargs: Any) -> Any:
        threads[name] = threading.current_thread().name
        return fn(*args, **kwargs)
    return run


def decoded(key: ApiKey, version: int, reply: Any) -> Any:
    raw = reply if isinstance(reply, bytes | bytearray) else b"".join(reply)
    return codec.decode_response(bytes(raw[4:]), key, version)[1]


REQUESTS: dict[str, Callable[[], tuple[ApiKey, int, bytes]]] = {
    "ListOffsets": lambda: (ApiKey.LIST_OFFSETS, 5, frame(
        ApiKey.LIST_OFFSETS, 5, replica_id=-1, topics=[{"name": "t", "partitions": [
            {"partition_index": i % 8, "current_leader_epoch": -1, "timestamp": -1} for i in range(N)]}])),
    "Metadata": lambda: (ApiKey.METADATA, 8, frame(
        ApiKey.METADATA, 8, topics=[{"name": f"x{i}"} for i in range(N)], allow_auto_topic_creation=False)),
    "Produce": lambda: (ApiKey.PRODUCE, 7, frame(
        ApiKey.PRODUCE, 7, acks=1, timeout=30000, topic_data=[{"name": "t", "partition_data": [
            {"index": i % 8, "records": None} for i in range(N)]}])),
    "OffsetCommit": lambda: (ApiKey.OFFSET_COMMIT, 7, frame(
        ApiKey.OFFSET_COMMIT, 7, group_id="g", generation_id_or_member_epoch=-1, member_id="",
        topics=[{"name": "t", "partitions": [{"partition_index": i % 8, "committed_offset": 0,
                                              "committed_leader_epoch": -1} for i in range(N)]}])),
    "OffsetFetch": lambda: (ApiKey.OFFSET_FETCH, 5, frame(
        ApiKey.OFFSET_FETCH, 5, group_id="g", topics=[{"name": "t", "partition_indexes": list(range(N))}])),
    "OffsetForLeaderEpoch": lambda: (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, frame(
        ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-1, topics=[{"topic": "t", "partitions": [
            {"partition": i % 8, "current_leader_epoch": -1, "leader_epoch": 0} for i in range(N)]}])),
    "DescribeGroups": lambda: (ApiKey.DESCRIBE_GROUPS, 4, frame(
        ApiKey.DESCRIBE_GROUPS, 4, groups=[f"g{i}" for i in range(N)])),
    "LeaveGroup": lambda: (ApiKey.LEAVE_GROUP, 4, frame(
        ApiKey.LEAVE_GROUP, 4, group_id="g", members=[{"member_id": f"m{i}"} for i in range(N)])),
    "DeleteGroups": lambda: (ApiKey.DELETE_GROUPS, 2, frame(
        ApiKey.DELETE_GROUPS, 2, groups_names=[f"g{i}" for i in range(N)])),
    "DeleteTopics": lambda: (ApiKey.DELETE_TOPICS, 4, frame(
        ApiKey.DELETE_TOPICS, 4, topic_names=[f"x{i}" for i in range(N)], timeout=1000)),
    "CreatePartitions": lambda: (ApiKey.CREATE_PARTITIONS, 3, frame(
        ApiKey.CREATE_PARTITIONS, 3, topics=[{"name": f"x{i}", "count": 2} for i in range(N)], timeout=1000)),
    "DescribeConfigs": lambda: (ApiKey.DESCRIBE_CONFIGS, 4, frame(
        ApiKey.DESCRIBE_CONFIGS, 4, resources=[{"resource_type": 2, "resource_name": f"x{i}",
                                                "configuration_keys": None} for i in range(N)])),
    "IncrementalAlterConfigs": lambda: (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, frame(
        ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, resources=[{"resource_type": 2, "resource_name": f"x{i}",
                                                         "configs": []} for i in range(N)])),
}


@pytest.fixture
def on_the_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every request read and answered on the event loop: only the handlers' own yields count."""
    monkeypatch.setattr(kafka_server, "LARGE_REQUEST", 1 << 40)
    monkeypatch.setattr(kafka_server, "WIDE_ANSWER", 1 << 40)
    monkeypatch.setattr(kafka_server, "WIDE_FAST_ANSWER", 1 << 40)
    yield


@pytest.mark.parametrize("name", sorted(REQUESTS))
async def test_a_kafka_request_of_many_items_lets_the_event_loop_run(
        broker: Broker, on_the_loop: None, name: str) -> None:
    key, version, request = REQUESTS[name]()
    reply, during = await turns_during(KafkaService(broker).answer(request, Session("127.0.0.1:1"), WHERE))
    assert reply is not None
    decoded(key, version, reply)  # a whole, valid answer
    assert during >= N // YIELD_EVERY - 1, f"{name}: {during} turns"


async def test_a_large_request_is_read_and_a_wide_answer_written_off_the_loop(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a frame past LARGE_REQUEST and writing an answer of WIDE_ANSWER entries or more
    cost CPU in proportion: the parse pool does them (and the loop turns meanwhile even with no
    yield in the handler)."""
    monkeypatch.setattr(pace_module, "YIELD_EVERY", 1 << 40)
    threads: dict[str, str] = {}

    monkeypatch.setattr(kafka_server.codec, "decode_request",
                        thread_spy(threads, "decode", codec.decode_request))
    monkeypatch.setattr(kafka_server, "_encode", thread_spy(threads, "encode", kafka_server._encode))
    svc, session = KafkaService(broker), Session("127.0.0.1:1")
    small = frame(ApiKey.LIST_OFFSETS, 5, replica_id=-1, topics=[{"name": "t", "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
    assert await svc.answer(small, session, WHERE)
    assert threads == {"decode": "MainThread", "encode": "MainThread"}
    large = frame(ApiKey.LIST_OFFSETS, 5, replica_id=-1, topics=[{"name": "t", "partitions": [
        {"partition_index": i % 8, "current_leader_epoch": -1, "timestamp": -1} for i in range(6_000)]}])
    assert len(large) > kafka_server.LARGE_REQUEST
    reply, during = await turns_during(svc.answer(large, session, WHERE))
    assert threads["decode"].startswith("bayou-parse") and threads["encode"].startswith("bayou-parse")
    assert during > 0
    answer = decoded(ApiKey.LIST_OFFSETS, 5, reply)
    assert [p.partition_index for p in answer.topics[0].partitions] == [i % 8 for i in range(6_000)]
    # a small request with a wide answer: Metadata of every topic on a broker of many partitions
    threads.clear()
    await broker.create_topic("wide", kafka_server.WIDE_ANSWER)
    reply = await svc.answer(frame(ApiKey.METADATA, 8, topics=None), session, WHERE)
    assert threads["decode"] == "MainThread" and threads["encode"].startswith("bayou-parse")
    wide = {t.name: len(t.partitions) for t in decoded(ApiKey.METADATA, 8, reply).topics}
    assert wide == {"t": 8, "wide": kafka_server.WIDE_ANSWER}
    # a produce of the usual shape is read on the loop however large its records (about 20 us,
    # the records are not parsed): the pool's two threads are not every producer's queue
    threads.clear()
    batch = encode_batch([Record(value=b"v" * 1000, timestamp=0) for _ in range(100)])
    produce = frame(ApiKey.PRODUCE, 7, acks=1, timeout=30000,
                    topic_data=[{"name": "t", "partition_data": [{"index": 0, "records": batch}]}])
    assert len(produce) > kafka_server.LARGE_REQUEST
    answer = decoded(ApiKey.PRODUCE, 7, await svc.answer(produce, session, WHERE))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert "decode" not in threads and threads["encode"] == "MainThread"


async def test_an_offset_commit_of_many_partitions_saves_the_offsets_once(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit of n partitions wrote the offsets file n times, each write holding every offset
    stored (100,000 partitions took 111 s); each topic's are now committed at once. The codes stay
    per partition: a negative offset, an unknown topic, a commit moving back in a group whose
    commits only go forward (a Cursus group)."""
    writes: list[Path] = []
    atomic_write = fsutil.atomic_write

    def counted(path: Path, data: bytes) -> None:
        writes.append(path)
        atomic_write(path, data)

    monkeypatch.setattr("bayou.broker.persist.atomic_write", counted)
    await broker.create_topic("c", 1)
    await broker.register_group("cg", "c", CURSUS_POLICY)
    await broker.commit_offset("cg", "c", 0, 10)
    await broker.create_topic("d", 4)
    await broker.register_group("cg", "d", CURSUS_POLICY)
    await broker.commit_offset("cg", "d", 0, 10)
    svc, session = KafkaService(broker), Session("127.0.0.1:1")

    def commit(group: str, topics: dict[str, dict[int, int]]) -> bytes:
        return frame(ApiKey.OFFSET_COMMIT, 7, group_id=group, generation_id_or_member_epoch=-1,
                     member_id="", topics=[{"name": t, "partitions": [
                         {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1}
                         for p, o in parts.items()]} for t, parts in topics.items()])

    writes.clear()
    many = {p: 1000 + p for p in range(2_000)}
    for name in ("e1", "e2", "e3"):
        await broker.create_topic(name, 1)
    answer = decoded(ApiKey.OFFSET_COMMIT, 7, await svc.answer(commit("g", {
        "t": many, "missing": {0: 1, 1: -1}, "e1": {0: 3}, "e2": {0: 4}, "e3": {0: -2}}), session, WHERE))
    codes = {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}
    assert codes == {**{("t", p): ErrorCode.none for p in many},
                     ("missing", 0): ErrorCode.unknown_topic_or_partition,
                     ("missing", 1): ErrorCode.unknown_topic_or_partition,  # the topic first, as before
                     ("e1", 0): ErrorCode.none, ("e2", 0): ErrorCode.none,
                     ("e3", 0): ErrorCode.offset_out_of_range}
    assert len([w for w in writes if w.name == "offsets.json"]) == 1  # one save for every topic
    assert all(broker.committed_offset("g", "t", p) == o for p, o in many.items())
    assert (broker.committed_offset("g", "e1", 0), broker.committed_offset("g", "e3", 0)) == (3, None)

    answer = decoded(ApiKey.OFFSET_COMMIT, 7, await svc.answer(
        commit("cg", {"d": {0: 5, 1: 7, 2: -3, 3: 11}}), session, WHERE))
    codes = {p.partition_index: p.error_code for p in answer.topics[0].partitions}
    assert codes == {0: code_of(OffsetRegression("")), 1: ErrorCode.none,
                     2: ErrorCode.offset_out_of_range, 3: ErrorCode.none}
    assert [broker.committed_offset("cg", "d", p) for p in range(4)] == [10, 7, None, 11]


# -- TANK ----------------------------------------------------------------------------------------


def _tank_conn() -> tuple[TankConnection, bytearray]:
    """A TANK connection whose writer keeps what the service writes."""
    data = bytearray()

    async def drained() -> None:
        return None

    writer = SimpleNamespace(write=data.extend, drain=drained)
    return TankConnection(SimpleNamespace(peer="127.0.0.1:40000", busy=0, writer=writer, answers=None)), data  # type: ignore[arg-type]


def _tank_bundle(value: bytes) -> bytes:
    return encode_bundle([TankMessage(0, 1_700_000_000_000, None, value)], compress=False)


TANK_REQUESTS: dict[str, Callable[[], Any]] = {
    "DiscoverPartitions": lambda: tm.DiscoverPartitions(1, "t", tuple(i % 8 for i in range(N))),
    "Consume": lambda: tm.Consume(1, tuple(tm.ConsumeTopic("t", tuple(
        tm.ConsumePartition(i % 8, 0, 4096) for i in range(250))) for _ in range(N // 250))),
    "ConsumePeer": lambda: tm.ConsumePeer(1, (tm.ConsumeTopic("t", tuple(
        tm.ConsumePartition(i % 8, 0, 4096) for i in range(N))),)),
    "Produce": lambda: tm.Produce(1, tuple(tm.ProduceTopic("t", tuple(
        tm.ProduceEntry(i % 8, _tank_bundle(b"v")) for i in range(250))) for _ in range(N // 250)),
        required_acks=1),
}


@pytest.mark.parametrize("name", sorted(TANK_REQUESTS))
async def test_a_tank_request_of_many_items_lets_the_event_loop_run(broker: Broker, name: str) -> None:
    """TANK's consume and produce count their topics and partitions in u8s (255 x 255), its
    ConsumePeer in u16s and DiscoverPartitions lists up to 65,535 ids: a 2 MB DiscoverPartitions
    held the loop 1.9-4.6 s (the reply then failed: more entries than its u16 count)."""
    svc, (c, written) = TankService(broker), _tank_conn()
    request = TANK_REQUESTS[name]()
    _, during = await turns_during(svc.handle(c, request))
    assert during >= N // YIELD_EVERY - 1, f"{name}: {during} turns"
    msg_id, size = struct.unpack_from("<BI", written)
    reply = tank_codec.decode_response(msg_id, bytes(written[5:5 + size]), request=request)
    if name == "DiscoverPartitions":
        assert isinstance(reply, tm.DiscoverPartitionsResponse) and len(reply.partitions) == N
    if name == "Produce":
        assert broker.partition("t", 0).log.next_offset == len(range(0, 250, 8)) * (N // 250)


def test_a_tank_discover_partitions_of_more_ids_than_its_reply_counts_is_malformed() -> None:
    for n, ok in ((tank_codec.MAX_DISCOVERED, True), (tank_codec.MAX_DISCOVERED + 1, False)):
        frame = tank_codec.encode_request_frame(tm.DiscoverPartitions(1, "t", (0,) * n))
        if ok:
            assert len(tank_codec.decode_request(6, frame[5:]).partitions) == n  # type: ignore[union-attr]
        else:
            with pytest.raises(TankError, match="65535"):
                tank_codec.decode_request(6, frame[5:])


async def test_large_tank_requests_are_read_off_the_event_loop(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a socket: a request past OFF_LOOP_BYTES other than a produce (a ConsumePeer of
    10,000 partitions) is decoded in the parse pool, and so is the check of a produced bundle
    whose messages must be walked one by one (uneven sizes); a bundle of uniform messages keeps
    the quick check on the loop, and small requests stay there too."""
    threads: dict[str, str] = {}

    monkeypatch.setattr(tank_codec, "decode_request",
                        thread_spy(threads, "decode", tank_codec.decode_request))
    monkeypatch.setattr(tank_store, "check_bundle", thread_spy(threads, "check", tank_store.check_bundle))
    server = await start_tank(tmp_path / "d")
    try:
        await server.broker.create_topic("t", 8)
        c = await TankConn.open(tank_port(server))
        peer = tm.ConsumePeer(1, (tm.ConsumeTopic("t", tuple(
            tm.ConsumePartition(i % 8, 0, 4096) for i in range(10_000))),))
        assert len(tank_codec.encode_request_frame(peer)) > OFF_LOOP_BYTES
        reply = await c.call(peer)
        assert isinstance(reply, tm.ConsumePeerResponse)
        assert len(reply.topics[0].partitions) == 10_000  # type: ignore[union-attr]
        assert threads.pop("decode").startswith("bayou-parse")

        uneven = encode_bundle([TankMessage(0, 1_700_000_000_000 + i, None, b"v" * (i % 50))
                                for i in range(5_000)], compress=False)
        uniform = encode_bundle([TankMessage(0, 1_700_000_000_000, None, b"v" * 40)
                                 for _ in range(5_000)], compress=False)
        assert len(uneven) > OFF_LOOP_BYTES and len(uniform) > OFF_LOOP_BYTES
        for name, data, checked in (("uneven", uneven, "bayou-parse"), ("uniform", uniform, None)):
            produced = await c.call(tm.Produce(2, (tm.ProduceTopic("t", (tm.ProduceEntry(0, data),)),),
                                               required_acks=1))
            assert isinstance(produced, tm.ProduceResponse) and produced.topics[0].errors == (0,), name
            assert threads.pop("decode") == "MainThread"  # a produce: at most 255 x 255 entries
            seen = threads.pop("check", None)
            assert (seen or "").startswith(checked) if checked else seen is None, (name, seen)
        assert broker_records(server.broker) == 10_000
        await c.close()
    finally:
        await server.stop()


def broker_records(b: Broker) -> int:
    return b.partition("t", 0).log.next_offset


# -- Cursus --------------------------------------------------------------------------------------


async def test_a_cursus_batch_commit_of_many_partitions(broker: Broker,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A BATCH_COMMIT is checked once for the member, then each partition against a set: the
    group's checks ran per partition, each scanning the member's list (10,000 owned partitions:
    0.44 s on the loop). A long one (a million entries is 15 MB) is read in the parse pool."""
    svc, state = CursusService(broker, CursusAdvertised("localhost", 9000)), ConnState()

    async def ask(text: str) -> bytes:
        reply = await svc.handle(text.encode(), state)
        assert isinstance(reply, bytes)
        return reply

    assert (await ask("CREATE topic=x partitions=1000")).startswith(b"OK")
    joined = await ask("JOIN_GROUP topic=x group=g member=m")
    found = re.search(rb"member=(\S+)", joined)
    assert found is not None, joined
    member = found.group(1).decode()
    checks = 0
    checked = GroupCoordinator._checked

    def counted(self: GroupCoordinator, *args: Any) -> Any:
        nonlocal checks
        checks += 1
        return checked(self, *args)

    monkeypatch.setattr(GroupCoordinator, "_checked", counted)
    entries = ",".join(f"P{p}:{p + 1}" for p in range(1000))
    reply = await ask(f"BATCH_COMMIT topic=x group=g member={member} generation=1 {entries}")
    assert reply == b"OK batched=1000"
    assert checks == 1
    assert [broker.committed_offset("g", "x", p) for p in (0, 500, 999)] == [1, 501, 1000]

    threads: dict[str, str] = {}

    monkeypatch.setattr(cursus_service, "classify", thread_spy(threads, "classify", cursus_service.classify))
    monkeypatch.setattr(cursus_requests, "decode", thread_spy(threads, "decode", cursus_requests.decode))
    many = ",".join(f"P{p}:7" for p in range(20_000))  # partitions past 999 are not the member's
    text = f"BATCH_COMMIT topic=x group=g member={member} generation=1 {many}"
    assert len(text) > OFF_LOOP_BYTES
    assert (await ask(text)).startswith(b"ERROR: NOT_OWNER partition=1000 ")
    assert threads["classify"].startswith("bayou-parse") and threads["decode"].startswith("bayou-parse")
    assert broker.committed_offset("g", "x", 0) == 1  # nothing of a refused batch is stored
    assert await ask(f"BATCH_COMMIT topic=x group=g member={member} generation=1 P0:5") == b"OK batched=1"
    assert threads["classify"] == threads["decode"] == "MainThread"


async def test_a_large_cursus_batch_on_an_idempotent_topic_is_read_off_the_loop(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message of a batch for an idempotent topic is decoded for its producer and sequence
    (up to 100,000 a batch: 0.45 s): past OFF_LOOP_BYTES in the parse pool. Every message is
    still stored once, in order, and a batch sent again stores nothing."""
    svc, state = CursusService(broker, CursusAdvertised("localhost", 9000)), ConnState()
    reply = await svc.handle(b"CREATE topic=idem partitions=1 idempotent=true", state)
    assert isinstance(reply, bytes) and reply.startswith(b"OK"), reply
    threads: dict[str, str] = {}
    monkeypatch.setattr(cursus_produce, "_producers",
                        thread_spy(threads, "producers", cursus_produce._producers))
    small = build_batch("idem", 0, [b"a", b"b"], idempotent=True)
    large = build_batch("idem", 0, [cursus_message(b"v%d" % i, i + 3) for i in range(5_000)],
                        idempotent=True)
    assert len(small) < OFF_LOOP_BYTES < len(large)
    for body, where in ((small, "MainThread"), (large, "bayou-parse"), (large, "bayou-parse")):
        reply = await svc.handle(body, state)
        assert isinstance(reply, bytes) and b'"status":"OK"' in reply, reply
        assert threads.pop("producers").startswith(where)
    assert broker.partition("idem", 0).log.next_offset == 5_002  # the batch sent again: nothing


# -- Iggy ----------------------------------------------------------------------------------------


async def _iggy(broker: Broker) -> tuple[IggyService, Any, Callable[[Any], Any]]:
    svc = IggyService(broker, port=0)
    svc.serve_authorizer()  # as server/app.py does
    await svc.start()
    session = svc.open_session(SimpleNamespace(peer="127.0.0.1:40000", writer=None, busy=0))  # type: ignore[arg-type]

    async def ask(req: Any) -> tuple[int, bytes]:
        (frame,) = LegacyFrameReader().feed(encode_request_frame(req, Dialect.LEGACY))
        reply = await svc.handle_legacy(session, frame)
        return int.from_bytes(reply[:4], "little"), reply[8:]

    status, _ = await ask(im.LoginUser("iggy", "iggy"))
    assert status == 0
    return svc, session, ask


def _grants(streams: int, topics: int) -> im.Permissions:
    return im.Permissions(streams=tuple(im.StreamPermissions(s, read_stream=True, topics=tuple(
        im.TopicPermissions(t, poll_messages=True) for t in range(topics))) for s in range(streams)))


async def test_an_iggy_grant_is_bounded_and_a_large_one_handled_off_the_loop(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's permissions may name at most MAX_GRANTS streams and topics (a 9 MB grant of a
    million took 5 s to read and 4 s to write back in every GET_USER, on the event loop): more is
    INVALID_FORMAT, the user's grants stay as they were, the connection goes on. A grant past
    OFF_LOOP_BYTES is read, and a GET_USER answer of WIDE_REPLY entries written, in the parse
    pool; each later request of the user finds its grant by a search, not a scan."""
    svc, session, ask = await _iggy(broker)
    threads: dict[str, str] = {}
    for name, attr in (("decode", "decode_frame"), ("encode", "encode_reply")):
        monkeypatch.setattr(iggy_service, attr, thread_spy(threads, name, getattr(iggy_service, attr)))
    status, _ = await ask(im.CreateUser("wide", "secret-pw", permissions=_grants(2, 2)))
    assert status == 0 and threads == {"decode": "MainThread", "encode": "MainThread"}

    big = _grants(2_000, 3)  # 8,000 grants, about 78 KB
    request = im.UpdatePermissions(im.Identifier("wide"), big)
    assert len(encode_request_frame(request, Dialect.LEGACY)) > OFF_LOOP_BYTES
    assert (await ask(request))[0] == 0
    assert threads["decode"].startswith("bayou-parse")
    status, payload = await ask(im.GetUser(im.Identifier("wide")))
    assert status == 0 and threads["encode"].startswith("bayou-parse")
    user = iggy_codec.decode_reply(Command.GET_USER, payload, Dialect.LEGACY)
    assert isinstance(user, im.UserDetails) and user.permissions == big

    too_many = _grants(1, iggy_codec.MAX_GRANTS)  # one stream and 10,000 topics: 10,001
    assert (await ask(im.UpdatePermissions(im.Identifier("wide"), too_many)))[0] == Status.INVALID_FORMAT
    assert (await ask(im.CreateUser("wider", "secret-pw", permissions=too_many)))[0] == Status.INVALID_FORMAT
    status, payload = await ask(im.GetUser(im.Identifier("wide")))
    assert status == 0
    assert iggy_codec.decode_reply(Command.GET_USER, payload, Dialect.LEGACY).permissions == big  # type: ignore[union-attr]
    most = _grants(1, iggy_codec.MAX_GRANTS - 1)
    assert (await ask(im.UpdatePermissions(im.Identifier("wide"), most)))[0] == 0
    # the bound is the stored users' too, whichever way they come (the HTTP API calls the store),
    # while a client reads a server's answer whatever it holds
    grants = authz.Permissions(streams=(authz.StreamPermissions(1, topics=tuple(
        authz.TopicPermissions(t) for t in range(authz.MAX_GRANTS))),))
    with pytest.raises(TooManyGrants):
        svc.users.update_permissions("wide", grants)
    with pytest.raises(TooManyGrants):
        svc.users.create_user("widest", "secret-pw", permissions=grants)
    user = iggy_codec.decode_reply(Command.GET_USER, iggy_codec.encode_reply(
        im.UserDetails(user.user, too_many), Dialect.LEGACY), Dialect.LEGACY)  # type: ignore[union-attr]
    assert isinstance(user, im.UserDetails) and user.permissions == too_many
    # each request of a user finds its grant by a search in the grants, kept sorted by id
    shuffled = authz.Permissions(streams=tuple(authz.StreamPermissions(i, topics=tuple(
        authz.TopicPermissions(t) for t in (9, 3, 5))) for i in (40, 7, 19)))
    assert [x.stream_id for x in shuffled.streams] == [7, 19, 40]
    found = shuffled.stream(19)
    assert found is not None and found.stream_id == 19 and shuffled.stream(20) is None
    assert [t.topic_id for t in found.topics] == [3, 5, 9] and found.topic(4) is None
    await svc.close_session(session)


async def test_a_large_iggy_send_by_messages_key_is_built_off_the_loop(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A messages-key send keeps its key, so its messages become records one by one (about 8 us
    each: 200,000 in a 16 MB send held the loop 1.6 s): past OFF_LOOP_BYTES' worth, in the parse
    pool. Every message is stored, in order, with the key."""
    svc, session, ask = await _iggy(broker)
    for req in (im.CreateStream("s"), im.CreateTopic(im.Identifier("s"), "k", 1)):
        assert (await ask(req))[0] == 0
    threads: dict[str, str] = {}
    monkeypatch.setattr(iggy_produce, "_keyed_batch", thread_spy(threads, "build", iggy_produce._keyed_batch))
    for count, where in ((10, "MainThread"), (5_000, "bayou-parse")):
        send = im.SendMessages(im.Identifier("s"), im.Identifier("k"), im.Partitioning.messages_key(b"key"),
                               tuple(im.Message(b"m%d" % i) for i in range(count)))
        assert (await ask(send))[0] == 0
        assert threads.pop("build").startswith(where)
    (topic,) = [t for t in broker.list_topics() if not t.startswith("__") and t != "t"]
    log = broker.partition(topic, 0).log
    assert log.next_offset == 5_010
    await svc.close_session(session)
