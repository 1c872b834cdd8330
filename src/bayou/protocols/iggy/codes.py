"""Every number the Iggy wire protocol names (iggy.md A.2, B.4, B.6, C.4, C.5), in one place.

``Command`` is the one table of command codes: the seed's (A.2), everything the apache-iggy 0.8 (L)
and 0.9 (V) SDKs put on the wire, and the user/token administration codes that exist in both. The
VSR dialect carries an ``Operation`` byte instead of a code for most commands; ``OPERATION_OF``
and ``COMMAND_OF_OPERATION`` are the two directions of that mapping (iggy.md C.5), so dispatch is a
lookup in both dialects. ``Status`` holds Iggy's numeric error codes as they travel in an L reply
status, a V header status and a V result entry; ``ERROR_STATUS`` maps bayou's error registry onto
them (STYLE habit 11: one place per protocol).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from bayou import errors


class Command(enum.IntEnum):
    """Command codes (``core/binary_protocol/src/codes.rs``; seed table A.2)."""

    # system
    PING = 1
    GET_STATS = 10
    GET_SNAPSHOT_FILE = 11
    GET_CLUSTER_METADATA = 12
    DESCRIBE_OPTIONS = 13
    GET_ME = 20
    GET_CLIENT = 21
    GET_CLIENTS = 22
    # users and sessions
    GET_USER = 31
    GET_USERS = 32
    CREATE_USER = 33
    DELETE_USER = 34
    UPDATE_USER = 35
    UPDATE_PERMISSIONS = 36
    CHANGE_PASSWORD = 37
    LOGIN_USER = 38
    LOGOUT_USER = 39
    LOGIN_REGISTER = 40
    # personal access tokens
    GET_PERSONAL_ACCESS_TOKENS = 41
    CREATE_PERSONAL_ACCESS_TOKEN = 42
    DELETE_PERSONAL_ACCESS_TOKEN = 43
    LOGIN_WITH_PERSONAL_ACCESS_TOKEN = 44
    LOGIN_REGISTER_WITH_PAT = 45
    # messages
    POLL_MESSAGES = 100
    SEND_MESSAGES = 101
    FLUSH_UNSAVED_BUFFER = 102
    # bayou's extension (not Iggy's; a real Iggy server answers it INVALID_COMMAND): wait until
    # one of the listed partitions has messages at or past an offset (bayou's SDK consumer)
    WAIT_FOR_MESSAGES = 10_100
    # bayou's extension: POLL_MESSAGES answered in the V layout (batch records of the stored
    # frames) on the legacy transport, so the SDK reads stored bytes with no 0.8 rewrite
    POLL_BATCHES = 10_101
    # bayou's extension: POLL_BATCHES of several partitions in one request, with the wait
    POLL_PARTITIONS = 10_102
    # consumer offsets
    GET_CONSUMER_OFFSET = 120
    STORE_CONSUMER_OFFSET = 121
    DELETE_CONSUMER_OFFSET = 122
    # streams
    GET_STREAM = 200
    GET_STREAMS = 201
    CREATE_STREAM = 202
    DELETE_STREAM = 203
    UPDATE_STREAM = 204
    PURGE_STREAM = 205
    # topics
    GET_TOPIC = 300
    GET_TOPICS = 301
    CREATE_TOPIC = 302
    DELETE_TOPIC = 303
    UPDATE_TOPIC = 304
    PURGE_TOPIC = 305
    # partitions and segments
    CREATE_PARTITIONS = 402
    DELETE_PARTITIONS = 403
    DELETE_SEGMENTS = 503
    # consumer groups
    GET_CONSUMER_GROUP = 600
    GET_CONSUMER_GROUPS = 601
    CREATE_CONSUMER_GROUP = 602
    DELETE_CONSUMER_GROUP = 603
    JOIN_CONSUMER_GROUP = 604
    LEAVE_CONSUMER_GROUP = 605
    SYNC_CONSUMER_GROUP = 606


SEED_COMMANDS: frozenset[Command] = frozenset({
    Command.PING, Command.GET_STATS, Command.GET_ME, Command.GET_CLIENT, Command.GET_CLIENTS,
    Command.POLL_MESSAGES, Command.SEND_MESSAGES, Command.GET_CONSUMER_OFFSET,
    Command.STORE_CONSUMER_OFFSET, Command.GET_STREAM, Command.GET_STREAMS, Command.CREATE_STREAM,
    Command.DELETE_STREAM, Command.GET_TOPIC, Command.GET_TOPICS, Command.CREATE_TOPIC,
    Command.DELETE_TOPIC, Command.CREATE_PARTITIONS, Command.DELETE_PARTITIONS,
    Command.GET_CONSUMER_GROUP, Command.GET_CONSUMER_GROUPS, Command.CREATE_CONSUMER_GROUP,
    Command.DELETE_CONSUMER_GROUP, Command.JOIN_CONSUMER_GROUP, Command.LEAVE_CONSUMER_GROUP,
})
"""The commands the design document lists (A.2); a D connection can send nothing else."""

LOGIN_COMMANDS: frozenset[Command] = frozenset({
    Command.LOGIN_USER, Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN,
})
"""The legacy logins: sending one marks a legacy-framed connection as L (iggy.md D.3 rule 1)."""

PRE_LOGIN_COMMANDS: frozenset[Command] = frozenset({Command.PING, Command.GET_STATS})
"""What a real L client sends before logging in (B.3 item 6); anything else marks a D client."""


class Operation(enum.IntEnum):
    """The VSR operation byte at RequestHeader offset 176 (iggy.md C.5; ``consensus/operation.rs``)."""

    RESERVED = 0
    REGISTER = 1
    NON_REPLICATED = 2
    LOGOUT = 3
    CREATE_STREAM = 128
    UPDATE_STREAM = 129
    DELETE_STREAM = 130
    PURGE_STREAM = 131
    CREATE_TOPIC = 132
    UPDATE_TOPIC = 133
    DELETE_TOPIC = 134
    PURGE_TOPIC = 135
    CREATE_PARTITIONS = 136
    DELETE_PARTITIONS = 137
    DELETE_SEGMENTS = 138
    CREATE_CONSUMER_GROUP = 139
    DELETE_CONSUMER_GROUP = 140
    CREATE_USER = 141
    UPDATE_USER = 142
    DELETE_USER = 143
    CHANGE_PASSWORD = 144
    UPDATE_PERMISSIONS = 145
    CREATE_PERSONAL_ACCESS_TOKEN = 146
    DELETE_PERSONAL_ACCESS_TOKEN = 147
    JOIN_CONSUMER_GROUP = 148
    LEAVE_CONSUMER_GROUP = 149
    SEND_MESSAGES = 160
    STORE_CONSUMER_OFFSET = 161
    DELETE_CONSUMER_OFFSET = 162


COMMAND_OF_OPERATION: Mapping[Operation, Command] = MappingProxyType({
    Operation.LOGOUT: Command.LOGOUT_USER,
    Operation.CREATE_STREAM: Command.CREATE_STREAM,
    Operation.UPDATE_STREAM: Command.UPDATE_STREAM,
    Operation.DELETE_STREAM: Command.DELETE_STREAM,
    Operation.PURGE_STREAM: Command.PURGE_STREAM,
    Operation.CREATE_TOPIC: Command.CREATE_TOPIC,
    Operation.UPDATE_TOPIC: Command.UPDATE_TOPIC,
    Operation.DELETE_TOPIC: Command.DELETE_TOPIC,
    Operation.PURGE_TOPIC: Command.PURGE_TOPIC,
    Operation.CREATE_PARTITIONS: Command.CREATE_PARTITIONS,
    Operation.DELETE_PARTITIONS: Command.DELETE_PARTITIONS,
    Operation.DELETE_SEGMENTS: Command.DELETE_SEGMENTS,
    Operation.CREATE_CONSUMER_GROUP: Command.CREATE_CONSUMER_GROUP,
    Operation.DELETE_CONSUMER_GROUP: Command.DELETE_CONSUMER_GROUP,
    Operation.CREATE_USER: Command.CREATE_USER,
    Operation.UPDATE_USER: Command.UPDATE_USER,
    Operation.DELETE_USER: Command.DELETE_USER,
    Operation.CHANGE_PASSWORD: Command.CHANGE_PASSWORD,
    Operation.UPDATE_PERMISSIONS: Command.UPDATE_PERMISSIONS,
    Operation.CREATE_PERSONAL_ACCESS_TOKEN: Command.CREATE_PERSONAL_ACCESS_TOKEN,
    Operation.DELETE_PERSONAL_ACCESS_TOKEN: Command.DELETE_PERSONAL_ACCESS_TOKEN,
    Operation.JOIN_CONSUMER_GROUP: Command.JOIN_CONSUMER_GROUP,
    Operation.LEAVE_CONSUMER_GROUP: Command.LEAVE_CONSUMER_GROUP,
    Operation.SEND_MESSAGES: Command.SEND_MESSAGES,
    Operation.STORE_CONSUMER_OFFSET: Command.STORE_CONSUMER_OFFSET,
    Operation.DELETE_CONSUMER_OFFSET: Command.DELETE_CONSUMER_OFFSET,
})
"""Operations that stand for exactly one command. REGISTER carries 40 or 45 (see
``framing.VsrFrame.command``); NON_REPLICATED carries its code in the header."""


def _invert(table: Mapping[Operation, Command]) -> dict[Command, Operation]:
    out = {command: op for op, command in table.items()}
    out[Command.LOGIN_REGISTER] = Operation.REGISTER
    out[Command.LOGIN_REGISTER_WITH_PAT] = Operation.REGISTER
    return out


OPERATION_OF: Mapping[Command, Operation] = MappingProxyType(_invert(COMMAND_OF_OPERATION))
"""The operation a V client uses for a command; a command absent here travels as NON_REPLICATED."""

BAYOU_EXTENSIONS: frozenset[Command] = frozenset({Command.WAIT_FOR_MESSAGES, Command.POLL_BATCHES,
                                                   Command.POLL_PARTITIONS})
"""bayou's own commands, on the legacy transport only: a real Iggy server answers them InvalidCommand."""

