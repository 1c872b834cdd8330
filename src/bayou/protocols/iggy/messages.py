"""Iggy requests, replies and their parts as frozen, slotted dataclasses (STYLE habit 4).

One class per request, whatever the dialect: where D, L and V lay a command out differently the
class holds the union of what they carry, and fields one dialect has no room for are None (or empty)
in the others. Each request class names its ``Command``; the codec dispatches on it.

Conventions: identifiers are ``Identifier`` (numeric u32 or a 1..255-byte UTF-8 name); message ids
are u128 ints; timestamps are microseconds since the Unix epoch, as on the wire; optional partitions
are ``int | None`` (None = the u8 flag 0, "server chooses"). D partition ids are passed through as
sent (1-based, 0 = not specified -> None); mapping them onto bayou's partitions is the server's job.
"""

from __future__ import annotations

import enum
import itertools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from bayou.protocols.iggy.codes import Command, Status
from bayou.protocols.iggy.framing import IggyError

_T = TypeVar("_T")

# -- kinds --------------------------------------------------------------------------------------


class IdKind(enum.IntEnum):
    NUMERIC = 1
    STRING = 2


class ConsumerKind(enum.IntEnum):
    CONSUMER = 1
    GROUP = 2


class PartitioningKind(enum.IntEnum):
    BALANCED = 1
    PARTITION_ID = 2
    MESSAGES_KEY = 3


class PollingKind(enum.IntEnum):
    OFFSET = 1
    TIMESTAMP = 2
    FIRST = 3
    LAST = 4
    NEXT = 5


class HeaderKind(enum.IntEnum):
    """User-header value kinds, numbered in the seed's list order (iggy.md A.5 item 5, B.2)."""

    RAW = 1
    STRING = 2
    BOOL = 3
    INT8 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    INT128 = 8
    UINT8 = 9
    UINT16 = 10
    UINT32 = 11
    UINT64 = 12
    UINT128 = 13
    FLOAT32 = 14
    FLOAT64 = 15


class CompressionAlgorithm(enum.IntEnum):
    NONE = 1
    GZIP = 2


class AckLevel(enum.IntEnum):
    """V store/delete consumer offset: 1 quorum (the client default), 0 leader-local."""

    NO_ACK = 0
    QUORUM = 1


class UserStatus(enum.IntEnum):
    """A user's status byte (``UserStatus::as_code``); any other value is INVALID_COMMAND."""

    ACTIVE = 1
    INACTIVE = 2


# -- shared parts -------------------------------------------------------------------------------

MAX_NAME = 255


@dataclass(frozen=True, slots=True)
class Identifier:
    """A stream, topic, group, user or consumer id: a u32 or a name of 1..255 UTF-8 bytes."""

    value: int | str

    @staticmethod
    def numeric(value: int) -> Identifier:
        return Identifier(value)

    @staticmethod
    def named(value: str) -> Identifier:
        return Identifier(value)

    @property
    def kind(self) -> IdKind:
        return IdKind.STRING if isinstance(self.value, str) else IdKind.NUMERIC

    @property
    def is_name(self) -> bool:
        return isinstance(self.value, str)


@dataclass(frozen=True, slots=True)
class Consumer:
    kind: ConsumerKind
    id: Identifier


@dataclass(frozen=True, slots=True)
class Partitioning:
    """How SEND_MESSAGES picks a partition. ``value`` is the raw value: empty (balanced; a D client
    may send 4 zero bytes), a u32 (partition id) or 1..255 key bytes (messages key)."""

    kind: PartitioningKind
    value: bytes = b""

    @staticmethod
    def balanced() -> Partitioning:
        return Partitioning(PartitioningKind.BALANCED)

    @staticmethod
    def partition(partition_id: int) -> Partitioning:
        return Partitioning(PartitioningKind.PARTITION_ID, struct.pack("<I", partition_id))

    @staticmethod
    def messages_key(key: bytes) -> Partitioning:
        return Partitioning(PartitioningKind.MESSAGES_KEY, key)

    @property
    def partition_id(self) -> int | None:
        if self.kind == PartitioningKind.PARTITION_ID and len(self.value) == 4:
            return int.from_bytes(self.value, "little")
        return None


