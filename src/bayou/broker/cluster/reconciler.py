"""The partition reconciler: makes this broker's partitions follow the cluster state that
ZooKeeper holds. Each pass (node.py runs them):

1. opens the partitions of topics it does not have yet, and closes topics deleted from the cluster
   (or an older incarnation of a topic: its topic id differs);
2. makes each partition a leader or a follower as its state says: a new leader records where its
   epoch begins (``LeaderEpochCache``); a follower has the follower fetcher copy the leader;
3. as a leader: shrinks the ISR by followers that have not caught up for the lag timeout and grows
   it by followers that reached the high watermark, compare-and-set in ZooKeeper before it counts.

It also holds the waits of requests that reached this broker before the state did (a topic
created elsewhere, a leadership the watch has not brought yet)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from bayou.broker.cluster.context import REPLICATION, TOPIC_ID, ClusterContext
from bayou.broker.cluster.fetcher import FollowerFetcher
from bayou.broker.cluster.replicaset import ReplicaSet
from bayou.broker.cluster.state import (
    NO_LEADER,
    PARTITIONS_REMOVED,
    PartitionState,
    TopicAssignment,
    partitions_to_drop,
)
from bayou.broker.cluster.zk import Snapshot
from bayou.broker.model import Topic
from bayou.broker.partition import FOLLOWER, LEADER, Partition
from bayou.errors import InvalidConfig, NotLeader, StorageError, UnknownTopic
from bayou.storage.epochs import LeaderEpochCache

log = logging.getLogger("bayou.cluster")


class PartitionReconciler:
    def __init__(self, ctx: ClusterContext, fetcher: FollowerFetcher, lag_timeout_s: float) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.me = ctx.me
        self.fetcher = fetcher
        self.lag_timeout_s = lag_timeout_s
        self._known_topics: set[str] = set()

    async def await_local(self, name: str, timeout: float = 15.0, partitions: int = 0,
                           exact: bool = False, topic_id: str | None = None) -> Topic:
        """The local copy of ``name`` once it has the partitions (and, given ``topic_id``, is that
        incarnation of the topic, not an older copy still being dropped) and their states."""
        deadline = time.monotonic() + timeout
        while True:
            topic = self.broker.topics.get(name)
            if (topic is not None and len(topic.partitions) >= partitions
                    and (topic_id is None or topic.meta.config.get(TOPIC_ID) == topic_id)
                    and (not exact or len(topic.partitions) == partitions)
                    and all(p.cluster is not None for p in topic.partitions)):
                return topic
            if time.monotonic() > deadline:
                raise UnknownTopic(f"topic {name} did not reach this broker in {timeout:.0f} s")
            self.ctx.wake.set()
            await asyncio.sleep(0.02)

    async def catch_up(self, name: str, partition: int, timeout: float = 5.0) -> None:
        """A request named a partition this broker has not opened (or whose state it has not
        taken) yet: when ZooKeeper has it, wake the reconciler and wait for the local copy;
        NotLeader (retriable) if it does not arrive in time. Returns at once when ZooKeeper does
        not have it either (the caller then answers unknown topic/partition)."""
        assignment = await self.ctx.run(self.ctx.zk.topic_assignment, name)
        if assignment is None or partition not in assignment.partitions:
            return
        try:
            await self.await_local(name, timeout=timeout, partitions=partition + 1,
                                    topic_id=assignment.config.get(TOPIC_ID))
        except UnknownTopic:
            raise NotLeader(f"partition {partition} of topic {name} has not reached this broker "
                            "yet; retry") from None

    async def await_leadership(self, topic: str, partition: int, timeout: float = 5.0) -> None:
        """A produce reached this broker while its local state says another broker leads the
        partition: when ZooKeeper already names this broker leader (a leadership change whose watch
        is still on its way), wake the reconciler and wait for the local state to take it on, so
        the client is not sent back to the old leader. Returns at once otherwise (the caller then
        answers NotLeader with the leader it knows), and after ``timeout`` in any case."""
        try:
            state = await self.ctx.run(self.ctx.zk.partition_state, topic, partition)
        except StorageError:  # ZooKeeper unreachable: the local state is all there is
            return
        if state is None or state.leader != self.me:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.broker.topics.get(topic)
            rs = None if t is None or partition >= len(t.partitions) else t.partitions[partition].cluster
            if rs is not None and (rs.is_leader or rs.epoch > state.leader_epoch):
                return
            self.ctx.wake.set()
            await asyncio.sleep(0.02)


    async def await_role(self, part: Partition, role: str, timeout: float = 10.0) -> None:
        """Wait until ``part`` has taken ``role`` from the cluster state."""
        deadline = time.monotonic() + timeout
        while part.role != role or part.cluster is None or part.cluster.is_leader != (role == LEADER):
            if time.monotonic() > deadline:
                raise InvalidConfig(f"the partition did not become {role} in {timeout:.0f} s")
            self.ctx.wake.set()
            await asyncio.sleep(0.02)


    def step_down_all(self) -> None:
        """The ZooKeeper session was lost: another broker may lead our partitions by now."""
        for topic in self.broker.topics.values():
            for part in topic.partitions:
                if part.cluster is not None and part.cluster.is_leader:
                    part.cluster.leader = NO_LEADER
                    part.role = FOLLOWER
                    part.notify()


    async def sync_topics(self, snap: Snapshot) -> None:
        """Open the topics ZooKeeper has; drop local copies of topics it no longer has, or of an
        older incarnation (deleted and created again while this broker was away: the topic id
        differs), so an old log is never served as the new topic."""
        for name, assignment in sorted(snap.topics.items()):
            self._known_topics.add(name)
            try:  # one topic that fails must not hold up the rest of the pass
                local = self.broker.topics.get(name)
                if local is not None and local.meta.config.get(TOPIC_ID) != assignment.config.get(TOPIC_ID):
                    log.info("dropping the local copy of an older incarnation of topic %s", name)
                    await self._drop_local(name)
                    local = None
                if local is not None and (assignment.config.get(PARTITIONS_REMOVED)
                                          != local.meta.config.get(PARTITIONS_REMOVED)):
                    await self._drop_removed(local, assignment)
                    local = self.broker.topics.get(name)
                if local is None:
                    await self.broker.open_topic(name, len(assignment.partitions), assignment.config,
                                                 exist_ok=True)
                elif len(local.partitions) < len(assignment.partitions):
                    await self.broker.grow_topic(name, len(assignment.partitions))
                elif len(local.partitions) > len(assignment.partitions):
                    keep = len(assignment.partitions)
                    for part in local.partitions[keep:]:
                        self.fetcher.stop((name, part.index))
                        await self.ctx.run(FollowerFetcher.detach, part)
                    await self.broker.shrink_topic(name, len(local.partitions) - keep)
            except Exception:
                log.exception("cannot open topic %s from the cluster state; retrying", name)
        gone = [t for t, topic in self.broker.topics.items() if t not in snap.topics
                and (t in self._known_topics or TOPIC_ID in topic.meta.config)]
        for name in gone:
            try:
                await self._drop_local(name)
            except Exception:
                log.exception("cannot drop topic %s; retrying", name)

    async def _drop_removed(self, local: Topic, assignment: TopicAssignment) -> None:
        """Partitions were removed since this copy last looked (maybe added again since): drop
        the local copies of every removed index, then remember the removals seen."""
        name = local.meta.name
        history = assignment.config.get(PARTITIONS_REMOVED)
        first = partitions_to_drop(history, local.meta.config.get(PARTITIONS_REMOVED))
        if first is not None and len(local.partitions) > first:
            for part in local.partitions[first:]:
                self.fetcher.stop((name, part.index))
                await self.ctx.run(FollowerFetcher.detach, part)
            await self.broker.shrink_topic(name, len(local.partitions) - first)
        await self.broker.alter_topic_config(name, {PARTITIONS_REMOVED: history})

    async def _drop_local(self, name: str) -> None:
        topic = self.broker.topics.get(name)
        if topic is not None:
            for p, part in enumerate(topic.partitions):
                self.fetcher.stop((name, p))
                await self.ctx.run(FollowerFetcher.detach, part)
            with contextlib.suppress(UnknownTopic):
                await self.broker.drop_topic(name)
        self._known_topics.discard(name)

    async def apply_states(self, snap: Snapshot) -> None:
        for (topic, p), (state, version) in snap.states.items():
            t = self.broker.topics.get(topic)
            if t is None or p >= len(t.partitions):
                continue
            part = t.partitions[p]
            replicas = tuple(snap.topics[topic].partitions.get(p, ()))
            rs = part.cluster
            if rs is None or rs.epoch != state.leader_epoch or rs.leader != state.leader:
                if rs is not None and rs.epoch > state.leader_epoch:
                    continue  # an older state read after a newer one
                self._take_state(part, state, version, replicas, snap)
            elif version > rs.version:
                rs.isr = state.isr
                rs.version = version
                if rs.is_leader and rs.advance_hw(part.log.next_offset):
                    part.notify()

    def _take_state(self, part: Partition, state: PartitionState, version: int,
                    replicas: tuple[int, ...], snap: Snapshot) -> None:
        with part.replica_lock:  # no copy or truncation of the previous state is half-way now
            self._take_state_locked(part, state, version, replicas, snap)

    def _take_state_locked(self, part: Partition, state: PartitionState, version: int,
                           replicas: tuple[int, ...], snap: Snapshot) -> None:
        old = part.cluster
        if part.epochs is None:
            part.epochs = LeaderEpochCache(part.log.dir)
            part.epochs.truncate_from(part.log.next_offset + 1)  # recovery may have cut the log
        key = (part.topic, part.index)
        hw = min(old.hw, part.log.next_offset) if old is not None else 0
        rs = ReplicaSet(self.me, state.leader, state.leader_epoch, state.isr, replicas, version, hw)
        part.cluster = rs
        if state.leader == self.me:
            self.fetcher.stop(key)
            if old is None or not old.is_leader:
                # the producer tables were left as they were when this broker last led (a
                # follower's copies do not go through them): rebuild from the log, as after a
                # restart, so an idempotent producer's retry of a copied batch is a replay
                part.reset_idempotence()
            part.epochs.assign(state.leader_epoch, part.log.next_offset)
            rs.epoch_start = part.log.next_offset
            part.role = LEADER
            log.info("leading %s/%d in epoch %d from offset %d", part.topic, part.index,
                     state.leader_epoch, part.log.next_offset)
        else:
            part.role = FOLLOWER
            self.fetcher.stop(key)
            if state.leader != NO_LEADER and self.me in replicas:
                leader = snap.brokers.get(state.leader)
                if leader is not None and leader.address(REPLICATION) is not None:
                    self.fetcher.follow(part, rs, leader)
        part.notify()

    async def maintain_isr(self, snap: Snapshot) -> None:
        if self.ctx.leaving:  # the controller hands the partitions over; draining must not shrink ISRs
            return
        staying = {b for b, reg in snap.brokers.items() if not reg.leaving}  # leaving ones never rejoin
        for topic in list(self.broker.topics.values()):
            for part in topic.partitions:
                rs = part.cluster
                if rs is None or not rs.is_leader:
                    continue
                wanted = rs.wanted_isr(part.log.next_offset, self.lag_timeout_s, staying,
                                       self.broker.config.replica_max_lag_records)
                if wanted == rs.isr:
                    continue
                new = PartitionState(self.me, rs.epoch, wanted)
                if await self.ctx.run(self.ctx.zk.set_state, part.topic, part.index, new, rs.version):
                    log.info("%s/%d ISR %s -> %s", part.topic, part.index, list(rs.isr), list(wanted))
                    rs.isr = wanted
                    rs.version += 1
                    rs.since = time.monotonic()
                    rs.advance_hw(part.log.next_offset)
                    part.notify()
                else:
                    self.ctx.wake.set()  # someone else changed it: re-read