NON_REPLICATED_COMMANDS: frozenset[Command] = frozenset(
    c for c in Command
    if c not in OPERATION_OF and c not in LOGIN_COMMANDS and c not in BAYOU_EXTENSIONS)
"""Codes that may ride operation 2 (iggy.md C.5). The legacy logins are not among them: VSR has no
legacy login, a V client logs in with operation 1. Nor are bayou's extensions (WAIT_FOR_MESSAGES,
POLL_BATCHES, POLL_PARTITIONS): they serve bayou's SDK, which speaks the legacy transport."""

RESULT_FRAMED: frozenset[Operation] = frozenset(
    {op for op in Operation if 128 <= op <= 149}
    | {Operation.STORE_CONSUMER_OFFSET, Operation.DELETE_CONSUMER_OFFSET, Operation.REGISTER})
"""Operations whose successful reply body starts with the u32 result count (iggy.md C.6 rule 2)."""

CHECKSUMMED_REQUESTS: frozenset[Operation] = frozenset(
    {op for op in Operation if 128 <= op <= 149} | {Operation.REGISTER, Operation.LOGOUT})
"""Operations whose request header carries XXH3-64 of the body in ``request_checksum`` (C.2)."""


class Status(enum.IntEnum):
    """Iggy error codes (``core/common/src/error/iggy_error.rs``; iggy.md B.6). 0 is success."""

    OK = 0
    ERROR = 1
    INVALID_CONFIGURATION = 2
    INVALID_COMMAND = 3
    INVALID_FORMAT = 4
    FEATURE_UNAVAILABLE = 5
    INVALID_IDENTIFIER = 6
    DISCONNECTED = 8
    STALE_CLIENT = 30
    UNAUTHENTICATED = 40
    UNAUTHORIZED = 41
    RESOURCE_NOT_FOUND = 20
    INVALID_CREDENTIALS = 42
    INVALID_USERNAME = 43
    INVALID_PASSWORD = 44
    USER_ALREADY_EXISTS = 46
    USER_INACTIVE = 47
    CANNOT_DELETE_USER = 48
    CANNOT_CHANGE_PERMISSIONS = 49
    INVALID_PERSONAL_ACCESS_TOKEN_NAME = 50
    PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS = 51
    PERSONAL_ACCESS_TOKENS_LIMIT_REACHED = 52
    INVALID_PERSONAL_ACCESS_TOKEN = 53
    TRANSIENT_NOT_COMMITTED = 57
    TRANSIENT_NOT_ACCEPTED = 58
    PERSONAL_ACCESS_TOKEN_EXPIRED = 54
    CLIENT_NOT_FOUND = 100
    CONNECTION_CLOSED = 206
    STREAM_ID_NOT_FOUND = 1009
    STREAM_NAME_NOT_FOUND = 1010
    STREAM_ID_ALREADY_EXISTS = 1011
    STREAM_NAME_ALREADY_EXISTS = 1012
    INVALID_STREAM_NAME = 1013
    INVALID_STREAM_ID = 1014
    TOPIC_ID_NOT_FOUND = 2010
    TOPIC_NAME_NOT_FOUND = 2011
    TOPIC_ID_ALREADY_EXISTS = 2012
    TOPIC_NAME_ALREADY_EXISTS = 2013
    INVALID_TOPIC_NAME = 2014
    INVALID_TOPIC_ID = 2016
    INVALID_PARTITIONS_COUNT = 2019
    PARTITION_NOT_FOUND = 3007
    NO_PARTITIONS = 3008
    TOPIC_FULL = 3009
    CONSUMER_OFFSET_NOT_FOUND = 3021
    INVALID_MESSAGES_COUNT = 4009
    TOO_BIG_USER_HEADERS = 4017
    INVALID_HEADER_KEY = 4018
    INVALID_HEADER_VALUE = 4019
    TOO_BIG_MESSAGE_PAYLOAD = 4022
    EMPTY_MESSAGE_PAYLOAD = 4024
    CANNOT_READ_MESSAGE = 4011  # Iggy's code for a stored message the server cannot read
    INVALID_MESSAGE_CHECKSUM = 4027
    NON_ZERO_OFFSET = 4031
    NON_ZERO_TIMESTAMP = 4032
    INVALID_MESSAGES_SIZE = 4036
    TOO_SMALL_MESSAGE = 4037
    INVALID_MESSAGE_TIMESTAMP_DELTA = 4038
    INVALID_BATCH_CHECKSUM = 4039
    INVALID_HEADER_KIND = 4040
    UNSUPPORTED_OPTION_KEY = 4041
    INVALID_OPTION_VALUE = 4042
    OPTIONS_BLOCK_TOO_LARGE = 4043
    INVALID_OFFSET = 4100
    INVALID_RESERVED_FIELD = 4101
    CONSUMER_GROUP_ID_NOT_FOUND = 5000
    CONSUMER_GROUP_ID_ALREADY_EXISTS = 5001
    INVALID_CONSUMER_GROUP_ID = 5002
    CONSUMER_GROUP_NAME_NOT_FOUND = 5003
    CONSUMER_GROUP_NAME_ALREADY_EXISTS = 5004
    INVALID_CONSUMER_GROUP_NAME = 5005
    CONSUMER_GROUP_MEMBER_NOT_FOUND = 5006
    CONSUMER_GROUP_PARTITION_NOT_OWNED = 5009
    ALREADY_AUTHENTICATED = 14000
    INVALID_SESSION = 14001
    INCOMPATIBLE_PROTOCOL_VERSION = 14003


