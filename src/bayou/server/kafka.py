"""The Kafka wire protocol bound to the broker (issue 17): kcat, librdkafka, kafka-python, aiokafka.

Requests are decoded by the sans-IO codec (``bayou.protocols.kafka``: kio's schemas behind a
bounds guard) and dispatched through one table keyed by API key (``HANDLERS``); each handler
returns its response's fields by name, built for whatever version the client sent
(``protocols/kafka/build.py``), and calls only the broker's facade. Requests are pipelined on the
shared serve loop (server/frames.py): each starts once the one before it has made its appends
(so a producer's batches are stored in the order sent) and waits only for the fsync or the
replicas, and responses are written strictly in arrival order, which Kafka requires of a broker
(clients match responses to requests by order as well as by correlation id).

The data path (this module): ApiVersions, Metadata, Produce, Fetch, ListOffsets,
OffsetForLeaderEpoch, InitProducerId. Groups are in kafka_groups.py, topic and config
administration in kafka_admin.py. A request that cannot be decoded closes its connection only
(Kafka does the same); an ApiVersions at a version bayou does not know is answered with the
UNSUPPORTED_VERSION fallback and the connection stays.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kio.schema.errors import ErrorCode

from bayou.broker import FETCH_MAX_BYTES, YIELD_EVERY, Broker, Pace, ordering
from bayou.broker.authz import Principal, current_caller, current_principal
from bayou.broker.broker import Acks
from bayou.broker.views import THIS_BROKER, Endpoint
from bayou.errors import (
    BayouError,
    InvalidRequest,
    InvalidTxnState,
    OffsetOutOfRange,
    OutOfOrderSequence,
    UnknownPartition,
    UnknownTopic,
)
from bayou.protocols import scram
from bayou.protocols.kafka import codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import (
    SUPPORTED,
    ApiKey,
    VersionRange,
)
from bayou.protocols.kafka.fast import FetchRequest, Piece, encode_fetch_response, encode_produce_response
from bayou.protocols.kafka.framing import MAX_REQUEST_SIZE, FrameReader, KafkaError, RequestHeader
from bayou.protocols.kafka.records import PlainBatches, check_produced, for_kafka
from bayou.protocols.kafka.sessions import FetchContext, FetchSessions, Want
from bayou.protocols.scram import ScramExchange, ScramFailure
from bayou.records.formats import kafka_producer
from bayou.server import kafka_admin, kafka_groups, kafka_txn
from bayou.server.answers import answer_room
from bayou.server.base import Connection, Listener
from bayou.server.frames import serve_frames
from bayou.server.iggy.users import AuthFailure
from bayou.server.kafka_context import (
    ALL_OPERATIONS_OMITTED,
    CLUSTER_ID,
    CLUSTER_OPERATIONS,
    KAFKA_LISTENERS,
    TOPIC_OPERATIONS,
    Advertised,
    Fields,
    Handler,
    Logins,
    Request,
    Session,
    cluster_brokers,
    code_of,
    not_coordinator,
)
from bayou.server.metering import UNKNOWN, RequestMeter
from bayou.server.workers import OFF_LOOP_BYTES, parse_pool, run_in

log = logging.getLogger("bayou.kafka")

MAX_WAIT_MS = 30_000  # a client's max wait is capped (Kafka's replica.fetch.wait.max.ms order)
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
READ_COMMITTED = 1  # a Fetch's or ListOffsets' isolation level

SERVED: Mapping[ApiKey, VersionRange] = MappingProxyType({
    **SUPPORTED,
    # SaslHandshake v0 is followed by raw SASL tokens outside Kafka's framing: only v1 is served
    ApiKey.SASL_HANDSHAKE: VersionRange(1, 1)})
"""What ApiVersions advertises: every API of ``SUPPORTED``, in cluster mode too."""

# Reading a request and writing its answer cost CPU in proportion to the entries they list (a
# 1.6 MB ListOffsets of 100,000 partitions: 0.09 s to decode, 0.7 s to build and encode the
# answer), and a frame may be 100 MiB: past these sizes that work runs in the parse pool
# (server/workers.py), which the event loop gets the interpreter lock back from every 5 ms.
LARGE_REQUEST = OFF_LOOP_BYTES  # bytes of a request frame
WIDE_ANSWER = 256  # entries of an answer, counted two lists deep (topics, then their partitions)
WIDE_FAST_ANSWER = 4096  # ... of a Produce or Fetch answer, written without kio (1-2 us an entry)

PLAIN = "PLAIN"
MECHANISMS = (PLAIN, *scram.MECHANISMS)  # what SaslHandshake offers
PRODUCER_ID_STRIDE = 1024  # broker ids 0..1023 get producer ids of their own (ms << 18 < 2**63)

class KafkaService:
    """The Kafka front end of one broker, shared by every listener that speaks Kafka."""

    def __init__(self, broker: Broker, served: Mapping[ApiKey, VersionRange] = SERVED,
                 login: Logins | None = None) -> None:
        self.broker = broker
        self.served = served
        self.login = login  # SASL's checks against the broker's users
        self.meter = RequestMeter("kafka")
        self.fetch_sessions = FetchSessions()  # KIP-227, shared by every listener that speaks Kafka
        self.plain = PlainBatches()  # stored batches a fetch need not walk (protocols/kafka/records.py)
        # producer ids from the clock (ms << 8): unique across restarts without a stored counter;
        # the low bits are the broker id, so the brokers of a cluster never hand out the same one
        # (a producer keeps its id when its partitions' leaders move)
        self._producer_ids = itertools.count(
            (int(time.time() * 1000) << 8) * PRODUCER_ID_STRIDE
            + broker.config.broker_id % PRODUCER_ID_STRIDE, PRODUCER_ID_STRIDE)
        # the transaction coordinator's too, and (cluster mode) which transactional ids it serves
        broker.set_producer_ids(self.next_producer_id, self.coordinates)

    def coordinates(self, txn_id: str) -> bool:
        """Whether this broker is ``txn_id``'s transaction coordinator (cluster mode: the broker
        FindCoordinator names for it, as for a group of that name)."""
        where = self.broker.group_coordinator(txn_id, KAFKA_LISTENERS)
        return where is THIS_BROKER or (isinstance(where, Endpoint)
                                        and where.broker_id == self.broker.config.broker_id)

    async def answer(self, frame: bytes, session: Session, advertised: Advertised
                     ) -> bytes | list[Piece] | None:
        """The response frame to one request frame, whole or in pieces to write in order (None:
        acks=0 produce, no response).
        Raises KafkaError when the connection must close."""
        try:
            # a produce or a fetch of the usual shape is read on the loop (its records are not
            # parsed: about 20 us); others past LARGE_REQUEST in the parse pool
            req = codec.decode_direct(frame, self.served)
            if req is None:
                if len(frame) > LARGE_REQUEST:
                    req = await run_in(parse_pool(), codec.decode_request, frame, self.served)
                else:
                    req = codec.decode_request(frame, self.served)
        except KafkaError as exc:
            if not exc.close and exc.reply is not None:
                return exc.reply
            raise
        header = req.header
        handler = _HANDLER_OF.get(header.api_key)
        started = time.perf_counter()
        failed = True
        name = _API_NAMES[header.api_key] if handler is not None else UNKNOWN
        try:
            if handler is None:
                raise KafkaError(f"api_key {header.api_key} has no handler")
            ctx = Request(header.api_key, header.api_version, header.client_id or "",
                          session.client_host, advertised, session)
            fields = await handler(self, ctx, req.body)
            failed = False
        finally:
            self.meter.record(name, started, failed)
        if fields is None:
            return None
        if header.api_key == ApiKey.PRODUCE:
            # an entry per partition listed, 8 bytes each at least: a small frame's answer is
            # written here at once (through _encode, the call alone cost 1 % of a one-record produce)
            if len(frame) < 8 * WIDE_FAST_ANSWER and fields.keys() == {"responses"}:
                fast = encode_produce_response(header.api_version, header.correlation_id, fields["responses"])
                if fast is not None:
                    return fast
            wide = _wide(fields, WIDE_FAST_ANSWER)
        else:
            wide = _wide(fields, WIDE_FAST_ANSWER if header.api_key == ApiKey.FETCH else WIDE_ANSWER)
        if wide:
            return await run_in(parse_pool(), _encode, header, fields)
        return _encode(header, fields)

    def next_producer_id(self) -> int:
        return next(self._producer_ids)


def _wide(fields: Fields, limit: int) -> bool:
    """Whether an answer lists ``limit`` entries or more, counted two lists deep (stops there)."""
    n = 0
    for value in fields.values():
        if type(value) is list:
            n += len(value)
            for entry in value:
                if n >= limit:
                    return True
                if type(entry) is dict:
                    for inner in entry.values():
                        if type(inner) is list:
                            n += len(inner)
    return n >= limit


def _encode(header: RequestHeader, fields: Fields) -> bytes | list[Piece]:
    """The response frame of ``fields`` for the request of ``header``."""
    if header.api_key == ApiKey.PRODUCE and fields.keys() == {"responses"}:
        fast = encode_produce_response(header.api_version, header.correlation_id, fields["responses"])
        if fast is not None:
            return fast
    elif header.api_key == ApiKey.FETCH:
        reply = encode_fetch_response(header.api_version, header.correlation_id, fields)
        if reply is not None:
            return reply
        for topic in fields.get("responses", ()):  # kio writes records from bytes
            for part in topic["partitions"]:
                if isinstance(part.get("records"), list):
                    part["records"] = b"".join(part["records"])
    body = build(codec.response_schema(header.api_key, header.api_version), **fields)
    return codec.encode_response(header, body)


# -- ApiVersions, Metadata ----------------------------------------------------------------------


async def api_versions(svc: KafkaService, req: Request, body: Any) -> Fields:
    served = svc.served
    return {"api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, lo, hi in codec.api_versions(served)],
            "finalized_features_epoch": -1}


def _partition_entries(svc: KafkaService, topic: str, live: set[int]) -> list[Fields]:
    """Each partition's leader, epoch, replicas and ISR as the cluster has them (this broker
    alone standalone); LEADER_NOT_AVAILABLE while none leads it, so clients ask again."""
    out = []
    for p in range(svc.broker.partition_count(topic)):
        leader, replicas, isr = svc.broker.partition_replicas(topic, p)
        entry: Fields = {"partition_index": p, "leader_id": leader,
                         "leader_epoch": svc.broker.leader_epoch(topic, p), "replica_nodes": replicas,
                         "isr_nodes": isr, "offline_replicas": [r for r in replicas if r not in live]}
        if leader < 0:
            entry["error_code"] = ErrorCode.leader_not_available
        out.append(entry)
    return out


async def metadata(svc: KafkaService, req: Request, body: Any) -> Fields:
    broker = svc.broker
    if body.topics is None or (req.version == 0 and not body.topics):
        names = broker.visible_topics()
        requested = False
    else:
        names = [t.name for t in body.topics if t.name is not None]
        requested = True
    auto = getattr(body, "allow_auto_topic_creation", True)
    topic_ops = (TOPIC_OPERATIONS if getattr(body, "include_topic_authorized_operations", False)
                 else ALL_OPERATIONS_OMITTED)
    cluster_ops = (CLUSTER_OPERATIONS if getattr(body, "include_cluster_authorized_operations", False)
                   else ALL_OPERATIONS_OMITTED)
    brokers, controller = cluster_brokers(broker, req.advertised)
    live = {b.node_id for b in brokers}
    topics: list[Fields] = []
    pace = Pace()
    for name in names:
        await pace()
        entry: Fields = {"name": name, "is_internal": False, "topic_authorized_operations": topic_ops}
        try:
            if requested:
                broker.check_topic_name(name)
                if not await broker.has_topic(name):
                    if not auto:
                        raise UnknownTopic(f"unknown topic {name}")
                    await broker.ensure_topic(name)
                broker.check_describe(name)
            entry["partitions"] = _partition_entries(svc, name, live)
            await pace(len(entry["partitions"]))
        except BayouError as exc:
            entry["error_code"] = code_of(exc)
        topics.append(entry)
    return {"brokers": [b.broker() for b in brokers], "cluster_id": CLUSTER_ID,
            "controller_id": controller, "topics": topics,
            "cluster_authorized_operations": cluster_ops}


# -- Produce ------------------------------------------------------------------------------------


async def _produce_partition(svc: KafkaService, topic: str, index: int, records: bytes | None,
                             acks: Acks, transactional_id: str | None) -> Fields:
    broker = svc.broker
    entry: Fields = {"index": index, "base_offset": -1, "log_append_time": None,
                     "log_start_offset": -1}
    with ordering.slot():  # the request is released once every partition has appended
        try:
            if not records:
                raise InvalidRequest("a produce without a record batch")
            broker.authorize("send", topic)  # before existence: no probing of topic names, as Kafka
            if not (broker.topic_exists(topic) or await broker.has_topic(topic)):
                raise UnknownTopic(f"unknown topic {topic}")
            if not 0 <= index < broker.partition_count(topic):
                raise UnknownPartition(f"topic {topic} has no partition {index}")
            batch = bytearray(records)
            h = check_produced(batch)
            if h.transactional and transactional_id is None:
                raise InvalidTxnState("a transactional batch outside a transactional produce")
            if h.producer_id >= 0 and h.base_sequence >= 0:
                pid = kafka_producer(h.producer_id)
                seqs = [(pid, h.producer_epoch, h.base_sequence + i + 1) for i in range(h.record_count)]

                def whole(keep: list[bool]) -> tuple[bytes, None]:
                    if not all(keep):  # a batch overlapping one stored before: Kafka's batches are whole
                        raise OutOfOrderSequence(f"batch at sequence {h.base_sequence} partly stored before")
                    return bytes(batch), None

                if h.transactional:
                    result = await broker.produce_transactional(topic, index, h.producer_id, h.producer_epoch,
                                                                seqs, whole, acks, transactional_id)
                else:
                    result = await broker.produce_idempotent(topic, index, seqs, whole, acks)
            else:
                result = await broker.produce(topic, index, batch, acks, create=False)
            svc.plain.add(topic, index, result.base_offset, h.crc)  # check_produced walked its records
            entry["base_offset"] = result.base_offset
            entry["log_start_offset"] = result.log_start_offset
        except BayouError as exc:
            entry["error_code"] = code_of(exc)
            entry["error_message"] = exc.message
    return entry


_ACKS: dict[int, Acks] = {int(a): a for a in Acks}


async def produce(svc: KafkaService, req: Request, body: Any) -> Fields | None:
    acks = _ACKS.get(body.acks)
    if acks == Acks.ALL and not svc.broker.clustered:
        # the in-sync replicas Metadata names are this broker alone (V1's standalone
        # replicas, which acks=all of V1 waits for, are not Kafka's ISR)
        acks = Acks.LEADER
    if acks is None:
        return {"responses": [{"name": t.name, "partition_responses": [
            {"index": p.index, "error_code": ErrorCode.invalid_required_acks, "base_offset": -1,
             "log_start_offset": -1} for p in t.partition_data]} for t in body.topic_data]}
    parts = [(t.name, p.index, p.records) for t in body.topic_data for p in t.partition_data]
    ordering.expect(len(parts))
    txn = body.transactional_id
    if len(parts) == 1 or not any(svc.broker.produce_may_wait(t.name) for t in body.topic_data):
        # nothing waits after an append (fsync not "always", one broker): each partition is done
        # at its append, in turn; a task per partition cost more than the append
        if len(parts) <= YIELD_EVERY:
            flat = [await _produce_partition(svc, name, index, records, acks, txn)
                    for name, index, records in parts]
        else:
            pace = Pace()
            flat = []
            for name, index, records in parts:
                await pace()
                flat.append(await _produce_partition(svc, name, index, records, acks, txn))
    else:
        # every partition's append starts before any waits (fsync, acks=all): they share group commits
        flat = await asyncio.gather(*(_produce_partition(svc, name, index, records, acks, txn)
                                      for name, index, records in parts))
    if acks == Acks.NONE:
        return None
    it = iter(flat)
    return {"responses": [{"name": t.name, "partition_responses": [next(it) for _ in t.partition_data]}
                          for t in body.topic_data]}


# -- Fetch ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Part:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    committed: bool = False  # read_committed: up to the last stable offset, aborted ones listed
    fields: Fields = field(default_factory=dict)
    size: int = 0


async def _fetch_one(svc: KafkaService, p: _Part, budget: int) -> None:
    broker = svc.broker
    f: Fields = {"partition_index": p.partition, "high_watermark": -1, "last_stable_offset": -1,
                 "log_start_offset": -1, "preferred_read_replica": -1, "records": None}
    p.fields, p.size = f, 0
    try:
        broker.authorize("poll", p.topic)  # before existence: no probing of topic names, as Kafka
        if not (broker.topic_exists(p.topic) or await broker.has_topic(p.topic)):
            raise UnknownTopic(f"unknown topic {p.topic}")
        if not 0 <= p.partition < broker.partition_count(p.topic):
            raise UnknownPartition(f"topic {p.topic} has no partition {p.partition}")
        broker.check_readable(p.topic, p.partition)
        if broker.clustered:
            await broker.check_leads(p.topic, p.partition)  # Kafka clients fetch from the leader
        start, hw = broker.partition_bounds(p.topic, p.partition)
        stable = await broker.last_stable_offset(p.topic, p.partition) if p.committed else hw
        f.update(high_watermark=hw, last_stable_offset=stable, log_start_offset=start)
        if p.offset > hw or p.offset < start:
            raise OffsetOutOfRange(f"offset {p.offset} outside {start}..{hw}")
        if p.offset >= stable or budget <= 0:
            f["records"] = b""
            return
        r = await broker.fetch(p.topic, p.partition, p.offset, max_bytes=min(p.max_bytes, budget),
                               committed_only=p.committed)
        if p.committed:  # the read's bound was the last stable offset
            f.update(high_watermark=max(hw, broker.partition_bounds(p.topic, p.partition)[1]),
                     last_stable_offset=r.high_watermark, log_start_offset=r.log_start_offset)
        else:
            f.update(high_watermark=r.high_watermark, last_stable_offset=r.high_watermark,
                     log_start_offset=r.log_start_offset)
        data = for_kafka(r.data, p.offset, *svc.plain.of(p.topic, p.partition),
                         limit=min(p.max_bytes, budget)) if r.data else []
        if p.committed and data:
            f["aborted_transactions"] = [
                {"producer_id": pid, "first_offset": first}
                for pid, first in await broker.aborted_transactions(p.topic, p.partition, p.offset,
                                                                    r.next_offset)]
        f["records"] = data
        p.size = sum(len(piece) for piece in data)
    except BayouError as exc:
        f["error_code"] = code_of(exc)


def _unchanged(svc: KafkaService, ctx: FetchContext, i: int, p: _Part) -> bool:
    """Whether partition ``i`` of an incremental fetch has nothing to answer: its fields are then
    what ``_fetch_one`` would write for it (no records, the same bounds)."""
    try:
        svc.broker.check_readable(p.topic, p.partition)  # a permission taken away is told at once
        start, hw = svc.broker.partition_bounds(p.topic, p.partition)
    except BayouError:
        return False  # _fetch_one reports it
    if not ctx.idle(i, start, hw, hw):
        return False
    p.fields = {"partition_index": p.partition, "high_watermark": hw, "last_stable_offset": hw,
                "log_start_offset": start, "preferred_read_replica": -1, "records": b""}
    p.size = 0
    return True


async def _wait_for_data(svc: KafkaService, parts: list[_Part], wait_s: float) -> None:
    """Return once any partition's visible end (its high watermark; the last stable offset for
    read_committed) passes its fetch offset, after ``wait_s``, or when the broker stops. Nothing
    is read here: the partitions' data waiters are registered before their ends are looked at (an
    append in between still wakes the wait), and the caller reads once woken."""
    broker = svc.broker
    deadline = time.monotonic() + wait_s
    while True:
        waiters = broker.data_waiters((p.topic, p.partition) for p in parts)
        try:
            for p in parts:
                try:
                    end = (await broker.last_stable_offset(p.topic, p.partition) if p.committed
                           else broker.partition_bounds(p.topic, p.partition)[1])
                except BayouError:
                    return  # gone meanwhile: the caller's read reports it
                if end > p.offset:
                    return
            left = deadline - time.monotonic()
            if left <= 0 or broker.closing or not waiters:
                return
            await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()


async def fetch(svc: KafkaService, req: Request, body: Any) -> Fields:
    committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    wants = [Want(t.topic, p.partition, p.fetch_offset, max(0, p.partition_max_bytes))
             for t in body.topics for p in t.partitions]
    ctx = svc.fetch_sessions.begin(
        current_principal(), req.version, getattr(body, "session_id", 0), getattr(body, "session_epoch", -1),
        wants, ((f.topic, i) for f in getattr(body, "forgotten_topics_data", ()) for i in f.partitions))
    parts = [_Part(w.topic, w.partition, w.offset, w.max_bytes, committed) for w in ctx.wants]
    # the client's bound, within the broker's (it is the answer's size held in memory)
    max_bytes = min(body.max_bytes, FETCH_MAX_BYTES) if body.max_bytes > 0 else FETCH_MAX_BYTES
    # the direct reader's body gives the wait in ms (kio's a timedelta, which costs more to build)
    wait_ms = body.max_wait_ms if isinstance(body, FetchRequest) else body.max_wait.total_seconds() * 1000
    deadline = time.monotonic() + min(max(0, wait_ms), MAX_WAIT_MS) / 1000
    # an incremental fetch skips the partitions it would not answer (nothing to read, bounds as
    # last told) after one look at their bounds; the checks of a read come with the first change
    # (standalone only: in cluster mode each read also checks leadership)
    quick = ctx.kind == "incremental" and not committed and not svc.broker.clustered
    room = answer_room()
    while True:
        if room is not None:  # the most this answer may hold, before its reads (answers.py)
            waiting = room.claim(max_bytes)
            if waiting is not None:
                await waiting
        total = 0
        for i, p in enumerate(parts):
            if i and i % YIELD_EVERY == 0:  # reads that never suspend: let other connections in (Pace)
                await asyncio.sleep(0)
            if quick and _unchanged(svc, ctx, i, p):
                continue
            # at least one batch (the first partition with data) even past max_bytes, as Kafka
            await _fetch_one(svc, p, max_bytes - total if total else max_bytes)
            total += p.size
        wait = deadline - time.monotonic()
        if total >= max(1, body.min_bytes) or wait <= 0 or svc.broker.closing:
            break
        idle = [p for p in parts if not p.size and not p.fields.get("error_code")]
        if not idle:  # every partition gave what it has: min_bytes is not reached by waiting here
            break
        if room is not None:  # read again once woken: wait holding nothing
            for p in parts:
                p.fields, p.size = {}, 0
            room.release()
        await _wait_for_data(svc, idle, wait)
    if room is not None:
        room.keep(total)
    session_id, keep, error = svc.fetch_sessions.finish(ctx, [p.fields for p in parts])
    by_topic: dict[str, list[Fields]] = {}
    for i in keep:
        p = parts[i]
        by_topic.setdefault(p.topic, []).append(p.fields)
    out: Fields = {"session_id": session_id,
                   "responses": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
    if error:
        out["error_code"] = error
    return out


# -- ListOffsets, OffsetForLeaderEpoch, InitProducerId ------------------------------------------


async def _offset_at(svc: KafkaService, topic: str, partition: int, timestamp: int,
                     committed: bool) -> Fields:
    broker = svc.broker
    out: Fields = {"partition_index": partition, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    try:
        if not await broker.has_topic(topic):
            raise UnknownTopic(f"unknown topic {topic}")
        broker.check_readable(topic, partition)
        await broker.check_leads(topic, partition)
        out["leader_epoch"] = broker.leader_epoch(topic, partition)
        start, hw = broker.partition_bounds(topic, partition)
        if timestamp == EARLIEST:
            out["offset"] = start
        elif timestamp in (LATEST, MAX_TIMESTAMP):
            out["offset"] = await broker.last_stable_offset(topic, partition) if committed else hw
        elif timestamp < 0:
            raise InvalidRequest(f"timestamp {timestamp}")
        else:
            found = await broker.offset_for_timestamp(topic, partition, timestamp)
            if found is not None:
                out["offset"] = found
                out["timestamp"] = timestamp
    except BayouError as exc:
        out["error_code"] = code_of(exc)
    return out


async def list_offsets(svc: KafkaService, req: Request, body: Any) -> Fields:
    committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    pace = Pace()
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            await pace()
            parts.append(await _offset_at(svc, t.name, p.partition_index, p.timestamp, committed))
        topics.append({"name": t.name, "partitions": parts})
    return {"topics": topics}


async def offset_for_leader_epoch(svc: KafkaService, req: Request, body: Any) -> Fields:
    """KIP-101 at the leader, from its leader epoch cache (cluster mode: the epochs ZooKeeper
    gave, stamped on the batches). A single broker has one epoch, 0, ending at the high
    watermark."""
    broker = svc.broker
    topics = []
    pace = Pace()
    for t in body.topics:
        parts = []
        for p in t.partitions:
            await pace()
            entry: Fields = {"partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            try:
                if not await broker.has_topic(t.topic):
                    raise UnknownTopic(f"unknown topic {t.topic}")
                broker.check_readable(t.topic, p.partition)
                await broker.check_leads(t.topic, p.partition)
                entry["leader_epoch"], entry["end_offset"] = broker.epoch_end(t.topic, p.partition,
                                                                              p.leader_epoch)
            except BayouError as exc:
                entry["error_code"] = code_of(exc)
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return {"topics": topics}


async def init_producer_id(svc: KafkaService, req: Request, body: Any) -> Fields:
    pid, epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
    if body.transactional_id is not None:
        code = not_coordinator(svc.broker, req, body.transactional_id)
        if code is not None:
            return {"error_code": code, "producer_id": -1, "producer_epoch": -1}
        try:
            pid, epoch = await svc.broker.txn_init_producer(
                body.transactional_id, int(body.transaction_timeout.total_seconds() * 1000), pid, epoch)
        except BayouError as exc:
            return {"error_code": kafka_txn.txn_code(exc), "producer_id": -1, "producer_epoch": -1}
        return {"producer_id": pid, "producer_epoch": epoch}
    if pid >= 0 and epoch >= 0:  # KIP-360: the producer bumps its epoch and restarts at 0
        return {"producer_id": pid, "producer_epoch": (epoch + 1) % 32767}
    return {"producer_id": svc.next_producer_id(), "producer_epoch": 0}


# -- SASL ----------------------------------------------------------------------------------------


async def sasl_handshake(svc: KafkaService, req: Request, body: Any) -> Fields:
    if body.mechanism not in MECHANISMS:
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": list(MECHANISMS)}
    if req.session.mechanism is not None:  # one exchange per connection, as Kafka's
        req.session.close = True
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": list(MECHANISMS)}
    req.session.mechanism = body.mechanism
    return {"mechanisms": list(MECHANISMS)}


def _refused(session: Session, reason: str) -> Fields:
    """SASL_AUTHENTICATION_FAILED, then the connection closes (Kafka's behaviour: a client must
    not go on unauthenticated)."""
    session.close = True
    session.scram = None
    return {"error_code": ErrorCode.sasl_authentication_failed,
            "error_message": f"Authentication failed: {reason}", "auth_bytes": b""}


async def _plain(svc: KafkaService, session: Session, token: bytes) -> Principal:
    """PLAIN (RFC 4616): ``authzid NUL authcid NUL password``, checked against the broker's users."""
    parts = token.split(b"\0")
    if len(parts) != 3 or svc.login is None:
        raise AuthFailure("invalid_credentials")  # malformed, or no users to check against
    authzid, user, password = (p.decode() for p in parts)
    if authzid and authzid != user:
        raise AuthFailure("invalid_credentials")  # acting as another user is not offered
    return await svc.login.plain(session.peer, user, password)


