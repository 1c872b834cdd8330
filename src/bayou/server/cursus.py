"""The Cursus protocol bound to the broker (cursus.md; replies in the current broker's style).

Frames are classified by the sans-IO codec (protocols/cursus) into a binary batch or a text command;
a text command is decoded into a typed request (``protocols/cursus/requests.py``) and dispatched on
its type through one table. Registry errors become replies in one place (``protocols/cursus/codes``).
Batches are stored in their own format (records/cursus.py) so CONSUME and STREAM serve the stored
bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import struct
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bayou.broker import Acks, Broker
from bayou.broker.groups.coordinator import CURSUS_POLICY
from bayou.broker.window import Stored, window
from bayou.errors import (
    BayouError,
    CorruptStorage,
    GroupNotFound,
    GroupTopicMismatch,
    InvalidConfig,
    InvalidTopicName,
    OffsetOutOfRange,
    OffsetRegression,
    OutOfOrderSequence,
    PartitionNotAssigned,
    ProducerFenced,
)
from bayou.protocols.cursus import batch as cb
from bayou.protocols.cursus import replies
from bayou.protocols.cursus import requests as rq
from bayou.protocols.cursus.codes import Scope, error_reply
from bayou.protocols.cursus.commands import Command, classify
from bayou.protocols.cursus.compression import GZIP_MAGIC, LZ4_MAGIC, XERIAL_MAGIC, maybe_decompress
from bayou.protocols.cursus.framing import KEEPALIVE, MAX_FRAME, CursusError, FrameReader, encode_frame
from bayou.protocols.cursus.requests import DEFAULT_GROUP, ErrorReply
from bayou.records.batch import HEADER_SIZE, BatchHeader, Record, assemble_batch, iter_batches
from bayou.records.cursus import (
    FORMAT_CURSUS,
    CursusMessage,
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

log = logging.getLogger("bayou.cursus")

STREAM_KEEPALIVE_S = 5.0
STREAM_COMMIT_S = 5.0
POLICY_FIELDS = (("cleanup_policy", "delete"), ("partitioner", "hash_key"), ("auth_policy", "open"),
                 ("read_acl", ""), ("write_acl", ""))
HELP = ("CREATE,DELETE,LIST,PUBLISH,CONSUME,STREAM,SUBSCRIBE,JOIN_GROUP,SYNC_GROUP,LEAVE_GROUP,HEARTBEAT,"
        "COMMIT,COMMIT_OFFSET,BATCH_COMMIT,FETCH_OFFSET,LIST_OFFSETS,REGISTER_GROUP,GROUP_STATUS,"
        "LIST_GROUPS,DESCRIBE,METADATA,FIND_COORDINATOR,HELP")


Body = bytes | list[bytes] | None  # one reply frame, several (READ_STREAM), or none


def err(code: str, *pairs: tuple[str, object]) -> ErrorReply:
    return ErrorReply(replies.error(code, *pairs))


def _refuse(invalid: bytes | None) -> None:
    """Raise the argument error a request carries (H reports it after its topic checks)."""
    if invalid is not None:
        raise ErrorReply(invalid)


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
        self.table: dict[type[Any], Callable[[Any, ConnState, Connection | None], Awaitable[Body]]] = {
            rq.CreateTopic: self.create,
            rq.DeleteTopic: self.delete,
            rq.ListTopics: self.list_topics,
            rq.Help: self.help,
            rq.Metadata: self.metadata,
            rq.FindCoordinator: self.find_coordinator,
            rq.Describe: self.describe,
            rq.ListOffsets: self.list_offsets,
            rq.Publish: self.publish,
            rq.JoinGroup: self.join_group,
            rq.SyncGroup: self.sync_group,
            rq.Heartbeat: self.heartbeat,
            rq.LeaveGroup: self.leave_group,
            rq.FetchOffset: self.fetch_offset,
            rq.CommitOffset: self.commit_offset,
            rq.BatchCommit: self.batch_commit,
            rq.Consume: self.consume,
            rq.Stream: self.stream,
            rq.Subscribe: self.subscribe,
            rq.RegisterGroup: self.register_group,
            rq.GroupStatus: self.group_status,
            rq.ListGroups: self.list_groups,
            rq.AppendStream: self.append_stream,
            rq.StreamVersion: self.stream_version,
            rq.SaveSnapshot: self.save_snapshot,
            rq.ReadSnapshot: self.read_snapshot,
            rq.ReadStream: self.read_stream,
        }
        self.events = EventStore(broker)

    # -- dispatch ------------------------------------------------------------------------------

    async def handle(self, body: bytes, state: ConnState, conn: Connection | None = None) -> Body:
        """One frame body -> the reply body or bodies (None: no reply). Raises CursusError to close."""
        started = time.perf_counter()
        command, failed = UNKNOWN, True
        try:
            if body.startswith(COMPRESSED_MAGICS):  # inflating is CPU work: off the loop (gzip bombs)
                body = await run_in(inflate_pool(), maybe_decompress, body)
            item = classify(body)
            command = "BATCH" if isinstance(item, cb.BatchHead) else item.name if item.name in rq.DECODERS \
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
            if not rq.served(item):
                return rq.unknown(item)
            if item.name in GROUP_COMMANDS and self.broker.cluster is not None:
                self._check_coordinator(item)
            request = rq.decode(item)
            return await self.table[type(request)](request, state, conn)
        except ErrorReply as r:
            return r.reply
        except CursusError:
            raise
        except BayouError as exc:
            return error_reply(exc)
        except Exception:
            log.exception("Cursus request failed")
            return replies.error("internal_error", ("reason", "internal error"))

    # -- helpers -------------------------------------------------------------------------------

    def _check_coordinator(self, cmd: Command) -> None:
        """Cluster mode: a group's membership lives on its coordinator; elsewhere the distributed
        Cursus broker's ``ERROR: NOT_COORDINATOR host=<h> port=<p>``, on which clients find the
        coordinator again and rejoin there."""
        positional = rq.positional(cmd)  # the seeds' forms: topic, group, ...
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

    async def _topic_exists(self, topic: str) -> None:
        if not await self.broker.has_topic(topic):  # cluster mode: one made elsewhere is waited for
            raise err("topic_not_found", ("topic", topic))

    def _policy_pairs(self, topic: str) -> list[tuple[str, object]]:
        cfg = self.broker.topic_config(topic)
        pairs: list[tuple[str, object]] = [(k, cfg.get(f"cursus.{k}", d)) for k, d in POLICY_FIELDS]
        rms = cfg.get("retention.ms")
        pairs.append(("retention_hours", int(rms) // 3_600_000 if rms and int(rms) > 0 else 0))
        rb = cfg.get("retention.bytes")
        pairs.append(("retention_bytes", int(rb) if rb and int(rb) > 0 else 0))
        return pairs

    # -- topics --------------------------------------------------------------------------------

    async def create(self, req: rq.CreateTopic, state: ConnState, conn: Connection | None) -> bytes:
        topic = req.topic
        try:
            self.broker.check_topic_name(topic)
        except InvalidTopicName:
            raise err("invalid_topic_name", ("topic", replies.Quoted(topic)),
                      ("reason", "use 1-249 of letters, digits, '.', '_', '-', not '.' or '..'")) from None
        _refuse(req.invalid)
        n = req.partitions
        try:  # (cluster mode: ZooKeeper says whether it exists, not a local copy maybe just deleted)
            existing = await self.broker.create_topic(topic, n, dict(req.config), exist_ok=True)
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

    async def delete(self, req: rq.DeleteTopic, state: ConnState, conn: Connection | None) -> bytes:
        await self._topic_exists(req.topic)
        await self.broker.delete_topic(req.topic)
        self.events.forget(req.topic)
        return replies.ok(("topic", req.topic), ("deleted", True))

    async def list_topics(self, req: rq.ListTopics, state: ConnState, conn: Connection | None) -> bytes:
        names = self.broker.visible_topics()
        return replies.ok(("count", len(names)), ("topics", ",".join(names)))

    async def help(self, req: rq.Help, state: ConnState, conn: Connection | None) -> bytes:
        return replies.ok(("commands", HELP))

    async def metadata(self, req: rq.Metadata, state: ConnState, conn: Connection | None) -> bytes:
        topic = req.topic
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

    async def find_coordinator(self, req: rq.FindCoordinator, state: ConnState,
                               conn: Connection | None) -> bytes:
        cluster = self.broker.cluster
        if cluster is not None and req.kind == "group":
            reg = cluster.coordinator_of(req.key, "cursus")
            where = reg.address("cursus") if reg is not None else None
            if reg is None or where is None:
                raise err("coordinator_not_available", ("group", req.key))
            return replies.ok(("coordinator_id", reg.broker_id), ("coordinator_type", req.kind),
                              ("host", where[0]), ("port", where[1]))
        return replies.ok(("coordinator_id", "standalone"), ("coordinator_type", req.kind),
                          ("host", self.advertised.host), ("port", self.advertised.port))

    async def describe(self, req: rq.Describe, state: ConnState, conn: Connection | None) -> bytes:
        topic = req.topic
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
        leader, replicas, isr = self.broker.partition_replicas(topic, partition)
        return {"leader": leader, "replicas": replicas, "isr": isr}

    async def list_offsets(self, req: rq.ListOffsets, state: ConnState, conn: Connection | None) -> bytes:
        await self._topic_exists(req.topic)
        info = self.broker.describe_topic(req.topic)
        _refuse(req.invalid)
        parts = info.partitions
        if req.partition is not None:
            p = req.partition
            if not 0 <= p < len(parts):
                raise err("partition_not_found", ("partition", p))
            parts = (parts[p],)
        offsets = ",".join(f"P{p.partition}:earliest={p.log_start_offset}:latest={p.high_watermark}"
                           f":leo={p.log_end_offset}:hwm={p.high_watermark}" for p in parts)
        return replies.ok(("topic", req.topic), ("partitions", len(info.partitions)), ("offsets", offsets))

    # -- producing -----------------------------------------------------------------------------

    def _acks(self, level: rq.AckLevel) -> Acks:
        # A standalone Cursus broker treats -1/all exactly like 1 (vector 04): on a single node the
        # V1 protocol's follower reports are the only "replicas", and they are not Cursus's. In
        # cluster mode -1/all waits for the in-sync replicas (or answers the timeout error).
        if level is rq.AckLevel.NONE:
            return Acks.NONE
        if level is rq.AckLevel.ALL and self.broker.cluster is not None:
            return Acks.ALL
        return Acks.LEADER

    async def _append_messages(self, topic: str, partition: int, body: bytes | bytearray,
                               starts: list[int], acks: Acks) -> int:
        """Store message records ``body[starts[0]:starts[-1]]``; returns the partition's last offset.
        On an idempotent topic only the messages the producer rules keep are stored (the broker's
        idempotence, broker/idempotence.py)."""
        if self.broker.topic_flag(topic, "idempotent"):
            producers = []
            for s in starts[:-1]:
                m, _ = decode_message(body, s)
                producers.append((m.producer_id, m.epoch, m.seq_num))

            def build(keep: list[bool]) -> tuple[bytes, Callable[[bytearray, int], None]]:
                if all(keep):
                    return _message_batch(body, starts)
                kept = [(starts[i], starts[i + 1]) for i, k in enumerate(keep) if k]
                rel = [0]
                for a, b in kept:
                    rel.append(rel[-1] + (b - a))
                return _message_batch(b"".join(bytes(body[a:b]) for a, b in kept), rel)

            await self.broker.produce_idempotent(topic, partition, producers, build, acks)
        else:
            batch, stamp = _message_batch(body, starts)
            await self.broker.produce(topic, partition, batch, acks, stamp=stamp, create=False)
        return self.broker.partition(topic, partition).log.next_offset - 1

    async def produce_batch(self, body: bytes, head: cb.BatchHead) -> bytes:
        level = rq.parse_acks(head.acks)
        if level is None:
            raise err("invalid_acks", ("value", head.acks))
        acks = self._acks(level)
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

    async def publish(self, req: rq.Publish, state: ConnState, conn: Connection | None) -> bytes:
        topic = req.topic
        acks = self._acks(req.acks)
        await self._topic_exists(topic)
        n = self.broker.partition_count(topic)
        _refuse(req.invalid)
        if req.partition is not None:
            p = req.partition
            if not 0 <= p < n:
                raise err("partition_not_found", ("partition", p))
        elif req.key and self.broker.topic_config(topic).get("cursus.partitioner") != "round_robin":
            p = fnv1a_32(req.key.encode()) % n
        else:
            p = self.broker.next_round_robin(topic, n)
        out = bytearray()
        encode_message(CursusMessage(req.message.encode(), 0, req.seq_num, req.producer_id.encode(),
                                     req.key.encode(), req.epoch), out)
        last = await self._append_messages(topic, p, out, [0, len(out)], acks)
        return replies.json_ack(last, req.epoch, req.producer_id, req.seq_num, req.seq_num)

    # -- groups --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _group_errors(self, group: str, member: str = "", generation: int | None = None,
                      partition: int | None = None, batch: Iterable[int] = ()) -> Iterator[None]:
        """Answer a registry error of a group request through the one table, naming the request
        (for NOT_OWNER: ``partition``, or the first of ``batch`` the member does not own)."""
        try:
            yield
        except BayouError as exc:
            if isinstance(exc, PartitionNotAssigned) and partition is None:
                owned = self.broker.group_assignment(group, member)
                partition = next((p for p in batch if p not in owned), None)
            scope = Scope(group, member, generation, self.broker.group_generation(group), partition)
            raise ErrorReply(error_reply(exc, scope)) from None

    def _group_for(self, group: str, topic: str) -> None:
        """The group exists and is bound to ``topic`` (checked before reading or committing)."""
        bound = self.broker.group_topic(group)
        if bound is None:
            raise GroupNotFound()
        if bound != topic:
            raise GroupTopicMismatch(bound, topic)

    async def join_group(self, req: rq.JoinGroup, state: ConnState, conn: Connection | None) -> bytes:
        topic, group, member = req.topic, req.group, req.member
        await self._topic_exists(topic)
        _refuse(req.invalid)
        with self._group_errors(group, member, req.generation):
            if req.generation is not None:
                view = await self.broker.resume_group(group, topic, member, req.generation)
                return replies.ok(("generation", view.generation), ("member", member),
                                  ("assignments", list(view.assignment)), ("resumed", True))
            members = self.broker.group_members(group)
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
        return replies.ok(("generation", view.generation), ("member", member_id),
                          ("assignments", list(view.assignment)))

    async def sync_group(self, req: rq.SyncGroup, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group, req.member, req.generation):
            view = await self.broker.sync_group(req.group, req.topic, req.member, req.generation)
        return replies.ok(("generation", view.generation), ("member", req.member),
                          ("assignments", list(view.assignment)))

    async def heartbeat(self, req: rq.Heartbeat, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group, req.member, req.generation):
            await self.broker.heartbeat(req.group, req.topic, req.member, req.generation)
        return replies.ok(("member", req.member), ("generation", req.generation))

    async def leave_group(self, req: rq.LeaveGroup, state: ConnState, conn: Connection | None) -> bytes:
        # Without generation= the leave is unconditional (cursus.md decision 2: the Python and
        # Java clients never send one).
        with self._group_errors(req.group, req.member, req.generation):
            await self.broker.leave_group(req.group, req.topic, req.member, req.generation)
        return replies.ok(("group", req.group), ("member", req.member), ("left", True))

    async def fetch_offset(self, req: rq.FetchOffset, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group):
            self._group_for(req.group, req.topic)
            off = self.broker.committed_offset(req.group, req.topic, req.partition)
        return replies.ok(("offset", off if off is not None else 0))

    async def commit_offset(self, req: rq.CommitOffset, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group, req.member or "", req.generation, req.partition):
            self._group_for(req.group, req.topic)
            await self.broker.commit_offset(req.group, req.topic, req.partition, req.offset,
                                            member=req.member, generation=req.generation)
        return replies.ok()

    async def batch_commit(self, req: rq.BatchCommit, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group, req.member, req.generation, batch=req.offsets):
            self._group_for(req.group, req.topic)
            await self.broker.commit_offsets(req.group, req.topic, dict(req.offsets), member=req.member,
                                             generation=req.generation)
        return replies.ok(("batched", len(req.offsets)))

    async def register_group(self, req: rq.RegisterGroup, state: ConnState, conn: Connection | None) -> bytes:
        topic, group = req.topic, req.group
        await self._topic_exists(topic)
        d = await self.broker.register_group(group, topic, CURSUS_POLICY, "range")
        if d.topic != topic:
            raise err("register_group_failed", ("reason", f"group {group} is bound to topic {d.topic}"))
        return replies.ok(("group", group), ("topic", topic), ("registered", True))

    async def subscribe(self, req: rq.Subscribe, state: ConnState, conn: Connection | None) -> bytes:
        await self._topic_exists(req.topic)
        d = await self.broker.register_group(req.group, req.topic, CURSUS_POLICY, "range")
        if d.topic != req.topic:
            raise err("topic_not_assigned_to_group", ("expected", d.topic), ("actual", req.topic))
        return replies.ok(("topic", req.topic), ("group", req.group), ("subscribed", True))

    async def group_status(self, req: rq.GroupStatus, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group):
            d = self.broker.describe_group(req.group)
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

    async def list_groups(self, req: rq.ListGroups, state: ConnState, conn: Connection | None) -> bytes:
        names = self.broker.list_groups()
        return replies.ok(("count", len(names)), ("groups", ",".join(names)))

    # -- event sourcing ------------------------------------------------------------------------

    def _event_topic(self, topic: str) -> None:
        if topic not in self.broker.topics:
            raise err("topic_not_found", ("topic", topic))
        if not self.broker.topic_flag(topic, "event.sourcing"):
            raise err("event_sourcing_not_enabled", ("topic", topic))

    async def append_stream(self, req: rq.AppendStream, state: ConnState, conn: Connection | None) -> bytes:
        self._event_topic(req.topic)
        _refuse(req.invalid)
        try:
            offset, p = await self.events.append(
                req.topic, req.key, req.version, req.message.encode(), req.event_type.encode(),
                req.schema_version, req.metadata.encode(), req.producer_id.encode())
        except VersionConflict as exc:
            raise err("version_conflict", ("current", exc.current), ("expected", exc.expected)) from None
        return replies.ok(("version", req.version), ("offset", offset), ("partition", p))

    async def stream_version(self, req: rq.StreamVersion, state: ConnState, conn: Connection | None) -> bytes:
        self._event_topic(req.topic)
        return replies.ok(("version", await self.events.version(req.topic, req.key)))

    async def save_snapshot(self, req: rq.SaveSnapshot, state: ConnState, conn: Connection | None) -> bytes:
        self._event_topic(req.topic)
        _refuse(req.invalid)
        try:
            p = await self.events.save_snapshot(req.topic, req.key, req.version, req.message)
        except SnapshotAhead as exc:
            raise err("snapshot_version_exceeds_stream", ("version", exc.version),
                      ("current", exc.current)) from None
        return replies.ok(("version", req.version), ("partition", p))

    async def read_snapshot(self, req: rq.ReadSnapshot, state: ConnState, conn: Connection | None) -> bytes:
        self._event_topic(req.topic)
        snap = self.events.snapshot(req.topic, req.key)
        if snap is None:
            return replies.ok(("snapshot", replies.Raw("null")))
        body = replies.json_body({"version": snap.version, "payload": snap.payload}).decode()
        return replies.ok(("snapshot", replies.Raw(body)))

    async def read_stream(self, req: rq.ReadStream, state: ConnState, conn: Connection | None) -> list[bytes]:
        topic, key, from_version = req.topic, req.key, req.from_version
        try:  # READ_STREAM errors are a single JSON frame
            self._event_topic(topic)
        except ErrorReply as r:
            assert isinstance(r.reply, bytes)
            return [rq.json_error(r.reply)]
        if req.invalid is not None:
            return [req.invalid]
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
        if limit <= 0:
            return b"", count, first_seq, last_seq, next_offset

        async def decode(pos: int, _h: BatchHeader) -> list[Record]:
            return await decode_stored(data, pos)

        async for piece in window(iter_batches(data), FORMAT_CURSUS, offset, decode):
            if isinstance(piece, Stored):
                pos, h = piece.pos, piece.header
                skip = piece.lo - h.base_offset
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
                else:
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
            else:
                out = bytearray()
                for rec in piece.records[:limit - count]:
                    m = record_to_message(rec)
                    encode_message(m, out)
                    if count == 0:
                        first_seq = m.seq_num
                    last_seq = m.seq_num
                    count += 1
                    next_offset = rec.offset + 1
                chunks.append(bytes(out))
            if count >= limit:
                break
        return b"".join(chunks), count, first_seq, last_seq, next_offset

    def _start_offset(self, topic: str, partition: int, group: str, explicit: int | None,
                      reset: str | None) -> int:
        committed = self.broker.committed_offset(group, topic, partition)
        if committed is not None:
            return committed
        if explicit is not None:
            return explicit
        earliest, latest = self.broker.partition_bounds(topic, partition)
        return latest if (reset or "").lower() == "latest" else earliest

    async def _check_read_target(self, topic: str, partition: int) -> None:
        if not await self.broker.has_topic(topic):
            raise err("command_failed", ("reason", f"topic '{topic}' does not exist"))
        n = self.broker.partition_count(topic)
        if not 0 <= partition < n:
            raise err("command_failed",
                      ("reason", f"partition {partition} out of range for topic '{topic}' (0-{n - 1})"))

    async def consume(self, req: rq.Consume, state: ConnState, conn: Connection | None) -> bytes:
        topic, p = req.topic, req.partition
        await self._check_read_target(topic, p)
        start = state.positions.get((topic, p))
        if start is None:
            committed = self.broker.committed_offset(req.group, topic, p)
            # Never behind the client's own position: the published client polls on a new
            # connection each time and commits lazily, so a lower committed offset would hand it
            # records it has already processed.
            start = req.offset if committed is None else max(committed, req.offset)
        try:
            messages, count, s0, s1, nxt = await self._read_messages(topic, p, start, req.batch, req.wait_ms)
        except OffsetOutOfRange:  # below the start, also when retention moved it during the read
            earliest, latest = self.broker.partition_bounds(topic, p)
            raise err("OFFSET_OUT_OF_RANGE", ("requested", start), ("earliest", earliest),
                      ("latest", latest)) from None
        if count:
            state.positions[(topic, p)] = nxt
        return cb.encode_batch(topic, p, messages, count, s0, s1)

    async def stream(self, req: rq.Stream, state: ConnState, conn: Connection | None) -> bytes | None:
        topic, p, group = req.topic, req.partition, req.group
        await self._check_read_target(topic, p)
        start = self._start_offset(topic, p, group, req.offset, req.auto_offset_reset)
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
            await self._push(conn, topic, p, group, start, max(1, req.batch), key,
                             auto_commit=not req.member)
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
                    earliest, latest = self.broker.partition_bounds(topic, p)
                    conn.writer.write(encode_frame(
                        f"STREAM_CONTROL type=CLOSE reason=offset_out_of_range offset={position} "
                        f"requested={position} earliest={earliest} latest={latest}".encode()))
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
        if self.broker.group_topic(group) != topic:
            return committed
        try:
            await self.broker.commit_offset(group, topic, p, position)
        except (OffsetRegression, BayouError):
            return committed
        return position


_SEQ = struct.Struct(">Q")
COMPRESSED_MAGICS = (GZIP_MAGIC, XERIAL_MAGIC, LZ4_MAGIC)  # what maybe_decompress inflates


def _message_batch(body: bytes | bytearray, starts: list[int]
                   ) -> tuple[bytes, Callable[[bytearray, int], None]]:
    """The stored batch of message records ``body[starts[0]:starts[-1]]`` and the stamp that
    writes their offsets once the broker assigns them."""
    now = int(time.time() * 1000)
    batch = assemble_batch(bytes(body[starts[0]:starts[-1]]), record_count=len(starts) - 1, base_offset=0,
                           attributes=FORMAT_CURSUS << 8, base_timestamp=now, max_timestamp=now,
                           producer_id=starts[-2] - starts[0])  # LAST_MESSAGE_AT, records/cursus.py
    shift = HEADER_SIZE - starts[0]
    positions = [s + shift for s in starts]

    def stamp(buf: bytearray, base: int) -> None:
        stamp_offsets(buf, positions, base)

    return batch, stamp


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