@dataclass(frozen=True, slots=True)
class PollingStrategy:
    kind: PollingKind
    value: int = 0


HeaderValue = bytes | str | bool | int | float

_FIXED: dict[HeaderKind, struct.Struct] = {
    HeaderKind.INT8: struct.Struct("<b"), HeaderKind.INT16: struct.Struct("<h"),
    HeaderKind.INT32: struct.Struct("<i"), HeaderKind.INT64: struct.Struct("<q"),
    HeaderKind.UINT8: struct.Struct("<B"), HeaderKind.UINT16: struct.Struct("<H"),
    HeaderKind.UINT32: struct.Struct("<I"), HeaderKind.UINT64: struct.Struct("<Q"),
    HeaderKind.FLOAT32: struct.Struct("<f"), HeaderKind.FLOAT64: struct.Struct("<d"),
}


def decode_header_value(kind: int, raw: bytes) -> HeaderValue:
    """The Python value of one typed header field. Unknown kinds and ill-sized values raise
    ``IggyError`` (INVALID_HEADER_KIND / INVALID_HEADER_VALUE)."""
    try:
        k = HeaderKind(kind)
    except ValueError:
        raise IggyError(Status.INVALID_HEADER_KIND, f"header kind {kind}") from None
    if k == HeaderKind.RAW:
        return raw
    if k == HeaderKind.STRING:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise IggyError(Status.INVALID_HEADER_VALUE, "string header is not UTF-8") from None
    if k == HeaderKind.BOOL:
        if len(raw) != 1 or raw[0] > 1:
            raise IggyError(Status.INVALID_HEADER_VALUE, "bool header must be one byte 0 or 1")
        return raw[0] == 1
    if k in (HeaderKind.INT128, HeaderKind.UINT128):
        if len(raw) != 16:
            raise IggyError(Status.INVALID_HEADER_VALUE, f"{k.name} header must be 16 bytes")
        return int.from_bytes(raw, "little", signed=k == HeaderKind.INT128)
    s = _FIXED[k]
    if len(raw) != s.size:
        raise IggyError(Status.INVALID_HEADER_VALUE, f"{k.name} header must be {s.size} bytes")
    value: int | float = s.unpack(raw)[0]
    return value


def encode_header_value(kind: HeaderKind, value: HeaderValue) -> bytes:
    """The wire bytes of a typed header field (raises ValueError/struct.error for a value that does
    not fit the kind: a caller bug, not a protocol error)."""
    if kind == HeaderKind.RAW:
        if not isinstance(value, bytes):
            raise ValueError("RAW header takes bytes")
        return value
    if kind == HeaderKind.STRING:
        if not isinstance(value, str):
            raise ValueError("STRING header takes str")
        return value.encode("utf-8")
    if kind == HeaderKind.BOOL:
        return b"\x01" if value is True else b"\x00" if value is False else _bad_bool()
    if isinstance(value, (bytes, str)):
        raise ValueError(f"{kind.name} header takes a number")
    if kind in (HeaderKind.INT128, HeaderKind.UINT128):
        return int(value).to_bytes(16, "little", signed=kind == HeaderKind.INT128)
    return _FIXED[kind].pack(value)


def _bad_bool() -> bytes:
    raise ValueError("BOOL header takes a bool")


@dataclass(frozen=True, slots=True)
class UserHeader:
    """One user header (or option) entry: a typed key and a typed value, raw bytes on both sides.

    Kinds stay ints: the Iggy wire treats unknown kind codes as forwardable (only 0 is invalid)."""

    key: bytes
    value: bytes
    key_kind: int = HeaderKind.STRING
    value_kind: int = HeaderKind.RAW

    @staticmethod
    def of(name: str, kind: HeaderKind, value: HeaderValue) -> UserHeader:
        """A string-keyed header holding ``value`` as ``kind``."""
        return UserHeader(name.encode("utf-8"), encode_header_value(kind, value), HeaderKind.STRING,
                          kind)

    @property
    def name(self) -> str | None:
        """The key as text when it is a string key of valid UTF-8."""
        if self.key_kind != HeaderKind.STRING:
            return None
        try:
            return self.key.decode("utf-8")
        except UnicodeDecodeError:
            return None

    @property
    def typed_value(self) -> HeaderValue:
        return decode_header_value(self.value_kind, self.value)


