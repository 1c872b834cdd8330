"""The controller's duties, and the topic changes every broker makes through ZooKeeper.

Whoever holds /controller (any broker takes it when it is free) moves the leadership of
partitions whose leader's broker is gone to an in-sync replica, with the next leader epoch, drops
dead brokers from ISRs (``state.after_failures``), hands over the partitions of a broker that is
leaving (controlled shutdown), and drops the connection-bound group members of dead brokers.

Topics are created, grown, shrunk and deleted in ZooKeeper (replicas assigned over the live
brokers); the call returns once this broker's reconciler has the local copy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid

from kazoo.exceptions import NodeExistsError

from bayou.broker.cluster.context import TOPIC_ID, ClusterContext
from bayou.broker.cluster.reconciler import PartitionReconciler
from bayou.broker.cluster.state import (
    PartitionState,
    TopicAssignment,
    after_failures,
    assign_replicas,
    hand_over,
    initial_state,
    member_broker,
)
from bayou.broker.cluster.store import ZkMetadataStore
from bayou.broker.cluster.zk import Snapshot
from bayou.broker.model import Topic
from bayou.errors import (
    InvalidConfig,
    InvalidPartitions,
    TopicAlreadyExists,
    UnknownPartition,
    UnknownTopic,
)

log = logging.getLogger("bayou.cluster")


class Controller:
    def __init__(self, ctx: ClusterContext, reconciler: PartitionReconciler, store: ZkMetadataStore) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.me = ctx.me
        self.reconciler = reconciler
        self.store = store
        self._reaped_with: set[int] | None = None  # live brokers at the last reap as the controller

    async def lead(self, snap: Snapshot) -> None:
        """The controller's part of a reconciliation pass: take /controller when it is free; as
        the controller, elect and hand over (``_control``) and reap dead brokers' members."""
        if snap.controller is None or snap.controller == self.me:
            if snap.controller is None:
                await self.ctx.run(self.ctx.zk.try_become_controller)
            else:
                await self._control(snap)
                live = set(snap.brokers)
                if self._reaped_with is None or self._reaped_with - live:
                    await self.reap_members(live)
                self._reaped_with = live
        else:
            self._reaped_with = None  # reap again on becoming controller

    async def create_topic(self, name: str, partitions: int, config: dict[str, str], *,
                           exist_ok: bool = False) -> Topic:
        snap = await self.ctx.run(self.ctx.zk.snapshot)
        live = sorted(snap.brokers)
        if name in snap.topics:
            topic_id = snap.topics[name].config.get(TOPIC_ID)
            if not exist_ok:  # raised once this broker has opened it, so the caller can use it
                with contextlib.suppress(UnknownTopic):
                    await self.reconciler.await_local(name, timeout=5.0, topic_id=topic_id)
                raise TopicAlreadyExists(f"topic {name} already exists")
        else:
            explicit = config.get("replication.factor")
            try:  # never silently fewer copies than asked for (or than the broker default)
                rf = int(explicit) if explicit is not None else self.broker.config.replication_factor
            except ValueError:
                raise InvalidConfig(f"invalid replication.factor {explicit!r}") from None
            try:
                replicas = assign_replicas(live, partitions, rf, start=random.randrange(max(1, len(live))))
            except ValueError as exc:
                raise InvalidConfig(str(exc)) from None
            topic_id = uuid.uuid4().hex
            assignment = TopicAssignment(replicas, {**config, "replication.factor": str(rf),
                                                    TOPIC_ID: topic_id})
            states = {p: initial_state(r, set(live)) for p, r in replicas.items()}
            try:
                await self.ctx.run(self.ctx.zk.create_topic, name, assignment, states)
            except NodeExistsError:
                if not exist_ok:
                    raise TopicAlreadyExists(f"topic {name} already exists") from None
                topic_id = None  # made by another broker at the same moment: whichever it is
            else:
                log.info("created topic %s in the cluster: %s", name, replicas)
        return await self.reconciler.await_local(name, topic_id=topic_id)

    async def add_partitions(self, name: str, total: int | None, more: int = 0) -> Topic:
        """Grow a topic in the cluster to ``total`` partitions, or by ``more`` (new partitions
        spread over the live brokers); returns once this broker has opened them."""
        try:
            new = await self.ctx.run(self.ctx.zk.add_partitions, name, total,
                                  random.randrange(max(1, len(self.ctx.live_brokers()))), more)
        except LookupError:
            raise UnknownTopic(f"unknown topic {name}") from None
        except ValueError as exc:
            raise InvalidPartitions(str(exc)) from None
        log.info("added partitions to topic %s in the cluster: %s", name, new)
        return await self.reconciler.await_local(name, partitions=max(new) + 1)

    async def remove_partitions(self, name: str, count: int) -> Topic:
        """Remove a topic's last ``count`` partitions in the cluster; returns once this broker has
        removed them."""
        try:
            keep = await self.ctx.run(self.ctx.zk.remove_partitions, name, count)
        except LookupError:
            raise UnknownTopic(f"unknown topic {name}") from None
        except ValueError as exc:
            raise InvalidPartitions(str(exc)) from None
        log.info("removed partitions %d and beyond of topic %s in the cluster", keep, name)
        await self.broker.forget_shared_partitions(name, keep)
        return await self.reconciler.await_local(name, partitions=keep, exact=True)


    async def delete_topic(self, name: str) -> None:
        await self.ctx.run(self.ctx.zk.delete_topic, name)
        deadline = time.monotonic() + 15
        while name in self.broker.topics and time.monotonic() < deadline:
            self.ctx.wake.set()
            await asyncio.sleep(0.02)

    async def set_leader(self, topic: str, partition: int, leader: int, isr: list[int]) -> PartitionState:
        """An operator's choice of leader (V1 ADMIN_SET_PARTITION_LEADER): it must be a live
        replica in the ISR it names (given, or the current one), so no acknowledged record is
        lost; the epoch moves on when the leader changes."""
        self.broker.authorizer.check("manage_servers")
        snap = await self.ctx.run(self.ctx.zk.snapshot)
        entry = snap.states.get((topic, partition))
        if topic not in snap.topics or entry is None:
            raise UnknownPartition(f"partition not found: topic={topic} partition={partition}")
        state, version = entry
        replicas = snap.topics[topic].partitions[partition]
        new_isr = tuple(isr) if isr else state.isr
        if not set(new_isr) <= set(state.isr) or not set(new_isr) <= set(replicas):
            raise InvalidConfig(f"isr {list(new_isr)} must be replicas in the current ISR {list(state.isr)}")
        if leader not in new_isr or leader not in snap.brokers:
            raise InvalidConfig(f"leader {leader} must be a live broker in the ISR")
        epoch = state.leader_epoch + (1 if leader != state.leader else 0)
        new = PartitionState(leader, epoch, new_isr)
        if not await self.ctx.run(self.ctx.zk.set_state, topic, partition, new, version):
            raise InvalidConfig("the partition state changed meanwhile; try again")
        self.ctx.wake.set()
        return new


    async def elect_leaders(self, topic: str) -> int:
        """V1 ADMIN_ELECT_TOPIC_LEADERS: run the controller's election for ``topic`` now; the
        number of partitions whose state changed."""
        self.broker.authorizer.check("manage_servers")
        snap = await self.ctx.run(self.ctx.zk.snapshot)
        if topic not in snap.topics:
            raise UnknownTopic(f"topic not found: {topic}")
        live = set(snap.brokers)
        changes = 0
        for (t, p), (state, version) in sorted(snap.states.items()):
            if t != topic:
                continue
            new = after_failures(state, snap.topics[t].partitions.get(p, []), live)
            if new != state and await self.ctx.run(self.ctx.zk.set_state, t, p, new, version):
                changes += 1
        if changes:
            self.ctx.wake.set()
        return changes


    async def _control(self, snap: Snapshot) -> None:
        live = set(snap.brokers)
        leaving = {b for b, reg in snap.brokers.items() if reg.leaving}
        for (topic, p), (state, version) in sorted(snap.states.items()):
            replicas = snap.topics[topic].partitions.get(p, [])
            new = hand_over(after_failures(state, replicas, live), replicas, leaving)
            if new != state and await self.ctx.run(self.ctx.zk.set_state, topic, p, new, version):
                log.info("controller: %s/%d leader %d -> %d (epoch %d), isr %s", topic, p,
                         state.leader, new.leader, new.leader_epoch, list(new.isr))
                self.ctx.wake.set()


    async def reap_members(self, alive: set[int]) -> None:
        """Drop the connection-bound members (Iggy's) handed out by brokers not in ``alive``: their
        connections are gone with them, so their partitions go to the members left."""
        def gone(member: str) -> bool:
            b = member_broker(member)
            return b is not None and b not in alive

        for group, (policy, _topic) in (await self.store.shared_groups()).items():
            if policy == "iggy":
                try:
                    await self.broker.drop_group_members(group, gone)
                except Exception:
                    log.exception("cannot drop the members of dead brokers from group %s", group)

