"""What an operator asks of a broker beyond the protocols' calls: the admin API's broker side.

The HTTP admin API (server/http/api*.py) and the CLI need views no wire protocol has: every
group with its lag, a topic's replicas as the cluster places them, the newest records of a
partition decoded whatever protocol wrote them, a group's offsets moved the way Kafka's
``kafka-consumer-groups --reset-offsets`` moves them. Each is a function of a ``Broker`` here, built
on the broker's own calls, so the same authorizer checks apply (the principal of the request being
served: broker/authz.py) and nothing here reaches below the broker into storage.

Reads of records go through ``Broker.fetch`` (a worker thread) and are decoded in a worker thread
too: a browse of 500 compressed records never holds the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bayou.broker.broker import Acks, Broker, ProduceResult
from bayou.broker.groups.coordinator import GroupDescription
from bayou.errors import BayouError, GroupNotFound, InvalidRequest, OffsetOutOfRange, UnknownPartition
from bayou.records.batch import decode_records, encode_batch, iter_batches
from bayou.records.model import Headers, Record

MAX_BROWSE = 500  # records one browse returns at most
_BROWSE_FETCH_BYTES = 1 << 20
_BROWSE_MAX_FETCHES = 16  # a browse over tiny batches stops after this many reads
ResetTarget = Literal["earliest", "latest", "offset", "timestamp"]
RESET_TARGETS: tuple[ResetTarget, ...] = ("earliest", "latest", "offset", "timestamp")


class GroupNotEmpty(BayouError):
    """A group with members cannot have its offsets reset or be deleted (Kafka's GROUP_NOT_EMPTY):
    its consumers would overwrite the change with their next commit. Not in the wire registry:
    only the admin API raises it."""

    code = "GROUP_NOT_EMPTY"
    default_message = "the group has active members"


# -- cluster and placement --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerView:
    id: int
    host: str
    endpoints: dict[str, int]
    leaving: bool = False


@dataclass(frozen=True, slots=True)
class ClusterView:
    mode: Literal["single", "cluster"]
    broker_id: int
    controller: int | None
    brokers: tuple[BrokerView, ...]
    topics: int
    partitions: int
    under_replicated: int
    offline: int


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a partition lives: its leader (-1: none), assigned replicas and in-sync replicas."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return self.leader >= 0 and len(self.isr) < len(self.replicas)


def placement(broker: Broker, topic: str, partition: int) -> Placement:
    """A partition's leader and replicas: ZooKeeper's view in cluster mode, the single node's own
    metadata otherwise (it leads everything it holds)."""
    node = broker.cluster
    if node is not None:
        snap = node.snapshot
        if snap is not None:
            assignment = snap.topics.get(topic)
            replicas = tuple(assignment.partitions.get(partition, ())) if assignment is not None else ()
            entry = snap.states.get((topic, partition))
            if entry is not None:
                return Placement(entry[0].leader, replicas, tuple(entry[0].isr))
            return Placement(-1, replicas, ())
        return Placement(-1, (), ())
    me = broker.config.broker_id
    meta = broker.metadata.partitions.get((topic, partition))
    if meta is None:
        return Placement(me, (me,), (me,))
    isr = tuple(meta.isr) or (meta.leader,)
    return Placement(meta.leader, tuple(sorted({meta.leader, *isr})), isr)


def cluster_view(broker: Broker, endpoints: dict[str, int], host: str) -> ClusterView:
    """The brokers, the controller and partition health. ``endpoints``/``host``: this broker's own
    listeners, for single mode (a cluster's brokers publish theirs in ZooKeeper)."""
    node = broker.cluster
    me = broker.config.broker_id
    names = broker.visible_topics()
    places = [placement(broker, t, p) for t in names for p in range(len(broker.topics[t].partitions))
              if t in broker.topics]
    under = sum(1 for pl in places if pl.under_replicated)
    offline = sum(1 for pl in places if pl.leader < 0)
    if node is None:
        return ClusterView("single", me, me, (BrokerView(me, host, dict(endpoints)),), len(names),
                           len(places), under, offline)
    snap = node.snapshot
    brokers = tuple(BrokerView(reg.broker_id, reg.host, dict(reg.endpoints), reg.leaving)
                    for _id, reg in sorted((snap.brokers if snap is not None else {}).items()))
    return ClusterView("cluster", me, snap.controller if snap is not None else None, brokers, len(names),
                       len(places), under, offline)


# -- records ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Browse:
    records: tuple[Record, ...]
    log_start_offset: int
    high_watermark: int
    next_offset: int  # where the next page starts


def _decode(data: bytes, start: int, limit: int) -> list[Record]:
    out: list[Record] = []
    for pos, _h in iter_batches(data):
        for rec in decode_records(data, pos):
            if rec.offset >= start:
                out.append(rec)
                if len(out) >= limit:
                    return out
    return out


async def browse(broker: Broker, topic: str, partition: int, *, offset: int | None = None,
                 timestamp: int | None = None, limit: int = 50) -> Browse:
    """Up to ``limit`` records of a partition from ``offset`` (clamped to the log start), or from
    the first record at or after ``timestamp`` (ms), or else the newest ``limit``."""
    if not 1 <= limit <= MAX_BROWSE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_BROWSE}")
    if offset is not None and offset < 0:
        raise InvalidRequest("offset must not be negative")
    part = await broker.ready_partition(topic, partition)
    broker.check_readable(topic, partition)
    start_of_log, hw = part.log.log_start_offset, part.high_watermark
    if timestamp is not None:
        found = await broker.offset_for_timestamp(topic, partition, timestamp)
        start = hw if found is None else found
    elif offset is not None:
        start = offset
    else:
        start = hw - limit
    start = max(start, start_of_log)
    records: list[Record] = []
    position = start
    loop = asyncio.get_running_loop()
    for _ in range(_BROWSE_MAX_FETCHES):
        if len(records) >= limit or position >= hw:
            break
        try:
            r = await broker.fetch(topic, partition, position, max_bytes=_BROWSE_FETCH_BYTES,
                                   max_records=limit - len(records))
        except OffsetOutOfRange:  # retention removed it meanwhile: from the new start
            position = max(position, part.log.log_start_offset)
            continue
        if not r.data:
            break
        got = await loop.run_in_executor(None, _decode, r.data, position, limit - len(records))
        records.extend(got)
        hw = r.high_watermark
        position = max(r.next_offset, got[-1].offset + 1 if got else position + 1)
    next_offset = records[-1].offset + 1 if records else max(start, min(position, hw))
    return Browse(tuple(records), part.log.log_start_offset, hw, next_offset)


async def produce_one(broker: Broker, topic: str, partition: int, value: bytes, key: bytes | None = None,
                      headers: Headers = ()) -> ProduceResult:
    """One record (a test message) appended to an existing partition, acknowledged by the leader."""
    record = Record(value, key, int(time.time() * 1000), headers)
    return await broker.produce(topic, partition, encode_batch([record]), Acks.LEADER, create=False)


# -- consumer groups --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None  # the next offset the group reads; None: nothing committed
    log_start_offset: int | None  # None: the partition is gone (the offset outlived it)
    high_watermark: int | None
    lag: int | None
    member: str | None  # who it is assigned to now


@dataclass(frozen=True, slots=True)
class GroupLag:
    name: str
    description: GroupDescription | None  # None: only committed offsets (no membership kept)
    partitions: tuple[PartitionLag, ...]

    @property
    def state(self) -> str:
        return "offsets-only" if self.description is None else self.description.state

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def active_members(self) -> int:
        return 0 if self.description is None else len(self.description.members)


Committed = dict[tuple[str, int], int]


def offsets_by_group(broker: Broker) -> dict[str, Committed]:
    """Every committed offset, grouped by group in one pass (a listing of N groups must not scan
    all offsets N times on the event loop)."""
    out: dict[str, Committed] = {}
    for (g, t, p), off in broker.groups.offsets.items():
        out.setdefault(g, {})[(t, p)] = off
    return out


def group_names(broker: Broker, index: dict[str, Committed] | None = None) -> list[str]:
    """Every group the caller may see: those with a membership record and those that only
    committed offsets (Iggy consumers, V1 commits without a join). ``index``: offsets_by_group."""
    index = offsets_by_group(broker) if index is None else index
    seen = set(broker.groups.list_groups()) | set(index)
    visible = set(broker.list_groups())
    for name in seen - set(broker.groups.groups):  # offsets only: visible if every topic is
        topics = {t for t, _p in index.get(name, {})}
        if len(broker.visible_topics_of(topics)) == len(topics):
            visible.add(name)
    return sorted(visible)


async def group_lag(broker: Broker, group: str, index: dict[str, Committed] | None = None) -> GroupLag:
    """A group's members, assignment, committed offsets and lag per partition (the high watermark
    minus the committed offset, or minus the log start when the offset fell below it).
    ``index``: offsets_by_group, when listing many groups."""
    description: GroupDescription | None = None
    if group in broker.groups.groups:
        broker.describe_group(group)  # the authorization check
        description = await broker.current_group(group)
    committed = broker.groups.offsets.of_group(group) if index is None else dict(index.get(group, {}))
    if description is None and not committed:
        raise GroupNotFound(f"no group {group}")
    for topic in sorted({t for t, _p in committed}):
        broker.authorizer.check_topic("poll", topic)
    owner: dict[int, str] = {}
    keys = set(committed)
    if description is not None:
        for member_id, _seen, parts in description.members:
            for p in parts:
                owner[p] = member_id
        t = broker.topics.get(description.topic)
        if t is not None:
            keys |= {(description.topic, p) for p in range(len(t.partitions))}
    rows: list[PartitionLag] = []
    for topic, p in sorted(keys):
        off = committed.get((topic, p))
        t = broker.topics.get(topic)
        mine = description is not None and topic == description.topic
        member = owner.get(p) if mine else None
        if t is None or p >= len(t.partitions):
            rows.append(PartitionLag(topic, p, off, None, None, None, member))
            continue
        part = t.partitions[p]
        start, hw = part.log.log_start_offset, part.high_watermark
        lag = None if off is None else max(0, hw - max(off, start))
        rows.append(PartitionLag(topic, p, off, start, hw, lag, member))
    return GroupLag(group, description, tuple(rows))


@dataclass(frozen=True, slots=True)
class OffsetChange:
    partition: int
    before: int | None
    after: int


async def reset_offsets(broker: Broker, group: str, topic: str, to: ResetTarget, value: int | None = None,
                        *, partitions: Sequence[int] | None = None, dry_run: bool = False
                        ) -> list[OffsetChange]:
    """Move a group's committed offsets on ``topic`` (every partition, or ``partitions``) to the log
    start, the high watermark, an offset (clamped into the log, as Kafka does) or the first record
    at or after a timestamp (ms; the high watermark when there is none). Refused while the group
    has members. Needs manage rights on the topic: it rewrites what its consumers will read."""
    if to not in RESET_TARGETS:
        raise InvalidRequest(f"to must be one of {', '.join(RESET_TARGETS)}")
    if to in ("offset", "timestamp") and value is None:
        raise InvalidRequest(f"resetting to {to} needs a value")
    broker.authorize("manage_topics", topic)
    t = await broker.ready_topic(topic)
    count = len(t.partitions)
    chosen = list(range(count)) if partitions is None else sorted(set(partitions))
    for p in chosen:
        if not 0 <= p < count:
            raise UnknownPartition(f"topic {topic} has no partition {p}")
    if group in broker.groups.groups:
        desc = await broker.current_group(group)
        if desc.members:
            raise GroupNotEmpty(f"group {group} has {len(desc.members)} active members: stop its "
                                "consumers before resetting its offsets")
    changes: list[OffsetChange] = []
    for p in chosen:
        part = t.partitions[p]
        start, hw = part.log.log_start_offset, part.high_watermark
        if to == "earliest":
            target = start
        elif to == "latest":
            target = hw
        elif to == "offset":
            assert value is not None
            target = min(max(value, start), hw)
        else:
            assert value is not None
            found = await broker.offset_for_timestamp(topic, p, value)
            target = hw if found is None else max(found, start)
        changes.append(OffsetChange(p, await broker.current_committed_offset(group, topic, p), target))
    if not dry_run:
        for c in changes:
            if c.before is not None and c.after < c.before:  # a monotonic group refuses a move back
                await broker.delete_committed_offset(group, topic, c.partition)
            await broker.commit_offset(group, topic, c.partition, c.after)
    return changes


async def delete_group(broker: Broker, group: str) -> None:
    """Remove a group and its committed offsets; refused while it has members (Kafka's rule)."""
    lag = await group_lag(broker, group)
    if lag.active_members:
        raise GroupNotEmpty(f"group {group} has {lag.active_members} active members")
    for topic in sorted({p.topic for p in lag.partitions}):
        broker.authorize("manage_topics", topic)
    await broker.delete_group(group)


__all__ = ["MAX_BROWSE", "RESET_TARGETS", "Browse", "ClusterView", "GroupLag", "GroupNotEmpty",
           "OffsetChange", "PartitionLag", "Placement", "browse", "cluster_view", "delete_group",
           "group_lag", "group_names", "placement", "produce_one", "reset_offsets"]