class EvictionReason(enum.IntEnum):
    """Byte 255 of a V EvictionHeader (iggy.md C.4): the session ends instead of a reply."""

    NO_SESSION = 1
    CLIENT_RELEASE_TOO_LOW = 2
    CLIENT_RELEASE_TOO_HIGH = 3
    INVALID_REQUEST_OPERATION = 4
    INVALID_REQUEST_BODY = 5
    INVALID_REQUEST_BODY_SIZE = 6
    SESSION_TOO_LOW = 7
    SESSION_RELEASE_MISMATCH = 8
    INVALID_CREDENTIALS = 9
    INVALID_TOKEN = 10
    USER_INACTIVE = 11
    SESSION_ERROR = 12
    STALE_CLIENT = 13
    INCOMPATIBLE_PROTOCOL = 14
    MALFORMED_LOGIN = 15


# bayou's registry -> Iggy code. Where Iggy distinguishes "by id" from "by name" (1009/1010,
# 2010/2011, 5000/5003) the table gives the id variant; ``not_found_status`` picks the right one.
ERROR_STATUS: Mapping[type[errors.BayouError], Status] = MappingProxyType({
    errors.InvalidRequest: Status.INVALID_COMMAND,
    errors.InvalidTopicName: Status.INVALID_TOPIC_NAME,
    errors.TopicAlreadyExists: Status.TOPIC_NAME_ALREADY_EXISTS,
    errors.UnknownTopic: Status.TOPIC_ID_NOT_FOUND,
    errors.UnknownPartition: Status.PARTITION_NOT_FOUND,
    errors.InvalidPartitions: Status.INVALID_PARTITIONS_COUNT,
    errors.PartitionLimitReached: Status.INVALID_PARTITIONS_COUNT,  # the broker's max_partitions
    errors.InvalidConfig: Status.INVALID_OPTION_VALUE,
    errors.OffsetOutOfRange: Status.INVALID_OFFSET,
    errors.CorruptRecord: Status.INVALID_MESSAGE_CHECKSUM,
    errors.RecordTooLarge: Status.TOO_BIG_MESSAGE_PAYLOAD,
    errors.UnsupportedCompression: Status.FEATURE_UNAVAILABLE,
    errors.NotLeader: Status.TRANSIENT_NOT_ACCEPTED,
    errors.ReplicationTimeout: Status.TRANSIENT_NOT_COMMITTED,
    errors.NotEnoughReplicas: Status.TRANSIENT_NOT_COMMITTED,  # refused before appending: retriable
    errors.NotEnoughReplicasAfterAppend: Status.TRANSIENT_NOT_COMMITTED,  # stored, not replicated enough
    errors.GroupNotFound: Status.CONSUMER_GROUP_ID_NOT_FOUND,
    errors.IllegalGeneration: Status.CONSUMER_GROUP_PARTITION_NOT_OWNED,  # the V client re-syncs on it
    errors.UnknownMember: Status.CONSUMER_GROUP_MEMBER_NOT_FOUND,
    errors.PartitionNotAssigned: Status.CONSUMER_GROUP_PARTITION_NOT_OWNED,
    # Kafka's classic groups and produce checks (server/kafka.py): never raised on an Iggy request
    errors.RebalanceInProgress: Status.CONSUMER_GROUP_PARTITION_NOT_OWNED,
    errors.InconsistentGroupProtocol: Status.CONSUMER_GROUP_ID_NOT_FOUND,
    errors.InvalidRecord: Status.INVALID_COMMAND,
    errors.GroupTopicMismatch: Status.CONSUMER_GROUP_ID_NOT_FOUND,  # Iggy groups live inside a topic
    errors.OffsetRegression: Status.INVALID_OFFSET,
    errors.DuplicateSequence: Status.ERROR,  # Iggy has no idempotent producers; never raised for it
    errors.OutOfOrderSequence: Status.ERROR,
    errors.ProducerFenced: Status.ERROR,
    errors.InvalidTxnState: Status.ERROR,  # Kafka's transactions: never raised on an Iggy request
    errors.ConcurrentTransactions: Status.ERROR,
    errors.InvalidProducerIdMapping: Status.ERROR,
    errors.InvalidTransactionTimeout: Status.ERROR,
    errors.TransactionalIdLimit: Status.ERROR,
    errors.StorageError: Status.ERROR,
    errors.CorruptStorage: Status.CANNOT_READ_MESSAGE,
    errors.BrokerShuttingDown: Status.TRANSIENT_NOT_ACCEPTED,
    errors.Unauthorized: Status.UNAUTHORIZED,
})

_BY_NAME = {
    Status.STREAM_ID_NOT_FOUND: Status.STREAM_NAME_NOT_FOUND,
    Status.TOPIC_ID_NOT_FOUND: Status.TOPIC_NAME_NOT_FOUND,
    Status.CONSUMER_GROUP_ID_NOT_FOUND: Status.CONSUMER_GROUP_NAME_NOT_FOUND,
}


def status_for(exc: errors.BayouError) -> Status:
    """The Iggy code for a registry error (its nearest registered base class; ERROR otherwise)."""
    for cls in type(exc).__mro__:
        status = ERROR_STATUS.get(cls)
        if status is not None:
            return status
    return Status.ERROR


def not_found_status(id_status: Status, by_name: bool) -> Status:
    """``STREAM_ID_NOT_FOUND`` and friends, switched to the by-name code when the client named it."""
    return _BY_NAME.get(id_status, id_status) if by_name else id_status
