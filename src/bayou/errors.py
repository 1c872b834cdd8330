"""One error registry shared by every layer.

Each error class carries a stable ``code`` and a ``retriable`` flag. Protocol front ends map these
codes to their own wire errors in one table each; nothing below the server layer knows about wire
error texts.
"""

from __future__ import annotations

from typing import ClassVar


class BayouError(Exception):
    """Base of every error bayou raises on purpose."""

    code: ClassVar[str] = "UNKNOWN"
    retriable: ClassVar[bool] = False
    default_message: ClassVar[str] = "unknown error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.default_message)
        self.message = message or self.default_message


REGISTRY: dict[str, type[BayouError]] = {}


def _register(cls: type[BayouError]) -> type[BayouError]:
    if cls.code in REGISTRY:
        raise RuntimeError(f"duplicate error code {cls.code}")
    REGISTRY[cls.code] = cls
    return cls


@_register
class InvalidRequest(BayouError):
    code = "INVALID_REQUEST"
    default_message = "invalid request"


@_register
class InvalidRecord(InvalidRequest):
    code = "INVALID_RECORD"
    default_message = "a record batch the broker does not accept (well formed, but refused)"


@_register
class InvalidTopicName(BayouError):
    code = "INVALID_TOPIC_NAME"
    default_message = "invalid topic name"


@_register
class TopicAlreadyExists(BayouError):
    code = "TOPIC_ALREADY_EXISTS"
    default_message = "topic already exists"


@_register
class UnknownTopic(BayouError):
    code = "UNKNOWN_TOPIC"
    default_message = "unknown topic"


@_register
class UnknownPartition(BayouError):
    code = "UNKNOWN_PARTITION"
    default_message = "unknown partition"


@_register
class InvalidPartitions(BayouError):
    code = "INVALID_PARTITIONS"
    default_message = "invalid partition count"


@_register
class InvalidConfig(BayouError):
    code = "INVALID_CONFIG"
    default_message = "invalid configuration"


@_register
class OffsetOutOfRange(BayouError):
    code = "OFFSET_OUT_OF_RANGE"
    default_message = "offset out of range"


@_register
class PartitionLimitReached(InvalidPartitions):
    """The broker already holds ``max_partitions`` partitions (a broker-wide limit, so a few
    requests cannot exhaust its file descriptors and memory)."""

    code = "PARTITION_LIMIT_REACHED"
    default_message = "the broker's partition limit is reached"


@_register
class CorruptRecord(BayouError):
    code = "CORRUPT_RECORD"
    default_message = "corrupt record batch"


@_register
class RecordTooLarge(BayouError):
    code = "RECORD_TOO_LARGE"
    default_message = "record batch too large"


@_register
class UnsupportedCompression(BayouError):
    code = "UNSUPPORTED_COMPRESSION"
    default_message = "unsupported compression codec"


@_register
class NotLeader(BayouError):
    """``leader`` is, in cluster mode, the broker leading the partition now: its id, host and
    port per protocol name, for the front ends' redirects; None when no broker leads it."""

    code = "NOT_LEADER"
    retriable = True
    default_message = "partition leader unavailable on this broker"

    def __init__(self, message: str | None = None, *,
                 leader: tuple[int, str, dict[str, int]] | None = None) -> None:
        super().__init__(message)
        self.leader = leader

    def leader_address(self, protocol: str) -> tuple[str, int] | None:
        """(host, port) of the leader's ``protocol`` listener, if known."""
        if self.leader is None:
            return None
        _id, host, ports = self.leader
        port = ports.get(protocol)
        return None if port is None else (host, port)


@_register
class ReplicationTimeout(BayouError):
    code = "REPLICATION_TIMEOUT"
    retriable = True
    default_message = "acks=all timeout"


@_register
class NotEnoughReplicas(ReplicationTimeout):
    """An acks=all produce refused before anything is appended: fewer replicas are in sync than
    ``min.insync.replicas`` (Kafka's NOT_ENOUGH_REPLICAS). A kind of ReplicationTimeout, so a front
    end without a code of its own answers that (retriable; nothing was stored, so a retry cannot
    duplicate)."""

    code = "NOT_ENOUGH_REPLICAS"
    default_message = "not enough in-sync replicas"


@_register
class NotEnoughReplicasAfterAppend(ReplicationTimeout):
    """An acks=all produce that was appended while enough replicas were in sync, after which the
    ISR shrank below ``min.insync.replicas`` before they acknowledged it (Kafka's
    NOT_ENOUGH_REPLICAS_AFTER_APPEND). Answered as soon as the remaining ISR holds the records rather
    than after the full acks=all timeout. The records are stored and visible: like a timeout, a retry
    may store them twice."""

    code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    default_message = "appended, but fewer in-sync replicas than min.insync.replicas remain"


