"""Requests of the V1 protocol as frozen, slotted dataclasses (one per command).

Text fields are ``str`` decoded from the wire as UTF-8 with ``surrogateescape``, so every byte
round-trips; keys and values are the exact bytes the client sent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Produce:
    topic: str
    key: bytes
    value: bytes
    acks: str  # "0", "1" or "all"


@dataclass(frozen=True, slots=True)
class Consume:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Join:
    group: str
    topic: str
    consumer_id: str
    assignor: str | None


@dataclass(frozen=True, slots=True)
class Sync:
    group: str
    topic: str
    consumer_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group: str
    topic: str
    consumer_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class Leave:
    group: str
    topic: str
    consumer_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class Commit:
    group: str
    topic: str
    consumer_id: str
    generation: int
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Offset:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    topic: str
    partition: int
    replica_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class SetPartitionRole:
    topic: str
    partition: int
    role: str  # "leader" or "follower"


@dataclass(frozen=True, slots=True)
class Ping:
    pass


# ADMIN_CREATE_TOPIC's replication factor -1 asks for the broker's default (bayou extension, after
# Kafka's CreateTopics convention, KIP-464); the original broker refused every value <= 0.
DEFAULT_REPLICATION_FACTOR = -1


@dataclass(frozen=True, slots=True)
class AdminCreateTopic:
    topic: str
    partitions: int
    replication_factor: int  # DEFAULT_REPLICATION_FACTOR: the broker's default (bayou extension)
    config: tuple[tuple[str, str], ...] = ()  # bayou extension: trailing key=value tokens


@dataclass(frozen=True, slots=True)
class AdminDescribeTopic:
    """bayou extension (additive, as the V1 compatibility policy allows)."""

    topic: str


@dataclass(frozen=True, slots=True)
class AdminDeleteTopic:
    """bayou extension (additive, as the V1 compatibility policy allows)."""

    topic: str


@dataclass(frozen=True, slots=True)
class AdminRegisterBroker:
    broker_id: int
    host: str
    port: int
    epoch: int


@dataclass(frozen=True, slots=True)
class AdminBrokerHeartbeat:
    broker_id: int


@dataclass(frozen=True, slots=True)
class AdminSetPartitionLeader:
    topic: str
    partition: int
    leader_id: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AdminGetMetadata:
    pass


@dataclass(frozen=True, slots=True)
class AdminReconcileBrokerHealth:
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class AdminFenceBroker:
    broker_id: int
    fenced: bool


@dataclass(frozen=True, slots=True)
class AdminElectTopicLeaders:
    topic: str


@dataclass(frozen=True, slots=True)
class BrokerFetch:
    topic: str
    partition: int
    follower_id: int
    offset: int
    max_messages: int


@dataclass(frozen=True, slots=True)
class BrokerReplicaAck:
    topic: str
    partition: int
    follower_id: int
    acked_offset: int


Request = (
    Produce | Consume | Join | Sync | Heartbeat | Leave | Commit | Offset | ReplicaFetch
    | SetPartitionRole | Ping | AdminCreateTopic | AdminRegisterBroker | AdminBrokerHeartbeat
    | AdminSetPartitionLeader | AdminGetMetadata | AdminReconcileBrokerHealth | AdminFenceBroker
    | AdminElectTopicLeaders | BrokerFetch | BrokerReplicaAck | AdminDescribeTopic | AdminDeleteTopic
)