async def _scram(svc: KafkaService, session: Session, message: bytes) -> tuple[Principal | None, bytes]:
    """One step of SCRAM (RFC 5802, KIP-84): the client-first message is answered with the
    server-first (no principal yet); the client-final's proof is judged through the login guard
    and answered with the server-final and the principal."""
    assert session.mechanism is not None
    if svc.login is None:
        raise AuthFailure("invalid_credentials")  # no users to check against
    if session.scram is None:
        session.scram = ScramExchange(session.mechanism, svc.login.scram_credential)
        return None, session.scram.first(message)
    exchange, session.scram = session.scram, None
    assert exchange.username is not None
    return await svc.login.scram(session.peer, exchange.username, lambda: exchange.final(message))


async def sasl_authenticate(svc: KafkaService, req: Request, body: Any) -> Fields:
    """PLAIN in one step; SCRAM-SHA-256/512 in two (client-first, client-final). The connection's
    principal is then that user (broker/authz.py). A failure (wrong password, unknown user,
    malformed message, nonce that does not match) is answered SASL_AUTHENTICATION_FAILED, then the
    connection closes."""
    session = req.session
    if session.mechanism is None or session.authenticated:
        session.close = True
        return {"error_code": ErrorCode.illegal_sasl_state,
                "error_message": "SaslHandshake first, once per connection", "auth_bytes": b""}
    answer = b""
    try:
        if session.mechanism == PLAIN:
            principal: Principal | None = await _plain(svc, session, bytes(body.auth_bytes))
        else:
            principal, answer = await _scram(svc, session, bytes(body.auth_bytes))
    except (AuthFailure, UnicodeDecodeError):
        return _refused(session, "invalid credentials")
    except ScramFailure as exc:
        if not exc.proof:
            log.info("SCRAM exchange refused: %s", exc, extra={"peer": session.peer})
        return _refused(session, str(exc))
    if principal is not None:  # else the exchange goes on: the client-final message is next
        caller = current_caller()
        if caller is not None:
            caller.login(principal)
        session.authenticated = True
    return {"auth_bytes": answer, "session_lifetime": 0}


