"""Topic lifecycle and configs: create, delete, grow and shrink, purge, delete segments, alter
config, describe, and the topic config keys the broker itself reads.

Each change is checked here (authorization, names, limits) and then decided by the metadata store
(broker/coordination.py): a single node's own files at once, or in cluster mode ZooKeeper, after
which every broker's reconciler makes its local copy with the ``open_topic``, ``drop_topic``,
``grow_topic`` and ``shrink_topic`` steps below.
"""

from __future__ import annotations

import asyncio
import logging

from bayou.broker.authz import current_principal
from bayou.broker.context import BrokerContext
from bayou.broker.model import PartitionInfo, Topic, TopicInfo
from bayou.broker.partition import Partition
from bayou.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidRequest,
    PartitionLimitReached,
    StorageError,
    TopicAlreadyExists,
    Unauthorized,
    UnknownTopic,
)
from bayou.storage import LogConfig, TopicMeta, apply_overrides, validate_topic_name
from bayou.storage.config import TOPIC_CONFIG_KEYS

log = logging.getLogger("bayou.broker")

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


def split_topic_config(config: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
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


class TopicAdmin:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    async def create_topic(self, name: str, partitions: int | None = None,
                           config: dict[str, str] | None = None, *, exist_ok: bool = False) -> Topic:
        """Create ``name`` through the metadata store. In cluster mode the topic is created in
        ZooKeeper (replicas assigned over the live brokers) and every broker, this one included,
        opens its partitions when it sees it (``open_topic``)."""
        self.ctx.authorize("manage_topics", name)
        n, overrides, _log_cfg = self._topic_spec(name, partitions, config)
        if not (exist_ok and name in self.ctx.topics):
            self._check_partition_limit(n)
        # In cluster mode ZooKeeper decides whether it exists (exist_ok: the copy returned is
        # ZooKeeper's incarnation): a local copy may be of a topic just deleted through another broker
        return await self.ctx.metadata_store.create_topic(name, n, overrides, exist_ok=exist_ok)

    def _topic_spec(self, name: str, partitions: int | None,
                    config: dict[str, str] | None) -> tuple[int, dict[str, str], LogConfig]:
        """(partitions, validated overrides, log config) of a topic to create."""
        validate_topic_name(name)
        n = self.ctx.config.default_partitions if partitions is None else partitions
        if not 1 <= n <= MAX_PARTITIONS:
            raise InvalidPartitions(f"partitions must be between 1 and {MAX_PARTITIONS}")
        broker_keys, log_keys = split_topic_config(dict(config or {}))
        log_cfg = apply_overrides(self.ctx.config.log, log_keys)
        return n, {**log_keys, **broker_keys}, log_cfg

    async def open_topic(self, name: str, partitions: int, config: dict[str, str], *,
                         exist_ok: bool = False, limited: bool = False) -> Topic:
        """Make the local copy of ``name``: where a single node's ``create_topic`` ends, and what
        the cluster's reconciler does for each topic ZooKeeper has (not ``limited`` by
        max_partitions then: the cluster decided)."""
        n, overrides, log_cfg = self._topic_spec(name, partitions, config)
        async with self.ctx.admin_lock:
            existing = self.ctx.topics.get(name)
            if existing is not None:
                if exist_ok:
                    return existing
                raise TopicAlreadyExists(f"topic {name} already exists")
            if limited:  # again under the lock: a concurrent create may have filled it
                self._check_partition_limit(n)
            meta = TopicMeta(name, n, overrides)
            loop = asyncio.get_running_loop()
            topic = await loop.run_in_executor(self.ctx.io, self._create_topic_files, meta, log_cfg)
            self.ctx.topics[name] = topic
            self.ctx.metadata.add_topic(name, n, self.ctx.topic_rf(meta))
            log.info("created topic %s with %d partitions", name, n)
            return topic

    def partition_total(self) -> int:
        """Partitions this broker holds, over every topic."""
        return sum(len(t.partitions) for t in self.ctx.topics.values())

    def _check_partition_limit(self, more: int) -> None:
        have = self.partition_total()
        if have + more > self.ctx.config.max_partitions:
            raise PartitionLimitReached(
                f"the broker holds {have} partitions; {more} more would pass max_partitions "
                f"({self.ctx.config.max_partitions})")

    def _create_topic_files(self, meta: TopicMeta, cfg: LogConfig) -> Topic:
        topic = Topic(meta, cfg)
        try:
            self.ctx.store.write_topic(meta)
            for p in range(meta.partitions):
                part = Partition(meta.name, p, self.ctx.store.open_log(meta.name, p, cfg), self.ctx.config)
                part.replica_state = self.ctx.replica_state
                topic.partitions.append(part)
        except OSError as exc:  # a full disk: undo what was made, answer an error
            self._close_partitions(topic.partitions)
            try:
                self.ctx.store.delete_topic(meta.name)
            except OSError:
                log.exception("could not remove the half-created topic %s", meta.name)
            raise StorageError(f"cannot create topic {meta.name}: {exc}") from exc
        return topic

    async def ensure_topic(self, name: str) -> Topic:
        """The topic, created with defaults first if auto-creation is on."""
        topic = self.ctx.topics.get(name)
        if topic is not None:
            return topic
        validate_topic_name(name)
        if not self.ctx.config.auto_create_topics:
            raise UnknownTopic(f"unknown topic {name}")
        return await self.create_topic(name, exist_ok=True)

    def list_topics(self) -> list[str]:
        return sorted(self.ctx.topics)

    def visible_topics(self) -> list[str]:
        """The topics the caller may describe, sorted: what a listing shows it (Kafka's
        metadata rule). ``list_topics`` is every topic, for bayou's own use."""
        return self.ctx.authorizer.describable(sorted(self.ctx.topics))

    def check_describe(self, name: str) -> None:
        """Raise Unauthorized unless the caller may describe ``name`` (see ``visible_topics``)."""
        if not self.ctx.visible_topics_of((name,)):
            raise Unauthorized(f"{current_principal()} may not describe topic {name}")

    def describe_topic(self, name: str) -> TopicInfo:
        self.check_describe(name)
        t = self.ctx.topic(name)
        parts = tuple(
            PartitionInfo(p.index, p.role, p.log.log_start_offset, p.log.next_offset, p.high_watermark,
                          p.log.size_bytes, len(p.log.segments), p.log.offline_reason)
            for p in t.partitions
        )
        return TopicInfo(name, parts, dict(t.meta.config))

    async def delete_topic(self, name: str) -> None:
        self.ctx.authorize("manage_topics", name)
        self.ctx.topic(name)
        await self.ctx.metadata_store.delete_topic(name)

    async def drop_topic(self, name: str) -> None:
        """Delete the local copy of ``name`` (a single node's ``delete_topic``, or the cluster's
        reconciler following ZooKeeper)."""
        async with self.ctx.admin_lock:
            topic = self.ctx.topic(name)
            del self.ctx.topics[name]
            for part in topic.partitions:
                part.notify()
            loop = asyncio.get_running_loop()
            # Close its files at once, so the space is free now (a read in a worker thread
            # finishes first, a zero-copy send sees end-of-file: storage/handles.py).
            await loop.run_in_executor(self.ctx.io, self._delete_topic_files, name, topic)
            self.ctx.metadata.remove_topic(name)
            self.ctx.groups.forget_topic(name)
            await self.ctx.offsets_file.save()
            log.info("deleted topic %s", name)

    def _delete_topic_files(self, name: str, topic: Topic) -> None:
        try:
            self.ctx.store.delete_topic(name)
        finally:
            self._close_partitions(topic.partitions)

    @staticmethod
    def _close_partitions(parts: list[Partition]) -> None:
        for part in parts:
            part.log.close()

    async def add_partitions(self, name: str, total: int) -> Topic:
        """Grow a topic to ``total`` partitions (cluster mode: in ZooKeeper, which every broker
        then follows)."""
        self.ctx.authorize("manage_topics", name)
        topic = self.ctx.topic(name)
        self._check_new_total(name, topic, total)
        self._check_partition_limit(total - len(topic.partitions))
        return await self.ctx.metadata_store.add_partitions(name, total)

    @staticmethod
    def _check_new_total(name: str, topic: Topic, total: int) -> None:
        if total <= len(topic.partitions) or total > MAX_PARTITIONS:
            raise InvalidPartitions(
                f"topic {name} has {len(topic.partitions)} partitions; the new count must be larger")

    async def grow_partitions(self, name: str, more: int) -> Topic:
        """Add ``more`` partitions (Iggy CREATE_PARTITIONS); cluster mode counts from ZooKeeper's
        partition count, which this broker's copy may lag."""
        self.ctx.authorize("manage_topics", name)
        have = len(self.ctx.topic(name).partitions)
        if more < 1 or have + more > MAX_PARTITIONS:
            raise InvalidPartitions(f"cannot add {more} partitions to the {have} of topic {name}")
        self._check_partition_limit(more)
        return await self.ctx.metadata_store.add_partitions(name, None, more)

    async def grow_topic(self, name: str, total: int, *, limited: bool = False) -> Topic:
        """Grow the local copy of ``name`` to ``total`` partitions: a single node's
        ``add_partitions`` (``limited``: checked against max_partitions and the count in place),
        or the cluster's reconciler following ZooKeeper (a count already reached is no error)."""
        if not limited:
            self._check_new_total(name, self.ctx.topic(name), total)
        async with self.ctx.admin_lock:
            topic = self.ctx.topic(name)
            have = len(topic.partitions)
            if total <= have:  # another change got there first
                if not limited:
                    return topic
                raise InvalidPartitions(f"topic {name} has {have} partitions; the new count must be larger")
            if limited:
                self._check_partition_limit(total - have)
            loop = asyncio.get_running_loop()

            def _add() -> list[Partition]:
                new = [Partition(name, p, self.ctx.store.open_log(name, p, topic.log_config), self.ctx.config)
                       for p in range(have, total)]
                for part in new:
                    part.replica_state = self.ctx.replica_state
                topic.meta.partitions = total
                self.ctx.store.write_topic(topic.meta)
                return new

            topic.partitions.extend(await loop.run_in_executor(self.ctx.io, _add))
            self.ctx.metadata.add_topic(name, total, self.ctx.topic_rf(topic.meta))
            return topic

    async def remove_partitions(self, name: str, count: int) -> Topic:
        """Remove the last ``count`` partitions (Iggy DELETE_PARTITIONS); at least one must stay.

        Their data, committed offsets and group assignments go; long-polls on them end with
        UnknownPartition. The new count is written before the directories go, so a crash in
        between leaves directories that the next start removes. Cluster mode: in ZooKeeper,
        which every broker then follows.
        """
        self.ctx.authorize("manage_topics", name)
        have = len(self.ctx.topic(name).partitions)
        if not 1 <= count < have:
            raise InvalidPartitions(
                f"topic {name} has {have} partitions: can remove 1 to {have - 1}, not {count}")
        return await self.ctx.metadata_store.remove_partitions(name, count)

    async def shrink_topic(self, name: str, count: int) -> Topic:
        """Remove the last ``count`` partitions of the local copy of ``name`` (a single node's
        ``remove_partitions``, or the cluster's reconciler following ZooKeeper)."""
        async with self.ctx.admin_lock:
            topic = self.ctx.topic(name)
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
                self.ctx.store.write_topic(topic.meta)
                for part in removed:
                    try:
                        self.ctx.store.delete_partition(name, part.index)
                    except OSError:  # the new count is durable: the next start removes it
                        log.exception("could not delete %s/%d", name, part.index)

            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self.ctx.io, _remove)
            except Exception:  # the new count was not written: nothing changed
                topic.partitions.extend(removed)
                topic.meta.partitions = have
                raise
            for part in removed:
                part.notify()
            self.ctx.metadata.add_topic(name, keep, self.ctx.topic_rf(topic.meta))
            await loop.run_in_executor(self.ctx.io, self._close_partitions, removed)
            if self.ctx.groups.forget_partitions(name, keep):
                await self.ctx.groups_file.save()
            await self.ctx.offsets_file.save()
            log.info("removed partitions %d-%d of topic %s", keep, have - 1, name)
            return topic

    async def purge_topic(self, name: str) -> None:
        """Delete every record of every partition; offsets are not reused (Iggy PURGE_TOPIC).

        Each log then starts at its old end. Committed offsets stay: they now lie below the log
        start, so a consumer that resumes from one gets OffsetOutOfRange, as after retention.
        Cluster mode: done by the broker leading every partition (NotLeader elsewhere); the
        followers take the new log start from their next fetch.
        """
        self.ctx.authorize("manage_topics", name)
        async with self.ctx.admin_lock:
            topic = self.ctx.topic(name)
            parts = list(topic.partitions)
            for part in parts:
                self.ctx.topology.check_log_changes(part)

            def _purge() -> None:
                for part in parts:
                    part.log.purge()

            try:
                await asyncio.get_running_loop().run_in_executor(self.ctx.io, _purge)
            finally:
                for part in parts:
                    part.reset_idempotence()  # de-duplication knows what the log holds, as after a restart
                    part.notify()
            log.info("purged topic %s", name)

    async def delete_segments(self, topic: str, partition: int, count: int) -> int:
        """Delete up to ``count`` of a partition's oldest segments, never the active one (Iggy
        DELETE_SEGMENTS). Returns how many went; the log start moves up past them. Cluster mode:
        on the leader, whose followers then drop their segments below its new log start."""
        self.ctx.authorize("manage_topics", topic)
        if count < 0:
            raise InvalidRequest(f"segment count must not be negative, not {count}")
        async with self.ctx.admin_lock:
            part = self.ctx.partition(topic, partition)
            self.ctx.topology.check_log_changes(part)
            return await asyncio.get_running_loop().run_in_executor(
                self.ctx.io, part.log.delete_oldest_segments, count)

    async def alter_topic_config(self, name: str, changes: dict[str, str | None]) -> dict[str, str]:
        """Set (or with None, remove) topic config keys; applies to the partitions at once."""
        self.ctx.authorize("manage_topics", name)
        async with self.ctx.admin_lock:
            topic = self.ctx.topic(name)
            merged = dict(topic.meta.config)
            for k, v in changes.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            broker_keys, log_keys = split_topic_config(merged)
            try:
                cfg = apply_overrides(self.ctx.config.log, log_keys)
            except (TypeError, ValueError) as exc:
                raise InvalidConfig(str(exc)) from None
            before = {k: topic.meta.config.get(k) for k in _DEDUP_KEYS}
            topic.meta.config = {**log_keys, **broker_keys}
            merged = dict(topic.meta.config)
            if any(merged.get(k) != v for k, v in before.items()):
                for part in topic.partitions:  # rebuilt from the log, with the new settings
                    part.reset_idempotence()
            await asyncio.get_running_loop().run_in_executor(self.ctx.io, self.ctx.store.write_topic,
                                                             topic.meta)
            topic.log_config = cfg
            for part in topic.partitions:
                part.log.config = cfg
            return merged