Headers = tuple[UserHeader, ...]


@dataclass(frozen=True, slots=True)
class Message:
    """One message as a producer sends it. ``id`` 0 asks the server to choose one."""

    payload: bytes
    id: int = 0
    headers: Headers = ()
    origin_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class PolledMessage:
    """One stored message as a poll reply carries it; encoders compute its checksum."""

    offset: int
    timestamp: int
    origin_timestamp: int
    id: int
    payload: bytes
    headers: Headers = ()


# -- permissions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GlobalPermissions:
    """The ten global flags, in wire order (``permissions.rs``). They apply to every stream."""

    manage_servers: bool = False
    read_servers: bool = False
    manage_users: bool = False
    read_users: bool = False
    manage_streams: bool = False
    read_streams: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False

    @staticmethod
    def everything() -> GlobalPermissions:
        return GlobalPermissions(*(True,) * 10)


@dataclass(frozen=True, slots=True)
class TopicPermissions:
    """Flags for one topic of one stream, wire order after the u32 ``topic_id``."""

    topic_id: int
    manage_topic: bool = False
    read_topic: bool = False
    poll_messages: bool = False
    send_messages: bool = False


@dataclass(frozen=True, slots=True)
class StreamPermissions:
    """Flags for one stream, wire order after the u32 ``stream_id``, then its topics.

    ``topics`` is kept sorted by id (the order V writes; L writes hash-map order, which carries no
    meaning), so two equal permission sets compare equal. Duplicate topic ids raise ValueError."""

    stream_id: int
    manage_stream: bool = False
    read_stream: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False
    topics: tuple[TopicPermissions, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", _sorted_unique(self.topics, lambda t: t.topic_id, "topic"))

    def topic(self, topic_id: int) -> TopicPermissions | None:
        return next((t for t in self.topics if t.topic_id == topic_id), None)


@dataclass(frozen=True, slots=True)
class Permissions:
    """A user's permission set: global flags plus per-stream (and per-topic) grants that extend
    them. ``streams`` is kept sorted by id; duplicate stream ids raise ValueError."""

    global_permissions: GlobalPermissions = GlobalPermissions()
    streams: tuple[StreamPermissions, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", _sorted_unique(self.streams, lambda x: x.stream_id, "stream"))

    def stream(self, stream_id: int) -> StreamPermissions | None:
        return next((x for x in self.streams if x.stream_id == stream_id), None)

    @staticmethod
    def root() -> Permissions:
        """What Iggy gives the root user (``Permissions::root``): every global flag, no streams."""
        return Permissions(GlobalPermissions.everything())


def _sorted_unique(items: tuple[_T, ...], key: Callable[[_T], int], what: str) -> tuple[_T, ...]:
    out = tuple(sorted(items, key=key))
    for a, b in itertools.pairwise(out):
        if key(a) == key(b):
            raise ValueError(f"duplicate {what} id {key(a)} in permissions")
    return out


# -- requests -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ping:
    command: ClassVar[Command] = Command.PING


@dataclass(frozen=True, slots=True)
class GetStats:
    command: ClassVar[Command] = Command.GET_STATS


@dataclass(frozen=True, slots=True)
class GetClusterMetadata:
    command: ClassVar[Command] = Command.GET_CLUSTER_METADATA


@dataclass(frozen=True, slots=True)
class GetMe:
    command: ClassVar[Command] = Command.GET_ME


@dataclass(frozen=True, slots=True)
class GetClient:
    client_id: int
    command: ClassVar[Command] = Command.GET_CLIENT


@dataclass(frozen=True, slots=True)
class GetClients:
    command: ClassVar[Command] = Command.GET_CLIENTS


@dataclass(frozen=True, slots=True)
class GetUser:
    user: Identifier
    command: ClassVar[Command] = Command.GET_USER


@dataclass(frozen=True, slots=True)
class GetUsers:
    command: ClassVar[Command] = Command.GET_USERS


@dataclass(frozen=True, slots=True)
class DeleteUser:
    user: Identifier
    command: ClassVar[Command] = Command.DELETE_USER


@dataclass(frozen=True, slots=True)
class CreateUser:
    """``permissions`` None = the u8 flag 0 (the user gets none). ``options`` is V only: a TLV
    block running to the end of the body (no client sends one yet)."""

    username: str
    password: str
    status: UserStatus = UserStatus.ACTIVE
    permissions: Permissions | None = None
    options: Headers = ()
    command: ClassVar[Command] = Command.CREATE_USER


@dataclass(frozen=True, slots=True)
class UpdateUser:
    """None = leave unchanged. ``options`` is V only (the 0.9.0 ``update_user(options=...)``)."""

    user: Identifier
    username: str | None = None
    status: UserStatus | None = None
    options: Headers = ()
    command: ClassVar[Command] = Command.UPDATE_USER


@dataclass(frozen=True, slots=True)
class UpdatePermissions:
    """A full replacement: None removes every permission."""

    user: Identifier
    permissions: Permissions | None
    command: ClassVar[Command] = Command.UPDATE_PERMISSIONS


@dataclass(frozen=True, slots=True)
class ChangePassword:
    user: Identifier
    current_password: str
    new_password: str
    command: ClassVar[Command] = Command.CHANGE_PASSWORD


@dataclass(frozen=True, slots=True)
class LoginUser:
    """L login (B.3): version and context are str32, length 0 = absent (None)."""

    username: str
    password: str
    version: str | None = None
    context: str | None = None
    command: ClassVar[Command] = Command.LOGIN_USER


@dataclass(frozen=True, slots=True)
class LoginWithToken:
    """L login with a personal access token (B.3 item 7). Older SDKs send the token alone; newer
    ones follow it with LOGIN_USER's version and context str32s (both None: the token alone)."""

    token: str
    version: str | None = None
    context: str | None = None
    command: ClassVar[Command] = Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN


@dataclass(frozen=True, slots=True)
class LoginRegister:
    """V login, carried by operation 1 (C.7). ``protocol_version`` is packed 10 bits per part."""

    protocol_version: int
    sdk_name: str
    sdk_version: str
    username: str
    password: str
    context: str | None = None
    command: ClassVar[Command] = Command.LOGIN_REGISTER


@dataclass(frozen=True, slots=True)
class LoginRegisterWithToken:
    """V login with a personal access token, also operation 1 (C.7)."""

    protocol_version: int
    sdk_name: str
    sdk_version: str
    token: str
    context: str | None = None
    command: ClassVar[Command] = Command.LOGIN_REGISTER_WITH_PAT


@dataclass(frozen=True, slots=True)
class LogoutUser:
    command: ClassVar[Command] = Command.LOGOUT_USER


@dataclass(frozen=True, slots=True)
class GetPersonalAccessTokens:
    command: ClassVar[Command] = Command.GET_PERSONAL_ACCESS_TOKENS


@dataclass(frozen=True, slots=True)
class CreatePersonalAccessToken:
    name: str
    expiry: int  # microseconds; 0 = never
    command: ClassVar[Command] = Command.CREATE_PERSONAL_ACCESS_TOKEN


@dataclass(frozen=True, slots=True)
class DeletePersonalAccessToken:
    name: str
    command: ClassVar[Command] = Command.DELETE_PERSONAL_ACCESS_TOKEN


@dataclass(frozen=True, slots=True)
class PollMessages:
    consumer: Consumer
    stream: Identifier
    topic: Identifier
    partition_id: int | None
    strategy: PollingStrategy
    count: int
    auto_commit: bool
    command: ClassVar[Command] = Command.POLL_MESSAGES


@dataclass(frozen=True, slots=True)
class PollBatches(PollMessages):
    """bayou's extension (command 10101, the legacy transport only): POLL_MESSAGES with the same
    request, answered in the V layout (C.9: the 16-byte prefix, then batch records) instead of L's
    64-byte message headers. The broker serves the frames it stores as they are, where L needs each
    message's header rewritten and its checksum computed; bayou's SDK reads the records column-wise.

    ``max_wait_ms`` (an optional u32 after POLL_MESSAGES' fields, sent only when above 0): when the
    poll finds nothing past its start, the broker answers once a record arrives there or the time
    passes (at most 30 s): a long poll in one round trip, where WAIT_FOR_MESSAGES and a poll take
    two. A broker without it answers INVALID_COMMAND (trailing bytes)."""

    max_wait_ms: int = 0
    command: ClassVar[Command] = Command.POLL_BATCHES


@dataclass(frozen=True, slots=True)
class WaitTopic:
    """One topic of a WaitForMessages: (partition, offset) pairs."""

    stream: Identifier
    topic: Identifier
    partitions: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class WaitForMessages:
    """bayou's extension (command 10100, the legacy transport only): answer once any listed
    partition holds a message at or past its offset, or after ``max_wait_ms``. The reply is a u32:
    how many of the listed partitions have such messages (0: the wait ended without any). The
    client then polls them with POLL_MESSAGES: the long poll Iggy's protocol lacks."""

    max_wait_ms: int
    topics: tuple[WaitTopic, ...]
    command: ClassVar[Command] = Command.WAIT_FOR_MESSAGES


@dataclass(frozen=True, slots=True)
class PollTopic:
    """One topic of a PollPartitions: (partition, offset, count) triples."""

    stream: Identifier
    topic: Identifier
    partitions: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class PollPartitions:
    """bayou's extension (command 10102, the legacy transport only): POLL_BATCHES of several
    partitions in one request, as Kafka's Fetch names many. Each listed partition is polled from
    its offset for up to its count (the Offset strategy, no auto-commit, as a plain consumer);
    the reply is a u32 (how many partitions), then for each, in the order listed, a u32 length and
    POLL_BATCHES' reply for it. With ``max_wait_ms`` above 0 the polls wait, as WAIT_FOR_MESSAGES
    does, until one of the partitions holds a record at or past its offset or the time passes:
    a long poll of many partitions in one round trip, where the wait and a poll each took one
    request of the broker. One answer holds at most POLL_MAX_BYTES over all its partitions (those
    past it are answered empty)."""

    max_wait_ms: int
    topics: tuple[PollTopic, ...]
    command: ClassVar[Command] = Command.POLL_PARTITIONS


@dataclass(frozen=True, slots=True)
class SendMessages:
    stream: Identifier
    topic: Identifier
    partitioning: Partitioning
    messages: tuple[Message, ...]
    command: ClassVar[Command] = Command.SEND_MESSAGES


@dataclass(frozen=True, slots=True)
class FlushUnsavedBuffer:
    stream: Identifier
    topic: Identifier
    partition_id: int
    fsync: bool
    command: ClassVar[Command] = Command.FLUSH_UNSAVED_BUFFER


@dataclass(frozen=True, slots=True)
class GetConsumerOffset:
    consumer: Consumer
    stream: Identifier
    topic: Identifier
    partition_id: int | None
    command: ClassVar[Command] = Command.GET_CONSUMER_OFFSET


@dataclass(frozen=True, slots=True)
class StoreConsumerOffset:
    """``ack`` is V only (C.8: a trailing u8); None in D and L."""

    consumer: Consumer
    stream: Identifier
    topic: Identifier
    partition_id: int | None
    offset: int
    ack: AckLevel | None = None
    command: ClassVar[Command] = Command.STORE_CONSUMER_OFFSET


@dataclass(frozen=True, slots=True)
class DeleteConsumerOffset:
    consumer: Consumer
    stream: Identifier
    topic: Identifier
    partition_id: int | None
    ack: AckLevel | None = None
    command: ClassVar[Command] = Command.DELETE_CONSUMER_OFFSET


@dataclass(frozen=True, slots=True)
class GetStream:
    stream: Identifier
    command: ClassVar[Command] = Command.GET_STREAM


@dataclass(frozen=True, slots=True)
class GetStreams:
    command: ClassVar[Command] = Command.GET_STREAMS


@dataclass(frozen=True, slots=True)
class CreateStream:
    """``stream_id`` is the D client's chosen id (A.5 item 2); ``options`` the V options block."""

    name: str
    stream_id: int | None = None
    options: Headers = ()
    command: ClassVar[Command] = Command.CREATE_STREAM


@dataclass(frozen=True, slots=True)
class DeleteStream:
    stream: Identifier
    command: ClassVar[Command] = Command.DELETE_STREAM


@dataclass(frozen=True, slots=True)
class UpdateStream:
    stream: Identifier
    name: str
    command: ClassVar[Command] = Command.UPDATE_STREAM


@dataclass(frozen=True, slots=True)
class PurgeStream:
    stream: Identifier
    command: ClassVar[Command] = Command.PURGE_STREAM


@dataclass(frozen=True, slots=True)
class GetTopic:
    stream: Identifier
    topic: Identifier
    command: ClassVar[Command] = Command.GET_TOPIC


@dataclass(frozen=True, slots=True)
class GetTopics:
    stream: Identifier
    command: ClassVar[Command] = Command.GET_TOPICS


@dataclass(frozen=True, slots=True)
class CreateTopic:
    """L carries compression, expiry, max size and replication factor as fields; V carries them as
    options (the decoder reads the known keys into the same fields, None = key absent = server
    default, and keeps ``options`` for the encoder, which writes only ``options`` in V); D carries
    a client-chosen ``topic_id`` and a u32 expiry. In L, ``options`` (when not empty) follow the
    name as a V options block: bayou's extension, for bayou topic config keys (0.8 sends none)."""

    stream: Identifier
    name: str
    partitions_count: int
    compression_algorithm: int | None = None
    message_expiry: int | None = None
    max_topic_size: int | None = None
    replication_factor: int | None = None
    topic_id: int | None = None
    options: Headers = ()
    command: ClassVar[Command] = Command.CREATE_TOPIC


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    stream: Identifier
    topic: Identifier
    command: ClassVar[Command] = Command.DELETE_TOPIC


@dataclass(frozen=True, slots=True)
class UpdateTopic:
    """``replication_factor`` in L only; ``options`` in V, and in L as bayou's extension (an
    options block after the name, as in ``CreateTopic``)."""

    stream: Identifier
    topic: Identifier
    compression_algorithm: int
    message_expiry: int
    max_topic_size: int
    name: str
    replication_factor: int | None = None
    options: Headers = ()
    command: ClassVar[Command] = Command.UPDATE_TOPIC


@dataclass(frozen=True, slots=True)
class PurgeTopic:
    stream: Identifier
    topic: Identifier
    command: ClassVar[Command] = Command.PURGE_TOPIC


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    stream: Identifier
    topic: Identifier
    partitions_count: int
    command: ClassVar[Command] = Command.CREATE_PARTITIONS


@dataclass(frozen=True, slots=True)
class DeletePartitions:
    stream: Identifier
    topic: Identifier
    partitions_count: int
    command: ClassVar[Command] = Command.DELETE_PARTITIONS


@dataclass(frozen=True, slots=True)
class DeleteSegments:
    stream: Identifier
    topic: Identifier
    partition_id: int
    segments_count: int
    command: ClassVar[Command] = Command.DELETE_SEGMENTS


@dataclass(frozen=True, slots=True)
class GetConsumerGroup:
    stream: Identifier
    topic: Identifier
    group: Identifier
    command: ClassVar[Command] = Command.GET_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class GetConsumerGroups:
    stream: Identifier
    topic: Identifier
    command: ClassVar[Command] = Command.GET_CONSUMER_GROUPS


@dataclass(frozen=True, slots=True)
class CreateConsumerGroup:
    """L and V create by ``name``; D creates by a client-chosen ``group_id`` and has no name."""

    stream: Identifier
    topic: Identifier
    name: str | None
    group_id: int | None = None
    command: ClassVar[Command] = Command.CREATE_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class DeleteConsumerGroup:
    stream: Identifier
    topic: Identifier
    group: Identifier
    command: ClassVar[Command] = Command.DELETE_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class JoinConsumerGroup:
    stream: Identifier
    topic: Identifier
    group: Identifier
    command: ClassVar[Command] = Command.JOIN_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class LeaveConsumerGroup:
    stream: Identifier
    topic: Identifier
    group: Identifier
    command: ClassVar[Command] = Command.LEAVE_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class SyncConsumerGroup:
    stream: Identifier
    topic: Identifier
    group: Identifier
    command: ClassVar[Command] = Command.SYNC_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A known command bayou has no decoder for (snapshots, option discovery). The server
    answers it with FEATURE_UNAVAILABLE (B.4 allows status 5)."""

    code: Command
    payload: bytes

    @property
    def command(self) -> Command:
        return self.code


Request = (
    Ping | GetStats | GetClusterMetadata | GetMe | GetClient | GetClients | GetUser | GetUsers
    | WaitForMessages | DeleteUser | CreateUser | UpdateUser | UpdatePermissions | ChangePassword | LoginUser
    | LoginWithToken | LoginRegister | LoginRegisterWithToken | LogoutUser
    | GetPersonalAccessTokens | CreatePersonalAccessToken | DeletePersonalAccessToken | PollMessages
    | PollBatches | PollPartitions | SendMessages | FlushUnsavedBuffer | GetConsumerOffset
    | StoreConsumerOffset
    | DeleteConsumerOffset | GetStream | GetStreams | CreateStream | DeleteStream | UpdateStream
    | PurgeStream | GetTopic | GetTopics | CreateTopic | DeleteTopic | UpdateTopic | PurgeTopic
    | CreatePartitions | DeletePartitions | DeleteSegments | GetConsumerGroup | GetConsumerGroups
    | CreateConsumerGroup | DeleteConsumerGroup | JoinConsumerGroup | LeaveConsumerGroup
    | SyncConsumerGroup | Unsupported
)

# -- replies ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream record (B.4); V appends an options block (C.8)."""

    id: int
    created_at: int
    topics_count: int
    size_bytes: int
    messages_count: int
    name: str
    options: Headers = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic record. L has ``replication_factor``; V has none and ends with two option blocks
    (explicit, then server-derived)."""

    id: int
    created_at: int
    partitions_count: int
    message_expiry: int
    compression_algorithm: int
    max_topic_size: int
    size_bytes: int
    messages_count: int
    name: str
    replication_factor: int = 0
    options: Headers = ()
    derived_options: Headers = ()


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    id: int
    created_at: int
    segments_count: int
    current_offset: int
    size_bytes: int
    messages_count: int


@dataclass(frozen=True, slots=True)
class StreamDetails:
    """GET_STREAM / CREATE_STREAM reply: the stream record, then one topic record per topic (CREATE
    answers with no topics)."""

    stream: StreamInfo
    topics: tuple[TopicInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDetails:
    topic: TopicInfo
    partitions: tuple[PartitionInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupInfo:
    id: int
    partitions_count: int
    members_count: int
    name: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    id: int
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDetails:
    group: ConsumerGroupInfo
    members: tuple[ConsumerGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupAssignment:
    """V SYNC_CONSUMER_GROUP reply: the caller's generation and partitions."""

    generation: int
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerOffsetInfo:
    partition_id: int
    current_offset: int
    stored_offset: int


@dataclass(frozen=True, slots=True)
class PolledMessages:
    """POLL_MESSAGES reply. ``partition_id`` 0xFFFFFFFF with no messages tells a V group consumer
    to re-sync (C.10 item 2)."""

    partition_id: int
    current_offset: int
    messages: tuple[PolledMessage, ...] = ()


RESYNC_PARTITION = 0xFFFF_FFFF


@dataclass(frozen=True, slots=True)
class SendConfirmation:
    stream_id: int
    topic_id: int
    partition_id: int
    base_offset: int


@dataclass(frozen=True, slots=True)
class SendConfirmations:
    """V SEND_MESSAGES reply: one entry per partition written (C.8)."""

    confirmations: tuple[SendConfirmation, ...] = ()


@dataclass(frozen=True, slots=True)
class LoginReply:
    """L login reply: the user id (root = 0)."""

    user_id: int


@dataclass(frozen=True, slots=True)
class LoginRegisterReply:
    """V login reply after the result section (C.7): ``session`` must be non-zero."""

    user_id: int
    session: int
    server_protocol_version: int
    server_version: str


@dataclass(frozen=True, slots=True)
class ClusterNode:
    name: str
    ip: str
    tcp_port: int
    quic_port: int
    http_port: int
    websocket_port: int
    role: int = 0  # 0 leader, 1 follower
    status: int = 0  # 0 healthy, 1 starting, 2 stopping, 3 unreachable, 4 maintenance, 5 unknown


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    name: str
    nodes: tuple[ClusterNode, ...]


@dataclass(frozen=True, slots=True)
class CacheMetric:
    stream_id: int
    topic_id: int
    partition_id: int
    hits: int
    misses: int
    hit_ratio: float


@dataclass(frozen=True, slots=True)
class Stats:
    """GET_STATS reply (iggy.md E.8); the same layout in L and V."""

    process_id: int
    cpu_usage: float
    total_cpu_usage: float
    memory_usage: int
    total_memory: int
    available_memory: int
    run_time: int
    start_time: int
    read_bytes: int
    written_bytes: int
    messages_size_bytes: int
    streams_count: int
    topics_count: int
    partitions_count: int
    segments_count: int
    messages_count: int
    clients_count: int
    consumer_groups_count: int
    hostname: str
    os_name: str
    os_version: str
    kernel_version: str
    iggy_server_version: str
    iggy_server_semver: int
    cache_metrics: tuple[CacheMetric, ...]
    threads_count: int
    free_disk_space: int
    total_disk_space: int


@dataclass(frozen=True, slots=True)
class ClientInfo:
    client_id: int
    user_id: int
    transport: int
    address: str
    consumer_groups_count: int


@dataclass(frozen=True, slots=True)
class ClientGroup:
    stream_id: int
    topic_id: int
    group_id: int


@dataclass(frozen=True, slots=True)
class ClientDetails:
    """GET_ME / GET_CLIENT reply: the client record, then its groups (B.4)."""

    client: ClientInfo
    groups: tuple[ClientGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class UserInfo:
    """A user record: u32 id, u64 created_at, u8 status, name8 username; V appends a u32-prefixed
    options block (``options``; L has none)."""

    id: int
    created_at: int
    status: UserStatus
    username: str
    options: Headers = ()


@dataclass(frozen=True, slots=True)
class UserDetails:
    """GET_USER / CREATE_USER reply: the user record, then its permissions (None = no permissions,
    sent as four zero bytes)."""

    user: UserInfo
    permissions: Permissions | None = None


@dataclass(frozen=True, slots=True)
class PersonalAccessTokenInfo:
    """One GET_PERSONAL_ACCESS_TOKENS entry: name8 + u64 expiry timestamp in microseconds (0 on the
    wire = never expires = None)."""

    name: str
    expiry_at: int | None = None


@dataclass(frozen=True, slots=True)
class RawPersonalAccessToken:
    """CREATE_PERSONAL_ACCESS_TOKEN reply: the token itself, name8; the only time it is sent."""

    token: str


Reply = (
    StreamDetails | TopicDetails | ConsumerGroupDetails | ConsumerGroupAssignment | ConsumerOffsetInfo
    | PolledMessages | SendConfirmations | LoginReply | LoginRegisterReply | ClusterMetadata | Stats
    | ClientDetails | UserDetails | RawPersonalAccessToken | tuple[StreamInfo, ...] | tuple[TopicInfo, ...]
    | tuple[ConsumerGroupInfo, ...] | tuple[ClientInfo, ...] | tuple[UserInfo, ...]
    | tuple[PersonalAccessTokenInfo, ...]
)


def pack_version(major: int, minor: int, patch: int) -> int:
    """V protocol version packing (C.7): 10 bits per component, 0.11.0 = 0x2C00."""
    return (major << 20) | (minor << 10) | patch


def unpack_version(packed: int) -> tuple[int, int, int]:
    return packed >> 20, (packed >> 10) & 0x3FF, packed & 0x3FF
