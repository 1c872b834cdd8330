"""The V1 line protocol bound to the broker: one handler per request type, found by lookup."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bayou.broker import Acks, Broker
from bayou.broker.partition import FOLLOWER
from bayou.errors import (
    BayouError,
    CorruptStorage,
    GroupNotFound,
    IllegalGeneration,
    InvalidConfig,
    InvalidRequest,
    InvalidTopicName,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeader,
    PartitionNotAssigned,
    ReplicationTimeout,
    TopicAlreadyExists,
    Unauthorized,
    UnknownMember,
    UnknownPartition,
    UnknownTopic,
)
from bayou.protocols.rtes import messages as m
from bayou.protocols.rtes.codec import (
    Code,
    LineReader,
    LineTooLong,
    RtesError,
    decode_request,
    encode_error,
    encode_ok,
    encode_records,
    escape_value,
    fnv1a_32,
    go_bool,
    go_list,
)
from bayou.records.batch import Record, encode_batch, iter_batches
from bayou.server.answers import answer_room
from bayou.server.base import Connection, Listener
from bayou.server.frames import serve_frames
from bayou.server.metering import UNKNOWN, RequestMeter
from bayou.server.workers import decode_stored

log = logging.getLogger("bayou.rtes")

# CONSUME returns records from the offset through hw; the original had no bound at all. bayou stops
# at whichever comes first of these (at least one record is always returned); the reference
# consumer resumes from the last offset + 1, so a capped reply only means another round trip.
CONSUME_MAX_RECORDS = 10_000
CONSUME_MAX_BYTES = 4 * 1024 * 1024

# One table maps registry errors to V1 codes and messages.
ERROR_MAP: dict[type[BayouError], tuple[Code, str | None]] = {
    NotLeader: (Code.NOT_LEADER, "partition leader unavailable on this broker"),
    ReplicationTimeout: (Code.REPLICATION_TIMEOUT, "acks=all timeout"),
    NotEnoughReplicas: (Code.REPLICATION_TIMEOUT, "not enough in-sync replicas"),
    NotEnoughReplicasAfterAppend: (Code.REPLICATION_TIMEOUT, None),  # says the records were stored
    GroupNotFound: (Code.GENERATION_MISMATCH, "group not found"),
    IllegalGeneration: (Code.GENERATION_MISMATCH, "stale generation"),
    UnknownMember: (Code.GENERATION_MISMATCH, "unknown member"),
    PartitionNotAssigned: (Code.GENERATION_MISMATCH, "partition not assigned to member"),
    InvalidTopicName: (Code.BAD_REQUEST, "invalid topic name"),
    UnknownPartition: (Code.BAD_REQUEST, "invalid partition"),
    CorruptStorage: (Code.STORAGE_ERROR, None),
    Unauthorized: (Code.UNAUTHORIZED, None),
}


def map_error(exc: BayouError) -> tuple[Code, str]:
    for cls in type(exc).__mro__:
        if cls in ERROR_MAP:
            code, msg = ERROR_MAP[cls]
            return code, msg or exc.message
    if exc.retriable:
        return Code.INTERNAL_ERROR, exc.message
    return Code.BAD_REQUEST, exc.message


def _partition_status(offline: str | None) -> str:
    """``ok``, or ``offline:<reason>`` (percent-escaped) for a quarantined partition."""
    if offline is None:
        return "ok"
    return "offline:" + escape_value(offline.replace("[", "(").replace("]", ")").encode()).decode()


ACKS = {"0": Acks.NONE, "1": Acks.LEADER, "all": Acks.ALL}


class RtesService:
    """Serves decoded V1 requests against the broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.meter = RequestMeter("rtes")
        self.table: dict[type[Any], Callable[[Any], Awaitable[bytes | str | None]]] = {
            m.Produce: self.produce,
            m.Consume: self.consume,
            m.Join: self.join,
            m.Sync: self.sync,
            m.Heartbeat: self.heartbeat,
            m.Leave: self.leave,
            m.Commit: self.commit,
            m.Offset: self.offset,
            m.ReplicaFetch: self.replica_fetch,
            m.SetPartitionRole: self.set_partition_role,
            m.Ping: self.ping,
            m.AdminCreateTopic: self.admin_create_topic,
            m.AdminRegisterBroker: self.admin_register_broker,
            m.AdminBrokerHeartbeat: self.admin_broker_heartbeat,
            m.AdminSetPartitionLeader: self.admin_set_partition_leader,
            m.AdminGetMetadata: self.admin_get_metadata,
            m.AdminReconcileBrokerHealth: self.admin_reconcile,
            m.AdminFenceBroker: self.admin_fence,
            m.AdminElectTopicLeaders: self.admin_elect,
            m.BrokerFetch: self.broker_fetch,
            m.BrokerReplicaAck: self.broker_replica_ack,
            m.AdminDescribeTopic: self.admin_describe_topic,
            m.AdminDeleteTopic: self.admin_delete_topic,
        }

    async def handle_line(self, line: bytes) -> bytes:
        started = time.perf_counter()
        decoded = self.decode(line)
        if isinstance(decoded, bytes):
            self.meter.record(UNKNOWN, started, True)
            return decoded
        reply = await self.execute(*decoded)
        failed = reply.startswith(b"ERR|", reply.find(b"|", 3) + 1)  # V1|<cid>|ERR|... (or |OK)
        self.meter.record(type(decoded[1]).__name__, started, failed)
        return reply

    @staticmethod
    def decode(line: bytes) -> tuple[str, m.Request] | bytes:
        """The request, or the error reply when the line does not decode."""
        try:
            return decode_request(line)
        except RtesError as exc:
            return encode_error(exc.cid or "0", exc.code, exc.message)
        except Exception:
            log.exception("V1 request could not be decoded")
            return encode_error("0", Code.INTERNAL_ERROR, "internal error")

    async def execute(self, cid: str, req: m.Request) -> bytes:
        try:
            payload = await self.table[type(req)](req)
        except RtesError as exc:
            return encode_error(cid, exc.code, exc.message)
        except BayouError as exc:
            code, msg = map_error(exc)
            return encode_error(cid, code, msg)
        except Exception:
            log.exception("V1 request failed", extra={"request": type(req).__name__})
            return encode_error(cid, Code.INTERNAL_ERROR, "internal error")
        return encode_ok(cid, payload)

    # -- data ----------------------------------------------------------------------------------

    async def _partitions(self, topic: str) -> int:
        if not self.broker.topic_exists(topic):
            await self.broker.has_topic(topic)  # cluster mode: a topic made elsewhere is waited for
        return self.broker.partition_count(topic)

    async def produce(self, r: m.Produce) -> str:
        self.broker.check_topic_name(r.topic)
        p = fnv1a_32(r.key) % await self._partitions(r.topic)
        batch = encode_batch([Record(r.value, r.key, int(time.time() * 1000))])
        res = await self.broker.produce(r.topic, p, batch, ACKS[r.acks])
        return f"partition={p} offset={res.base_offset} hw={res.high_watermark - 1}"

    async def _records(self, topic: str, partition: int, offset: int, limit: int,
                       upto_log_end: bool = False) -> tuple[list[tuple[int, bytes]], int]:
        """Records from ``offset`` (clamped to the log start), at most ``limit``; and the inclusive hw."""
        await self.broker.ready_partition(topic, partition)
        if not upto_log_end:
            self.broker.check_readable(topic, partition)
        start, hw = self.broker.partition_bounds(topic, partition)
        end = self.broker.log_end_offset(topic, partition) if upto_log_end else hw
        offset = max(offset, start)
        out: list[tuple[int, bytes]] = []
        size = 0
        room = answer_room()
        if room is not None and offset < end:  # before the reads (server/answers.py)
            await room.reserve(CONSUME_MAX_BYTES)
        while offset < end and len(out) < limit and size < CONSUME_MAX_BYTES:
            res = await self.broker.fetch(topic, partition, offset, max_bytes=CONSUME_MAX_BYTES - size,
                                          max_records=limit - len(out), upto_log_end=upto_log_end,
                                          from_log_start=True)  # rtes.md 7.2: from the earliest record
            if not res.data:
                break
            for pos, h in iter_batches(res.data):
                if len(out) >= limit or size >= CONSUME_MAX_BYTES:
                    break
                if h.next_offset <= offset:
                    continue
                for rec in await decode_stored(res.data, pos):
                    if offset <= rec.offset < end and len(out) < limit and size < CONSUME_MAX_BYTES:
                        out.append((rec.offset, rec.value))
                        size += len(rec.value) + 12
            offset = res.next_offset
        if room is not None:
            room.keep(size)
        return out, hw - 1

    async def consume(self, r: m.Consume) -> bytes:
        self.broker.check_topic_name(r.topic)
        if not 0 <= r.partition < await self._partitions(r.topic):
            raise RtesError(Code.BAD_REQUEST, "invalid partition")
        if not await self.broker.has_topic(r.topic):
            return b"messages= hw=-1"
        records, hw = await self._records(r.topic, r.partition, r.offset, CONSUME_MAX_RECORDS)
        return b"messages=" + encode_records(records) + f" hw={hw}".encode()

    # -- groups --------------------------------------------------------------------------------

    async def join(self, r: m.Join) -> str:
        self.broker.check_topic_name(r.topic)
        view = await self.broker.join_group(r.group, r.topic, r.consumer_id, r.assignor)
        return f"generation={view.generation} assigned={go_list(view.assignment)}"

    async def sync(self, r: m.Sync) -> str:
        view = await self.broker.sync_group(r.group, r.topic, r.consumer_id, r.generation)
        return f"generation={view.generation} assigned={go_list(view.assignment)}"

    async def heartbeat(self, r: m.Heartbeat) -> str:
        await self.broker.heartbeat(r.group, r.topic, r.consumer_id, r.generation)
        return "heartbeat=ok"

    async def leave(self, r: m.Leave) -> str:
        await self.broker.leave_group(r.group, r.topic, r.consumer_id, r.generation)
        return "left=true"

    async def commit(self, r: m.Commit) -> str:
        await self.broker.commit_offset(r.group, r.topic, r.partition, r.offset,
                                        member=r.consumer_id, generation=r.generation)
        return "committed=true"

    async def offset(self, r: m.Offset) -> str:
        off = await self.broker.current_committed_offset(r.group, r.topic, r.partition)
        return f"offset={off if off is not None else 0}"

    # -- replication (single node: followers report progress) ----------------------------------

    async def replica_fetch(self, r: m.ReplicaFetch) -> str:
        self.broker.check_topic_name(r.topic)
        try:
            rep = await self.broker.replica_progress(r.topic, r.partition, r.replica_id, r.offset)
        except NotLeader:
            raise RtesError(Code.BAD_REQUEST, "partition is not leader") from None
        return (f"replica={r.replica_id} acked_offset={r.offset} hw={rep.high_watermark} "
                f"isr={go_list(rep.isr)} under_replicated={go_bool(rep.under_replicated)}")

    async def set_partition_role(self, r: m.SetPartitionRole) -> str:
        self.broker.check_topic_name(r.topic)
        try:
            hw = await self.broker.set_partition_role(r.topic, r.partition, r.role)
        except (InvalidConfig, InvalidRequest) as exc:
            if not self.broker.clustered:  # the single node's V1 answers these as before
                raise
            raise RtesError(Code.BAD_REQUEST, exc.message) from None
        except UnknownPartition:
            raise RtesError(Code.BAD_REQUEST,
                            f"partition not found: topic={r.topic} partition={r.partition}") from None
        return f"topic={r.topic} partition={r.partition} role={r.role} hw={hw}"

    async def ping(self, r: m.Ping) -> None:
        return None

    async def broker_fetch(self, r: m.BrokerFetch) -> bytes:
        self.broker.check_topic_name(r.topic)
        await self.broker.ensure_topic(r.topic)
        if not 0 <= r.partition < self.broker.partition_count(r.topic):
            raise RtesError(Code.BAD_REQUEST, "invalid partition")
        if self.broker.partition_role(r.topic, r.partition) == FOLLOWER:
            raise NotLeader()
        records, hw = await self._records(r.topic, r.partition, r.offset, r.max_messages,
                                          upto_log_end=True)
        head = f"topic={r.topic} partition={r.partition} follower={r.follower_id} hw={hw} records="
        return head.encode() + encode_records(records)

    async def broker_replica_ack(self, r: m.BrokerReplicaAck) -> str:
        self.broker.check_topic_name(r.topic)
        try:
            rep = await self.broker.replica_progress(r.topic, r.partition, r.follower_id, r.acked_offset)
        except NotLeader:
            raise RtesError(Code.BAD_REQUEST, "partition is not leader") from None
        return (f"topic={r.topic} partition={r.partition} follower={r.follower_id} "
                f"acked_offset={r.acked_offset} hw={rep.high_watermark} isr={go_list(rep.isr)} "
                f"under_replicated={go_bool(rep.under_replicated)}")

    # -- cluster metadata (ADMIN_*) ------------------------------------------------------------

    def _meta_tail(self) -> str:
        md = self.broker.metadata
        return f"term={md.term} index={md.index}"

    async def admin_create_topic(self, r: m.AdminCreateTopic) -> str:
        self.broker.check_topic_name(r.topic)
        config = dict(r.config)
        if r.replication_factor != m.DEFAULT_REPLICATION_FACTOR:  # -1: the broker's default
            config["replication.factor"] = str(r.replication_factor)
        # the same topic again is fine (idempotent); another partition count is not
        topic = await self.broker.create_topic(r.topic, r.partitions, config, exist_ok=True)
        if len(topic.partitions) != r.partitions:
            raise TopicAlreadyExists(f"topic already exists: {r.topic} ({len(topic.partitions)} partitions)")
        default_rf = str(self.broker.config.replication_factor)
        rf = (self.broker.topic_config(r.topic).get("replication.factor", default_rf)
              if r.replication_factor == m.DEFAULT_REPLICATION_FACTOR else str(r.replication_factor))
        return f"topic={r.topic} partitions={r.partitions} replication_factor={rf} " + self._meta_tail()

    async def admin_describe_topic(self, r: m.AdminDescribeTopic) -> str:
        if not await self.broker.has_topic(r.topic):
            raise RtesError(Code.BAD_REQUEST, f"topic not found: {r.topic}")
        info = self.broker.describe_topic(r.topic)
        rf = info.config.get("replication.factor", str(self.broker.config.replication_factor))
        config = ",".join(f"{k}={v}" for k, v in sorted(info.config.items()) if k != "replication.factor")
        parts = info.partitions
        return (f"topic={r.topic} partitions={len(parts)} replication_factor={rf} "
                f"log_start={go_list(p.log_start_offset for p in parts)} "
                f"log_end={go_list(p.log_end_offset for p in parts)} "
                f"hw={go_list(p.high_watermark - 1 for p in parts)} "
                f"size_bytes={go_list(p.size_bytes for p in parts)} "
                f"roles={go_list(p.role for p in parts)} "
                f"status={go_list(_partition_status(p.offline) for p in parts)} config={config}")

    async def admin_delete_topic(self, r: m.AdminDeleteTopic) -> str:
        if not await self.broker.has_topic(r.topic):
            raise RtesError(Code.BAD_REQUEST, f"topic not found: {r.topic}")
        await self.broker.delete_topic(r.topic)
        return f"topic={r.topic} deleted=true " + self._meta_tail()

    async def admin_register_broker(self, r: m.AdminRegisterBroker) -> str:
        self.broker.metadata.register_broker(r.broker_id, r.host, r.port, r.epoch)
        return f"broker_id={r.broker_id} host={r.host} port={r.port} " + self._meta_tail()

    async def admin_broker_heartbeat(self, r: m.AdminBrokerHeartbeat) -> str:
        if r.broker_id not in self.broker.metadata.brokers:
            raise RtesError(Code.BAD_REQUEST, f"broker not found: {r.broker_id}")
        self.broker.metadata.heartbeat(r.broker_id)
        return f"broker_id={r.broker_id} heartbeat=ok " + self._meta_tail()

    async def admin_set_partition_leader(self, r: m.AdminSetPartitionLeader) -> str:
        md = self.broker.metadata
        if not await self.broker.has_topic(r.topic):
            raise RtesError(Code.BAD_REQUEST, f"topic not found: {r.topic}")
        if (r.topic, r.partition) not in md.partitions:
            raise RtesError(Code.BAD_REQUEST, f"partition not found: topic={r.topic} partition={r.partition}")
        try:  # standalone the V1 metadata model's; in cluster mode the state in ZooKeeper
            await self.broker.set_partition_leader(r.topic, r.partition, r.leader_id, list(r.isr))
        except BayouError as exc:
            if not self.broker.clustered:  # the single node's V1 answers these as before
                raise
            raise RtesError(Code.BAD_REQUEST, exc.message) from None
        return (f"topic={r.topic} partition={r.partition} leader={r.leader_id} isr={go_list(r.isr)} "
                + self._meta_tail())

    async def admin_get_metadata(self, r: m.AdminGetMetadata) -> str:
        md = self.broker.metadata
        return (f"topics={go_list(self.broker.visible_topics())} brokers={go_list(sorted(md.brokers))} "
                f"fenced={go_list(md.fenced_ids())}")

    async def admin_reconcile(self, r: m.AdminReconcileBrokerHealth) -> str:
        return f"reconciled={self.broker.metadata.reconcile_health(r.timeout_ms)}"

    async def admin_fence(self, r: m.AdminFenceBroker) -> str:
        if r.broker_id not in self.broker.metadata.brokers:
            raise RtesError(Code.BAD_REQUEST, f"broker not found: {r.broker_id}")
        self.broker.metadata.set_fenced(r.broker_id, r.fenced)
        return f"broker_id={r.broker_id} fenced={go_bool(r.fenced)} " + self._meta_tail()

    async def admin_elect(self, r: m.AdminElectTopicLeaders) -> str:
        if not await self.broker.has_topic(r.topic):
            raise UnknownTopic(f"topic not found: {r.topic}")
        return f"topic={r.topic} elected_changes={await self.broker.elect_leaders(r.topic)}"


