"""The interfaces the broker is built on where a single node and a cluster differ, chosen once at
start: the broker depends on these, never on the cluster's code (broker/cluster/ implements them).

* ``MetadataStore``: where topic changes are decided. On a single node, the broker's own files
  (``LocalMetadataStore``); in cluster mode ZooKeeper (the cluster node's controller), after which
  every broker, this one included, opens its local copy when its reconciler sees the change.
  The broker checks a request first (authorization, names, limits) and then hands it to the store.
* ``ReplicaState``: who decides a partition's high watermark. On a single node the followers'
  V1 REPLICA_FETCH reports (broker/replication.py); in cluster mode the ISR that ZooKeeper
  holds and the followers' fetches (broker/cluster/replicaset.py).
* ``Cluster``: what cluster mode offers the rest of the broker and the front ends (leaders and
  coordinators as the cluster state has them, the waits for a state still on its way, requests
  forwarded to a partition's leader, the offsets, groups, documents and locks kept in ZooKeeper).
  ``Broker.cluster`` is one, or None on a single node.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bayou.broker.cluster.state import BrokerRegistration, PartitionState
    from bayou.broker.cluster.zk import Snapshot
    from bayou.broker.model import Acks, FetchResult, ProduceResult, Topic
    from bayou.broker.partition import Partition


class MetadataStore(Protocol):
    async def create_topic(self, name: str, partitions: int, config: dict[str, str], *,
                           exist_ok: bool = False) -> Topic:
        """Create ``name`` (``config``: validated overrides); the existing topic with ``exist_ok``."""
        ...

    async def delete_topic(self, name: str) -> None: ...

    async def add_partitions(self, name: str, total: int | None, more: int = 0) -> Topic:
        """Grow ``name`` to ``total`` partitions, or (``total`` None) by ``more``."""
        ...

    async def remove_partitions(self, name: str, count: int) -> Topic:
        """Remove the last ``count`` partitions of ``name``."""
        ...

    async def await_topic(self, name: str, partition: int) -> None:
        """A request names partition ``partition`` of ``name``: when it was made elsewhere and has
        not reached this broker yet, wait for it briefly (a watch may still be on its way), so the
        client is not told it does not exist. At once when the store is this broker's own."""
        ...


class ReplicaState(Protocol):
    def high_watermark(self, part: Partition) -> int:
        """The partition's high watermark (exclusive): consumers see the offsets below it."""
        ...

    def epoch(self, part: Partition) -> int | None:
        """The leader epoch stamped on what the leader appends (None: no epochs are kept)."""
        ...

    def appended(self, part: Partition) -> None:
        """The leader appended to ``part``: move what the high watermark follows."""
        ...

    def check_insync(self, part: Partition) -> None:
        """Before an acks=all append: raise NotEnoughReplicas when the append could only time
        out for want of in-sync replicas."""
        ...

    async def await_replicated(self, part: Partition, last_offset: int, deadline: float) -> None:
        """After an acks=all append: return once ``last_offset`` is replicated as the mode
        promises; ReplicationTimeout at ``deadline`` (time.monotonic)."""
        ...


class LocalTopics(Protocol):
    """The broker's local steps that a single node's store decides alone."""

    def topic(self, name: str) -> Topic: ...

    async def open_topic(self, name: str, partitions: int, config: dict[str, str], *,
                         exist_ok: bool = False, limited: bool = False) -> Topic: ...

    async def drop_topic(self, name: str) -> None: ...

    async def grow_topic(self, name: str, total: int, *, limited: bool = False) -> Topic: ...

    async def shrink_topic(self, name: str, count: int) -> Topic: ...


class LocalMetadataStore:
    """A single node: topic changes are the broker's own, made at once (with the partition limit
    checked again under the broker's admin lock)."""

    def __init__(self, broker: LocalTopics) -> None:
        self.broker = broker

    async def create_topic(self, name: str, partitions: int, config: dict[str, str], *,
                           exist_ok: bool = False) -> Topic:
        return await self.broker.open_topic(name, partitions, config, exist_ok=exist_ok, limited=True)

    async def delete_topic(self, name: str) -> None:
        await self.broker.drop_topic(name)

    async def add_partitions(self, name: str, total: int | None, more: int = 0) -> Topic:
        if total is None:
            total = len(self.broker.topic(name).partitions) + more
        return await self.broker.grow_topic(name, total, limited=True)

    async def remove_partitions(self, name: str, count: int) -> Topic:
        return await self.broker.shrink_topic(name, count)

    async def await_topic(self, name: str, partition: int) -> None:
        return None


class Cluster(MetadataStore, Protocol):
    """Cluster mode as the broker and the front ends see it (broker/cluster/node.py)."""

    started: asyncio.Event  # joined: registered, reaped, first reconciliation done

    @property
    def snapshot(self) -> Snapshot | None:
        """The cluster state as this broker last read it."""
        ...

    # the cluster state as this broker last read it

    def leader_of(self, part: Partition) -> tuple[int, str, dict[str, int]] | None: ...

    def coordinator_of(self, group: str, protocol: str | tuple[str, ...]) -> BrokerRegistration | None: ...

    def partition_leader(self, topic: str, partition: int) -> tuple[BrokerRegistration | None, int]: ...

    def live_brokers(self) -> dict[int, BrokerRegistration]: ...

    # waits for a state that ZooKeeper has and this broker has not taken on yet

    async def catch_up(self, name: str, partition: int, timeout: float = 5.0) -> None: ...

    async def await_leadership(self, topic: str, partition: int, timeout: float = 5.0) -> None: ...

    async def await_role(self, part: Partition, role: str, timeout: float = 10.0) -> None: ...

    # leadership changes an operator asks for

    async def set_leader(self, topic: str, partition: int, leader: int, isr: list[int]) -> PartitionState: ...

    async def elect_leaders(self, topic: str) -> int: ...

    # requests sent to a partition's leader on a client's behalf

    async def forward_produce(self, topic: str, partition: int, batch: bytes, acks: Acks, *,
                              deduplicate: bool = False) -> ProduceResult: ...

    async def consumer_fetch(self, topic: str, partition: int, offset: int,
                             max_bytes: int) -> FetchResult: ...

    # committed offsets, groups, shared documents and locks kept in ZooKeeper

    async def publish_offsets(self, group: str, topic: str, entries: dict[int, int]) -> None: ...

    async def forget_offset(self, group: str, topic: str, partition: int) -> None: ...

    async def committed_offset(self, group: str, topic: str, partition: int) -> int | None: ...

    async def forget_group(self, group: str) -> None: ...

    async def shared_groups(self) -> dict[str, tuple[str, str]]: ...

    async def group_state(self, group: str) -> tuple[bytes, int]: ...

    async def set_group_state(self, group: str, data: bytes, version: int) -> bool: ...

    async def read_doc(self, name: str) -> tuple[bytes, int]: ...

    async def write_doc(self, name: str, data: bytes, version: int) -> bool: ...

    async def topic_names(self) -> list[str]: ...

    def doc_changes(self, name: str) -> int: ...

    def is_locked(self, name: str) -> bool: ...

    def exclusive(self, name: str, timeout: float = 15.0) -> contextlib.AbstractAsyncContextManager[None]: ...
