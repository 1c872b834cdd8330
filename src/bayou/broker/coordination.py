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
* ``Topology``: the answers the broker's facade and parts give about where things are served:
  who leads a partition and its replicas, leader epochs, which broker coordinates a group, the
  other brokers' listeners, whether this broker may serve or change a partition now, and the
  requests it sends to another leader. On a single node ``StandaloneTopology`` (this broker leads
  everything alone, epoch 0, no other broker); in cluster mode ``ClusterTopology``, the cluster
  state as the ``Cluster`` last read it.
* ``GroupStore``: where committed offsets and the groups every broker shares are kept besides
  this broker's files: nowhere on a single node (``LocalGroupStore``); in cluster mode ZooKeeper
  (``ClusterGroupStore``: offsets written through before a commit is answered, V1 and Iggy groups
  read, changed and written back with a compare-and-set).

The broker is built standalone; ``BrokerContext.join_cluster`` (called when the cluster node is
built, before the first request) swaps in the cluster's implementations, all at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from bayou.broker.cluster.state import MEMBER_BROKER_SHIFT, connection_member_base
from bayou.broker.groups.coordinator import CURSUS_POLICY
from bayou.broker.partition import LEADER
from bayou.broker.views import THIS_BROKER, Endpoint, Here
from bayou.errors import NotLeader

if TYPE_CHECKING:
    from bayou.broker.cluster.state import BrokerRegistration, PartitionState
    from bayou.broker.cluster.zk import Snapshot
    from bayou.broker.groups.coordinator import GroupCoordinator, GroupPolicy
    from bayou.broker.metadata import ClusterMetadata
    from bayou.broker.model import Acks, FetchResult, ProduceResult, Topic
    from bayou.broker.partition import Partition
    from bayou.broker.views import SharedDocuments


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

    def topic_settled(self, name: str, partition: int) -> bool:
        """Whether ``await_topic`` has nothing to wait for (a request's fast path skips it)."""
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

    def topic_settled(self, name: str, partition: int) -> bool:
        return True


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

    async def forward_marker(self, topic: str, partition: int, batch: bytes) -> None:
        """A transaction marker appended by the partition's leader and replicated to its ISR."""
        ...

    # Kafka transactions' coordinator state: a JSON document per transactional id,
    # compare-and-set by znode version (-1: create; data None: delete)

    async def txn_state(self, txn_id: str) -> tuple[bytes, int]: ...

    async def set_txn_state(self, txn_id: str, data: bytes | None, version: int) -> bool: ...

    async def txn_ids(self) -> list[str]: ...

    async def txn_bucket_size(self, txn_id: str) -> int:
        """How many transactional ids are kept next to ``txn_id`` (one of 64 buckets)."""
        ...

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


