"""The Cursus protocol bound to the broker (cursus.md; replies in the current broker's style).

Frames are classified by the sans-IO codec (protocols/cursus) into a binary batch or a text command;
text commands are dispatched by keyword through one table. Batches are stored in their own format
(records/cursus.py) so CONSUME and STREAM serve the stored bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bayou.broker import Acks, Broker
from bayou.broker.groups.coordinator import CURSUS_POLICY
from bayou.broker.producers import ProducerEntry
from bayou.errors import (
    BayouError,
    CorruptStorage,
    GroupNotFound,
    GroupTopicMismatch,
    IllegalGeneration,
    InvalidConfig,
    InvalidTopicName,
    NotLeader,
    OffsetOutOfRange,
    OffsetRegression,
    OutOfOrderSequence,
    PartitionNotAssigned,
    ProducerFenced,
    Unauthorized,
    UnknownMember,
)
from bayou.protocols.cursus import batch as cb
from bayou.protocols.cursus import replies
from bayou.protocols.cursus.commands import Command, classify, parse_int
from bayou.protocols.cursus.compression import GZIP_MAGIC, LZ4_MAGIC, XERIAL_MAGIC, maybe_decompress
from bayou.protocols.cursus.framing import KEEPALIVE, MAX_FRAME, CursusError, FrameReader, encode_frame
from bayou.records.batch import HEADER_SIZE, assemble_batch, iter_batches
from bayou.records.cursus import (
    FORMAT_CURSUS,
    decode_message,
    encode_message,
    message_starts,
    record_to_message,
    stamp_offsets,
)
from bayou.records.hashing import fnv1a_32
from bayou.server.base import Connection, Listener
from bayou.server.cursus_events import EventStore, SnapshotAhead, VersionConflict
from bayou.server.frames import serve_frames
from bayou.server.metering import UNKNOWN, RequestMeter
from bayou.server.workers import decode_stored, inflate_pool, run_in
from bayou.storage import validate_topic_name

log = logging.getLogger("bayou.cursus")

DEFAULT_PARTITIONS = 4
DEFAULT_GROUP = "default-group"
DEFAULT_BATCH = 8192
STREAM_KEEPALIVE_S = 5.0
STREAM_COMMIT_S = 5.0
POLICY_FIELDS = (("cleanup_policy", "delete"), ("partitioner", "hash_key"), ("auth_policy", "open"),
                 ("read_acl", ""), ("write_acl", ""))
HELP = ("CREATE,DELETE,LIST,PUBLISH,CONSUME,STREAM,SUBSCRIBE,JOIN_GROUP,SYNC_GROUP,LEAVE_GROUP,HEARTBEAT,"
        "COMMIT,COMMIT_OFFSET,BATCH_COMMIT,FETCH_OFFSET,LIST_OFFSETS,REGISTER_GROUP,GROUP_STATUS,"
        "LIST_GROUPS,DESCRIBE,METADATA,FIND_COORDINATOR,HELP")


Body = bytes | list[bytes] | None  # one reply frame, several (READ_STREAM), or none


class Reply(Exception):
    """Raised by handlers to answer with an error text (connection kept)."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body.decode(errors="replace"))
        self.body = body


def err(code: str, *pairs: tuple[str, object]) -> Reply:
    return Reply(replies.error(code, *pairs))


@dataclass(slots=True)
class ConnState:
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    streaming: bool = False


@dataclass(frozen=True, slots=True)
class Advertised:
    host: str
    port: int


# Commands whose state lives on the group's coordinator (cluster mode checks who that is).
GROUP_COMMANDS = frozenset({"JOIN_GROUP", "SYNC_GROUP", "HEARTBEAT", "LEAVE_GROUP", "COMMIT_OFFSET", "COMMIT",
                            "BATCH_COMMIT", "REGISTER_GROUP", "GROUP_STATUS"})