@_register
class GroupNotFound(BayouError):
    code = "GROUP_NOT_FOUND"
    default_message = "group not found"


@_register
class IllegalGeneration(BayouError):
    code = "ILLEGAL_GENERATION"
    retriable = True
    default_message = "stale generation"


@_register
class UnknownMember(BayouError):
    code = "UNKNOWN_MEMBER"
    retriable = True
    default_message = "unknown member"


@_register
class RebalanceInProgress(BayouError):
    code = "REBALANCE_IN_PROGRESS"
    retriable = True
    default_message = "the group is rebalancing: rejoin"


@_register
class InconsistentGroupProtocol(BayouError):
    code = "INCONSISTENT_GROUP_PROTOCOL"
    default_message = "the member's protocols share none with the group's"


@_register
class PartitionNotAssigned(BayouError):
    code = "PARTITION_NOT_ASSIGNED"
    default_message = "partition not assigned to member"


@_register
class GroupTopicMismatch(BayouError):
    code = "GROUP_TOPIC_MISMATCH"
    default_message = "group is bound to another topic"

    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(f"group is bound to topic {expected}, not {actual}")
        self.expected = expected
        self.actual = actual


@_register
class OffsetRegression(BayouError):
    code = "OFFSET_REGRESSION"
    default_message = "committed offset may not move backwards"


@_register
class DuplicateSequence(BayouError):
    code = "DUPLICATE_SEQUENCE"
    default_message = "duplicate sequence number"


@_register
class OutOfOrderSequence(BayouError):
    code = "OUT_OF_ORDER_SEQUENCE"
    default_message = "out of order sequence number"


@_register
class ProducerFenced(BayouError):
    code = "PRODUCER_FENCED"
    default_message = "producer fenced by a newer epoch"


@_register
class InvalidTxnState(BayouError):
    code = "INVALID_TXN_STATE"
    default_message = "the transaction is not in a state that allows this"


@_register
class ConcurrentTransactions(BayouError):
    code = "CONCURRENT_TRANSACTIONS"
    retriable = True
    default_message = "the previous transaction of this producer is still completing"


@_register
class InvalidProducerIdMapping(BayouError):
    code = "INVALID_PRODUCER_ID_MAPPING"
    default_message = "the producer id is not the transactional id's"


@_register
class TransactionalIdLimit(BayouError):
    """The broker (or, in cluster mode, the cluster's share of ZooKeeper a transactional id falls
    in) already keeps ``MAX_TRANSACTIONAL_IDS``' worth of transactional ids: a new one is refused
    until unused ones expire (a limit, so clients cannot grow the state without bound)."""

    code = "TRANSACTIONAL_ID_LIMIT"
    default_message = "the transactional id limit is reached"


@_register
class InvalidTransactionTimeout(BayouError):
    code = "INVALID_TRANSACTION_TIMEOUT"
    default_message = "transaction timeout above the broker's transaction.max.timeout.ms"


@_register
class StorageError(BayouError):
    code = "STORAGE_ERROR"
    retriable = True
    default_message = "storage failure"


class AppendsUndone(StorageError):
    """The write of deferred appends failed (a full disk) and they were undone, so the log
    could not be made durable as far as asked; what was written before them was fsynced. The
    same wire error as StorageError (retriable): the client's retry is stored anew."""


@_register
class CorruptStorage(StorageError):
    """Stored data failed its check on read (batch CRC, length, offsets): the partition is
    quarantined, offline from the damaged batch on, until the damaged segment is repaired
    (``bayou verify --repair``) or removed (retention, delete-records). Not retriable: reading
    again returns the same bytes."""

    code = "CORRUPT_STORAGE"
    retriable = False
    default_message = "stored data is damaged"


@_register
class BrokerShuttingDown(BayouError):
    code = "BROKER_SHUTTING_DOWN"
    retriable = True
    default_message = "broker is shutting down"


@_register
class Unauthorized(BayouError):
    """The principal of the request may not do it (broker/authz.py). Each front end answers its
    protocol's authorization error; nothing was read or changed."""

    code = "UNAUTHORIZED"
    default_message = "not authorized"


class WouldBlock(Exception):
    """A read asked not to wait could not be served without waiting: bytes not in the page cache,
    the log busy in another thread, more than an event-loop read may copy (storage/cached.py).
    The caller does the read on an I/O thread instead. Not a BayouError: no front end maps it."""
