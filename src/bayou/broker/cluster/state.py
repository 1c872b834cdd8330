"""What the cluster keeps in ZooKeeper, as plain data: the node layout, JSON codecs, replica
assignment and leader election. Pure functions; ``zk.py`` does the I/O.

Layout under the cluster's chroot (``zk://host:port/chroot``), as Kafka kept it before KRaft:

    /cluster/id                            the cluster's id (a uuid, set by the first broker)
    /brokers/ids/<id>                      ephemeral: {"host", "endpoints": {protocol: port}}
    /controller                            ephemeral: {"broker_id"}
    /topics/<topic>                        {"partitions": {"0": [replica ids]}, "config": {...}}
    /topics/<topic>/partitions/<p>/state   {"leader", "leader_epoch", "isr": [...]}
    /groups/<group>                        V1 groups: the group's state (groups.json's entry)
    /groups/<group>/<topic>                {"partition": committed offset}
    /iggy/catalog, /iggy/users             Iggy's streams/topics/groups and users (JSON documents)
    /locks/<name>                          cluster-wide locks (kazoo's recipe)

The controller (whoever holds /controller) moves leadership when a leader's broker goes away and
drops dead brokers from ISRs; a partition's leader shrinks and grows its ISR. Both write the state
node with a compare-and-set on its znode version, so neither overwrites what it has not seen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from bayou.records.hashing import fnv1a_32

CLUSTER_ID = "/cluster/id"
BROKERS = "/brokers/ids"
CONTROLLER = "/controller"
TOPICS = "/topics"
GROUPS = "/groups"
LOCKS = "/locks"
TRANSACTIONS = "/transactions"  # Kafka transactions' coordinator state, one node per transactional id
PARTITIONS_REMOVED = "cluster.partitions.removed"  # topic config: [[removal id, partitions kept], ...]
NO_LEADER = -1


def group_path(group: str) -> str:
    return f"{GROUPS}/{quote(group, safe='')}"


TXN_BUCKETS = 64  # /transactions/<bucket>/<id>: no listing of one node's children grows past a bound


def txn_bucket(txn_id: str) -> str:
    """The node under which ``txn_id``'s state is kept (FNV-1a of the id over ``TXN_BUCKETS``)."""
    return bucket_path(fnv1a_32(txn_id.encode()) % TXN_BUCKETS)


def bucket_path(bucket: int) -> str:
    return f"{TRANSACTIONS}/{bucket:02x}"


def txn_path(txn_id: str) -> str:
    return f"{txn_bucket(txn_id)}/{quote(txn_id, safe='')}"


def offsets_path(group: str, topic: str) -> str:
    """A group's committed offsets on one topic: ``{"partition": next offset to read}``. Names
    are percent-encoded (a group name may hold a slash)."""
    return f"{GROUPS}/{quote(group, safe='')}/{quote(topic, safe='')}"


