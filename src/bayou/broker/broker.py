"""The one async API every protocol front end calls."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from bayou.broker.authz import Action, Authorizer, current_principal
from bayou.broker.background import run_forever
from bayou.broker.cluster.state import MEMBER_BROKER_SHIFT, connection_member_base
from bayou.broker.coordination import Cluster, LocalMetadataStore, MetadataStore, ReplicaState
from bayou.broker.groups.classic import ClassicGroups
from bayou.broker.groups.coordinator import (
    CURSUS_POLICY,
    RTES_POLICY,
    GroupCoordinator,
    GroupDescription,
    GroupPolicy,
    GroupView,
)
from bayou.broker.idempotence import (
    DEFAULT_MAX_PRODUCERS,
    DEFAULT_WINDOW,
    DedupTable,
    IdRun,
    ProducerTable,
    Rebuilt,
    TableT,
    rebuild,
)
from bayou.broker.metadata import ClusterMetadata
from bayou.broker.model import (
    Acks,
    FetchResult,
    PartitionInfo,
    ProduceResult,
    ReplicaReport,
    Topic,
    TopicInfo,
)
from bayou.broker.partition import FOLLOWER, LEADER, Partition
from bayou.broker.persist import StateFile
from bayou.broker.replication import SINGLE_NODE
from bayou.broker.settings import BrokerConfig
from bayou.broker.views import Endpoint, LogTotals, SharedDocuments
from bayou.errors import (
    BayouError,
    BrokerShuttingDown,
    InvalidConfig,
    InvalidPartitions,
    InvalidRequest,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeader,
    OffsetOutOfRange,
    PartitionLimitReached,
    ReplicationTimeout,
    StorageError,
    TopicAlreadyExists,
    Unauthorized,
    UnknownPartition,
    UnknownTopic,
)
from bayou.records.formats import ProducerSequence
from bayou.stats import Recovery
from bayou.storage import (
    FileSpan,
    LogConfig,
    PartitionLog,
    Store,
    TopicMeta,
    apply_overrides,
    validate_topic_name,
)
from bayou.storage.config import TOPIC_CONFIG_KEYS
from bayou.storage.handles import default_capacity, raise_fd_limit
from bayou.storage.log import AppendInfo
from bayou.storage.scrub import Scrubber

log = logging.getLogger("bayou.broker")
T = TypeVar("T")
Stamp = Callable[[bytearray, int], None]  # writes the assigned offsets into a batch (produce)

MAX_PARTITIONS = 10_000

# Topic config keys the broker itself reads (the rest are log settings, storage/config.py).
BROKER_TOPIC_KEYS = {
    "replication.factor": int,
    "min.insync.replicas": int,  # acks=all needs this many in-sync replicas (cluster mode)
    "cluster.topic.id": str,  # cluster mode: which incarnation of the topic (set by the cluster)
    "cluster.partitions.removed": str,  # cluster mode: every removal of partitions (set by the cluster)
    "idempotent": bool,  # de-duplicate producer sequences (Cursus ``idempotent=true``)
    "event.sourcing": bool,  # Cursus event-sourcing topic (aggregate streams, snapshots)
    # Message de-duplication by id (Iggy sends; broker/idempotence.py, Broker.produce_unique)
    "message.deduplication": bool,
    "message.deduplication.producers": int,  # producers remembered per partition (LRU)
    "message.deduplication.window": int,  # last offsets scanned to rebuild the table after a start
}
DEDUP = "message.deduplication"
DEDUP_PRODUCERS = "message.deduplication.producers"
DEDUP_WINDOW = "message.deduplication.window"
_DEDUP_KEYS = (DEDUP, DEDUP_PRODUCERS, DEDUP_WINDOW)
# Every per-topic config key a topic accepts (log settings and the broker's own).
TOPIC_KEYS: frozenset[str] = frozenset(TOPIC_CONFIG_KEYS) | frozenset(BROKER_TOPIC_KEYS)


def _split_topic_config(config: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(broker keys, log keys), with broker keys validated and normalised."""
    broker: dict[str, str] = {}
    log_keys: dict[str, str] = {}
    for k, v in config.items():
        kind = BROKER_TOPIC_KEYS.get(k)
        if kind is None:
            log_keys[k] = v
        elif kind is bool:
            if str(v).lower() not in ("true", "false"):
                raise InvalidConfig(f"topic config {k} must be true or false, not {v!r}")
            broker[k] = str(v).lower()
        elif kind is str:
            broker[k] = str(v)
        else:
            try:
                n = int(str(v))
            except ValueError:
                raise InvalidConfig(f"topic config {k} must be an integer, not {v!r}") from None
            if n < 1:
                raise InvalidConfig(f"topic config {k} must be >= 1")
            broker[k] = str(n)
    return broker, log_keys


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.store = Store(config.data_dir, config.log.max_open_files)
        self.topics: dict[str, Topic] = {}
        # Who may do what (broker/authz.py): every request below is checked against the principal
        # of the connection it came from; server/ injects the topic resolver and the users.
        self.authorizer = Authorizer()
        self.metadata = ClusterMetadata(config.broker_id, self.authorizer)
        self.groups = GroupCoordinator(config.group_session_timeout_ms, self.partition_count)
        # Kafka's classic groups: membership of their own (a leader-run assignor), offsets in
        # ``groups.offsets`` with every other protocol's (broker/groups/classic.py)
        self.classic_groups = ClassicGroups()
        self._groups_file = StateFile(config.data_dir / "groups.json", self.groups.groups_json)
        self._offsets_file = StateFile(config.data_dir / "offsets.json", self.groups.offsets_json)
        self._io = ThreadPoolExecutor(max_workers=16, thread_name_prefix="bayou-io")
        self._admin_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._groups_dirty = False
        # cluster mode: when each committed offset last changed here (see adopt_offsets)
        self._offset_clock = 0
        self._offset_stamps: dict[tuple[str, str, int], int] = {}
        self.closing = False
        self.started = False
        self._scrubber: Scrubber | None = None
        self._scrub_pool: ThreadPoolExecutor | None = None
        self.recovery = Recovery()  # the start-up load's progress (/metrics, /ready)
        # Where topic changes are decided (broker/coordination.py): this broker's files, or in
        # cluster mode ZooKeeper (broker/cluster/node.py sets both when it is built, before the
        # first request): partitions then follow the leaders the cluster elects.
        self.metadata_store: MetadataStore = LocalMetadataStore(self)
        self.replica_state: ReplicaState = SINGLE_NODE
        self.cluster: Cluster | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        raise_fd_limit()
        if not self.config.log.max_open_files:  # derived from the limit now in force
            self.store.handles.capacity = default_capacity()
        await loop.run_in_executor(self._io, self._open_storage)
        self.metadata.register_broker(self.config.broker_id, "127.0.0.1", 0)
        for name, topic in self.topics.items():
            self.metadata.add_topic(name, len(topic.partitions), self._topic_rf(topic.meta))
        self._load_group_state()
        self._tasks = [
            loop.create_task(self._background("retention", self.run_retention,
                                              self.config.retention_check_interval_ms / 1000),
                             name="retention"),
            loop.create_task(self._background("flush", self._flush_due, self._flush_tick), name="flush"),
            loop.create_task(self._background("groups-persist", self._persist_groups_if_dirty,
                                              self.config.heartbeat_persist_interval_ms / 1000),
                             name="groups-persist"),
            loop.create_task(self._background("group-expiry", self._expire_members,
                                              self.config.group_expiry_check_ms / 1000),
                             name="group-expiry"),
        ]
        if self.config.scrub_interval_ms > 0:
            # Its own thread: a throttled pass takes long and must not hold a worker of the I/O pool.
            self._scrubber = Scrubber(self._partition_logs, self.config.scrub_bytes_per_second)
            self._scrub_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bayou-scrub")
            self._tasks.append(loop.create_task(
                self._background("scrub", self._scrub_pass, self.config.scrub_interval_ms / 1000),
                name="scrub"))
        self.started = True

    def _partition_logs(self) -> list[tuple[str, PartitionLog]]:
        return [(f"{name}/{p.index}", p.log) for name, t in list(self.topics.items())
                for p in list(t.partitions)]

    async def _scrub_pass(self) -> None:
        """One scrub pass (storage/scrub.py) in the scrub's own thread, every ``scrub_interval_ms``
        through ``_background`` (a failed pass is logged and retried)."""
        assert self._scrubber is not None and self._scrub_pool is not None
        await asyncio.get_running_loop().run_in_executor(self._scrub_pool, self._scrubber.run_pass)

    def _open_storage(self) -> None:
        """Open every partition's log; after an unclean stop each active segment's tail is
        validated (CRCs from the last indexed point) and cut at the first bad byte. Progress is
        in ``self.recovery`` (/metrics, /ready); the summary is logged."""
        started = time.monotonic()
        rec = self.recovery
        clean = self.store.open()
        rec.validated = not clean
        if not clean:
            log.info("no clean-shutdown marker in %s: validating active segments", self.config.data_dir)
        metas = self.store.load_topics()
        rec.partitions_total = sum(meta.partitions for meta in metas.values())
        for name, meta in metas.items():
            cfg = apply_overrides(self.config.log, _split_topic_config(meta.config)[1])
            topic = Topic(meta, cfg)
            self.store.prune_partitions(meta)
            for p in range(meta.partitions):
                plog = self.store.open_log(name, p, cfg)
                if rec.validated:
                    rec.validated_bytes += plog.active.size
                if plog.truncated_bytes:
                    log.warning("recovered %s/%d: cut %d bytes of torn or corrupt tail",
                                name, p, plog.truncated_bytes,
                                extra={"topic": name, "partition": p, "cut_bytes": plog.truncated_bytes})
                    rec.truncated_bytes += plog.truncated_bytes
                    rec.truncated_partitions += 1
                topic.partitions.append(Partition(name, p, plog, self.config))
                rec.partitions_done += 1
            self.topics[name] = topic
        rec.seconds = time.monotonic() - started
        rec.done = True
        log.info("%s %d partitions of %d topics in %.3f s%s", "validated" if rec.validated else "opened",
                 rec.partitions_done, len(self.topics), rec.seconds,
                 f": cut {rec.truncated_bytes} bytes from {rec.truncated_partitions} partitions"
                 if rec.truncated_bytes else " (nothing cut)" if rec.validated else " (clean shutdown)",
                 extra={"partitions": rec.partitions_done, "topics": len(self.topics),
                        "validated_bytes": rec.validated_bytes,
                        "seconds": round(rec.seconds, 3), "cut_bytes": rec.truncated_bytes,
                        "cut_partitions": rec.truncated_partitions})

    def _load_group_state(self) -> None:
        for file, loader in ((self._groups_file, self.groups.load_groups),
                             (self._offsets_file, self.groups.load_offsets)):
            data = file.load()
            if data is None:
                continue
            try:
                loader(data)
            except Exception as exc:  # any shape error: ignore the file, start empty (rtes.md 6.4)
                log.error("ignoring unreadable %s: %s", file.path, exc)

    async def stop(self) -> None:
        """Flush everything, persist group state and leave the clean-shutdown marker."""
        if not self.started:
            return
        self.closing = True
        self.started = False
        if self._scrubber is not None:
            self._scrubber.stop()  # a pass in progress ends within one read
        self.classic_groups.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._scrub_pool is not None:
            await asyncio.to_thread(self._scrub_pool.shutdown, True)
        for topic in self.topics.values():
            for part in topic.partitions:
                part.notify()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._io, self._close_storage)
        self._io.shutdown(wait=True)

    def _close_storage(self) -> None:
        """Flush and close every log, write the state files, leave the clean marker when every
        log is on disk. A failure (a full disk) is logged and the stop goes on: the marker is
        only about the logs, so unwritable state files do not keep it from being written."""
        flushed = True
        for topic in self.topics.values():
            for part in topic.partitions:
                try:
                    part.log.flush()
                except (OSError, BayouError):
                    flushed = False
                    log.exception("could not flush %s/%d at shutdown", part.topic, part.index)
                part.log.close()
        for state in (self._groups_file, self._offsets_file):
            try:
                state.write_now()
            except OSError:
                log.exception("could not write %s at shutdown", state.path)
        try:
            if flushed:
                self.store.mark_clean()
            else:
                log.error("not every log reached the disk: the next start recovers them")
        except OSError:
            log.exception("could not write the clean-shutdown marker")
        finally:
            self.store.close()
        log.info("broker stopped%s", " cleanly" if flushed else "")

    # -- topics --------------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int:
        t = self.topics.get(topic)
        return len(t.partitions) if t else self.config.default_partitions

    def topic_flag(self, topic: str, key: str) -> bool:
        t = self.topics.get(topic)
        return t is not None and t.meta.config.get(key) == "true"

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's ``min.insync.replicas``, else the broker's, capped by its replica count."""
        t = self.topics.get(topic)
        value = t.meta.config.get("min.insync.replicas") if t is not None else None
        try:
            n = int(value) if value is not None else self.config.min_insync_replicas
        except ValueError:
            n = self.config.min_insync_replicas
        return max(1, n)

    def _topic_rf(self, meta: TopicMeta) -> int:
        try:
            return int(meta.config.get("replication.factor", self.config.replication_factor))
        except ValueError:
            return self.config.replication_factor

    async def create_topic(self, name: str, partitions: int | None = None,
                           config: dict[str, str] | None = None, *, exist_ok: bool = False) -> Topic:
        """Create ``name`` through the metadata store. In cluster mode the topic is created in
        ZooKeeper (replicas assigned over the live brokers) and every broker, this one included,
        opens its partitions when it sees it (``open_topic``)."""
        self.authorize("manage_topics", name)
        n, overrides, _log_cfg = self._topic_spec(name, partitions, config)
        if not (exist_ok and name in self.topics):
            self._check_partition_limit(n)
        # In cluster mode ZooKeeper decides whether it exists (exist_ok: the copy returned is
        # ZooKeeper's incarnation): a local copy may be of a topic just deleted through another broker
        return await self.metadata_store.create_topic(name, n, overrides, exist_ok=exist_ok)

    def _topic_spec(self, name: str, partitions: int | None,
                    config: dict[str, str] | None) -> tuple[int, dict[str, str], LogConfig]:
        """(partitions, validated overrides, log config) of a topic to create."""
        validate_topic_name(name)
        n = self.config.default_partitions if partitions is None else partitions
        if not 1 <= n <= MAX_PARTITIONS:
            raise InvalidPartitions(f"partitions must be between 1 and {MAX_PARTITIONS}")
        broker_keys, log_keys = _split_topic_config(dict(config or {}))
        log_cfg = apply_overrides(self.config.log, log_keys)
        return n, {**log_keys, **broker_keys}, log_cfg

    async def open_topic(self, name: str, partitions: int, config: dict[str, str], *,
                         exist_ok: bool = False, limited: bool = False) -> Topic:
        """Make the local copy of ``name``: where a single node's ``create_topic`` ends, and what
        the cluster's reconciler does for each topic ZooKeeper has (not ``limited`` by
        max_partitions then: the cluster decided)."""
        n, overrides, log_cfg = self._topic_spec(name, partitions, config)
        async with self._admin_lock:
            existing = self.topics.get(name)
            if existing is not None:
                if exist_ok:
                    return existing
                raise TopicAlreadyExists(f"topic {name} already exists")
            if limited:  # again under the lock: a concurrent create may have filled it
                self._check_partition_limit(n)
            meta = TopicMeta(name, n, overrides)
            loop = asyncio.get_running_loop()
            topic = await loop.run_in_executor(self._io, self._create_topic_files, meta, log_cfg)
            self.topics[name] = topic
            self.metadata.add_topic(name, n, self._topic_rf(meta))
            log.info("created topic %s with %d partitions", name, n)
            return topic

    def partition_total(self) -> int:
        """Partitions this broker holds, over every topic."""
        return sum(len(t.partitions) for t in self.topics.values())

    def _check_partition_limit(self, more: int) -> None:
        have = self.partition_total()
        if have + more > self.config.max_partitions:
            raise PartitionLimitReached(
                f"the broker holds {have} partitions; {more} more would pass max_partitions "
                f"({self.config.max_partitions})")

    def _create_topic_files(self, meta: TopicMeta, cfg: LogConfig) -> Topic:
        topic = Topic(meta, cfg)
        try:
            self.store.write_topic(meta)
            for p in range(meta.partitions):
                part = Partition(meta.name, p, self.store.open_log(meta.name, p, cfg), self.config)
                part.replica_state = self.replica_state
                topic.partitions.append(part)
        except OSError as exc:  # a full disk: undo what was made, answer an error
            self._close_partitions(topic.partitions)
            try:
                self.store.delete_topic(meta.name)
            except OSError:
                log.exception("could not remove the half-created topic %s", meta.name)
            raise StorageError(f"cannot create topic {meta.name}: {exc}") from exc
        return topic

    async def ensure_topic(self, name: str) -> Topic:
        """The topic, created with defaults first if auto-creation is on."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        validate_topic_name(name)
        if not self.config.auto_create_topics:
            raise UnknownTopic(f"unknown topic {name}")
        return await self.create_topic(name, exist_ok=True)

    def topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name}")
        return topic

    def partition(self, topic: str, partition: int) -> Partition:
        t = self.topic(topic)
        if not 0 <= partition < len(t.partitions):
            raise UnknownPartition(f"topic {topic} has no partition {partition}")
        return t.partitions[partition]

    async def ready_topic(self, name: str, partition: int = 0) -> Topic:
        """``topic(name)`` for a request. In cluster mode a topic (or partition) that ZooKeeper has
        but this broker has not opened yet, or whose cluster state has not reached it, is waited
        for briefly instead of being called unknown: a client that created it through another
        broker must not be told it does not exist because a watch is still on its way."""
        if self.cluster is not None:
            t = self.topics.get(name)
            if (t is None or not 0 <= partition < len(t.partitions)
                    or t.partitions[partition].cluster is None):
                await self.cluster.catch_up(name, partition)
        return self.topic(name)

    async def has_topic(self, name: str) -> bool:
        """Whether ``name`` exists, for a request (in cluster mode: see ``ready_topic``)."""
        if name not in self.topics and self.cluster is not None:
            try:
                await self.ready_topic(name)
            except UnknownTopic:
                return False
        return name in self.topics

    async def ready_partition(self, topic: str, partition: int) -> Partition:
        """``partition(topic, partition)`` for a request (see ``ready_topic``)."""
        await self.ready_topic(topic, partition)
        return self.partition(topic, partition)

    def list_topics(self) -> list[str]:
        return sorted(self.topics)

    def visible_topics(self) -> list[str]:
        """The topics the caller may describe, sorted: what a listing shows it (Kafka's
        metadata rule). ``list_topics`` is every topic, for bayou's own use."""
        return self.authorizer.describable(sorted(self.topics))

    def visible_topics_of(self, names: Iterable[str]) -> list[str]:
        """Those of ``names`` the caller may describe."""
        return self.authorizer.describable(names)

    def check_describe(self, name: str) -> None:
        """Raise Unauthorized unless the caller may describe ``name`` (see ``visible_topics``)."""
        if not self.visible_topics_of((name,)):
            raise Unauthorized(f"{current_principal()} may not describe topic {name}")

    def authorize(self, action: Action, topic: str) -> None:
        """Raise Unauthorized unless the caller may do ``action`` on ``topic``: the check each
        call below makes, for a front end that must choose its reply before calling."""
        self.authorizer.check_topic(action, topic)

    def describe_topic(self, name: str) -> TopicInfo:
        self.check_describe(name)
        t = self.topic(name)
        parts = tuple(
            PartitionInfo(p.index, p.role, p.log.log_start_offset, p.log.next_offset, p.high_watermark,
                          p.log.size_bytes, len(p.log.segments), p.log.offline_reason)
            for p in t.partitions
        )
        return TopicInfo(name, parts, dict(t.meta.config))

    async def delete_topic(self, name: str) -> None:
        self.authorize("manage_topics", name)
        self.topic(name)
        await self.metadata_store.delete_topic(name)

    async def drop_topic(self, name: str) -> None:
        """Delete the local copy of ``name`` (a single node's ``delete_topic``, or the cluster's
        reconciler following ZooKeeper)."""
        async with self._admin_lock:
            topic = self.topic(name)
            del self.topics[name]
            for part in topic.partitions:
                part.notify()
            loop = asyncio.get_running_loop()
            # Close its files at once, so the space is free now (a read in a worker thread
            # finishes first, a zero-copy send sees end-of-file: storage/handles.py).
            await loop.run_in_executor(self._io, self._delete_topic_files, name, topic)
            self.metadata.remove_topic(name)
            self.groups.forget_topic(name)
            await self._offsets_file.save()
            log.info("deleted topic %s", name)

    def _delete_topic_files(self, name: str, topic: Topic) -> None:
        try:
            self.store.delete_topic(name)
        finally:
            self._close_partitions(topic.partitions)

    @staticmethod
    def _close_partitions(parts: list[Partition]) -> None:
        for part in parts:
            part.log.close()

    async def add_partitions(self, name: str, total: int) -> Topic:
        """Grow a topic to ``total`` partitions (cluster mode: in ZooKeeper, which every broker
        then follows)."""
        self.authorize("manage_topics", name)
        topic = self.topic(name)
        self._check_new_total(name, topic, total)
        self._check_partition_limit(total - len(topic.partitions))
        return await self.metadata_store.add_partitions(name, total)

    @staticmethod
    def _check_new_total(name: str, topic: Topic, total: int) -> None:
        if total <= len(topic.partitions) or total > MAX_PARTITIONS:
            raise InvalidPartitions(
                f"topic {name} has {len(topic.partitions)} partitions; the new count must be larger")

    async def grow_partitions(self, name: str, more: int) -> Topic:
        """Add ``more`` partitions (Iggy CREATE_PARTITIONS); cluster mode counts from ZooKeeper's
        partition count, which this broker's copy may lag."""
        self.authorize("manage_topics", name)
        have = len(self.topic(name).partitions)
        if more < 1 or have + more > MAX_PARTITIONS:
            raise InvalidPartitions(f"cannot add {more} partitions to the {have} of topic {name}")
        self._check_partition_limit(more)
        return await self.metadata_store.add_partitions(name, None, more)

    async def grow_topic(self, name: str, total: int, *, limited: bool = False) -> Topic:
        """Grow the local copy of ``name`` to ``total`` partitions: a single node's
        ``add_partitions`` (``limited``: checked against max_partitions and the count in place),
        or the cluster's reconciler following ZooKeeper (a count already reached is no error)."""
        if not limited:
            self._check_new_total(name, self.topic(name), total)
        async with self._admin_lock:
            topic = self.topic(name)
            have = len(topic.partitions)
            if total <= have:  # another change got there first
                if not limited:
                    return topic
                raise InvalidPartitions(f"topic {name} has {have} partitions; the new count must be larger")
            if limited:
                self._check_partition_limit(total - have)
            loop = asyncio.get_running_loop()

            def _add() -> list[Partition]:
                new = [Partition(name, p, self.store.open_log(name, p, topic.log_config), self.config)
                       for p in range(have, total)]
                for part in new:
                    part.replica_state = self.replica_state
                topic.meta.partitions = total
                self.store.write_topic(topic.meta)
                return new

            topic.partitions.extend(await loop.run_in_executor(self._io, _add))
            self.metadata.add_topic(name, total, self._topic_rf(topic.meta))
            return topic

    async def remove_partitions(self, name: str, count: int) -> Topic:
        """Remove the last ``count`` partitions (Iggy DELETE_PARTITIONS); at least one must stay.

        Their data, committed offsets and group assignments go; long-polls on them end with
        UnknownPartition. The new count is written before the directories go, so a crash in
        between leaves directories that the next start removes. Cluster mode: in ZooKeeper,
        which every broker then follows.
        """
        self.authorize("manage_topics", name)
        have = len(self.topic(name).partitions)
        if not 1 <= count < have:
            raise InvalidPartitions(
                f"topic {name} has {have} partitions: can remove 1 to {have - 1}, not {count}")
        return await self.metadata_store.remove_partitions(name, count)

    async def shrink_topic(self, name: str, count: int) -> Topic:
        """Remove the last ``count`` partitions of the local copy of ``name`` (a single node's
        ``remove_partitions``, or the cluster's reconciler following ZooKeeper)."""
        async with self._admin_lock:
            topic = self.topic(name)
            have = len(topic.partitions)
            if not 1 <= count < have:
                raise InvalidPartitions(
                    f"topic {name} has {have} partitions: can remove 1 to {have - 1}, not {count}")
            keep = have - count
            removed = topic.partitions[keep:]
            # Stop serving them first, so nothing is appended in a directory that is going.
            del topic.partitions[keep:]
            topic.meta.partitions = keep

            def _remove() -> None:
                self.store.write_topic(topic.meta)
                for part in removed:
                    try:
                        self.store.delete_partition(name, part.index)
                    except OSError:  # the new count is durable: the next start removes it
                        log.exception("could not delete %s/%d", name, part.index)

            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._io, _remove)
            except Exception:  # the new count was not written: nothing changed
                topic.partitions.extend(removed)
                topic.meta.partitions = have
                raise
            for part in removed:
                part.notify()
            self.metadata.add_topic(name, keep, self._topic_rf(topic.meta))
            await loop.run_in_executor(self._io, self._close_partitions, removed)
            if self.groups.forget_partitions(name, keep):
                await self._groups_file.save()
            await self._offsets_file.save()
            log.info("removed partitions %d-%d of topic %s", keep, have - 1, name)
            return topic

    async def purge_topic(self, name: str) -> None:
        """Delete every record of every partition; offsets are not reused (Iggy PURGE_TOPIC).

        Each log then starts at its old end. Committed offsets stay: they now lie below the log
        start, so a consumer that resumes from one gets OffsetOutOfRange, as after retention.
        Cluster mode: done by the broker leading every partition (NotLeader elsewhere); the
        followers take the new log start from their next fetch.
        """
        self.authorize("manage_topics", name)
        async with self._admin_lock:
            topic = self.topic(name)
            parts = list(topic.partitions)
            if self.cluster is not None:
                for part in parts:
                    self._check_leader(part)

            def _purge() -> None:
                for part in parts:
                    part.log.purge()

            try:
                await asyncio.get_running_loop().run_in_executor(self._io, _purge)
            finally:
                for part in parts:
                    part.reset_idempotence()  # de-duplication knows what the log holds, as after a restart
                    part.notify()
            log.info("purged topic %s", name)

    async def delete_segments(self, topic: str, partition: int, count: int) -> int:
        """Delete up to ``count`` of a partition's oldest segments, never the active one (Iggy
        DELETE_SEGMENTS). Returns how many went; the log start moves up past them. Cluster mode:
        on the leader, whose followers then drop their segments below its new log start."""
        self.authorize("manage_topics", topic)
        if count < 0:
            raise InvalidRequest(f"segment count must not be negative, not {count}")
        async with self._admin_lock:
            part = self.partition(topic, partition)
            if self.cluster is not None:
                self._check_leader(part)
            return await asyncio.get_running_loop().run_in_executor(
                self._io, part.log.delete_oldest_segments, count)

    async def alter_topic_config(self, name: str, changes: dict[str, str | None]) -> dict[str, str]:
        """Set (or with None, remove) topic config keys; applies to the partitions at once."""
        self.authorize("manage_topics", name)
        async with self._admin_lock:
            topic = self.topic(name)
            merged = dict(topic.meta.config)
            for k, v in changes.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            broker_keys, log_keys = _split_topic_config(merged)
            try:
                cfg = apply_overrides(self.config.log, log_keys)
            except (TypeError, ValueError) as exc:
                raise InvalidConfig(str(exc)) from None
            before = {k: topic.meta.config.get(k) for k in _DEDUP_KEYS}
            topic.meta.config = {**log_keys, **broker_keys}
            merged = dict(topic.meta.config)
            if any(merged.get(k) != v for k, v in before.items()):
                for part in topic.partitions:  # rebuilt from the log, with the new settings
                    part.reset_idempotence()
            await asyncio.get_running_loop().run_in_executor(self._io, self.store.write_topic, topic.meta)
            topic.log_config = cfg
            for part in topic.partitions:
                part.log.config = cfg
            return merged

    # -- produce and fetch ---------------------------------------------------------------------

    def _led_elsewhere(self, part: Partition) -> bool:
        """Cluster mode: another broker leads ``part`` now."""
        rs = part.cluster
        return rs is not None and not rs.is_leader and rs.leader >= 0

    async def _await_leadership(self, part: Partition) -> None:
        """Cluster mode, a produce to a partition this broker does not lead by its local state:
        if ZooKeeper already names it leader, wait (briefly) for the state to arrive rather than
        send the client back to the old leader (Cluster.await_leadership)."""
        if self.cluster is not None and (part.cluster is None or not part.cluster.is_leader):
            await self.cluster.await_leadership(part.topic, part.index)

    def _check_leader(self, part: Partition) -> None:
        if self.cluster is not None:
            if part.cluster is None or not part.cluster.is_leader:
                raise NotLeader(leader=self.cluster.leader_of(part))
            return
        meta = self.metadata.partitions.get((part.topic, part.index))
        if part.role != LEADER or (meta is not None and meta.leader != self.config.broker_id):
            raise NotLeader()

    def _check_insync(self, part: Partition, acks: Acks) -> None:
        """Cluster mode, acks=all: refuse before appending when fewer replicas are in sync than
        ``min.insync.replicas`` (an append that could only time out would still become visible,
        and the client's retry would store it twice). A single node keeps the V1 model, where
        followers report while the produce waits (rtes.md 6.2)."""
        rs = part.cluster
        if acks == Acks.ALL and rs is not None:
            need = self.min_insync_replicas(part.topic)
            if len(rs.isr) < need:
                raise NotEnoughReplicas(f"not enough in-sync replicas: {len(rs.isr)} in sync "
                                        f"({list(rs.isr)}), min.insync.replicas={need}")

    @staticmethod
    def _epoch(part: Partition) -> int | None:
        """The leader epoch a cluster leader stamps on what it appends (None on a single node)."""
        return None if part.cluster is None else part.cluster.epoch

    async def produce(self, topic: str, partition: int, batch: bytes | bytearray,
                      acks: Acks = Acks.LEADER, *,
                      stamp: Callable[[bytearray, int], None] | None = None,
                      create: bool = True, at_offset: int | None = None,
                      forward: bool = False) -> ProduceResult:
        """Append one batch (its base offset is assigned here) and acknowledge per ``acks``.

        ``stamp`` writes the assigned offsets into formats that carry them per record (the batch
        was built by the caller, so its CRC is computed after stamping instead of verified).
        With ``create=False`` an unknown topic is an error even when auto-creation is on.
        ``at_offset`` places the batch at that base offset, past the log end (a gap; see
        ``PartitionLog.append``). ``forward`` (cluster mode): a partition led by another broker
        gets the batch through this one (for clients that cannot follow a redirect) instead of
        NotLeader.
        """
        self.authorize("send", topic)
        if self.closing:
            raise BrokerShuttingDown()
        t = await self.ensure_topic(topic) if create else await self.ready_topic(topic, partition)
        if not 0 <= partition < len(t.partitions):
            raise UnknownPartition(f"topic {topic} has no partition {partition}")
        part = t.partitions[partition]
        if forward and self._led_elsewhere(part):
            assert self.cluster is not None
            return await self.cluster.forward_produce(topic, partition, bytes(batch), acks)
        await self._await_leadership(part)
        self._check_leader(part)
        self._check_insync(part, acks)
        if stamp is None:
            info = part.log.append(batch, at_offset=at_offset, leader_epoch=self._epoch(part))
        else:
            info = part.log.append(batch, verify_crc=False, stamp=stamp, at_offset=at_offset,
                                   leader_epoch=self._epoch(part))
        return await self._acknowledge(part, info, acks)

    async def _acknowledge(self, part: Partition, info: AppendInfo, acks: Acks) -> ProduceResult:
        """After an append: move a cluster leader's high watermark, wait for what ``acks`` and
        the fsync policy promise, wake long-polls, report."""
        part.bytes_in += info.size
        part.records_in += info.record_count
        if part.cluster is not None:
            part.cluster.advance_hw(part.log.next_offset)
        end = info.last_offset + 1
        if part.log.config.fsync.mode == "always":
            await asyncio.get_running_loop().run_in_executor(self._io, part.log.sync_to, end)
        part.notify()
        if acks == Acks.ALL:
            await self._await_replication(part, info.last_offset)
        return ProduceResult(part.index, info.base_offset, info.last_offset, part.high_watermark,
                             part.log.log_start_offset)

    def deduplicating(self, topic: str) -> bool:
        """Whether sends to ``topic`` go through ``produce_unique`` (``message.deduplication``)."""
        return self.topic_flag(topic, DEDUP)

    async def produce_unique(self, topic: str, partition: int, ids: Sequence[int] | IdRun,
                             build: Callable[[list[bool]], bytes], acks: Acks = Acks.LEADER, *,
                             forward: bool = False) -> ProduceResult:
        """Append, of a send whose messages carry ``ids`` (in order, none 0), only those that are not
        replays for the partition's de-duplication table (broker/idempotence.py); ``build(keep)``
        returns the batch of the kept messages, in order (see ``_append_checked``).

        The table is rebuilt from the last ``message.deduplication.window`` offsets of the log by
        the first such send after a start (or after the settings changed or the topic was purged).
        """
        self.authorize("send", topic)
        if self.closing:
            raise BrokerShuttingDown()
        part = await self.ready_partition(topic, partition)
        if forward and self._led_elsewhere(part):  # the leader checks the ids (see produce)
            assert self.cluster is not None
            count = ids.count if isinstance(ids, IdRun) else len(ids)
            return await self.cluster.forward_produce(topic, partition, build([True] * count), acks,
                                                      deduplicate=True)
        return await self._append_checked(part, part.dedup_state, self._new_dedup_table, ids,
                                          lambda keep: (build(keep), None), acks)

    async def produce_idempotent(self, topic: str, partition: int, producers: Sequence[ProducerSequence],
                                 build: Callable[[list[bool]], tuple[bytes, Stamp | None]],
                                 acks: Acks = Acks.LEADER) -> ProduceResult:
        """Append, of a send whose messages carry (producer id, epoch, sequence) ``producers`` (in
        order), only those that are not replays for the partition's producer table
        (broker/idempotence.py); ``build(keep)`` returns the batch of the kept messages and the
        ``stamp`` that writes their offsets (see ``produce``; None: a Kafka batch, whose base offset is
        written in place and whose CRC is checked). Raises ProducerFenced or
        OutOfOrderSequence (nothing stored) when the producer rules refuse the send.

        The table is rebuilt from the active segment by the first such send after a start.
        """
        self.authorize("send", topic)
        if self.closing:
            raise BrokerShuttingDown()
        part = await self.ready_partition(topic, partition)
        return await self._append_checked(part, part.producer_state, self._new_producer_table,
                                          producers, build, acks)

    async def _append_checked(self, part: Partition, slot: Rebuilt[TableT],
                              new: Callable[[Partition], tuple[TableT, int]], keys: Any,
                              build: Callable[[list[bool]], tuple[bytes, Stamp | None]],
                              acks: Acks) -> ProduceResult:
        """The one idempotent produce step: check ``keys`` (one per message, in order) against the
        partition's table of ``slot`` (rebuilt from the log first, by ``new``'s table from its
        offset, if need be), append ``build(keep)``'s batch of the kept messages, commit. No await
        from the check to the commit, so concurrent sends to a partition cannot both store one
        sequence; the table changes only once the append succeeded.

        When every message is a replay nothing is appended and the result is an empty range at the
        log end: ``base_offset`` = the next offset, ``last_offset`` = ``base_offset - 1``; under
        fsync=always it is returned once the log is durable up to there (the replayed originals
        may still have been waiting for their fsync)."""
        await self._await_leadership(part)
        table = slot.table
        if table is None:
            table = await self._rebuilt(part, slot, new)
        self._check_leader(part)
        self._check_insync(part, acks)
        keep, staged = table.check(keys)
        if any(keep):
            batch, stamp = build(keep)
            if stamp is None:
                info = part.log.append(batch, leader_epoch=self._epoch(part))
            else:
                info = part.log.append(batch, verify_crc=False, stamp=stamp, leader_epoch=self._epoch(part))
            table.commit(staged)
            return await self._acknowledge(part, info, acks)
        end = part.log.next_offset
        if part.log.config.fsync.mode == "always" and part.log.durable_offset < end:
            await asyncio.get_running_loop().run_in_executor(self._io, part.log.sync_to, end)
        return ProduceResult(part.index, end, end - 1, part.high_watermark, part.log.log_start_offset)

    def _new_dedup_table(self, part: Partition) -> tuple[DedupTable, int]:
        """An empty message de-duplication table sized per the topic's settings, and the first
        offset its rebuild reads (the last ``message.deduplication.window`` ones)."""
        t = self.topics.get(part.topic)
        config = t.meta.config if t is not None else {}
        window = int(config.get(DEDUP_WINDOW, DEFAULT_WINDOW))
        return (DedupTable(int(config.get(DEDUP_PRODUCERS, DEFAULT_MAX_PRODUCERS))),
                max(part.log.log_start_offset, part.log.next_offset - window))

    @staticmethod
    def _new_producer_table(part: Partition) -> tuple[ProducerTable, int]:
        """An empty producer table, rebuilt from the active segment (older entries are past the
        producer expiry in practice)."""
        return ProducerTable(), max(part.log.log_start_offset, part.log.active.base_offset)

    async def _rebuilt(self, part: Partition, slot: Rebuilt[TableT],
                       new: Callable[[Partition], tuple[TableT, int]]) -> TableT:
        """The table of ``slot``, rebuilt from the partition's log first (one rebuild however many
        sends wait for it; a failed one is retried by the next send). Checks again that this
        broker may serve the partition, as the rebuild awaited."""
        task = slot.loading
        if task is None:
            task = asyncio.get_running_loop().create_task(self._rebuild(part, slot, new),
                                                          name=f"idempotence-{part.topic}-{part.index}")
            slot.loading = task
        try:
            table = await asyncio.shield(task)
        except Exception:
            if slot.loading is task:
                slot.loading = None
            raise
        self._check_serving(part)
        if self.closing:
            raise BrokerShuttingDown()
        return table

    async def _rebuild(self, part: Partition, slot: Rebuilt[TableT],
                       new: Callable[[Partition], tuple[TableT, int]]) -> TableT:
        generation = slot.generation
        table, offset = new(part)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        end = part.log.next_offset
        first = offset
        while True:
            offset = await loop.run_in_executor(self._io, rebuild, table, part.log, offset, end)
            if part.log.next_offset <= end:  # nothing appended meanwhile (and no await from here on)
                break
            offset, end = max(offset, end), part.log.next_offset
        if slot.generation == generation:
            slot.table = table
            slot.loading = None
        log.info("rebuilt %s of %s/%d from offsets %d-%d: %d producers in %.3f s",
                 table.KIND, part.topic, part.index, first, end - 1, len(table),
                 time.monotonic() - started)
        return table

    async def _await_replication(self, part: Partition, last_offset: int) -> None:
        deadline = time.monotonic() + self.config.ack_all_timeout_ms / 1000
        if part.cluster is not None:
            min_isr = self.min_insync_replicas(part.topic)
            while not (part.cluster.hw > last_offset and len(part.cluster.isr) >= min_isr):
                if part.cluster.hw > last_offset:  # the ISR shrank under min.insync after the append
                    isr = list(part.cluster.isr)
                    raise NotEnoughReplicasAfterAppend(
                        f"appended, but only {len(isr)} replicas remain in sync ({isr}), "
                        f"min.insync.replicas={min_isr}")
                left = deadline - time.monotonic()
                if left <= 0 or self.closing:
                    raise ReplicationTimeout()
                if not part.cluster.is_leader:
                    raise NotLeader(leader=self.cluster.leader_of(part) if self.cluster else None)
                await part.wait_for_data(min(left, 0.05))
            return
        while not part.replicas.acks_all_satisfied(last_offset, part.leader_last):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReplicationTimeout()
            await asyncio.sleep(min(0.002, left))

    async def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20,
                    max_records: int | None = None, max_wait_ms: int = 0, min_bytes: int = 1,
                    upto_log_end: bool = False, from_log_start: bool = False) -> FetchResult:
        """Whole batches from the one holding ``offset`` up to the high watermark, at most
        ``max_bytes`` and (batch-granular) ``max_records``, but always at least one batch.

        With ``max_wait_ms``, waits until at least ``min_bytes`` are available or the time passes.
        An offset below the log start raises OffsetOutOfRange, or with ``from_log_start`` reads
        from the log start instead (V1 and Iggy clamp so); one at or past the end returns nothing
        (after the wait). ``upto_log_end`` reads past the high watermark (replica fetches).
        Retention may remove the segment while the read runs: the start is then checked again,
        never answered as an empty read.
        """
        self.authorize("poll", topic)
        if upto_log_end:  # records not yet committed: a replica's read (V1 BROKER_FETCH), not a consumer's
            self.authorizer.check("manage_servers")
        part = await self.ready_partition(topic, partition)
        if not upto_log_end:
            self._check_replica(part)
        if offset < 0:
            raise OffsetOutOfRange(f"negative offset {offset}")
        deadline = time.monotonic() + max_wait_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            # registered before the log end is read: an append during the read still wakes us
            waiter = part.data_waiter() if max_wait_ms > 0 else None
            try:
                hw = part.log.next_offset if upto_log_end else part.high_watermark
                start = part.log.log_start_offset
                if offset < start:
                    if not from_log_start:
                        raise OffsetOutOfRange(f"offset {offset} is below the log start {start}")
                    offset = start
                if offset < hw:
                    r = await loop.run_in_executor(self._io, self._read, part, offset, max_bytes, hw,
                                                   max_records)
                    if r is None and offset < part.log.log_start_offset:
                        continue  # retention removed the segment meanwhile: check the new start
                    if r is not None and (len(r.data) >= min_bytes or time.monotonic() >= deadline):
                        if not upto_log_end:  # a follower's copy is not client traffic
                            part.bytes_out += len(r.data)
                            part.records_out += r.record_count
                        return r
                left = deadline - time.monotonic()
                if left <= 0 or self.closing:
                    return FetchResult(b"", 0, offset, hw, start, part.log.next_offset)
                await part.wait_for_data(left, waiter)
            finally:
                if waiter is not None:
                    part.forget_waiter(waiter)
            self._check_serving(part)

    def check_readable(self, topic: str, partition: int) -> None:
        """Raise NotLeader (naming the leader) when this broker holds no replica of the partition
        (cluster mode): consumers are sent where the records are instead of reading nothing."""
        self.authorize("poll", topic)
        self._check_replica(self.partition(topic, partition))

    def _check_replica(self, part: Partition) -> None:
        rs = part.cluster
        if rs is not None and rs.me not in rs.replicas and not rs.is_leader:
            raise NotLeader(leader=self.cluster.leader_of(part) if self.cluster else None)

    def _check_serving(self, part: Partition) -> None:
        """Raise if ``part`` was deleted (with its topic, or by remove_partitions) meanwhile."""
        t = self.topics.get(part.topic)
        if t is None:
            raise UnknownTopic(f"unknown topic {part.topic}")
        if part.index >= len(t.partitions) or t.partitions[part.index] is not part:
            raise UnknownPartition(f"partition {part.index} of topic {part.topic} was deleted")

    @staticmethod
    def _read(part: Partition, offset: int, max_bytes: int, hw: int,
              max_records: int | None) -> FetchResult | None:
        try:
            r = part.log.read(offset, max_bytes, max_offset=hw, max_records=max_records)
        except OffsetOutOfRange:
            return None
        return FetchResult(r.data, r.record_count, r.next_offset, hw, r.log_start_offset, r.log_end_offset)

    async def locate(self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20,
                     payload_only: bool = False) -> FileSpan | None:
        """Where the batches a fetch from ``offset`` (up to the high watermark) would return lie in
        one segment file, for zero-copy serving; None when nothing is visible yet. An offset below
        the log start raises OffsetOutOfRange."""
        self.authorize("poll", topic)
        part = await self.ready_partition(topic, partition)
        self._check_replica(part)
        return await asyncio.get_running_loop().run_in_executor(
            self._io, lambda: part.log.locate(offset, max_bytes, max_offset=part.high_watermark,
                                              payload_only=payload_only))

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        self.authorize("poll", topic)
        part = await self.ready_partition(topic, partition)
        self._check_replica(part)
        return await asyncio.get_running_loop().run_in_executor(
            self._io, part.log.offset_for_timestamp, timestamp)

    # -- roles and follower progress (single node) ---------------------------------------------

    async def set_partition_role(self, topic: str, partition: int, role: str) -> Partition:
        """Make this broker lead or follow ``partition``. In cluster mode leadership moves in
        ZooKeeper: ``leader`` makes this broker the leader (it must be a live member of the ISR),
        ``follower`` hands leadership to another live ISR member; the partition follows when the
        new state reaches it."""
        self.authorizer.check("manage_servers")  # a flux-era replication command
        if role not in (LEADER, FOLLOWER):
            raise InvalidRequest("invalid role")
        if self.cluster is not None:
            part = await self.ready_partition(topic, partition)
            rs = part.cluster
            if rs is None:
                raise NotLeader("the partition's cluster state is not known yet")
            me = self.config.broker_id
            if role == LEADER and not rs.is_leader:
                await self.cluster.set_leader(topic, partition, me, [])
            elif role == FOLLOWER and rs.is_leader:
                live = self.cluster.live_brokers()
                others = [b for b in rs.isr if b != me and b in live]
                if not others:
                    raise InvalidRequest("no other live in-sync replica to hand the leadership to")
                await self.cluster.set_leader(topic, partition, others[0], [])
            await self.cluster.await_role(part, role)
            return part
        t = await self.ensure_topic(topic)
        if not 0 <= partition < len(t.partitions):
            raise UnknownPartition(f"partition not found: topic={topic} partition={partition}")
        part = t.partitions[partition]
        part.role = role
        meta = self.metadata.partitions.get((topic, partition))
        if meta is not None and meta.leader != self.config.broker_id:
            self.metadata.set_leader(topic, partition, self.config.broker_id, None)
        return part

    async def replica_progress(self, topic: str, partition: int, replica_id: int,
                               offset: int) -> ReplicaReport:
        """Record that follower ``replica_id`` holds everything up to ``offset`` (inclusive).

        In cluster mode progress comes only from the followers' own fetches (a report could
        otherwise acknowledge records no replica holds): the reply is the real state, checked like
        a report (the partition led here, the id one of its replicas)."""
        self.authorizer.check("manage_servers")  # a flux-era replication command
        if self.cluster is not None:
            part = await self.ready_partition(topic, partition)
            rs = part.cluster
            if rs is None or not rs.is_leader:
                raise NotLeader("partition is not leader")
            if replica_id not in rs.replicas or replica_id == rs.me:
                raise InvalidRequest("invalid replica id")
            min_isr = self.min_insync_replicas(topic)
            return ReplicaReport(offset, part.high_watermark - 1, rs.isr, len(rs.isr) < min_isr)
        # rtes.md 7.9: the replica id is checked first. Both refusals come before the implicit
        # creation: a rejected report must leave nothing behind.
        if not 1 <= replica_id < self.config.replication_factor:
            raise InvalidRequest("invalid replica id")
        if topic not in self.topics and not 0 <= partition < self.config.default_partitions:
            raise UnknownPartition(f"topic {topic} has no partition {partition}")
        t = await self.ensure_topic(topic)
        if not 0 <= partition < len(t.partitions):
            raise UnknownPartition(f"topic {topic} has no partition {partition}")
        part = t.partitions[partition]
        if not part.replicas.valid_replica(replica_id):
            raise InvalidRequest("invalid replica id")
        if part.role != LEADER:
            raise NotLeader("partition is not leader")
        part.replicas.report(replica_id, offset, part.leader_last)
        part.notify()
        isr = tuple(part.replicas.isr(part.leader_last))
        return ReplicaReport(offset, part.high_watermark - 1, isr, len(isr) < part.replicas.min_isr)

    # -- consumer groups and offsets -----------------------------------------------------------

    def _shared_group(self, group: str, policy: GroupPolicy | None = None) -> bool:
        """Cluster mode keeps V1 and Iggy groups in ZooKeeper, so members on different brokers
        form one group and it survives any broker (neither protocol has a coordinator to find).
        Cursus groups live in the memory of their coordinator broker (FIND_COORDINATOR)."""
        if self.cluster is None:
            return False
        if policy is not None:
            return policy is not CURSUS_POLICY
        g = self.groups.groups.get(group)
        return g is None or g.policy is not CURSUS_POLICY

    async def _in_cluster(self, group: str, op: Callable[[], T]) -> T:
        """Run a group operation on the state ZooKeeper holds: read it, apply ``op``, write the
        result back with a compare-and-set (again from the newer state when another broker wrote
        first). State changes made before an error (an expiry sweep) are written too."""
        assert self.cluster is not None
        while True:
            data, version = await self.cluster.group_state(group)
            self.groups.replace_group(group, data)
            error: Exception | None = None
            try:
                result = op()
            except Exception as exc:  # a group error: raised once the state is written
                error = exc
            new = self.groups.group_json(group)
            if new != data:
                if not await self.cluster.set_group_state(group, new, version):
                    continue
                self._groups_dirty = True
            if error is not None:
                raise error
            return result

    async def join_group(self, group: str, topic: str, member: str, assignor: str | None = None,
                         policy: GroupPolicy = RTES_POLICY) -> GroupView:
        self.authorize("poll", topic)
        if self._shared_group(group, policy):
            return await self._in_cluster(
                group, lambda: self.groups.join(group, topic, member, assignor, policy))
        view = self.groups.join(group, topic, member, assignor, policy)
        await self._groups_file.save()
        return view

    async def register_group(self, group: str, topic: str, policy: GroupPolicy,
                             assignor: str | None = None) -> GroupDescription:
        """Register ``group`` for ``topic`` (no member joins); the existing group if there is one."""
        self.authorize("poll", topic)
        partitions = None if policy.rebind_topic else self.partition_count(topic)
        if self._shared_group(group, policy):
            return await self._in_cluster(group, lambda: self.groups.describe(
                self.groups.register(group, topic, policy, assignor, partitions).name))
        existed = group in self.groups.groups
        self.groups.register(group, topic, policy, assignor, partitions)
        if not existed:
            await self._groups_file.save()
        return self.groups.describe(group)

    async def forget_shared_partitions(self, topic: str, keep: int) -> None:
        """Cluster mode, partitions ``keep`` and beyond of ``topic`` are gone: the shared groups on
        it (kept in ZooKeeper) drop them from their assignments, once, by the broker that removed
        them (every broker drops its own copy's when it removes the partitions)."""
        assert self.cluster is not None
        for group, (policy, bound) in (await self.cluster.shared_groups()).items():
            if bound == topic and policy != CURSUS_POLICY.name:
                await self._in_cluster(group, lambda: self.groups.forget_partitions(topic, keep))

    async def current_group(self, group: str) -> GroupDescription:
        """The group as it is now: in cluster mode a shared group is read from ZooKeeper (another
        broker's members may have changed it), otherwise as ``describe_group``."""
        if self._shared_group(group):
            return await self._in_cluster(group, lambda: self.groups.describe(group))
        return self.groups.describe(group)

    async def drop_group_members(self, group: str, gone: Callable[[str], bool]) -> None:
        """Remove the members for which ``gone`` holds (see GroupCoordinator.drop_members)."""
        if self._shared_group(group):
            await self._in_cluster(group, lambda: self.groups.drop_members(group, gone))
        elif self.groups.drop_members(group, gone):
            await self._groups_file.save()

    async def resume_group(self, group: str, topic: str, member: str, generation: int) -> GroupView:
        self.authorize("poll", topic)
        before = self._generation(group)
        try:
            return self.groups.resume(group, topic, member, generation)
        finally:
            if self._generation(group) != before:
                await self._groups_file.save()

    async def sync_group(self, group: str, topic: str, member: str, generation: int) -> GroupView:
        self.authorize("poll", topic)
        if self._shared_group(group):
            return await self._in_cluster(
                group, lambda: self.groups.sync(group, topic, member, generation))
        before = self._generation(group)
        try:
            view = self.groups.sync(group, topic, member, generation)
        except Exception:
            if self._generation(group) != before:  # the expiry sweep removed someone
                await self._groups_file.save()
            raise
        await self._groups_file.save()
        return view

    async def heartbeat(self, group: str, topic: str, member: str, generation: int) -> None:
        self.authorize("poll", topic)
        if self._shared_group(group):
            return await self._in_cluster(
                group, lambda: self.groups.heartbeat(group, topic, member, generation))
        before = self._generation(group)
        try:
            self.groups.heartbeat(group, topic, member, generation)
        finally:
            if self._generation(group) != before:
                await self._groups_file.save()
        self._groups_dirty = True

    async def leave_group(self, group: str, topic: str, member: str, generation: int | None) -> None:
        if self._shared_group(group):
            return await self._in_cluster(
                group, lambda: self.groups.leave(group, topic, member, generation))
        try:
            self.groups.leave(group, topic, member, generation)
        finally:
            await self._groups_file.save()

    async def commit_offset(self, group: str, topic: str, partition: int, offset: int, *,
                            member: str | None = None, generation: int | None = None) -> None:
        """Store a committed offset durably; with a member, check its generation and ownership."""
        self.authorize("poll", topic)
        if offset < 0:
            raise OffsetOutOfRange("invalid offset")
        if member is not None and generation is not None:
            await self._check_commit(group, topic, member, generation, (partition,))
        if self.cluster is not None:  # the cluster's copy first: an adoption never reverts this
            self.groups.check_offsets(group, topic, {partition: offset})
            self._offset_written((group, topic, partition))
            await self.cluster.publish_offsets(group, topic, {partition: offset})
        self.groups.store_offset(group, topic, partition, offset)
        await self._offsets_file.save()

    async def _check_commit(self, group: str, topic: str, member: str, generation: int,
                            partitions: Iterable[int]) -> None:
        """A member's commit is valid: group, expiry, generation, membership, ownership."""
        def check() -> None:
            for p in partitions:
                self.groups.check_commit(group, topic, member, generation, p)

        if self._shared_group(group):
            await self._in_cluster(group, check)
            return
        before = self._generation(group)
        try:
            check()
        finally:
            if self._generation(group) != before:
                await self._groups_file.save()

    def _offset_written(self, key: tuple[str, str, int]) -> None:
        """Cluster mode: ``key`` changes locally now (an adoption read earlier must not undo it)."""
        self._offset_clock += 1
        self._offset_stamps[key] = self._offset_clock

    def offsets_mark(self) -> int:
        return self._offset_clock

    async def commit_offsets(self, group: str, topic: str, entries: dict[int, int], *,
                             member: str, generation: int) -> None:
        """Commit several partitions at once, all or nothing, each checked for ownership."""
        self.authorize("poll", topic)
        if any(off < 0 for off in entries.values()):
            raise OffsetOutOfRange("invalid offset")
        await self._check_commit(group, topic, member, generation, entries)
        self.groups.check_offsets(group, topic, entries)
        if self.cluster is not None:  # the cluster's copy first: an adoption never reverts this
            for p in entries:
                self._offset_written((group, topic, p))
            await self.cluster.publish_offsets(group, topic, dict(entries))
        for p, off in entries.items():
            self.groups.store_offset(group, topic, p, off)
        await self._offsets_file.save()

    def adopt_offsets(self, offsets: dict[tuple[str, str, int], int], *, since: int) -> bool:
        """Cluster mode: make the committed offsets those of the cluster's copy (read after
        ``offsets_mark()`` returned ``since``), except the ones changed here since; whether any
        changed."""
        changed = False
        fresh = {k for k, stamp in self._offset_stamps.items() if stamp > since}
        for key, off in offsets.items():
            if key not in fresh and self.groups.offsets.get(key) != off:
                self.groups.offsets[key] = off
                changed = True
        for key in [k for k in self.groups.offsets if k not in offsets and k not in fresh]:
            del self.groups.offsets[key]
            changed = True
        for key in [k for k, stamp in self._offset_stamps.items() if stamp <= since]:
            del self._offset_stamps[key]
        return changed

    async def save_offsets(self) -> None:
        await self._offsets_file.save()

    def _group_topics(self, group: str) -> set[str]:
        """The topics a group is about: the one it lives in, and every topic it has offsets for."""
        g = self.groups.groups.get(group)
        topics = {k[1] for k in self.groups.offsets if k[0] == group}
        if g is not None:
            topics.add(g.topic)
        return topics

    def _authorize_group(self, group: str) -> None:
        """A group's state is its consumers': whoever may poll every topic it is about may see and
        change it (Kafka asks Describe/Delete on the group; Iggy's groups live in their topic)."""
        for topic in sorted(self._group_topics(group)):
            self.authorizer.check_topic("poll", topic)

    def list_groups(self) -> list[str]:
        """The groups the caller may see: those whose every topic it may describe."""
        return [name for name in self.groups.list_groups()
                if len(self.visible_topics_of(self._group_topics(name))) == len(self._group_topics(name))]

    async def reset_group_members(self, group: str) -> None:
        self._authorize_group(group)
        if self.groups.reset_members(group):
            await self._groups_file.save()

    async def delete_group(self, group: str) -> None:
        """Remove a group and its committed offsets (a missing group is not an error)."""
        self._authorize_group(group)
        if self.cluster is not None:
            for key in [k for k in self.groups.offsets if k[0] == group]:
                self._offset_written(key)
            await self.cluster.forget_group(group)
        if self.groups.delete_group(group):
            await self._groups_file.save()
            await self._offsets_file.save()

    async def delete_committed_offset(self, group: str, topic: str, partition: int) -> bool:
        self.authorize("poll", topic)
        if await self.current_committed_offset(group, topic, partition) is None:
            return False
        if self.cluster is not None:  # the cluster's copy first, as for commits
            self._offset_written((group, topic, partition))
            await self.cluster.forget_offset(group, topic, partition)
        self.groups.delete_offset(group, topic, partition)
        await self._offsets_file.save()
        return True

    async def flush_partition(self, topic: str, partition: int) -> None:
        """fsync everything appended to a partition so far."""
        self.authorize("send", topic)
        part = self.partition(topic, partition)
        await asyncio.get_running_loop().run_in_executor(self._io, part.log.flush)

    def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        self.authorize("poll", topic)
        return self.groups.committed(group, topic, partition)

    async def current_committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        """The committed offset as the cluster has it now (a commit made through another broker
        a moment ago included); on a single node the same as ``committed_offset``."""
        self.authorize("poll", topic)
        if self.cluster is None:
            return self.groups.committed(group, topic, partition)
        return await self.cluster.committed_offset(group, topic, partition)

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Every committed offset of ``group`` whose topic the caller may poll, by (topic,
        partition): what Kafka's OffsetFetch of all topics answers."""
        out: dict[tuple[str, int], int] = {}
        for (g, topic, partition), offset in self.groups.offsets.items():
            if g == group:
                try:
                    self.authorizer.check_topic("poll", topic)
                except Unauthorized:
                    continue
                out[(topic, partition)] = offset
        return out

    def describe_group(self, group: str) -> GroupDescription:
        self._authorize_group(group)
        return self.groups.describe(group)

    def _generation(self, group: str) -> int:
        g = self.groups.groups.get(group)
        return g.generation if g else 0

    # -- the front ends' facade ----------------------------------------------------------------
    # Lookups the protocol services need for their replies, so that server/ never reaches into
    # the broker's internals (the group table, topic metadata, partitions' logs, the storage
    # layout). They check no authorization: the request they answer was checked by the call
    # it made (or answers an error that names only what the client sent).

    @staticmethod
    def check_topic_name(name: str) -> str:
        """``name`` if it is a valid topic name; raises InvalidTopicName (storage's rule)."""
        return validate_topic_name(name)

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

    def partition_dir(self, topic: str, partition: int) -> Path:
        """The directory holding the partition's log (TANK keeps a per-partition config file there)."""
        return self.partition(topic, partition).log.dir

    def partition_replicas(self, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
        """(leader, replicas, ISR) of a partition: this broker alone when standalone; in cluster
        mode ZooKeeper's as this broker last read them (leader -1 and an empty ISR while none)."""
        me = self.config.broker_id
        if self.cluster is None:
            return me, [me], [me]
        snap = self.cluster.snapshot
        assignment = snap.topics.get(topic) if snap is not None else None
        entry = snap.states.get((topic, partition)) if snap is not None else None
        return (entry[0].leader if entry is not None else -1,
                list(assignment.partitions.get(partition, ())) if assignment is not None else [],
                list(entry[0].isr) if entry is not None else [])

    def next_round_robin(self, topic: str, partitions: int) -> int:
        """The partition for the topic's next unkeyed, unpartitioned record, in turn."""
        part0 = self.partition(topic, 0)
        p = part0.round_robin % partitions
        part0.round_robin += 1
        return p

    def group_generation(self, group: str) -> int:
        """The group's generation (0 when there is no such group)."""
        return self._generation(group)

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
        return self.cluster is not None

    def shared_documents(self) -> SharedDocuments | None:
        """The documents and locks every broker of the cluster shares (the Iggy catalog and
        users); None when standalone."""
        return self.cluster

    def connection_ids(self) -> range | None:
        """The connection-bound member ids this broker hands out in a cluster: they carry its
        broker id, so that the cluster can drop the members of a dead or restarted broker
        (broker/cluster/controller.py, ``reap_members``). None when standalone: any id."""
        if self.cluster is None:
            return None
        base = connection_member_base(self.config.broker_id)
        return range(base + 1, base + (1 << MEMBER_BROKER_SHIFT))

    def listener_endpoints(self, listener: str) -> list[Endpoint] | None:
        """Every live broker with a ``listener`` (a protocol's name), by broker id, and which one
        is the controller; None when standalone."""
        cluster = self.cluster
        if cluster is None:
            return None
        controller = cluster.snapshot.controller if cluster.snapshot is not None else None
        return [Endpoint(b, reg.host, reg.endpoints[listener], b == controller)
                for b, reg in sorted(cluster.live_brokers().items()) if listener in reg.endpoints]

    async def fetch_at_leader(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        """A consumer's read at the partition's leader, for a broker holding no replica of it
        (cluster mode): batches from ``offset`` below the leader's high watermark, with that
        watermark and the log start (``max_bytes`` 0: only those two). NotLeader standalone."""
        if self.cluster is None:
            raise NotLeader(f"this broker holds no replica of {topic}/{partition}")
        return await self.cluster.consumer_fetch(topic, partition, offset, max_bytes)

    # -- background work -----------------------------------------------------------------------

    def _background(self, name: str, step: Callable[[], Awaitable[object]],
                    interval: Callable[[], float] | float) -> Coroutine[Any, Any, None]:
        """A periodic task that logs failures and retries with backoff (broker/background.py)."""
        return run_forever(name, step, interval, retry_s=self.config.background_retry_ms / 1000,
                           retry_max_s=self.config.background_retry_max_ms / 1000, logger=log)

    async def run_retention(self, loop: asyncio.AbstractEventLoop | None = None) -> int:
        """Apply retention to every partition; one partition's failure does not stop the others
        (it is logged and retried on the next pass)."""
        loop = loop or asyncio.get_running_loop()
        deleted = 0
        failed = 0
        for topic in list(self.topics.values()):
            for part in list(topic.partitions):
                try:
                    deleted += await loop.run_in_executor(self._io, part.log.apply_retention, None)
                except (OSError, BayouError):
                    failed += 1
                    log.exception("retention failed for %s/%d", part.topic, part.index)
        self.store.handles.sweep()
        if failed:
            raise StorageError(f"retention failed for {failed} partitions")
        return deleted

    def _flush_tick(self) -> float:
        intervals = [p.log.config.fsync.interval_ms for t in self.topics.values()
                     for p in t.partitions if p.log.config.fsync.mode == "interval"]
        return max(0.005, min(intervals) / 1000) if intervals else 0.2

    async def _flush_due(self) -> None:
        """fsync the partitions under ``fsync = interval:<ms>`` whose interval has passed. A
        partition whose fsync fails is logged and retried on the next tick (its data stays
        dirty); the others are flushed regardless."""
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        failed = 0
        for topic in list(self.topics.values()):
            for part in list(topic.partitions):
                pol = part.log.config.fsync
                if pol.mode != "interval" or now - part.last_flush < pol.interval_ms / 1000:
                    continue
                if part.log.durable_offset < part.log.next_offset:
                    try:
                        await loop.run_in_executor(self._io, part.log.flush)
                    except (OSError, BayouError):
                        failed += 1
                        log.exception("flush failed for %s/%d", part.topic, part.index)
                        continue
                part.last_flush = now
        if failed:
            raise StorageError(f"flush failed for {failed} partitions")

    async def _expire_members(self) -> None:
        """Sweep the groups whose policy expires members in the background (Cursus: every 5 s)."""
        if self.groups.sweep_all(active_only=True):
            await self._groups_file.save(wait=False)

    async def _persist_groups_if_dirty(self) -> None:
        if self._groups_dirty:
            self._groups_dirty = False
            await self._groups_file.save(wait=False)

    def stats(self) -> dict[str, Any]:
        return {
            "topics": len(self.topics),
            "partitions": sum(len(t.partitions) for t in self.topics.values()),
            "groups": len(self.groups.groups),
        }


__all__ = ["Acks", "Broker", "FetchResult", "PartitionLog", "ProduceResult", "TopicInfo"]
