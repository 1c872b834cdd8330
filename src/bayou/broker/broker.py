"""The one async API every protocol front end calls: the composition root of the broker's parts
and the facade over them.

Each concern is a part of its own, with the one place to change it: topic lifecycle and configs
(topics.py), the produce path (produce.py), the fetch path and long poll (fetch.py), consumer
groups and committed offsets (consumers.py), the V1 role commands (roles.py), and start, stop and
background work (lifecycle.py). They share one ``BrokerContext`` (context.py: the topics, the
storage, the group table, the I/O pool, and the single-node-or-cluster choices of
broker/coordination.py). ``Broker`` builds them and forwards each call; the front ends see only
this class.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bayou.broker.authz import Action
from bayou.broker.consumers import ConsumerGroups
from bayou.broker.context import BrokerContext
from bayou.broker.coordination import Cluster, LocalMetadataStore, MetadataStore, ReplicaState
from bayou.broker.fetch import FetchPath
from bayou.broker.groups.coordinator import RTES_POLICY, GroupDescription, GroupPolicy, GroupView
from bayou.broker.idempotence import IdRun
from bayou.broker.lifecycle import Lifecycle
from bayou.broker.model import (
    Acks,
    FetchResult,
    ProduceResult,
    ReplicaReport,
    Topic,
    TopicInfo,
)
from bayou.broker.partition import Partition
from bayou.broker.produce import ProducePath, Stamp
from bayou.broker.roles import ReplicaRoles
from bayou.broker.settings import BrokerConfig
from bayou.broker.topics import TOPIC_KEYS, TopicAdmin
from bayou.broker.transactions import Transactions
from bayou.broker.views import Endpoint, Here, LogTotals, SharedDocuments
from bayou.errors import BayouError, Unauthorized
from bayou.records.formats import ProducerSequence
from bayou.stats import Recovery
from bayou.storage import FileSpan, PartitionLog, validate_topic_name
from bayou.storage.config import TOPIC_CONFIG_KEYS


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        # Built standalone (broker/coordination.py): topic changes, high watermarks, leadership
        # and committed offsets are this broker's own. In cluster mode broker/cluster/node.py
        # replaces the metadata store and the replica state and sets ``cluster`` (the topology
        # and group store follow) when it is built, before the first request.
        self.ctx = ctx = BrokerContext(config, LocalMetadataStore(self))
        self.config = config
        self.store = ctx.store
        self.topics = ctx.topics
        self.authorizer = ctx.authorizer
        self.metadata = ctx.metadata
        self.groups = ctx.groups
        self.topic_admin = TopicAdmin(ctx)
        self.produce_path = ProducePath(ctx, self.topic_admin)
        self.fetch_path = FetchPath(ctx)
        self.roles = ReplicaRoles(ctx, self.topic_admin)
        self.consumers = ConsumerGroups(ctx)
        self.lifecycle = Lifecycle(ctx, self.consumers)
        # Kafka's transaction coordinator and each partition's open and aborted transactions
        self.transactions = Transactions(ctx, self.produce_path, self._commit_txn_offsets)
        # Kafka's classic groups: membership of their own (a leader-run assignor), offsets in
        # ``groups.offsets`` with every other protocol's (broker/groups/classic.py)
        self.classic_groups = ctx.classic_groups

    # -- the shared state's switches (context.py) ----------------------------------------------

    @property
    def cluster(self) -> Cluster | None:
        """Cluster mode as the broker and the front ends see it; None on a single node."""
        return self.ctx.cluster

    @cluster.setter
    def cluster(self, cluster: Cluster | None) -> None:
        """Join ``cluster``: its topology and group store from now on (context.py)."""
        self.ctx.join_cluster(cluster)

    @property
    def metadata_store(self) -> MetadataStore:
        return self.ctx.metadata_store

    @metadata_store.setter
    def metadata_store(self, store: MetadataStore) -> None:
        self.ctx.metadata_store = store

    @property
    def replica_state(self) -> ReplicaState:
        return self.ctx.replica_state

    @replica_state.setter
    def replica_state(self, state: ReplicaState) -> None:
        self.ctx.replica_state = state

    @property
    def closing(self) -> bool:
        return self.ctx.closing

    @property
    def started(self) -> bool:
        return self.lifecycle.started

    @property
    def recovery(self) -> Recovery:
        """The start-up load's progress (/metrics, /ready)."""
        return self.lifecycle.recovery

    @property
    def _io(self) -> ThreadPoolExecutor:
        """The storage worker pool (the cluster node runs its log changes and kazoo calls there)."""
        return self.ctx.io

    @property
    def _tasks(self) -> list[asyncio.Task[None]]:
        return self.lifecycle.tasks

    # -- start, stop, background work (lifecycle.py) -------------------------------------------

    async def start(self) -> None:
        await self.lifecycle.start()
        self.lifecycle.tasks.extend(await self.transactions.start())

    async def stop(self) -> None:
        await self.lifecycle.stop()

    async def run_retention(self, loop: asyncio.AbstractEventLoop | None = None) -> int:
        return await self.lifecycle.run_retention(loop)

    def stats(self) -> dict[str, Any]:
        return {
            "topics": len(self.topics),
            "partitions": sum(len(t.partitions) for t in self.topics.values()),
            "groups": len(self.groups.groups),
        }

    # -- topic lookups, authorization (context.py) ---------------------------------------------

    def partition_count(self, topic: str) -> int:
        return self.ctx.partition_count(topic)

    def topic_flag(self, topic: str, key: str) -> bool:
        return self.ctx.topic_flag(topic, key)

    def min_insync_replicas(self, topic: str) -> int:
        return self.ctx.min_insync_replicas(topic)

    def topic(self, name: str) -> Topic:
        return self.ctx.topic(name)

    def partition(self, topic: str, partition: int) -> Partition:
        return self.ctx.partition(topic, partition)

    async def ready_topic(self, name: str, partition: int = 0) -> Topic:
        return await self.ctx.ready_topic(name, partition)

    async def has_topic(self, name: str) -> bool:
        return await self.ctx.has_topic(name)

    async def ready_partition(self, topic: str, partition: int) -> Partition:
        return await self.ctx.ready_partition(topic, partition)

    def visible_topics_of(self, names: Iterable[str]) -> list[str]:
        return self.ctx.visible_topics_of(names)

    def authorize(self, action: Action, topic: str) -> None:
        self.ctx.authorize(action, topic)

    # -- topic lifecycle and configs (topics.py) -----------------------------------------------

    async def create_topic(self, name: str, partitions: int | None = None,
                           config: dict[str, str] | None = None, *, exist_ok: bool = False) -> Topic:
        return await self.topic_admin.create_topic(name, partitions, config, exist_ok=exist_ok)

    async def open_topic(self, name: str, partitions: int, config: dict[str, str], *,
                         exist_ok: bool = False, limited: bool = False) -> Topic:
        return await self.topic_admin.open_topic(name, partitions, config, exist_ok=exist_ok, limited=limited)

    def partition_total(self) -> int:
        return self.topic_admin.partition_total()

    async def ensure_topic(self, name: str) -> Topic:
        return await self.topic_admin.ensure_topic(name)

    def list_topics(self) -> list[str]:
        return self.topic_admin.list_topics()

    def visible_topics(self) -> list[str]:
        return self.topic_admin.visible_topics()

    def check_describe(self, name: str) -> None:
        self.topic_admin.check_describe(name)

    def describe_topic(self, name: str) -> TopicInfo:
        return self.topic_admin.describe_topic(name)

    async def delete_topic(self, name: str) -> None:
        await self.topic_admin.delete_topic(name)

    async def drop_topic(self, name: str) -> None:
        await self.topic_admin.drop_topic(name)

    async def add_partitions(self, name: str, total: int) -> Topic:
        return await self.topic_admin.add_partitions(name, total)

    async def grow_partitions(self, name: str, more: int) -> Topic:
        return await self.topic_admin.grow_partitions(name, more)

    async def grow_topic(self, name: str, total: int, *, limited: bool = False) -> Topic:
        return await self.topic_admin.grow_topic(name, total, limited=limited)

    async def remove_partitions(self, name: str, count: int) -> Topic:
        return await self.topic_admin.remove_partitions(name, count)

    async def shrink_topic(self, name: str, count: int) -> Topic:
        return await self.topic_admin.shrink_topic(name, count)

    async def purge_topic(self, name: str) -> None:
        await self.topic_admin.purge_topic(name)

    async def delete_segments(self, topic: str, partition: int, count: int) -> int:
        return await self.topic_admin.delete_segments(topic, partition, count)

    async def alter_topic_config(self, name: str, changes: dict[str, str | None]) -> dict[str, str]:
        return await self.topic_admin.alter_topic_config(name, changes)

    # -- produce (produce.py) ------------------------------------------------------------------

    def produce(self, topic: str, partition: int, batch: bytes | bytearray,
                acks: Acks = Acks.LEADER, *,
                stamp: Callable[[bytearray, int], None] | None = None,
                create: bool = True, at_offset: int | None = None,
                forward: bool = False) -> Coroutine[Any, Any, ProduceResult]:
        # the path's own coroutine, not one around it: a produce request is where the broker's
        # time per request goes (issue 18)
        return self.produce_path.produce(topic, partition, batch, acks, stamp=stamp, create=create,
                                         at_offset=at_offset, forward=forward)

    def deduplicating(self, topic: str) -> bool:
        return self.produce_path.deduplicating(topic)

    async def produce_unique(self, topic: str, partition: int, ids: Sequence[int] | IdRun,
                             build: Callable[[list[bool]], bytes], acks: Acks = Acks.LEADER, *,
                             forward: bool = False) -> ProduceResult:
        return await self.produce_path.produce_unique(topic, partition, ids, build, acks, forward=forward)

    async def produce_idempotent(self, topic: str, partition: int, producers: Sequence[ProducerSequence],
                                 build: Callable[[list[bool]], tuple[bytes, Stamp | None]],
                                 acks: Acks = Acks.LEADER) -> ProduceResult:
        return await self.produce_path.produce_idempotent(topic, partition, producers, build, acks)

    async def flush_partition(self, topic: str, partition: int) -> None:
        await self.produce_path.flush_partition(topic, partition)

    # -- fetch (fetch.py) ----------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20,
              max_records: int | None = None, max_wait_ms: int = 0, min_bytes: int = 1,
              upto_log_end: bool = False, from_log_start: bool = False,
              committed_only: bool = False,
              before_read: Callable[[], Awaitable[object] | None] | None = None
              ) -> Coroutine[Any, Any, FetchResult]:
        read = self.fetch_path.fetch(topic, partition, offset, max_bytes=max_bytes,
                                     max_records=max_records, max_wait_ms=max_wait_ms,
                                     min_bytes=min_bytes, upto_log_end=upto_log_end,
                                     from_log_start=from_log_start, committed_only=committed_only,
                                     before_read=before_read)
        if not committed_only:
            return read  # the path's own coroutine, as ``produce``'s
        return self._fetch_committed(topic, partition, read)

    async def _fetch_committed(self, topic: str, partition: int,
                               read: Coroutine[Any, Any, FetchResult]) -> FetchResult:
        """A read up to the last stable offset: the partition's transaction table loaded first."""
        try:
            await self.transactions.table(await self.ctx.ready_partition(topic, partition))
        except BaseException:
            read.close()  # never awaited
            raise
        return await read

    # -- transactions (transactions.py) ---------------------------------------------------------

    async def _commit_txn_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        await self.consumers.commit_offsets(group, topic, offsets)

    def set_producer_ids(self, allocate: Callable[[], int],
                         coordinates: Callable[[str], bool] | None = None) -> None:
        """Where the transaction coordinator takes new producer ids, and (cluster mode) whether
        this broker coordinates a transactional id: the Kafka front end's answers."""
        self.transactions.next_producer_id = allocate
        if coordinates is not None:
            self.transactions.coordinates = coordinates

    async def write_txn_marker(self, topic: str, partition: int, batch: bytes, acks: Acks) -> ProduceResult:
        """Cluster mode: append a transaction marker another broker's coordinator made, as the
        partition's leader (broker/cluster/leader.py)."""
        return await self.transactions.marker_from(topic, partition, batch, acks)

    async def txn_init_producer(self, txn_id: str, timeout_ms: int, producer_id: int = -1,
                                epoch: int = -1) -> tuple[int, int]:
        return await self.transactions.init_producer(txn_id, timeout_ms, producer_id, epoch)

    async def txn_add_partitions(self, txn_id: str, producer_id: int, epoch: int,
                                 partitions: Sequence[tuple[str, int]]) -> None:
        await self.transactions.add_partitions(txn_id, producer_id, epoch, partitions)

    async def txn_add_offsets(self, txn_id: str, producer_id: int, epoch: int, group: str) -> None:
        await self.transactions.add_offsets(txn_id, producer_id, epoch, group)

    async def txn_stage_offsets(self, txn_id: str, producer_id: int, epoch: int, group: str,
                                offsets: dict[str, dict[int, int]]) -> None:
        await self.transactions.stage_offsets(txn_id, producer_id, epoch, group, offsets)

    async def txn_end(self, txn_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        await self.transactions.end(txn_id, producer_id, epoch, commit)

    async def produce_transactional(self, topic: str, partition: int, producer_id: int, epoch: int,
                                    producers: Sequence[ProducerSequence],
                                    build: Callable[[list[bool]], tuple[bytes, Stamp | None]],
                                    acks: Acks = Acks.LEADER, txn_id: str | None = None) -> ProduceResult:
        return await self.transactions.produce(topic, partition, producer_id, epoch, producers, build, acks,
                                               txn_id)

    async def last_stable_offset(self, topic: str, partition: int) -> int:
        """The offset before which every record's transaction has ended (the high watermark when
        none is open)."""
        part = await self.ctx.ready_partition(topic, partition)
        return await self.transactions.stable_offset(part, part.high_watermark)

    async def aborted_transactions(self, topic: str, partition: int, start: int,
                                   end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions with records in
        ``start..end-1``, by first offset: what a read_committed Kafka fetch of that range lists."""
        part = await self.ctx.ready_partition(topic, partition)
        return [(a.producer_id, a.first_offset) for a in await self.transactions.aborted(part, start, end)]

    def check_readable(self, topic: str, partition: int) -> None:
        self.fetch_path.check_readable(topic, partition)

    async def locate(self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20,
                     payload_only: bool = False) -> FileSpan | None:
        return await self.fetch_path.locate(topic, partition, offset, max_bytes=max_bytes,
                                            payload_only=payload_only)

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        return await self.fetch_path.offset_for_timestamp(topic, partition, timestamp)

    async def first_batch_base(self, topic: str, partition: int) -> int | None:
        """The base offset of the first stored batch (the one holding the log start); None while
        the partition stores nothing."""
        return await self.fetch_path.first_batch_base(topic, partition)

    # -- roles and follower progress, V1 (roles.py) --------------------------------------------

    async def set_partition_role(self, topic: str, partition: int, role: str) -> int:
        return await self.roles.set_partition_role(topic, partition, role)

    async def replica_progress(self, topic: str, partition: int, replica_id: int,
                               offset: int) -> ReplicaReport:
        return await self.roles.replica_progress(topic, partition, replica_id, offset)

    # -- consumer groups and offsets (consumers.py) --------------------------------------------

    async def join_group(self, group: str, topic: str, member: str, assignor: str | None = None,
                         policy: GroupPolicy = RTES_POLICY) -> GroupView:
        return await self.consumers.join_group(group, topic, member, assignor, policy)

    async def register_group(self, group: str, topic: str, policy: GroupPolicy,
                             assignor: str | None = None) -> GroupDescription:
        return await self.consumers.register_group(group, topic, policy, assignor)

    async def forget_shared_partitions(self, topic: str, keep: int) -> None:
        await self.consumers.forget_shared_partitions(topic, keep)

    async def current_group(self, group: str) -> GroupDescription:
        return await self.consumers.current_group(group)

    async def drop_group_members(self, group: str, gone: Callable[[str], bool]) -> None:
        await self.consumers.drop_group_members(group, gone)

    async def resume_group(self, group: str, topic: str, member: str, generation: int) -> GroupView:
        return await self.consumers.resume_group(group, topic, member, generation)

    async def sync_group(self, group: str, topic: str, member: str, generation: int) -> GroupView:
        return await self.consumers.sync_group(group, topic, member, generation)

    async def heartbeat(self, group: str, topic: str, member: str, generation: int) -> None:
        await self.consumers.heartbeat(group, topic, member, generation)

    async def leave_group(self, group: str, topic: str, member: str, generation: int | None) -> None:
        await self.consumers.leave_group(group, topic, member, generation)

    async def commit_offset(self, group: str, topic: str, partition: int, offset: int, *,
                            member: str | None = None, generation: int | None = None) -> None:
        await self.consumers.commit_offset(group, topic, partition, offset, member=member,
                                           generation=generation)

    def offsets_mark(self) -> int:
        return self.consumers.offsets_mark()

    async def commit_offsets(self, group: str, topic: str, entries: dict[int, int], *,
                             member: str | None = None, generation: int | None = None,
                             save: bool = True) -> None:
        await self.consumers.commit_offsets(group, topic, entries, member=member, generation=generation,
                                            save=save)

    def adopt_offsets(self, offsets: dict[tuple[str, str, int], int], *, since: int) -> bool:
        return self.consumers.adopt_offsets(offsets, since=since)

    async def save_offsets(self) -> None:
        await self.consumers.save_offsets()

    def list_groups(self) -> list[str]:
        return self.consumers.list_groups()

    async def reset_group_members(self, group: str) -> None:
        await self.consumers.reset_group_members(group)

    async def delete_group(self, group: str) -> None:
        await self.consumers.delete_group(group)

    async def delete_committed_offset(self, group: str, topic: str, partition: int) -> bool:
        return await self.consumers.delete_committed_offset(group, topic, partition)

    def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        return self.consumers.committed_offset(group, topic, partition)

    async def current_committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        return await self.consumers.current_committed_offset(group, topic, partition)

    def offset_groups(self) -> set[str]:
        """The groups holding a committed offset (whichever topics the caller may poll)."""
        return self.groups.offsets.groups()

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Every committed offset of ``group`` whose topic the caller may poll, by (topic,
        partition): what Kafka's OffsetFetch of all topics answers."""
        out: dict[tuple[str, int], int] = {}
        for (topic, partition), offset in self.groups.offsets.of_group(group).items():
            try:
                self.authorizer.check_topic("poll", topic)
            except Unauthorized:
                continue
            out[(topic, partition)] = offset
        return out

    def describe_group(self, group: str) -> GroupDescription:
        return self.consumers.describe_group(group)

    # -- the front ends' facade ----------------------------------------------------------------
    # Lookups the protocol services need for their replies, so that server/ never reaches into
    # the broker's internals (the group table, topic metadata, partitions' logs, the storage
    # layout). They check no authorization: the request they answer was checked by the call
    # it made (or answers an error that names only what the client sent).

    @staticmethod
    def check_topic_name(name: str) -> str:
        """``name`` if it is a valid topic name; raises InvalidTopicName (storage's rule)."""
        return validate_topic_name(name)

    def produce_waits(self) -> bool:
        """Whether a produce may wait after its append (an fsync under fsync=always, on the
        broker or on any topic; the replicas in cluster mode): then a connection pipelines its
        produce requests (server/frames.py). Otherwise every produce is answered at its append,
        and pipelining would add work and win nothing."""
        return (self.config.log.fsync.mode == "always" or self.clustered
                or any(t.log_config.fsync.mode == "always" for t in list(self.topics.values())))

    def produce_may_wait(self, topic: str) -> bool:
        """``produce_waits`` for one topic: whether a produce to it may wait after its append (an
        unknown topic: as the broker's default)."""
        if self.config.log.fsync.mode == "always" or self.clustered:
            return True
        t = self.topics.get(topic)
        return t is not None and t.log_config.fsync.mode == "always"

    def topic_config(self, topic: str) -> MappingProxyType[str, str]:
        """The topic's configuration overrides (bayou keys), read-only."""
        return MappingProxyType(self.topic(topic).meta.config)

    def effective_topic_config(self, topic: str) -> dict[str, tuple[str, bool]]:
        """Every config key of the topic: (value in effect, whether the topic sets it) for the log
        settings (the broker's default when it does not) and the broker keys it sets."""
        self.check_describe(topic)
        t = self.topic(topic)
        out = {key: (str(getattr(t.log_config, name)), key in t.meta.config)
               for key, name in sorted(TOPIC_CONFIG_KEYS.items())}
        for key, value in t.meta.config.items():
            out.setdefault(key, (value, True))
        return out

    def partition_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark): the range a consumer may read."""
        part = self.partition(topic, partition)
        return part.log.log_start_offset, part.high_watermark

    def records_end(self, topic: str, partition: int) -> int:
        """The high watermark less the transaction markers at its end (``known_records_end``
        first): the offset after the last record a reader sees, for protocols whose log end
        names a record (TANK's last assigned sequence)."""
        part = self.partition(topic, partition)
        hw = part.high_watermark
        run = part.control_run
        return run[0] if run is not None and run[0] < hw <= run[1] else hw

    async def known_records_end(self, topic: str, partition: int) -> None:
        """Find the markers at the partition's log end once after a start (``records_end``)."""
        part = await self.ctx.ready_partition(topic, partition)
        if part.control_run is None:
            end = part.log.next_offset
            run = await asyncio.get_running_loop().run_in_executor(self.ctx.io, trailing_controls,
                                                                   part.log, end)
            if part.control_run is None:
                part.control_run = run

    def log_end_offset(self, topic: str, partition: int) -> int:
        """The offset the partition's next record will get (past what is stored, acknowledged or not)."""
        return self.partition(topic, partition).log.next_offset

    def partition_dir(self, topic: str, partition: int) -> Path:
        """The directory holding the partition's log (TANK keeps a per-partition config file there)."""
        return self.partition(topic, partition).log.dir

    def partition_replicas(self, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
        """(leader, replicas, ISR) of a partition: this broker alone when standalone; in cluster
        mode ZooKeeper's as this broker last read them (leader -1 and an empty ISR while none)."""
        return self.ctx.topology.partition_replicas(topic, partition)

    def count_out(self, topic: str, partition: int, nbytes: int, records: int) -> None:
        """Count client bytes and records served outside ``fetch`` (TANK's zero-copy sends) for
        /metrics; a partition gone meanwhile is not counted."""
        with contextlib.suppress(BayouError):
            part = self.ctx.partition(topic, partition)
            part.bytes_out += nbytes
            part.records_out += records

    def data_waiters(self, partitions: Iterable[tuple[str, int]]) -> list[asyncio.Future[None]]:
        """One future per existing partition of ``partitions``, completed by its next append (or
        truncation). Register them before reading the ends, so an append in between wakes the
        wait; cancel the ones left when done (a cancelled one unregisters itself). Partitions
        that no longer exist are skipped."""
        out = []
        for topic, partition in partitions:
            t = self.ctx.topics.get(topic)
            if t is not None and 0 <= partition < len(t.partitions):
                part = t.partitions[partition]
                fut = part.data_waiter()
                fut.add_done_callback(part.forget_waiter)
                out.append(fut)
        return out

    def partition_role(self, topic: str, partition: int) -> str:
        """The V1 role this broker holds for the partition: ``leader`` or ``follower``."""
        return self.ctx.partition(topic, partition).role

    def leader_isr(self, topic: str, partition: int) -> tuple[list[int], list[int]] | None:
        """(replicas, ISR) as this broker tracks them while it leads the partition in cluster mode
        (its own view, fresher than ZooKeeper's); None standalone or when it does not lead."""
        rs = self.ctx.partition(topic, partition).cluster
        if rs is None or not rs.is_leader:
            return None
        return list(rs.replicas), list(rs.isr)

    def next_round_robin(self, topic: str, partitions: int) -> int:
        """The partition for the topic's next unkeyed, unpartitioned record, in turn."""
        part0 = self.partition(topic, 0)
        p = part0.round_robin % partitions
        part0.round_robin += 1
        return p

    def group_generation(self, group: str) -> int:
        """The group's generation (0 when there is no such group)."""
        return self.consumers.generation(group)

    def group_topic(self, group: str) -> str | None:
        """The topic the group is bound to; None when there is no such group."""
        g = self.groups.groups.get(group)
        return g.topic if g is not None else None

    def group_members(self, group: str) -> frozenset[str]:
        """The ids of the group's members (none when there is no such group)."""
        g = self.groups.groups.get(group)
        return frozenset(g.members) if g is not None else frozenset()

    def group_assignment(self, group: str, member: str) -> list[int]:
        """The partitions assigned to the member in the current generation."""
        g = self.groups.groups.get(group)
        return list(g.assignments.get(member, [])) if g is not None else []

    def topic_exists(self, name: str) -> bool:
        """Whether this broker holds the topic now (no wait for one made elsewhere: ``has_topic``)."""
        return name in self.topics

    def log_totals(self) -> LogTotals:
        """Partitions, bytes, segments and readable messages over this broker's replicas."""
        parts = [p for t in self.topics.values() for p in t.partitions]
        return LogTotals(len(parts), sum(p.log.size_bytes for p in parts),
                         sum(len(p.log.segments) for p in parts),
                         sum(p.high_watermark - p.log.log_start_offset for p in parts))

    @property
    def clustered(self) -> bool:
        """Whether the broker runs in a cluster (its topics and groups kept in ZooKeeper)."""
        return self.ctx.topology.clustered

    def shared_documents(self) -> SharedDocuments | None:
        """The documents and locks every broker of the cluster shares (the Iggy catalog and
        users); None when standalone."""
        return self.ctx.topology.shared_documents()

    def connection_ids(self) -> range | None:
        """The connection-bound member ids this broker hands out in a cluster: they carry its
        broker id, so that the cluster can drop the members of a dead or restarted broker
        (broker/cluster/controller.py, ``reap_members``). None when standalone: any id."""
        return self.ctx.topology.connection_ids()

    def listener_endpoints(self, listener: str) -> list[Endpoint] | None:
        """Every live broker with a ``listener`` (a protocol's name), by broker id, and which one
        is the controller; None when standalone."""
        return self.ctx.topology.listener_endpoints(listener)

    def group_coordinator(self, group: str, listeners: Sequence[str]) -> Endpoint | Here | None:
        """The broker coordinating ``group`` for a protocol served on any of ``listeners``: in
        cluster mode the live broker FNV-1a of the name picks among those brokers (as Cursus'
        groups: every broker agrees, and a dead coordinator's groups move to a live one), at the
        first of ``listeners`` it has, None while no such broker is known; THIS_BROKER standalone."""
        return self.ctx.topology.group_coordinator(group, listeners)

    def leader_endpoint(self, topic: str, partition: int, listener: str) -> Endpoint | Here | None:
        """The partition's leader at its ``listener`` as this broker last read it (None while no
        leader with that listener is known); THIS_BROKER standalone."""
        return self.ctx.topology.leader_endpoint(topic, partition, listener)

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch as this broker last read it: 0 standalone (one leader,
        ever), -1 in cluster mode while no state is known."""
        return self.ctx.topology.leader_epoch(topic, partition)

    async def check_leads(self, topic: str, partition: int) -> None:
        """Cluster mode: NotLeader (naming the leader) unless this broker leads the partition,
        for clients that read only at the leader (Kafka's); a leadership ZooKeeper already gives
        this broker is waited for briefly, as a produce does. Standalone: nothing (callers on a
        request's path may skip the await when ``clustered`` is false)."""
        await self.ctx.topology.check_leads(topic, partition)

    def epoch_end(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        """KIP-101's answer for ``epoch``: (the largest leader epoch <= ``epoch`` this replica
        knows, the offset where it ends here: the next epoch's start, or the log end for the
        newest); (-1, -1) when it knows none older. Standalone (one epoch, 0, never truncated):
        (0, the high watermark)."""
        return self.ctx.topology.epoch_end(self.ctx.partition(topic, partition), epoch)

    async def fetch_at_leader(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        """A consumer's read at the partition's leader, for a broker holding no replica of it
        (cluster mode): batches from ``offset`` below the leader's high watermark, with that
        watermark and the log start (``max_bytes`` 0: only those two). NotLeader standalone."""
        return await self.ctx.topology.fetch_at_leader(topic, partition, offset, max_bytes)

    async def set_partition_leader(self, topic: str, partition: int, leader: int, isr: list[int]) -> None:
        """V1's ADMIN_SET_PARTITION_LEADER: in cluster mode the partition's state in ZooKeeper;
        standalone the V1 metadata model's (broker/metadata.py)."""
        await self.ctx.topology.set_partition_leader(topic, partition, leader, isr)

    async def elect_leaders(self, topic: str) -> int:
        """V1's ADMIN_ELECT_TOPIC_LEADERS: how many of the topic's partitions got a new leader."""
        return await self.ctx.topology.elect_leaders(topic)


__all__ = ["TOPIC_KEYS", "Acks", "Broker", "FetchResult", "PartitionLog", "ProduceResult", "TopicInfo"]


def trailing_controls(log: PartitionLog, end: int, most: int = 64) -> tuple[int, int]:
    """The offsets ``from..end-1`` of the control batches that end the log at ``end`` (``from``
    = ``end``: none), looking back at most ``most`` batches. Blocking: a worker thread's."""
    start = end
    for _ in range(most):
        if start <= log.log_start_offset:
            break
        try:
            h = log.batch_header_at(start - 1)
        except BayouError:
            break
        if h is None or not h.control or h.next_offset != start:
            break
        start = h.base_offset
    return start, end