def broker_path(broker_id: int) -> str:
    return f"{BROKERS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker's node. ``leaving``: it is stopping (controlled shutdown, Kafka's
    ``shuttingDownBrokers``): its partitions' leadership moves to in-sync followers and it leaves
    every ISR, while it still serves until that is done."""

    broker_id: int
    host: str  # the advertised host resolved to an IP address
    endpoints: dict[str, int] = field(default_factory=dict)  # protocol name -> port
    leaving: bool = False
    name: str = ""  # the advertised host name, when it is not an IP address ("" otherwise)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {"broker_id": self.broker_id, "host": self.host, "endpoints": self.endpoints}
        if self.leaving:
            doc["leaving"] = True
        if self.name:
            doc["name"] = self.name
        return json.dumps(doc).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BrokerRegistration:
        doc = json.loads(data)
        return cls(int(doc["broker_id"]), str(doc["host"]),
                   {str(k): int(v) for k, v in doc.get("endpoints", {}).items()},
                   bool(doc.get("leaving", False)), str(doc.get("name", "")))

    def address(self, protocol: str) -> tuple[str, int] | None:
        port = self.endpoints.get(protocol)
        return None if port is None else (self.host, port)


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    partitions: dict[int, list[int]]  # partition -> replica broker ids, preferred leader first
    config: dict[str, str] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        return min((len(r) for r in self.partitions.values()), default=0)

    def to_json(self) -> bytes:
        return json.dumps({"partitions": {str(p): r for p, r in sorted(self.partitions.items())},
                           "config": self.config}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TopicAssignment:
        doc = json.loads(data)
        return cls({int(p): [int(b) for b in r] for p, r in doc["partitions"].items()},
                   {str(k): str(v) for k, v in doc.get("config", {}).items()})


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]

    def to_json(self) -> bytes:
        return json.dumps({"leader": self.leader, "leader_epoch": self.leader_epoch,
                           "isr": list(self.isr)}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> PartitionState:
        doc: dict[str, Any] = json.loads(data)
        return cls(int(doc["leader"]), int(doc["leader_epoch"]), tuple(int(b) for b in doc["isr"]))


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int, *,
                    first_partition: int = 0, start: int = 0) -> dict[int, list[int]]:
    """Kafka's round-robin assignment: partition p's replicas are consecutive live brokers starting
    at ``start + p``, so leaders (the first replica) spread evenly. Raises ValueError when there
    are fewer live brokers than the replication factor."""
    ids = sorted(brokers)
    if replication_factor < 1:
        raise ValueError("replication factor must be >= 1")
    if len(ids) < replication_factor:
        raise ValueError(f"replication factor {replication_factor} is larger than the {len(ids)} "
                         "live brokers")
    out: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + partitions):
        out[p] = [ids[(start + p + i) % len(ids)] for i in range(replication_factor)]
    return out


def initial_state(replicas: list[int], live: set[int]) -> PartitionState:
    """A new partition: led by its first live replica, every live replica in sync."""
    alive = [b for b in replicas if b in live]
    return PartitionState(alive[0] if alive else NO_LEADER, 0, tuple(alive or replicas[:1]))


def after_failures(state: PartitionState, replicas: list[int], live: set[int]) -> PartitionState:
    """The state once the brokers not in ``live`` are gone: a dead leader is replaced by the first
    replica (in assignment order) that is in the ISR and alive, with the next epoch; dead brokers
    leave the ISR. Only ISR members may lead (no unclean election), so when none is alive the
    partition has no leader and the ISR keeps the last leader, the one that can come back whole.
    A leaderless partition whose ISR member came back is led by it again."""
    alive_isr = tuple(b for b in state.isr if b in live)
    if state.leader != NO_LEADER and state.leader in live:
        if alive_isr == state.isr:
            return state
        return PartitionState(state.leader, state.leader_epoch, alive_isr)
    candidates = [b for b in replicas if b in alive_isr]
    if not candidates:
        if state.leader == NO_LEADER:
            return state
        return PartitionState(NO_LEADER, state.leader_epoch + 1, (state.leader,))
    return PartitionState(candidates[0], state.leader_epoch + 1, alive_isr)


def hand_over(state: PartitionState, replicas: list[int], leaving: set[int]) -> PartitionState:
    """Controlled shutdown: a partition led by a ``leaving`` broker moves to the first replica (in
    assignment order) that is in the ISR and not leaving, with the next epoch; leaving brokers
    leave the ISR. When no one else is in sync, nothing changes: the leaving broker keeps leading
    until it is gone (then ``after_failures`` applies), so no acknowledged record is lost."""
    if (not leaving or state.leader == NO_LEADER
            or (state.leader not in leaving and not leaving & set(state.isr))):
        return state
    staying = tuple(b for b in state.isr if b not in leaving)
    if not staying:
        return state
    if state.leader not in leaving:
        return PartitionState(state.leader, state.leader_epoch, staying)
    leader = next((b for b in replicas if b in staying), staying[0])
    return PartitionState(leader, state.leader_epoch + 1, staying)


# Members bound to a client connection (Iggy's) are numbered per broker: the broker id in the high
# bits, so the cluster can tell whose connections they were when a broker dies or restarts.
MEMBER_BROKER_SHIFT = 20


def connection_member_base(broker_id: int) -> int:
    """The first connection number a broker hands out (fits Iggy's u32 client ids)."""
    return (broker_id % 4096) << MEMBER_BROKER_SHIFT


def member_broker(member: str) -> int | None:
    """The broker a connection-bound member id was handed out by (None if not such an id)."""
    return int(member) >> MEMBER_BROKER_SHIFT if member.isascii() and member.isdigit() else None


def partitions_to_drop(zk_history: str | None, local_history: str | None) -> int | None:
    """Given a topic's removal history in ZooKeeper and the one a broker's copy has seen, the first
    partition index whose local copy is of a removed incarnation (None: nothing to drop)."""
    seen = {rid for rid, _keep in json.loads(local_history or "[]")}
    missed = [int(keep) for rid, keep in json.loads(zk_history or "[]") if rid not in seen]
    return min(missed) if missed else None

