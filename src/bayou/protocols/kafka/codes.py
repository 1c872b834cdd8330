"""Every number the Kafka front end names, in one place: API keys, served versions, error codes.

``ApiKey`` is the one table of the APIs bayou serves (issue 17, "APIs"). ``SUPPORTED`` gives each
the version range ApiVersions advertises. The ranges are the ones the kio schemas carry (Kafka 4.x
message definitions: Kafka 4.0 removed Produce v0-2, Fetch v0-3 and the other pre-0.11 versions, and
every client negotiated against a Kafka 4 broker copes with that), capped below the versions that
name topics by id instead of by name (Produce v13, Fetch v13, OffsetCommit/OffsetFetch v10,
DeleteTopics v6): bayou has no topic ids yet, and a client only uses ids when the broker advertises
those versions. ``ERROR_CODE`` maps bayou's error registry onto Kafka's codes (STYLE habit 11).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from bayou import errors


class ApiKey(enum.IntEnum):
    """The request API keys bayou serves (``clients/src/main/resources/common/message/*.json``)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_CLUSTER = 60


@dataclass(frozen=True, slots=True)
class VersionRange:
    """The versions of one API bayou accepts, both ends included."""

    min: int
    max: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min <= version <= self.max


SUPPORTED: Mapping[ApiKey, VersionRange] = MappingProxyType({
    ApiKey.PRODUCE: VersionRange(3, 12),  # v3: record batches (magic 2); v13 names topics by id
    ApiKey.FETCH: VersionRange(4, 12),  # v4: isolation level, aborted txns; v13 names topics by id
    ApiKey.LIST_OFFSETS: VersionRange(1, 11),
    ApiKey.METADATA: VersionRange(0, 13),  # v10+ carry a topic id: bayou answers the zero UUID
    ApiKey.OFFSET_COMMIT: VersionRange(2, 9),  # v10 names topics by id
    ApiKey.OFFSET_FETCH: VersionRange(1, 9),  # v10 names topics by id
    ApiKey.FIND_COORDINATOR: VersionRange(0, 6),
    ApiKey.JOIN_GROUP: VersionRange(0, 9),
    ApiKey.HEARTBEAT: VersionRange(0, 4),
    ApiKey.LEAVE_GROUP: VersionRange(0, 5),
    ApiKey.SYNC_GROUP: VersionRange(0, 5),
    ApiKey.DESCRIBE_GROUPS: VersionRange(0, 6),
    ApiKey.LIST_GROUPS: VersionRange(0, 5),
    ApiKey.SASL_HANDSHAKE: VersionRange(0, 1),
    ApiKey.API_VERSIONS: VersionRange(0, 4),
    ApiKey.CREATE_TOPICS: VersionRange(2, 7),  # v7 answers a topic id: the zero UUID
    ApiKey.DELETE_TOPICS: VersionRange(1, 5),  # v6 may name topics by id
    ApiKey.INIT_PRODUCER_ID: VersionRange(0, 6),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: VersionRange(2, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: VersionRange(0, 3),  # v4+ are the brokers' own verification batches
    ApiKey.ADD_OFFSETS_TO_TXN: VersionRange(0, 4),
    ApiKey.END_TXN: VersionRange(0, 5),
    ApiKey.TXN_OFFSET_COMMIT: VersionRange(0, 5),
    ApiKey.DESCRIBE_CONFIGS: VersionRange(1, 4),
    ApiKey.ALTER_CONFIGS: VersionRange(0, 2),
    ApiKey.SASL_AUTHENTICATE: VersionRange(0, 2),
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 3),
    ApiKey.DELETE_GROUPS: VersionRange(0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
    ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 2),
})
"""What ApiVersions advertises once the broker serves every API (issue 17, "APIs")."""

TRANSACTION_APIS: frozenset[ApiKey] = frozenset({
    ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
})
"""Kafka's transaction APIs (server/kafka_txn.py), served standalone and in cluster mode alike;
tests name them to build the ApiVersions of a listener that would not serve them."""

SASL_APIS: frozenset[ApiKey] = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


def is_supported(api_key: int, api_version: int) -> bool:
    """True when bayou decodes requests of this key and version."""
    try:
        key = ApiKey(api_key)
    except ValueError:
        return False
    return api_version in SUPPORTED[key]


ERROR_CODE: Mapping[type[errors.BayouError], ErrorCode] = MappingProxyType({
    errors.InvalidRequest: ErrorCode.invalid_request,
    errors.InvalidRecord: ErrorCode.invalid_record,
    errors.InvalidTopicName: ErrorCode.invalid_topic_exception,
    errors.TopicAlreadyExists: ErrorCode.topic_already_exists,
    errors.UnknownTopic: ErrorCode.unknown_topic_or_partition,
    errors.UnknownPartition: ErrorCode.unknown_topic_or_partition,
    errors.InvalidPartitions: ErrorCode.invalid_partitions,
    errors.PartitionLimitReached: ErrorCode.policy_violation,  # a broker-wide limit, not the request
    errors.InvalidConfig: ErrorCode.invalid_config,
    errors.OffsetOutOfRange: ErrorCode.offset_out_of_range,
    errors.CorruptRecord: ErrorCode.corrupt_message,
    errors.RecordTooLarge: ErrorCode.message_too_large,
    errors.UnsupportedCompression: ErrorCode.unsupported_compression_type,
    errors.NotLeader: ErrorCode.not_leader_or_follower,  # the client refreshes Metadata and retries
    errors.ReplicationTimeout: ErrorCode.request_timed_out,
    errors.NotEnoughReplicas: ErrorCode.not_enough_replicas,
    errors.NotEnoughReplicasAfterAppend: ErrorCode.not_enough_replicas_after_append,
    errors.GroupNotFound: ErrorCode.group_id_not_found,
    errors.IllegalGeneration: ErrorCode.illegal_generation,  # the client rejoins
    errors.UnknownMember: ErrorCode.unknown_member_id,  # the client rejoins with an empty id
    errors.RebalanceInProgress: ErrorCode.rebalance_in_progress,  # the member rejoins
    errors.InconsistentGroupProtocol: ErrorCode.inconsistent_group_protocol,
    errors.PartitionNotAssigned: ErrorCode.illegal_generation,  # a stale assignment: rejoin
    errors.GroupTopicMismatch: ErrorCode.inconsistent_group_protocol,  # bayou group bound elsewhere
    errors.OffsetRegression: ErrorCode.invalid_commit_offset_size,  # Kafka has no such refusal
    errors.DuplicateSequence: ErrorCode.duplicate_sequence_number,
    errors.OutOfOrderSequence: ErrorCode.out_of_order_sequence_number,
    errors.ProducerFenced: ErrorCode.producer_fenced,
    errors.InvalidTxnState: ErrorCode.invalid_txn_state,
    errors.ConcurrentTransactions: ErrorCode.concurrent_transactions,  # retriable: the client retries
    errors.InvalidProducerIdMapping: ErrorCode.invalid_producer_id_mapping,
    errors.InvalidTransactionTimeout: ErrorCode.invalid_transaction_timeout,
    errors.TransactionalIdLimit: ErrorCode.policy_violation,  # a broker-wide limit, not the request
    errors.StorageError: ErrorCode.kafka_storage_error,
    errors.CorruptStorage: ErrorCode.kafka_storage_error,  # the partition is offline until repaired
    errors.BrokerShuttingDown: ErrorCode.leader_not_available,  # retriable: the client waits
    errors.Unauthorized: ErrorCode.topic_authorization_failed,  # see ``authorization_code``
})
"""Every registry error's Kafka code, in one place. The registry is a class hierarchy: a subclass
missing here falls back to its nearest listed base (``error_code``)."""

AUTHORIZATION_CODE: Mapping[str, ErrorCode] = MappingProxyType({
    "topic": ErrorCode.topic_authorization_failed,
    "group": ErrorCode.group_authorization_failed,
    "cluster": ErrorCode.cluster_authorization_failed,
    "transactional_id": ErrorCode.transactional_id_authorization_failed,
})
"""Kafka names the refused resource in the code; ``errors.Unauthorized`` does not, so the handler
that knows the resource looks its code up here."""


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka code to answer ``exc`` with: its registry class or nearest base, else unknown."""
    for cls in type(exc).__mro__:
        code = ERROR_CODE.get(cls)
        if code is not None:
            return code
    return ErrorCode.unknown_server_error