class Topology(Protocol):
    """Where things are served, as the broker's facade and parts ask it (see the module's doc)."""

    @property
    def clustered(self) -> bool:
        """Whether the broker runs in a cluster (its topics and groups kept in ZooKeeper)."""
        ...

    # -- the other brokers, for the front ends' replies

    def shared_documents(self) -> SharedDocuments | None:
        """The documents and locks every broker shares; None when there is no other broker."""
        ...

    def connection_ids(self) -> range | None:
        """The connection-bound member ids this broker hands out (None: any id)."""
        ...

    def listener_endpoints(self, listener: str) -> list[Endpoint] | None:
        """Every live broker with ``listener``, and which one is the controller (None: standalone)."""
        ...

    def group_coordinator(self, group: str, listeners: Sequence[str]) -> Endpoint | Here | None:
        """The broker coordinating ``group`` for a protocol served on any of ``listeners``, at the
        first of them it has; THIS_BROKER standalone; None while no such broker is known."""
        ...

    def leader_endpoint(self, topic: str, partition: int, listener: str) -> Endpoint | Here | None:
        """The partition's leader at its ``listener``; THIS_BROKER standalone; None while no
        leader (or no such listener of it) is known."""
        ...

    def partition_replicas(self, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
        """(leader, replicas, ISR): leader -1 and an empty ISR while none is known."""
        ...

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch as last known: -1 while none is."""
        ...

    def epoch_end(self, part: Partition, epoch: int) -> tuple[int, int]:
        """KIP-101's answer for ``epoch`` (see ``Broker.epoch_end``)."""
        ...

    def leader_of(self, part: Partition) -> tuple[int, str, dict[str, int]] | None:
        """The leader to name in a NotLeader: (id, host, ports); None when there is none to name."""
        ...

    # -- whether this broker serves a partition now

    def check_leader(self, part: Partition) -> None:
        """Raise NotLeader unless this broker leads ``part`` (appends, leader-only reads)."""
        ...

    async def await_leadership(self, part: Partition) -> None:
        """A leadership the cluster already gives this broker and its local state has not taken
        on yet is waited for briefly (the client is not sent back to the old leader)."""
        ...

    async def check_leads(self, topic: str, partition: int) -> None:
        """For clients that read only at the leader: NotLeader unless this broker leads it (after
        ``await_leadership``). Standalone: nothing (not even the lookup)."""
        ...

    def check_log_changes(self, part: Partition) -> None:
        """Before an operator's change to a partition's log (purge, segment deletion): in a
        cluster only its leader makes it (the followers copy it); a single node always may."""
        ...

    # -- requests sent to another broker on a client's behalf

    async def forward_produce(self, topic: str, partition: int, batch: bytes, acks: Acks, *,
                              deduplicate: bool = False) -> ProduceResult:
        """The batch appended by the partition's leader (``led_elsewhere`` partitions only)."""
        ...

    async def fetch_at_leader(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        """A consumer's read at the partition's leader; NotLeader standalone."""
        ...

    # -- leadership an operator sets (V1's ADMIN commands)

    async def set_partition_leader(self, topic: str, partition: int, leader: int, isr: list[int]) -> None: ...

    async def elect_leaders(self, topic: str) -> int:
        """Give the topic's partitions without a live leader one; how many changed."""
        ...


class StandaloneTopology:
    """A single node: this broker leads every partition alone (replicas and ISR [me], epoch 0;
    V1's role and metadata commands may still hand a partition elsewhere), coordinates every
    group, and knows no other broker."""

    clustered = False

    def __init__(self, broker_id: int, metadata: ClusterMetadata) -> None:
        self.me = broker_id
        self.metadata = metadata  # V1's ADMIN_* model of leaders (broker/metadata.py)

    def shared_documents(self) -> SharedDocuments | None:
        return None

    def connection_ids(self) -> range | None:
        return None

    def listener_endpoints(self, listener: str) -> list[Endpoint] | None:
        return None

    def group_coordinator(self, group: str, listeners: Sequence[str]) -> Endpoint | Here | None:
        return THIS_BROKER

    def leader_endpoint(self, topic: str, partition: int, listener: str) -> Endpoint | Here | None:
        return THIS_BROKER

    def partition_replicas(self, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
        return self.me, [self.me], [self.me]

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 0  # one leader, ever

    def epoch_end(self, part: Partition, epoch: int) -> tuple[int, int]:
        return 0, part.high_watermark  # one epoch, never truncated

    def leader_of(self, part: Partition) -> tuple[int, str, dict[str, int]] | None:
        return None

    def check_leader(self, part: Partition) -> None:
        meta = self.metadata.partitions.get((part.topic, part.index))
        if part.role != LEADER or (meta is not None and meta.leader != self.me):
            raise NotLeader()

    async def await_leadership(self, part: Partition) -> None:
        return None

    async def check_leads(self, topic: str, partition: int) -> None:
        return None

    def check_log_changes(self, part: Partition) -> None:
        return None

    async def forward_produce(self, topic: str, partition: int, batch: bytes, acks: Acks, *,
                              deduplicate: bool = False) -> ProduceResult:
        raise NotLeader(f"no other broker leads {topic}/{partition}")

    async def fetch_at_leader(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        raise NotLeader(f"this broker holds no replica of {topic}/{partition}")

    async def set_partition_leader(self, topic: str, partition: int, leader: int, isr: list[int]) -> None:
        self.metadata.set_leader(topic, partition, leader, isr)

    async def elect_leaders(self, topic: str) -> int:
        return self.metadata.elect_leaders(topic)


class ClusterTopology:
    """Cluster mode: the answers of the cluster state as ``cluster`` last read it; a partition
    is led here once its local state (``Partition.cluster``, the reconciler's) says so."""

    clustered = True

    def __init__(self, cluster: Cluster, broker_id: int,
                 partition: Callable[[str, int], Partition]) -> None:
        self.cluster = cluster
        self.me = broker_id
        self.partition = partition  # the broker's lookup (UnknownTopic, UnknownPartition)

    def _controller(self) -> int | None:
        snap = self.cluster.snapshot
        return snap.controller if snap is not None else None

    def shared_documents(self) -> SharedDocuments | None:
        return self.cluster

    def connection_ids(self) -> range | None:
        # they carry this broker's id, so that the cluster can drop the members of a dead or
        # restarted broker (broker/cluster/controller.py, ``reap_members``)
        base = connection_member_base(self.me)
        return range(base + 1, base + (1 << MEMBER_BROKER_SHIFT))

    def listener_endpoints(self, listener: str) -> list[Endpoint] | None:
        controller = self._controller()
        return [Endpoint(b, reg.host, reg.endpoints[listener], b == controller, reg.name)
                for b, reg in sorted(self.cluster.live_brokers().items()) if listener in reg.endpoints]

    def group_coordinator(self, group: str, listeners: Sequence[str]) -> Endpoint | Here | None:
        # FNV-1a of the name over the live brokers with one of ``listeners`` (as Cursus' groups:
        # every broker agrees, and a dead coordinator's groups move to a live one)
        reg = self.cluster.coordinator_of(group, tuple(listeners))
        if reg is None:
            return None
        name = next(n for n in listeners if n in reg.endpoints)
        return Endpoint(reg.broker_id, reg.host, reg.endpoints[name], reg.broker_id == self._controller(),
                        reg.name)

    def leader_endpoint(self, topic: str, partition: int, listener: str) -> Endpoint | Here | None:
        reg, _epoch = self.cluster.partition_leader(topic, partition)
        if reg is None or listener not in reg.endpoints:
            return None
        return Endpoint(reg.broker_id, reg.host, reg.endpoints[listener], reg.broker_id == self._controller(),
                        reg.name)

    def partition_replicas(self, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
        snap = self.cluster.snapshot
        assignment = snap.topics.get(topic) if snap is not None else None
        entry = snap.states.get((topic, partition)) if snap is not None else None
        return (entry[0].leader if entry is not None else -1,
                list(assignment.partitions.get(partition, ())) if assignment is not None else [],
                list(entry[0].isr) if entry is not None else [])

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.cluster.partition_leader(topic, partition)[1]

    def epoch_end(self, part: Partition, epoch: int) -> tuple[int, int]:
        if part.epochs is None:  # no state from the cluster yet
            return 0, part.high_watermark
        return part.epochs.end_offset_for(epoch, part.log.next_offset)

    def leader_of(self, part: Partition) -> tuple[int, str, dict[str, int]] | None:
        return self.cluster.leader_of(part)

    def check_leader(self, part: Partition) -> None:
        if part.cluster is None or not part.cluster.is_leader:
            raise NotLeader(leader=self.cluster.leader_of(part))

    async def await_leadership(self, part: Partition) -> None:
        if part.cluster is None or not part.cluster.is_leader:
            await self.cluster.await_leadership(part.topic, part.index)

    async def check_leads(self, topic: str, partition: int) -> None:
        part = self.partition(topic, partition)
        await self.await_leadership(part)
        self.check_leader(part)

    def check_log_changes(self, part: Partition) -> None:
        self.check_leader(part)

    async def forward_produce(self, topic: str, partition: int, batch: bytes, acks: Acks, *,
                              deduplicate: bool = False) -> ProduceResult:
        return await self.cluster.forward_produce(topic, partition, batch, acks, deduplicate=deduplicate)

    async def fetch_at_leader(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        return await self.cluster.consumer_fetch(topic, partition, offset, max_bytes)

    async def set_partition_leader(self, topic: str, partition: int, leader: int, isr: list[int]) -> None:
        await self.cluster.set_leader(topic, partition, leader, isr)

    async def elect_leaders(self, topic: str) -> int:
        return await self.cluster.elect_leaders(topic)


class GroupStore(Protocol):
    """Where committed offsets and the shared groups are kept besides this broker's own files
    (see the module's doc). Each change is made there first, then in the broker's table: an
    adoption of the store's copy (``adopt_offsets``) never reverts it."""

    def shares(self, policy: GroupPolicy | None) -> bool:
        """Whether a group of ``policy`` (None: a group this broker does not hold) is kept in the
        store, read and written back around each operation (``group_state``, ``set_group_state``)."""
        ...

    async def group_state(self, group: str) -> tuple[bytes, int]:
        """The shared group's state, and the version to write it back with."""
        ...

    async def set_group_state(self, group: str, data: bytes, version: int) -> bool:
        """Write it back if it still has ``version``; whether it did."""
        ...

    async def shared_groups(self) -> dict[str, tuple[str, str]]:
        """The shared groups: name -> (policy, topic)."""
        ...

    async def publish_offsets(self, group: str, topic: str, entries: dict[int, int]) -> None:
        """Committed offsets, before the broker's table takes them (and the commit is answered)."""
        ...

    async def forget_offset(self, group: str, topic: str, partition: int) -> None: ...

    async def forget_group(self, group: str) -> None:
        """The group and every committed offset of it are being deleted."""
        ...

    async def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        """The committed offset as the store has it now (another broker's commit included)."""
        ...

    def offsets_mark(self) -> int:
        """A mark to pass to ``adopt_offsets`` for a copy of the store's offsets read after it."""
        ...

    def adopt_offsets(self, offsets: dict[tuple[str, str, int], int], *, since: int) -> bool:
        """Make the broker's committed offsets the store's ``offsets`` (read after ``since``),
        except those changed here since; whether any changed."""
        ...


def _adopt(table: dict[tuple[str, str, int], int], offsets: dict[tuple[str, str, int], int],
           fresh: set[tuple[str, str, int]]) -> bool:
    """``table`` becomes ``offsets`` except for the keys in ``fresh``; whether it changed."""
    changed = False
    for key, off in offsets.items():
        if key not in fresh and table.get(key) != off:
            table[key] = off
            changed = True
    for key in [k for k in table if k not in offsets and k not in fresh]:
        del table[key]
        changed = True
    return changed


class LocalGroupStore:
    """A single node: the broker's own table (and its files) is the only copy; no group is shared."""

    def __init__(self, groups: GroupCoordinator) -> None:
        self.groups = groups

    def shares(self, policy: GroupPolicy | None) -> bool:
        return False

    async def group_state(self, group: str) -> tuple[bytes, int]:
        return self.groups.group_json(group), 0

    async def set_group_state(self, group: str, data: bytes, version: int) -> bool:
        return True

    async def shared_groups(self) -> dict[str, tuple[str, str]]:
        return {}

    async def publish_offsets(self, group: str, topic: str, entries: dict[int, int]) -> None:
        return None

    async def forget_offset(self, group: str, topic: str, partition: int) -> None:
        return None

    async def forget_group(self, group: str) -> None:
        return None

    async def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        return self.groups.committed(group, topic, partition)

    def offsets_mark(self) -> int:
        return 0

    def adopt_offsets(self, offsets: dict[tuple[str, str, int], int], *, since: int) -> bool:
        return _adopt(self.groups.offsets, offsets, set())


class ClusterGroupStore:
    """Cluster mode: committed offsets and the V1 and Iggy groups in ZooKeeper, so members on
    different brokers form one group, and any broker serves a group's offsets after another is
    lost (neither protocol has a coordinator to find). Cursus groups live in the memory of their
    coordinator broker (FIND_COORDINATOR), Kafka's classic groups in broker/groups/classic.py."""

    def __init__(self, cluster: Cluster, groups: GroupCoordinator) -> None:
        self.cluster = cluster
        self.groups = groups
        # when each committed offset last changed here (see adopt_offsets)
        self._offset_clock = 0
        self._offset_stamps: dict[tuple[str, str, int], int] = {}

    def shares(self, policy: GroupPolicy | None) -> bool:
        return policy is not CURSUS_POLICY

    async def group_state(self, group: str) -> tuple[bytes, int]:
        return await self.cluster.group_state(group)

    async def set_group_state(self, group: str, data: bytes, version: int) -> bool:
        return await self.cluster.set_group_state(group, data, version)

    async def shared_groups(self) -> dict[str, tuple[str, str]]:
        return await self.cluster.shared_groups()

    def _written(self, key: tuple[str, str, int]) -> None:
        """``key`` changes locally now (an adoption read earlier must not undo it)."""
        self._offset_clock += 1
        self._offset_stamps[key] = self._offset_clock

    async def publish_offsets(self, group: str, topic: str, entries: dict[int, int]) -> None:
        for p in entries:
            self._written((group, topic, p))
        await self.cluster.publish_offsets(group, topic, dict(entries))

    async def forget_offset(self, group: str, topic: str, partition: int) -> None:
        self._written((group, topic, partition))
        await self.cluster.forget_offset(group, topic, partition)

    async def forget_group(self, group: str) -> None:
        for key in self.groups.offsets.keys_of(group):
            self._written(key)
        await self.cluster.forget_group(group)

    async def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        return await self.cluster.committed_offset(group, topic, partition)

    def offsets_mark(self) -> int:
        return self._offset_clock

    def adopt_offsets(self, offsets: dict[tuple[str, str, int], int], *, since: int) -> bool:
        fresh = {k for k, stamp in self._offset_stamps.items() if stamp > since}
        changed = _adopt(self.groups.offsets, offsets, fresh)
        for key in [k for k, stamp in self._offset_stamps.items() if stamp <= since]:
            del self._offset_stamps[key]
        return changed
