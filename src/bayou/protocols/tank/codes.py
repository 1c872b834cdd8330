"""Every number the TANK 4.0 wire protocol names (tank.md 1.1, 4.3, 5.3, 6, 7, 8), and the one
protocol error.

``MsgId`` is the one table of message ids; the codec's dispatch tables are keyed by it. The error
enums hold exactly the values the 4.0 client understands: it aborts on any other byte (tank.md
quirk 29), so encoders refuse values outside them. ``*_FOR`` map bayou's error registry onto the
wire codes (STYLE habit 11: one place per protocol).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

from bayou import errors

_E = TypeVar("_E", bound=enum.IntEnum)


class TankError(Exception):
    """The one protocol error.

    ``close`` means what the broker does with it (tank.md 1): protocol errors close the
    connection without any reply. The codec raises it with ``close=True`` for every malformed
    frame or payload; ``BundleError`` is the one kind that leaves the connection open.
    """

    def __init__(self, message: str, *, close: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.close = close

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, close={self.close})"


class MsgId(enum.IntEnum):
    """Frame message ids (tank.md 1.1)."""

    PRODUCE = 0x01
    CONSUME = 0x02
    PING = 0x03
    REG_REPLICA = 0x04  # obsolete: the 4.0 broker closes the connection on it
    PRODUCE_WITH_SEQNUM = 0x05  # answered with PRODUCE (0x01)
    DISCOVER_PARTITIONS = 0x06
    CREATE_TOPIC = 0x07
    RELOAD_CONF = 0x08
    CONSUME_PEER = 0x09
    STATUS = 0x0A
    DISCOVER_TOPICS = 0x0B
    DISCOVER_TOPOLOGY = 0x0C


class ProduceError(enum.IntEnum):
    """One byte per produce entry, or one per topic for the topic-level codes (tank.md 4.3)."""

    OK = 0x00
    UNKNOWN_PARTITION = 0x01
    SYSTEM_ERROR = 0x02  # I/O fault
    ACK_TIMEOUT = 0x03  # cluster only
    INSUFFICIENT_REPLICAS = 0x04  # cluster only
    INVALID_SEQ_NUMS = 0x0A  # tank-cli prints "Invalid Request"; bayou also uses it for bad bundles
    OTHER_LEADER = 0xFC  # cluster only; followed by u32 address + u16 port
    NO_LEADER = 0xFD  # cluster only
    READ_ONLY = 0xFE  # topic level: one byte stands for all of the topic's entries
    UNKNOWN_TOPIC = 0xFF  # topic level


TOPIC_LEVEL_PRODUCE_ERRORS: frozenset[int] = frozenset({ProduceError.READ_ONLY, ProduceError.UNKNOWN_TOPIC})
"""A topic group that starts with one of these is that single byte (tank.md 4.3)."""


class ConsumeFlag(enum.IntEnum):
    """A consume partition entry's ``errorOrFlags`` byte (tank.md 5.3)."""

    OK = 0x00
    BOUNDARY_FAULT = 0x01  # base 0, hwmark, chunk length 0, then first available u64
    SYSTEM_ERROR = 0xFB  # nothing follows
    OTHER_LEADER = 0xFC  # u32 address + u16 port follow, nothing else
    NO_LEADER = 0xFD  # nothing follows
    SPARSE = 0xFE  # ok, but the first bundle is sparse: no base seq field
    UNKNOWN_PARTITION = 0xFF  # nothing follows


CONSUME_FLAGS_WITH_BASE: frozenset[int] = frozenset({ConsumeFlag.OK, ConsumeFlag.BOUNDARY_FAULT})
CONSUME_FLAGS_WITH_CHUNK: frozenset[int] = frozenset({ConsumeFlag.OK, ConsumeFlag.BOUNDARY_FAULT,
                                                      ConsumeFlag.SPARSE})


class PartitionFault(enum.IntEnum):
    """The marker byte after a DiscoverPartitions entry whose two u64 are both 2^64-1 (tank.md 6)."""

    SYSTEM_ERROR = 0xFB
    OTHER_LEADER = 0xFC  # u32 address + u16 port follow
    NO_LEADER = 0xFD


class CreateTopicError(enum.IntEnum):
    """tank.md 7. tank-cli prints "Invalid Request" for both 4 and 10."""

    OK = 0
    ALREADY_EXISTS = 1
    SYSTEM_ERROR = 2
    INVALID_CONFIG = 4
    READ_ONLY = 5
    INVALID_REQUEST = 10  # partitions 0 or an invalid name; checked first
    NOT_SUPPORTED = 11  # understood by the client, never sent by a standalone broker


class ReloadConfError(enum.IntEnum):
    """tank.md 8.

    The 4.0 broker answers 11 for an unknown topic, which the 4.0 client treats as a silent
    "invalid request"; the client's own code for an unknown topic is 1.
    """

    OK = 0
    UNKNOWN_TOPIC = 1  # what the client understands as "unknown topic"
    SYSTEM_ERROR = 2  # file missing, empty or unreadable
    PARSE_FAILURE = 3
    UNKNOWN_PARTITION = 10
    INVALID_REQUEST = 11  # what the 4.0 broker sends for an unknown topic
    CLUSTER_MODE = 12