class CursusService:
    def __init__(self, broker: Broker, advertised: Advertised) -> None:
        self.broker = broker
        self.advertised = advertised
        self.streams: dict[str, asyncio.Task[object]] = {}
        self.meter = RequestMeter("cursus")
        self.table: dict[str, Callable[[Command, ConnState, Connection | None], Awaitable[Body]]] = {
            "CREATE": self.create,
            "DELETE": self.delete,
            "LIST": self.list_topics,
            "HELP": self.help,
            "METADATA": self.metadata,
            "FIND_COORDINATOR": self.find_coordinator,
            "DESCRIBE": self.describe,
            "LIST_OFFSETS": self.list_offsets,
            "PUBLISH": self.publish,
            "JOIN_GROUP": self.join_group,
            "SYNC_GROUP": self.sync_group,
            "HEARTBEAT": self.heartbeat,
            "LEAVE_GROUP": self.leave_group,
            "FETCH_OFFSET": self.fetch_offset,
            "COMMIT_OFFSET": self.commit_offset,
            "COMMIT": self.commit_offset,
            "BATCH_COMMIT": self.batch_commit,
            "CONSUME": self.consume,
            "STREAM": self.stream,
            "SUBSCRIBE": self.subscribe,
            "REGISTER_GROUP": self.register_group,
            "GROUP_STATUS": self.group_status,
            "LIST_GROUPS": self.list_groups,
            "APPEND_STREAM": self.append_stream,
            "STREAM_VERSION": self.stream_version,
            "SAVE_SNAPSHOT": self.save_snapshot,
            "READ_SNAPSHOT": self.read_snapshot,
            "READ_STREAM": self.read_stream,
        }
        self.events = EventStore(broker)
        self._producers_loaded: set[tuple[str, int]] = set()

    # -- dispatch ------------------------------------------------------------------------------

    async def handle(self, body: bytes, state: ConnState, conn: Connection | None = None) -> Body:
        """One frame body -> the reply body or bodies (None: no reply). Raises CursusError to close."""
        started = time.perf_counter()
        command, failed = UNKNOWN, True
        try:
            if body.startswith(COMPRESSED_MAGICS):  # inflating is CPU work: off the loop (gzip bombs)
                body = await run_in(inflate_pool(), maybe_decompress, body)
            item = classify(body)
            command = "BATCH" if isinstance(item, cb.BatchHead) else item.name if item.name in self.table \
                else UNKNOWN
            reply = await self._dispatch(body, item, state, conn)
            first = (reply[0] if reply else None) if isinstance(reply, list) else reply
            failed = first is not None and first.startswith(b"ERROR")
            return reply
        finally:
            self.meter.record(command, started, failed, timed=not state.streaming)

    async def _dispatch(self, body: bytes, item: cb.BatchHead | Command, state: ConnState,
                        conn: Connection | None) -> Body:
        try:
            if isinstance(item, cb.BatchHead):
                return await self.produce_batch(body, item)
            handler = self.table.get(item.name)
            if handler is None or not item.well_formed():
                return replies.error("unknown_command", ("command", replies.Quoted(item.text)))
            if item.name in GROUP_COMMANDS and self.broker.cluster is not None:
                self._check_coordinator(item)
            return await handler(item, state, conn)
        except Reply as r:
            return r.body
        except CursusError:
            raise
        except NotLeader as exc:
            # cluster mode: Cursus' distributed brokers' redirect, which its clients follow
            addr = exc.leader_address("cursus")
            code = replies.ErrorCode.NOT_LEADER
            return replies.error(code if addr is None else f"{code} LEADER_IS {addr[0]}:{addr[1]}")
        except CorruptStorage as exc:
            return replies.error(replies.ErrorCode.STORAGE_ERROR, ("reason", exc.message))
        except Unauthorized as exc:  # the connection stays open
            return replies.error(replies.ErrorCode.UNAUTHORIZED, ("reason", exc.message))
        except BayouError as exc:
            return replies.error("command_failed", ("reason", exc.message))
        except Exception:
            log.exception("Cursus request failed")
            return replies.error("internal_error", ("reason", "internal error"))

    # -- helpers -------------------------------------------------------------------------------

    def _check_coordinator(self, cmd: Command) -> None:
        """Cluster mode: a group's membership lives on its coordinator; elsewhere the distributed
        Cursus broker's ``ERROR: NOT_COORDINATOR host=<h> port=<p>``, on which clients find the
        coordinator again and rejoin there."""
        positional = self._positional(cmd)  # the seeds' forms: topic, group, ...
        group = cmd.args.get("group") or (positional[1] if len(positional) > 1 else None)
        cluster = self.broker.cluster
        if not group or cluster is None:
            return
        reg = cluster.coordinator_of(group, "cursus")
        if reg is None:  # the cluster state has not arrived yet
            raise err("coordinator_not_available", ("group", group))
        if reg.broker_id == self.broker.config.broker_id:
            return
        where = reg.address("cursus")
        assert where is not None  # chosen among brokers with a Cursus listener
        raise err(replies.ErrorCode.NOT_COORDINATOR, ("host", where[0]), ("port", where[1]))

    @staticmethod
    def _need(cmd: Command, key: str, missing: bytes | None = None) -> str:
        v = cmd.args.get(key)
        if v is None or v == "":
            raise Reply(missing or replies.error(f"missing_{key}", ("command", cmd.name)))
        return v

    @staticmethod
    def _positional(cmd: Command) -> list[str]:
        """The words after the keyword when the command uses the seeds' positional form."""
        if cmd.args:
            return []
        return cmd.text.split()[1:]

    async def _topic_exists(self, topic: str) -> None:
        if not await self.broker.has_topic(topic):  # cluster mode: one made elsewhere is waited for
            raise err("topic_not_found", ("topic", topic))

    def _partition(self, cmd: Command, value: str | None) -> int:
        p = parse_int(value) if value is not None else None
        if p is None:
            raise err("invalid_partition")
        return p

    def _policy_pairs(self, topic: str) -> list[tuple[str, object]]:
        cfg = self.broker.topics[topic].meta.config
        pairs: list[tuple[str, object]] = [(k, cfg.get(f"cursus.{k}", d)) for k, d in POLICY_FIELDS]
        rms = cfg.get("retention.ms")
        pairs.append(("retention_hours", int(rms) // 3_600_000 if rms and int(rms) > 0 else 0))
        rb = cfg.get("retention.bytes")
        pairs.append(("retention_bytes", int(rb) if rb and int(rb) > 0 else 0))
        return pairs

    # -- topics --------------------------------------------------------------------------------

    async def create(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        pos = self._positional(cmd)
        args = dict(cmd.args)
        if pos:  # seeds: CREATE <topic> [<partitions>]
            args["topic"] = pos[0]
            if len(pos) > 1:
                args["partitions"] = pos[1]
        topic = args.get("topic")
        if not topic:
            raise err("missing_topic", ("expected", "CREATE topic=<name> [partitions=<N>]"))
        try:
            validate_topic_name(topic)
        except InvalidTopicName:
            raise err("invalid_topic_name", ("topic", replies.Quoted(topic)),
                      ("reason", "use 1-249 of letters, digits, '.', '_', '-', not '.' or '..'")) from None
        n = DEFAULT_PARTITIONS
        if "partitions" in args:
            v = parse_int(args["partitions"])
            if v is None or v <= 0:
                raise err("invalid_partitions", ("reason", "must be a positive integer"))
            n = v
        if "replication_factor" in args:
            v = parse_int(args["replication_factor"])
            if v is None or v <= 0:
                raise err("invalid_replication_factor", ("reason", "must be a positive integer"))
        config: dict[str, str] = {}
        for flag, key in (("idempotent", "idempotent"), ("event_sourcing", "event.sourcing")):
            if args.get(flag, "").lower() == "true":
                config[key] = "true"
        cleanup = args.get("cleanup_policy", "delete")
        if cleanup != "delete":
            raise err("invalid_topic_policy", ("reason", f"cleanup_policy {cleanup} is not supported"))
        partitioner = args.get("partitioner", "hash_key")
        if partitioner not in ("hash_key", "round_robin"):
            raise err("invalid_topic_policy", ("reason", f"unknown partitioner {partitioner}"))
        if partitioner != "hash_key":
            config["cursus.partitioner"] = partitioner
        if args.get("auth_policy", "open") != "open":
            raise err("invalid_topic_policy", ("reason", "only auth_policy=open is supported"))
        for key, target, scale in (("retention_hours", "retention.ms", 3_600_000),
                                   ("retention_bytes", "retention.bytes", 1)):
            if key in args:
                v = parse_int(args[key])
                if v is None or v < 0:
                    raise err("invalid_topic_policy", ("reason", f"{key} must be a non-negative integer"))
                if v > 0:
                    config[target] = str(v * scale)
        try:  # (cluster mode: ZooKeeper says whether it exists, not a local copy maybe just deleted)
            existing = await self.broker.create_topic(topic, n, config, exist_ok=True)
        except InvalidConfig as exc:
            raise err("invalid_topic_policy", ("reason", exc.message)) from None
        have = len(existing.partitions)
        if n < have:
            raise err("create_topic_failed", ("topic", topic), (
                "reason", f"cannot decrease partition count for topic '{topic}': {have} -> {n}"))
        if n > have:
            await self.broker.add_partitions(topic, n)
        await self.broker.register_group(DEFAULT_GROUP, topic, CURSUS_POLICY, "range")
        return replies.ok(("topic", topic), ("partitions", n), *self._policy_pairs(topic))

    async def delete(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        pos = self._positional(cmd)
        topic = cmd.args.get("topic") or (pos[0] if pos else None)
        if not topic:
            raise err("missing_topic", ("expected", "DELETE topic=<name>"))
        await self._topic_exists(topic)
        await self.broker.delete_topic(topic)
        self.events.forget(topic)
        return replies.ok(("topic", topic), ("deleted", True))

    async def list_topics(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        names = self.broker.visible_topics()
        return replies.ok(("count", len(names)), ("topics", ",".join(names)))

    async def help(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        return replies.ok(("commands", HELP))

    async def metadata(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic = self._need(cmd, "topic")
        await self._topic_exists(topic)
        n = self.broker.partition_count(topic)
        addr = f"{self.advertised.host}:{self.advertised.port}"
        leaders, epochs = [addr] * n, ["0"] * n
        cluster = self.broker.cluster
        if cluster is not None:  # each partition's leader (its Cursus listener) and leader epoch
            for p in range(n):
                reg, epoch = cluster.partition_leader(topic, p)
                where = reg.address("cursus") if reg is not None else None
                leaders[p] = f"{where[0]}:{where[1]}" if where is not None else ""
                epochs[p] = str(max(epoch, 0))
        return replies.ok(("topic", topic), ("partitions", n), ("leaders", ",".join(leaders)),
                          ("epochs", ",".join(epochs)), *self._policy_pairs(topic))

    async def find_coordinator(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        if cmd.args.get("group"):
            kind = "group"
        elif cmd.args.get("transactional_id"):
            kind = "transaction"
        else:
            raise err("missing_coordinator_key", ("command", "FIND_COORDINATOR"))
        cluster = self.broker.cluster
        if cluster is not None and kind == "group":
            reg = cluster.coordinator_of(cmd.args["group"], "cursus")
            where = reg.address("cursus") if reg is not None else None
            if reg is None or where is None:
                raise err("coordinator_not_available", ("group", cmd.args["group"]))
            return replies.ok(("coordinator_id", reg.broker_id), ("coordinator_type", kind),
                              ("host", where[0]), ("port", where[1]))
        return replies.ok(("coordinator_id", "standalone"), ("coordinator_type", kind),
                          ("host", self.advertised.host), ("port", self.advertised.port))

    async def describe(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic = cmd.args.get("topic") or next(iter(self._positional(cmd)), None)
        if not topic:
            raise err("missing_topic", ("expected", "DESCRIBE topic=<name>"))
        await self._topic_exists(topic)
        info = self.broker.describe_topic(topic)
        body = {
            "status": "OK",
            "topic": topic,
            "partitions": [{"id": p.partition, **self._roles(topic, p.partition),
                            "leo": p.log_end_offset, "hwm": p.high_watermark, **_status(p.offline)}
                           for p in info.partitions],
            "policy": dict(self._policy_pairs(topic)),
        }
        return json.dumps(body, indent=2).encode()

    def _roles(self, topic: str, partition: int) -> dict[str, int | list[int]]:
        """Leader, replicas and ISR of a partition: this broker alone when standalone; in cluster
        mode ZooKeeper's as this broker last read them (leader -1 and an empty ISR while none)."""
        me = self.broker.config.broker_id
        cluster = self.broker.cluster
        if cluster is None:
            return {"leader": me, "replicas": [me], "isr": [me]}
        snap = cluster.snapshot
        assignment = snap.topics.get(topic) if snap is not None else None
        entry = snap.states.get((topic, partition)) if snap is not None else None
        return {"leader": entry[0].leader if entry is not None else -1,
                "replicas": list(assignment.partitions.get(partition, ())) if assignment is not None else [],
                "isr": list(entry[0].isr) if entry is not None else []}

    async def list_offsets(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic = self._need(cmd, "topic")
        await self._topic_exists(topic)
        info = self.broker.describe_topic(topic)
        parts = info.partitions
        if "partition" in cmd.args:
            p = self._partition(cmd, cmd.args["partition"])
            if not 0 <= p < len(parts):
                raise err("partition_not_found", ("partition", p))
            parts = (parts[p],)
        offsets = ",".join(f"P{p.partition}:earliest={p.log_start_offset}:latest={p.high_watermark}"
                           f":leo={p.log_end_offset}:hwm={p.high_watermark}" for p in parts)
        return replies.ok(("topic", topic), ("partitions", len(info.partitions)), ("offsets", offsets))

    # -- producing -----------------------------------------------------------------------------

    def _acks(self, text: str) -> Acks | None:
        # A standalone Cursus broker treats -1/all exactly like 1 (vector 04): on a single node the
        # V1 protocol's follower reports are the only "replicas", and they are not Cursus's. In
        # cluster mode -1/all waits for the in-sync replicas (or answers the timeout error).
        every = Acks.ALL if self.broker.cluster is not None else Acks.LEADER
        return {"0": Acks.NONE, "1": Acks.LEADER, "": Acks.LEADER, "-1": every,
                "all": every}.get(text.lower())

    async def _append_messages(self, topic: str, partition: int, body: bytes | bytearray,
                               starts: list[int], acks: Acks) -> int:
        """Store message records ``body[starts[0]:starts[-1]]``; returns the partition's last offset."""
        part = self.broker.partition(topic, partition)
        previous = None
        if self.broker.topic_flag(topic, "idempotent"):
            if (topic, partition) not in self._producers_loaded:
                await self._load_producers(topic, partition)
            ids = []
            for s in starts[:-1]:
                m, _ = decode_message(body, s)
                ids.append((m.producer_id, m.epoch, m.seq_num))
            keep, previous = part.producers.admit(ids)
            if not all(keep):
                kept = [(starts[i], starts[i + 1]) for i, k in enumerate(keep) if k]
                buf = b"".join(bytes(body[a:b]) for a, b in kept)
                rel = [0]
                for a, b in kept:
                    rel.append(rel[-1] + (b - a))
                body, starts = buf, rel
        count = len(starts) - 1
        if count == 0:
            return part.log.next_offset - 1
        now = int(time.time() * 1000)
        payload = bytes(body[starts[0]:starts[-1]])
        batch = assemble_batch(payload, record_count=count, base_offset=0,
                               attributes=FORMAT_CURSUS << 8, base_timestamp=now, max_timestamp=now,
                               producer_id=starts[-2] - starts[0])  # LAST_MESSAGE_AT, records/cursus.py
        shift = HEADER_SIZE - starts[0]
        positions = [s + shift for s in starts]

        def stamp(buf: bytearray, base: int) -> None:
            stamp_offsets(buf, positions, base)

        try:
            await self.broker.produce(topic, partition, batch, acks, stamp=stamp, create=False)
        except BaseException:
            if previous is not None:
                part.producers.restore(previous)
            raise
        return part.log.next_offset - 1

    async def _load_producers(self, topic: str, partition: int) -> None:
        """Rebuild producer sequences from the active segment after a restart (entries older than
        the active segment are past the 30-minute producer expiry in practice)."""
        part = self.broker.partition(topic, partition)
        offset = max(part.log.log_start_offset, part.log.active.base_offset)
        latest: dict[bytes, tuple[int, int]] = {}
        while offset < part.log.next_offset:
            res = await self.broker.fetch(topic, partition, offset, max_bytes=8 << 20,
                                          upto_log_end=True)
            if not res.data:
                break
            for pos, h in iter_batches(res.data):
                if h.payload_format != FORMAT_CURSUS or h.compression:
                    continue
                starts = message_starts(res.data, pos + HEADER_SIZE, h.record_count, pos + h.size)
                for s in starts[:-1]:
                    m, _ = decode_message(res.data, s)
                    if m.producer_id and m.seq_num:
                        latest[m.producer_id] = (m.epoch, m.seq_num)
            offset = res.next_offset
        now = time.monotonic()
        for pid, (epoch, seq) in latest.items():
            part.producers.entries.setdefault(pid, ProducerEntry(epoch, seq, now))
        self._producers_loaded.add((topic, partition))

    async def produce_batch(self, body: bytes, head: cb.BatchHead) -> bytes:
        acks = self._acks(head.acks)
        if acks is None:
            raise err("invalid_acks", ("value", head.acks))
        starts = cb.message_starts(body, head)
        if head.count == 0:
            raise err("broker_error", ("reason", "empty batch messages"))
        if not await self.broker.has_topic(head.topic):
            raise err("topic_not_found", ("topic", head.topic))
        n = self.broker.partition_count(head.topic)
        if not 0 <= head.partition < n:
            raise err("partition_not_found", ("partition", head.partition))
        first, _ = decode_message(body, starts[0])
        last, _ = decode_message(body, starts[-2]) if head.count > 1 else (first, 0)
        try:
            last_offset = await self._append_messages(head.topic, head.partition, body, starts, acks)
        except (ProducerFenced, OutOfOrderSequence) as exc:
            return replies.json_ack(0, last.epoch, last.producer_id.decode(errors="replace"),
                                    first.seq_num, last.seq_num, error=exc.message)
        # acks=0 gets the JSON ack too (cursus.md decision 1): clients parse every reply as JSON.
        return replies.json_ack(max(last_offset, 0), last.epoch, last.producer_id.decode(errors="replace"),
                                first.seq_num, last.seq_num)

    async def publish(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        args = dict(cmd.args)
        message = cmd.message
        pos = self._positional(cmd)
        if pos and message is None:  # seed 002: PUBLISH <topic> <message>
            args["topic"] = pos[0]
            message = cmd.text.split(None, 2)[2] if len(pos) > 1 else None
            args.setdefault("producerId", "bayou-text")
        topic = args.get("topic")
        if not topic:
            raise err("missing_topic", ("command", "PUBLISH"))
        if not message:
            raise err("missing_message", ("command", "PUBLISH"))
        producer = args.get("producerId")
        if not producer:
            raise err("missing_producer_id", ("command", "PUBLISH"))
        if "isIdempotent" in args and args["isIdempotent"].lower() not in ("true", "false"):
            raise err("invalid_is_idempotent", ("value", args["isIdempotent"]))
        acks = self._acks(args.get("acks", "1"))
        if acks is None:
            raise err("invalid_acks", ("value", args.get("acks", "")))
        seq = parse_int(args.get("seqNum", "0"))
        if seq is None or seq < 0:
            raise err("invalid_seq_num", ("reason", f"invalid seqNum {args.get('seqNum')}"))
        epoch = parse_int(args.get("epoch", "0"))
        if epoch is None:
            raise err("invalid_epoch", ("reason", f"invalid epoch {args.get('epoch')}"))
        await self._topic_exists(topic)
        n = self.broker.partition_count(topic)
        key = args.get("key", "")
        if "partition" in args:
            p = parse_int(args["partition"])
            if p is None:
                raise err("invalid_partition", ("reason", f"invalid partition {args['partition']}"))
            if not 0 <= p < n:
                raise err("partition_not_found", ("partition", p))
        elif key and self.broker.topics[topic].meta.config.get("cursus.partitioner") != "round_robin":
            p = fnv1a_32(key.encode()) % n
        else:
            p = self._round_robin(topic, n)
        from bayou.records.cursus import CursusMessage

        out = bytearray()
        encode_message(CursusMessage(message.encode(), 0, seq, producer.encode(), key.encode(), epoch), out)
        last = await self._append_messages(topic, p, out, [0, len(out)], acks)
        return replies.json_ack(last, epoch, producer, seq, seq)

    def _round_robin(self, topic: str, n: int) -> int:
        part0 = self.broker.partition(topic, 0)
        p = part0.round_robin % n
        part0.round_robin += 1
        return p

    # -- groups --------------------------------------------------------------------------------

    def _group_error(self, exc: BayouError, group: str, member: str, requested: int | None) -> Reply:
        if isinstance(exc, GroupNotFound):
            return err("group_not_found", ("group", group))
        if isinstance(exc, UnknownMember):
            return err("member_not_found", ("member", member), ("group", group))
        if isinstance(exc, IllegalGeneration):
            g = self.broker.groups.groups.get(group)
            return err("GEN_MISMATCH", ("current", g.generation if g else 0), ("requested", requested),
                       ("group", group), ("member", member))
        if isinstance(exc, GroupTopicMismatch):
            return err("topic_not_assigned_to_group", ("expected", exc.expected), ("actual", exc.actual))
        raise exc

    @staticmethod
    def _generation_arg(args: dict[str, str], command: str, required: bool) -> int | None:
        if "generation" not in args:
            if required:
                raise err("missing_generation", ("command", command))
            return None
        g = parse_int(args["generation"])
        if g is None:
            raise err("invalid_generation", ("command", command))
        return g

    def _group_args(self, cmd: Command, *positional: str) -> tuple[str, str, str, dict[str, str]]:
        """(topic, group, member, all arguments); the seeds' positional forms fill ``positional``."""
        args = dict(cmd.args)
        args.update((k, v) for k, v in zip(positional, self._positional(cmd), strict=False))
        for key in ("topic", "group", "member"):
            if not args.get(key):
                raise err(f"missing_{key}", ("command", cmd.name))
        return args["topic"], args["group"], args["member"], args

    async def join_group(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic, group, member, args = self._group_args(cmd, "topic", "group", "member")
        await self._topic_exists(topic)
        gen = self._generation_arg(args, cmd.name, required=False)
        try:
            if gen is not None:
                view = await self.broker.resume_group(group, topic, member, gen)
                return replies.ok(("generation", view.generation), ("member", member),
                                  ("assignments", list(view.assignment)), ("resumed", True))
            existing = self.broker.groups.groups.get(group)
            members = existing.members if existing is not None else {}
            if member in members:
                # A rejoin: the published client re-sends the id it was given (cursus.md 4.9). A
                # fresh suffix would leave the old id behind until it expires and bump the
                # generation again, so two members' rejoins would trigger each other for ever.
                member_id = member
            else:
                member_id = f"{member}-{random.randrange(10_000):04d}"
                while member_id in members:
                    member_id = f"{member}-{random.randrange(10_000):04d}"
            view = await self.broker.join_group(group, topic, member_id, "range", CURSUS_POLICY)
        except (GroupNotFound, UnknownMember, IllegalGeneration, GroupTopicMismatch) as exc:
            raise self._group_error(exc, group, member, gen) from None
        return replies.ok(("generation", view.generation), ("member", member_id),
                          ("assignments", list(view.assignment)))

    async def sync_group(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic, group, member, args = self._group_args(cmd, "topic", "group", "member", "generation")
        gen = self._generation_arg(args, cmd.name, required=True)
        assert gen is not None
        try:
            view = await self.broker.sync_group(group, topic, member, gen)
        except (GroupNotFound, UnknownMember, IllegalGeneration, GroupTopicMismatch) as exc:
            raise self._group_error(exc, group, member, gen) from None
        return replies.ok(("generation", view.generation), ("member", member),
                          ("assignments", list(view.assignment)))

    async def heartbeat(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic, group, member, args = self._group_args(cmd, "topic", "group", "consumer", "member",
                                                      "generation")
        gen = self._generation_arg(args, cmd.name, required=True)
        assert gen is not None
        try:
            await self.broker.heartbeat(group, topic, member, gen)
        except (GroupNotFound, UnknownMember, IllegalGeneration, GroupTopicMismatch) as exc:
            raise self._group_error(exc, group, member, gen) from None
        return replies.ok(("member", member), ("generation", gen))

    async def leave_group(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic, group, member, args = self._group_args(cmd, "topic", "group", "member")
        # Without generation= the leave is unconditional (cursus.md decision 2: the Python and
        # Java clients never send one).
        gen = self._generation_arg(args, cmd.name, required=False)
        try:
            await self.broker.leave_group(group, topic, member, gen)
        except (GroupNotFound, UnknownMember, IllegalGeneration, GroupTopicMismatch) as exc:
            raise self._group_error(exc, group, member, gen) from None
        return replies.ok(("group", group), ("member", member), ("left", True))

    def _group_for(self, group: str, topic: str) -> None:
        g = self.broker.groups.groups.get(group)
        if g is None:
            raise err("group_not_found", ("group", group))
        if g.topic != topic:
            raise err("topic_not_assigned_to_group", ("expected", g.topic), ("actual", topic))

    async def fetch_offset(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic = self._need(cmd, "topic")
        if "partition" not in cmd.args or cmd.args["partition"] == "":
            raise err("missing_partition", ("command", cmd.name))
        p = self._partition(cmd, cmd.args["partition"])
        group = self._need(cmd, "group")
        self._group_for(group, topic)
        off = self.broker.committed_offset(group, topic, p)
        return replies.ok(("offset", off if off is not None else 0))

    async def commit_offset(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        args = dict(cmd.args)
        pos = self._positional(cmd)
        if pos:  # design doc: COMMIT <topic> <group> <partition> <offset>
            args.update(zip(("topic", "group", "partition", "offset"), pos, strict=False))
        for key in ("topic", "partition", "group", "offset"):
            if not args.get(key):
                raise err(f"missing_{key}", ("command", "COMMIT_OFFSET"))
        topic, group = args["topic"], args["group"]
        p = parse_int(args["partition"])
        if p is None or p < 0:
            raise err("invalid_partition")
        off = parse_int(args["offset"])
        if off is None or off < 0:
            raise err("invalid_offset")
        member = args.get("member")
        gen: int | None = None
        if "generation" in args:
            gen = parse_int(args["generation"])
            if gen is None:
                raise err("invalid_generation", ("command", "COMMIT_OFFSET"))
        if member and gen is None:
            raise err("missing_generation", ("command", "COMMIT_OFFSET"))
        if gen is not None and not member:
            raise err("missing_member", ("command", "COMMIT_OFFSET"))
        self._group_for(group, topic)
        try:
            await self.broker.commit_offset(group, topic, p, off, member=member, generation=gen)
        except PartitionNotAssigned:
            raise err("NOT_OWNER", ("partition", p), ("member", member), ("group", group),
                      ("generation", gen)) from None
        except OffsetRegression as exc:
            raise err("offset_regression", ("reason", exc.message)) from None
        except (GroupNotFound, UnknownMember, IllegalGeneration, GroupTopicMismatch) as exc:
            raise self._group_error(exc, group, member or "", gen) from None
        return replies.ok()

    async def batch_commit(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic, group, member, args = self._group_args(cmd, "topic", "group", "member", "generation")
        gen = self._generation_arg(args, cmd.name, required=True)
        assert gen is not None
        entries: dict[int, int] = {}
        for entry in cmd.tail.split(","):
            text = entry[1:] if entry[:1] in ("P", "p") else entry
            ps, sep, os_ = text.partition(":")
            if not sep:
                raise err("invalid_batch_commit_entry", ("entry", replies.Quoted(entry)))
            p, off = parse_int(ps), parse_int(os_)
            if p is None or p < 0:
                raise err("invalid_partition", ("entry", replies.Quoted(entry)))
            if off is None or off < 0:
                raise err("invalid_offset", ("entry", replies.Quoted(entry)))
            if p in entries:
                raise err("duplicate_partition", ("partition", p), ("group", group), ("topic", topic))
            entries[p] = off
        self._group_for(group, topic)
        try:
            await self.broker.commit_offsets(group, topic, entries, member=member, generation=gen)
        except PartitionNotAssigned:
            bad = next(p for p in entries if p not in self._assigned(group, member))
            raise err("NOT_OWNER", ("partition", bad), ("member", member), ("group", group),
                      ("generation", gen)) from None
        except OffsetRegression as exc:
            raise err("offset_regression", ("reason", exc.message)) from None
        except (GroupNotFound, UnknownMember, IllegalGeneration, GroupTopicMismatch) as exc:
            raise self._group_error(exc, group, member, gen) from None
        return replies.ok(("batched", len(entries)))

    def _assigned(self, group: str, member: str) -> list[int]:
        g = self.broker.groups.groups.get(group)
        return list(g.assignments.get(member, [])) if g else []

    async def register_group(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic = self._need(cmd, "topic")
        group = self._need(cmd, "group")
        await self._topic_exists(topic)
        d = await self.broker.register_group(group, topic, CURSUS_POLICY, "range")
        if d.topic != topic:
            raise err("register_group_failed", ("reason", f"group {group} is bound to topic {d.topic}"))
        return replies.ok(("group", group), ("topic", topic), ("registered", True))

    async def subscribe(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        """Seed 000/002: ``SUBSCRIBE <topic> [<group>]``, kept as a bayou extension."""
        pos = self._positional(cmd)
        topic = cmd.args.get("topic") or (pos[0] if pos else "")
        group = cmd.args.get("group") or (pos[1] if len(pos) > 1 else DEFAULT_GROUP)
        if not topic:
            raise err("missing_topic", ("command", "SUBSCRIBE"))
        await self._topic_exists(topic)
        d = await self.broker.register_group(group, topic, CURSUS_POLICY, "range")
        if d.topic != topic:
            raise err("topic_not_assigned_to_group", ("expected", d.topic), ("actual", topic))
        return replies.ok(("topic", topic), ("group", group), ("subscribed", True))

    async def group_status(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        group = self._need(cmd, "group")
        try:
            d = self.broker.describe_group(group)
        except GroupNotFound:
            raise err("group_not_found", ("group", group)) from None
        body = {
            "status": "OK",
            "group_name": d.name,
            "topic_name": d.topic,
            "state": "Stable" if d.members else "Dead",
            "generation": d.generation,
            "member_count": len(d.members),
            "partition_count": d.partition_count,
            "members": [{"member_id": m, "last_heartbeat": _iso(ts), "assignments": list(parts)}
                        for m, ts, parts in d.members],
            "last_rebalance": _iso(d.last_rebalance_ms),
        }
        return json.dumps(body, indent=2).encode()

    async def list_groups(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        names = self.broker.list_groups()
        return replies.ok(("count", len(names)), ("groups", ",".join(names)))

    # -- event sourcing ------------------------------------------------------------------------

    def _es_topic(self, cmd: Command) -> tuple[str, bytes]:
        topic = cmd.args.get("topic")
        if not topic:
            raise err("missing_topic")
        key = cmd.args.get("key")
        if not key:
            raise err("missing_key")
        if topic not in self.broker.topics:
            raise err("topic_not_found", ("topic", topic))
        if not self.broker.topic_flag(topic, "event.sourcing"):
            raise err("event_sourcing_not_enabled", ("topic", topic))
        return topic, key.encode()

    @staticmethod
    def _version_arg(cmd: Command, name: str = "version", required: bool = True) -> int | None:
        if name not in cmd.args:
            if required:
                raise err(f"missing_{name}")
            return None
        v = parse_int(cmd.args[name])
        if v is None or v < 0:
            raise err(f"invalid_{name}")
        return v

    async def append_stream(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic, key = self._es_topic(cmd)
        version = self._version_arg(cmd)
        assert version is not None
        if not cmd.message:
            raise err("missing_message")
        schema = parse_int(cmd.args.get("schema_version", "1"))
        if schema is None or not 0 <= schema < 1 << 32:
            raise err("invalid_schema_version")
        try:
            offset, p = await self.events.append(
                topic, key, version, cmd.message.encode(), cmd.args.get("event_type", "").encode(),
                schema, cmd.args.get("metadata", "").encode(), cmd.args.get("producerId", "").encode())
        except VersionConflict as exc:
            raise err("version_conflict", ("current", exc.current), ("expected", exc.expected)) from None
        return replies.ok(("version", version), ("offset", offset), ("partition", p))

    async def stream_version(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic, key = self._es_topic(cmd)
        return replies.ok(("version", await self.events.version(topic, key)))

    async def save_snapshot(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic, key = self._es_topic(cmd)
        version = self._version_arg(cmd)
        assert version is not None
        if cmd.message is None:
            raise err("missing_message")
        try:
            p = await self.events.save_snapshot(topic, key, version, cmd.message)
        except SnapshotAhead as exc:
            raise err("snapshot_version_exceeds_stream", ("version", exc.version),
                      ("current", exc.current)) from None
        return replies.ok(("version", version), ("partition", p))

    async def read_snapshot(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        topic, key = self._es_topic(cmd)
        snap = self.events.snapshot(topic, key)
        if snap is None:
            return replies.ok(("snapshot", replies.Raw("null")))
        body = replies.json_body({"version": snap.version, "payload": snap.payload}).decode()
        return replies.ok(("snapshot", replies.Raw(body)))

    async def read_stream(self, cmd: Command, state: ConnState, conn: Connection | None) -> list[bytes]:
        try:
            topic, key = self._es_topic(cmd)
            from_version = self._version_arg(cmd, "from_version", required=False) or 1
        except Reply as r:  # READ_STREAM errors are a single JSON frame
            code = r.body.decode(errors="replace").removeprefix("ERROR: ")
            return [replies.json_body({"status": "ERROR", "error": code})]
        p = self.events.partition_of(topic, key)
        head: dict[str, object] = {"status": "OK", "topic": topic, "key": key.decode(errors="replace"),
                                   "partition": p}
        snap = self.events.snapshot(topic, key)
        start = from_version
        if snap is not None and snap.version >= from_version:
            start = snap.version + 1
        events = await self.events.events(topic, key, start)
        head["count"] = len(events)
        if snap is not None and snap.version >= from_version:
            head["snapshot"] = {"version": snap.version, "payload": snap.payload}
        out = bytearray()
        for m in events:
            encode_message(m, out)
        first = events[0].seq_num if events else 0
        last = events[-1].seq_num if events else 0
        return [replies.json_body(head), cb.encode_batch(topic, p, bytes(out), len(events), first, last)]

    # -- reading -------------------------------------------------------------------------------

    async def _read_messages(self, topic: str, partition: int, offset: int, limit: int,
                             wait_ms: int) -> tuple[bytes, int, int, int, int]:
        """Up to ``limit`` messages from ``offset``: (message bytes, count, first seq, last seq,
        next offset)."""
        res = await self.broker.fetch(topic, partition, offset, max_bytes=8 << 20, max_records=limit,
                                      max_wait_ms=wait_ms)
        chunks: list[bytes] = []
        count = 0
        first_seq = last_seq = 0
        next_offset = offset
        data = res.data
        for pos, h in iter_batches(data):
            if count >= limit:
                break
            if h.next_offset <= offset:
                continue
            if h.payload_format == FORMAT_CURSUS and h.compression == 0:
                skip = max(0, offset - h.base_offset)
                take = min(h.record_count - skip, limit - count)
                body = pos + HEADER_SIZE
                if skip == 0 and take == h.record_count and 0 <= h.producer_id < h.size - HEADER_SIZE:
                    # The whole stored batch: serve its bytes without walking the messages.
                    chunks.append(bytes(data[body : pos + h.size]))
                    if count == 0:
                        first_seq = _SEQ.unpack_from(data, body + 8)[0]
                    last_seq = _SEQ.unpack_from(data, body + h.producer_id + 8)[0]
                    count += take
                    next_offset = h.next_offset
                    continue
                starts = message_starts(data, body, h.record_count, pos + h.size)
                a, b = starts[skip], starts[skip + take]
                chunks.append(bytes(data[a:b]))
                m_first, _ = decode_message(data, a)
                m_last, _ = decode_message(data, starts[skip + take - 1])
                if count == 0:
                    first_seq = m_first.seq_num
                last_seq = m_last.seq_num
                count += take
                next_offset = h.base_offset + skip + take
                continue
            out = bytearray()
            for rec in await decode_stored(data, pos):
                if rec.offset < offset or count >= limit:
                    continue
                m = record_to_message(rec)
                encode_message(m, out)
                if count == 0:
                    first_seq = m.seq_num
                last_seq = m.seq_num
                count += 1
                next_offset = rec.offset + 1
            chunks.append(bytes(out))
        return b"".join(chunks), count, first_seq, last_seq, next_offset

    def _start_offset(self, topic: str, partition: int, group: str, explicit: int | None,
                      reset: str | None) -> int:
        committed = self.broker.committed_offset(group, topic, partition)
        if committed is not None:
            return committed
        if explicit is not None:
            return explicit
        part = self.broker.partition(topic, partition)
        return part.high_watermark if (reset or "").lower() == "latest" else part.log.log_start_offset

    async def _check_read_target(self, topic: str, partition: int) -> None:
        if not await self.broker.has_topic(topic):
            raise err("command_failed", ("reason", f"topic '{topic}' does not exist"))
        n = self.broker.partition_count(topic)
        if not 0 <= partition < n:
            raise err("command_failed",
                      ("reason", f"partition {partition} out of range for topic '{topic}' (0-{n - 1})"))

    async def consume(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes:
        args = dict(cmd.args)
        pos = self._positional(cmd)
        if pos:  # design doc: CONSUME <topic> <partition> <offset>
            if len(pos) != 3:
                raise err("invalid_consume_syntax")
            args.update(zip(("topic", "partition", "offset"), pos, strict=True))
            args.setdefault("member", "-")
        if not all(args.get(k) for k in ("topic", "partition", "offset", "member")):
            raise err("invalid_consume_syntax")
        topic = args["topic"]
        p = parse_int(args["partition"])
        offset = parse_int(args["offset"])
        if p is None:
            raise err("command_failed", ("reason", f"invalid partition value: {args['partition']}"))
        if offset is None or offset < 0:
            raise err("command_failed", ("reason", f"invalid offset value: {args['offset']}"))
        await self._check_read_target(topic, p)
        group = args.get("group") or DEFAULT_GROUP
        if group == "-":
            group = DEFAULT_GROUP
        limit = parse_int(args.get("batch", "")) or DEFAULT_BATCH
        limit = DEFAULT_BATCH if limit <= 0 else limit
        wait_ms = max(0, min(parse_int(args.get("wait_ms", "0")) or 0, 60_000))
        start = state.positions.get((topic, p))
        if start is None:
            committed = self.broker.committed_offset(group, topic, p)
            # Never behind the client's own position: the published client polls on a new
            # connection each time and commits lazily, so a lower committed offset would hand it
            # records it has already processed.
            start = offset if committed is None else max(committed, offset)
        part = self.broker.partition(topic, p)
        earliest, latest = part.log.log_start_offset, part.high_watermark
        if start < earliest:
            raise err("OFFSET_OUT_OF_RANGE", ("requested", start), ("earliest", earliest),
                      ("latest", latest))
        messages, count, s0, s1, nxt = await self._read_messages(topic, p, start, limit, wait_ms)
        if count:
            state.positions[(topic, p)] = nxt
        return cb.encode_batch(topic, p, messages, count, s0, s1)

    async def stream(self, cmd: Command, state: ConnState, conn: Connection | None) -> bytes | None:
        args = dict(cmd.args)
        pos = self._positional(cmd)
        if pos:  # design doc: STREAM <topic> <partition> <offset>
            if len(pos) != 3:
                raise err("invalid_stream_syntax")
            args.update(zip(("topic", "partition", "offset"), pos, strict=True))
            args.setdefault("group", DEFAULT_GROUP)
        if not all(args.get(k) for k in ("topic", "partition", "group")):
            raise err("invalid_stream_syntax")
        topic, group = args["topic"], args["group"]
        p = parse_int(args["partition"])
        if p is None:
            raise err("command_failed", ("reason", f"invalid partition value: {args['partition']}"))
        await self._check_read_target(topic, p)
        explicit = parse_int(args["offset"]) if args.get("offset") else None
        start = self._start_offset(topic, p, group, explicit, args.get("autoOffsetReset"))
        limit = parse_int(args.get("batch", "")) or DEFAULT_BATCH
        if conn is None:
            raise err("invalid_stream_syntax")
        state.streaming = True
        key = f"{topic}:{p}:{group}"
        old = self.streams.get(key)
        if old is not None:
            old.cancel()
        task = asyncio.current_task()
        assert task is not None
        self.streams[key] = task
        conn.busy -= 1  # a stream is not an in-flight request: shutdown cancels it at once
        try:
            # A group member commits what it processed itself; auto-committing the push position
            # would move the group past records it never handled.
            await self._push(conn, topic, p, group, start, max(1, limit), key,
                             auto_commit=not args.get("member"))
        finally:
            conn.busy += 1
            if self.streams.get(key) is task:
                del self.streams[key]
        return None

    async def _push(self, conn: Connection, topic: str, p: int, group: str, position: int, limit: int,
                    key: str, auto_commit: bool = True) -> None:
        """Push new records as they arrive, keepalives every 5 s, auto-commit every 5 s."""
        loop = asyncio.get_running_loop()
        next_keepalive = loop.time() + STREAM_KEEPALIVE_S
        next_commit = loop.time() + STREAM_COMMIT_S
        committed = position
        eof = loop.create_task(conn.reader.read(1))  # any inbound byte or EOF ends the stream
        reason = "stopped"
        try:
            while not eof.done():
                wait = max(0.0, min(next_keepalive, next_commit) - loop.time())
                try:
                    messages, count, s0, s1, nxt = await self._read_messages(
                        topic, p, position, limit, int(wait * 1000))
                except OffsetOutOfRange:
                    part = self.broker.partition(topic, p)
                    conn.writer.write(encode_frame(
                        f"STREAM_CONTROL type=CLOSE reason=offset_out_of_range offset={position} "
                        f"requested={position} earliest={part.log.log_start_offset} "
                        f"latest={part.high_watermark}".encode()))
                    reason = ""
                    return
                except CorruptStorage:  # the partition is quarantined from ``position`` on
                    reason = replies.ErrorCode.STORAGE_ERROR
                    return
                if count:
                    conn.writer.write(encode_frame(cb.encode_batch(topic, p, messages, count, s0, s1)))
                    position = nxt
                now = loop.time()
                if now >= next_keepalive:
                    conn.writer.write(KEEPALIVE)
                    next_keepalive = now + STREAM_KEEPALIVE_S
                if now >= next_commit and position != committed and auto_commit:
                    committed = await self._auto_commit(group, topic, p, position, committed)
                    next_commit = now + STREAM_COMMIT_S
                elif now >= next_commit:
                    next_commit = now + STREAM_COMMIT_S
                await conn.writer.drain()
        except asyncio.CancelledError:
            reason = "replaced" if self.streams.get(key) is not asyncio.current_task() else "stopped"
            raise
        finally:
            eof.cancel()
            if position != committed and auto_commit:
                with contextlib.suppress(Exception):
                    await self._auto_commit(group, topic, p, position, committed)
            if reason:
                with contextlib.suppress(Exception):
                    conn.writer.write(encode_frame(
                        f"STREAM_CONTROL type=CLOSE reason={reason} offset={position}".encode()))
                    await conn.writer.drain()

    async def _auto_commit(self, group: str, topic: str, p: int, position: int, committed: int) -> int:
        """Commit the stream position for its group (the issue's auto-commit); never backwards."""
        g = self.broker.groups.groups.get(group)
        if g is None or g.topic != topic:
            return committed
        try:
            await self.broker.commit_offset(group, topic, p, position)
        except (OffsetRegression, BayouError):
            return committed
        return position


_SEQ = struct.Struct(">Q")
COMPRESSED_MAGICS = (GZIP_MAGIC, XERIAL_MAGIC, LZ4_MAGIC)  # what maybe_decompress inflates


def _status(offline: str | None) -> dict[str, str]:
    """A partition's ``status`` in DESCRIBE: ``online``, or ``offline`` with the ``reason`` (a
    quarantined partition: damaged data, readable up to it)."""
    return {"status": "online"} if offline is None else {"status": "offline", "reason": offline}


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def cursus_handler(service: CursusService) -> Callable[[Connection, Listener], Awaitable[None]]:
    async def serve(conn: Connection, listener: Listener) -> None:
        state = ConnState()

        async def handle(body: bytes) -> Body:
            try:
                reply = await service.handle(body, state, conn)
            except CursusError as exc:
                if exc.close:
                    raise
                return None if exc.reply is None else encode_frame(exc.reply)
            if reply is None or state.streaming:  # a stream owned the connection until it ended
                return None
            return [encode_frame(r) for r in reply] if isinstance(reply, list) else encode_frame(reply)

        async def refuse(exc: CursusError) -> None:
            if exc.reply is not None:
                conn.writer.write(encode_frame(exc.reply))
                await conn.writer.drain()

        await serve_frames(conn, listener, FrameReader(listener.limits.frame_cap(MAX_FRAME)), handle,
                           error=CursusError, refuse=refuse, done=lambda: state.streaming)
    return serve


__all__ = ["Advertised", "CursusService", "cursus_handler"]