class _Lines(LineReader):
    """V1's line reader as the serve loop drives it: an over-long line behind complete ones stalls
    it (the next feed raises ``LineTooLong``)."""

    @property
    def stalled(self) -> bool:
        return self.overflowed


def rtes_handler(service: RtesService) -> Callable[..., Awaitable[None]]:
    async def serve(conn: Connection, listener: Listener, first: bytes = b"") -> None:
        # ``first``: bytes the V1 port's first-byte sniff already read (server/app.py).
        # Strictly in order: each request is answered (and drained: a client that pipelines and
        # does not read must not make the server buffer every reply) before the next one starts,
        # so its reply reflects exactly the state it produced: a PRODUCE's hw is the one it left
        # (rtes.md's vectors pin it for lines pipelined on one connection), which overlapping
        # produces would move (server/frames.py's pipelining is not used here).
        reader = _Lines()

        async def refuse(_exc: LineTooLong) -> None:
            conn.writer.write(encode_error("0", Code.BAD_REQUEST, "line too long"))
            await conn.writer.drain()
            log.warning("closing connection: line too long", extra={"peer": conn.peer})
            await _close_gently(conn)

        await serve_frames(conn, listener, reader, service.handle_line, error=LineTooLong, refuse=refuse,
                           last=reader.eof, first=first)
    return serve


async def _close_gently(conn: Connection, linger: float = 0.5) -> None:
    """Half-close and discard what the peer still sends for a moment, so the kernel does not
    answer unread input with a reset that would destroy the error reply in flight."""
    if conn.writer.can_write_eof():
        conn.writer.write_eof()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + linger
    with contextlib.suppress(TimeoutError, ConnectionError):
        while (left := deadline - loop.time()) > 0:
            if not await asyncio.wait_for(conn.reader.read(1 << 16), left):
                break