# -- dispatch ------------------------------------------------------------------------------------


HANDLERS: dict[ApiKey, Handler] = {
        ApiKey.API_VERSIONS: api_versions,
        ApiKey.METADATA: metadata,
        ApiKey.PRODUCE: produce,
        ApiKey.FETCH: fetch,
        ApiKey.LIST_OFFSETS: list_offsets,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
        ApiKey.INIT_PRODUCER_ID: init_producer_id,
        ApiKey.SASL_HANDSHAKE: sasl_handshake,
        ApiKey.SASL_AUTHENTICATE: sasl_authenticate,
        **kafka_groups.HANDLERS,
        **kafka_admin.HANDLERS,
        **kafka_txn.HANDLERS,
    }
"""The one dispatch table: API key -> handler (STYLE habit 5)."""
_HANDLER_OF: dict[int, Handler] = {int(k): h for k, h in HANDLERS.items()}  # looked up by the header's int
_API_NAMES: dict[int, str] = {int(k): k.name for k in ApiKey}  # the request label of /metrics


def is_produce(frame: bytes) -> bool:
    """A Produce request (API key 0, the header's first field): the one request a pipelining
    connection serves before those ahead of it are answered (server/frames.py)."""
    return frame[:2] == b"\0\0"


def kafka_handler(service: KafkaService, advertised: Callable[[Listener], Advertised]
                  ) -> Callable[..., Awaitable[None]]:
    """The connection handler of a Kafka listener; ``first`` is bytes already read (the V1
    port's first-byte sniff)."""
    async def serve(conn: Connection, listener: Listener, first: bytes = b"") -> None:
        where = advertised(listener)
        session = Session(conn.peer)

        async def handle(frame: bytes) -> bytes | list[Piece] | None:
            return await service.answer(frame, session, where)

        async def refuse(exc: KafkaError) -> None:
            log.info("closing Kafka connection: %s", exc.message, extra={"peer": conn.peer})

        await serve_frames(conn, listener, FrameReader(listener.limits.frame_cap(MAX_REQUEST_SIZE)),
                           handle, error=KafkaError, refuse=refuse, first=first,
                           done=lambda: session.close,
                           pipeline=is_produce if service.broker.produce_waits() else None)

    return serve


__all__ = ["Advertised", "KafkaService", "kafka_handler"]