class BundleError(TankError):
    """A bundle that cannot be stored or read (tank.md 3.1, 3.2).

    On produce it is not a connection error: the server answers the entry with
    ``produce_error`` (10, tank-cli's "Invalid Request"; checklist item 7) and carries on.
    """

    produce_error = ProduceError.INVALID_SEQ_NUMS

    def __init__(self, message: str) -> None:
        super().__init__(message, close=False)


# -- bayou's error registry onto TANK codes (STYLE habit 11) ------------------------------------

PRODUCE_ERROR_FOR: Mapping[type[errors.BayouError], ProduceError] = MappingProxyType({
    errors.UnknownTopic: ProduceError.UNKNOWN_TOPIC,
    errors.UnknownPartition: ProduceError.UNKNOWN_PARTITION,
    errors.InvalidRequest: ProduceError.INVALID_SEQ_NUMS,
    errors.CorruptRecord: ProduceError.INVALID_SEQ_NUMS,
    errors.UnsupportedCompression: ProduceError.INVALID_SEQ_NUMS,
    errors.RecordTooLarge: ProduceError.INVALID_SEQ_NUMS,
    errors.OutOfOrderSequence: ProduceError.INVALID_SEQ_NUMS,
    errors.DuplicateSequence: ProduceError.INVALID_SEQ_NUMS,
    errors.OffsetRegression: ProduceError.INVALID_SEQ_NUMS,
    errors.NotLeader: ProduceError.NO_LEADER,
    errors.ReplicationTimeout: ProduceError.ACK_TIMEOUT,
    errors.NotEnoughReplicas: ProduceError.INSUFFICIENT_REPLICAS,
    errors.StorageError: ProduceError.SYSTEM_ERROR,
})

CREATE_TOPIC_ERROR_FOR: Mapping[type[errors.BayouError], CreateTopicError] = MappingProxyType({
    errors.TopicAlreadyExists: CreateTopicError.ALREADY_EXISTS,
    errors.InvalidTopicName: CreateTopicError.INVALID_REQUEST,
    errors.InvalidPartitions: CreateTopicError.INVALID_REQUEST,
    errors.InvalidRequest: CreateTopicError.INVALID_REQUEST,
    errors.InvalidConfig: CreateTopicError.INVALID_CONFIG,
    errors.Unauthorized: CreateTopicError.READ_ONLY,  # tank-cli's "not allowed"
    errors.StorageError: CreateTopicError.SYSTEM_ERROR,
})

RELOAD_CONF_ERROR_FOR: Mapping[type[errors.BayouError], ReloadConfError] = MappingProxyType({
    errors.UnknownTopic: ReloadConfError.INVALID_REQUEST,  # what TANK 4.0 sends (tank.md 8)
    errors.UnknownPartition: ReloadConfError.UNKNOWN_PARTITION,
    errors.InvalidConfig: ReloadConfError.PARSE_FAILURE,
    errors.Unauthorized: ReloadConfError.SYSTEM_ERROR,  # the 4.0 client has no "not allowed" here
    errors.StorageError: ReloadConfError.SYSTEM_ERROR,
})


def _lookup(table: Mapping[type[errors.BayouError], _E], exc: errors.BayouError, default: _E) -> _E:
    for cls in type(exc).__mro__:
        code = table.get(cls)
        if code is not None:
            return code
    return default


def produce_error_for(exc: errors.BayouError) -> ProduceError:
    """The produce byte for a registry error (its nearest registered base; SYSTEM_ERROR otherwise)."""
    return _lookup(PRODUCE_ERROR_FOR, exc, ProduceError.SYSTEM_ERROR)


def create_topic_error_for(exc: errors.BayouError) -> CreateTopicError:
    return _lookup(CREATE_TOPIC_ERROR_FOR, exc, CreateTopicError.SYSTEM_ERROR)


def reload_conf_error_for(exc: errors.BayouError) -> ReloadConfError:
    return _lookup(RELOAD_CONF_ERROR_FOR, exc, ReloadConfError.SYSTEM_ERROR)


# A consume entry's error flag (tank.md 5.3): 0xfb, "system error opening the partition", for
# stored data that cannot be served (a quarantined partition, a failing disk).
CONSUME_FLAG_FOR: Mapping[type[errors.BayouError], ConsumeFlag] = MappingProxyType({
    errors.NotLeader: ConsumeFlag.NO_LEADER,  # cluster mode; a known leader is OTHER_LEADER instead
    errors.StorageError: ConsumeFlag.SYSTEM_ERROR,
    errors.CorruptStorage: ConsumeFlag.SYSTEM_ERROR,
})


def consume_flag_for(exc: errors.BayouError) -> ConsumeFlag:
    return _lookup(CONSUME_FLAG_FOR, exc, ConsumeFlag.SYSTEM_ERROR)
