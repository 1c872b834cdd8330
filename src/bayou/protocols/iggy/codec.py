"""Request decoding and reply encoding for every Iggy command, in all three dialects.

Server side: ``decode_request(dialect, code, payload)`` for a legacy-framed frame (D or L) and
``decode_vsr_request(frame)`` for a V frame turn a complete frame into a request message or raise
``IggyError``; ``encode_reply(reply, dialect)`` turns a reply message into the payload that
``framing.encode_legacy_reply`` / ``framing.encode_vsr_ok`` wrap.

Client side (tests, fuzzing, a future SDK): ``encode_request`` / ``encode_request_frame`` and
``decode_reply`` are the inverses.

Dispatch is a lookup: ``DECODERS`` maps each ``Command`` to one decoder, ``ENCODERS`` each request
class to one encoder. Every decoder consumes its payload exactly (iggy.md D.3 rule 4): trailing
bytes are INVALID_COMMAND.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from bayou.protocols.iggy import batches
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import (
    NON_REPLICATED_COMMANDS,
    OPERATION_OF,
    SEED_COMMANDS,
    Command,
    EvictionReason,
    Operation,
    Status,
)
from bayou.protocols.iggy.framing import (
    Dialect,
    IggyError,
    LegacyFrame,
    RequestHeader,
    VsrFrame,
    encode_legacy_request,
    encode_vsr_request,
    request_checksum,
)
from bayou.protocols.iggy.wire import (
    U8,
    U32,
    U64,
    Reader,
    decode_options,
    enc_bytes8,
    enc_consumer,
    enc_identifier,
    enc_name8,
    enc_optional_partition,
    enc_seed_consumer,
    enc_str32,
    enc_strategy,
    enc_user_headers,
    option,
)

Decoder = Callable[[bytes, Dialect], m.Request]

USERNAME_LENGTH = (3, 50)
PASSWORD_LENGTH = (3, 100)

_LEGACY_ONLY_IN_V = frozenset({Command.LOGIN_REGISTER, Command.LOGIN_REGISTER_WITH_PAT,
                               Command.SYNC_CONSUMER_GROUP})

# -- request decoders ---------------------------------------------------------------------------


def _empty(cls: Callable[[], m.Request]) -> Decoder:
    def decode(payload: bytes, dialect: Dialect) -> m.Request:
        Reader(payload).done()
        return cls()
    return decode


def _stream_only(cls: Callable[[m.Identifier], m.Request]) -> Decoder:
    def decode(payload: bytes, dialect: Dialect) -> m.Request:
        r = Reader(payload)
        out = cls(r.identifier())
        r.done()
        return out
    return decode


def _stream_topic(cls: Callable[[m.Identifier, m.Identifier], m.Request]) -> Decoder:
    def decode(payload: bytes, dialect: Dialect) -> m.Request:
        r = Reader(payload)
        out = cls(r.identifier(), r.identifier())
        r.done()
        return out
    return decode


def _group_cmd(cls: Callable[[m.Identifier, m.Identifier, m.Identifier], m.Request]) -> Decoder:
    """stream, topic, group Identifier (L/V); a bare u32 group id in D (A.4)."""
    def decode(payload: bytes, dialect: Dialect) -> m.Request:
        r = Reader(payload)
        stream, topic = r.identifier(), r.identifier()
        group = m.Identifier(r.u32()) if dialect is Dialect.SEED else r.identifier()
        r.done()
        return cls(stream, topic, group)
    return decode


def _partitions_cmd(cls: Callable[[m.Identifier, m.Identifier, int], m.Request]) -> Decoder:
    def decode(payload: bytes, dialect: Dialect) -> m.Request:
        r = Reader(payload)
        out = cls(r.identifier(), r.identifier(), r.u32())
        r.done()
        return out
    return decode


def _unsupported(code: Command) -> Decoder:
    def decode(payload: bytes, dialect: Dialect) -> m.Request:
        return m.Unsupported(code, payload)
    return decode


def _get_client(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    out = m.GetClient(r.u32())
    r.done()
    return out


def _login_user(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    username = r.name8(Status.INVALID_USERNAME)
    password_raw = r.bytes8()
    version = r.opt_str32()
    context = r.opt_str32()
    r.done()
    if not USERNAME_LENGTH[0] <= len(username.encode()) <= USERNAME_LENGTH[1]:
        raise IggyError(Status.INVALID_USERNAME, "username must be 3..50 bytes")
    if not PASSWORD_LENGTH[0] <= len(password_raw) <= PASSWORD_LENGTH[1]:
        raise IggyError(Status.INVALID_PASSWORD, "password must be 3..100 bytes")
    try:
        password = password_raw.decode("utf-8")
    except UnicodeDecodeError:
        raise IggyError(Status.INVALID_PASSWORD, "password is not UTF-8") from None
    return m.LoginUser(username, password, version, context)


def _login_with_token(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    token = r.name8(Status.INVALID_PERSONAL_ACCESS_TOKEN)
    version = context = None
    if r.remaining:  # the layout with LOGIN_USER's version and context fields
        version = r.opt_str32()
        context = r.opt_str32()
    r.done()
    return m.LoginWithToken(token, version, context)


def _register_prefix(r: Reader) -> tuple[int, str, str]:
    return r.u32(), r.name8(), r.name8()


def _malformed_login(exc: IggyError) -> IggyError:
    return IggyError(exc.status, f"malformed login: {exc.message}", eviction=EvictionReason.MALFORMED_LOGIN)


def _password_register(payload: bytes) -> m.LoginRegister:
    r = Reader(payload)
    version, sdk_name, sdk_version = _register_prefix(r)
    username = r.name8(Status.INVALID_USERNAME)
    password = r.text(r.u8(), Status.INVALID_PASSWORD)
    context = r.opt_str32()
    r.done()
    return m.LoginRegister(version, sdk_name, sdk_version, username, password, context)


def _token_register(payload: bytes) -> m.LoginRegisterWithToken:
    r = Reader(payload)
    version, sdk_name, sdk_version = _register_prefix(r)
    token = r.text(r.u8(), Status.INVALID_PERSONAL_ACCESS_TOKEN)
    context = r.opt_str32()
    r.done()
    return m.LoginRegisterWithToken(version, sdk_name, sdk_version, token, context)


def _login_register(payload: bytes, dialect: Dialect) -> m.Request:
    """C.7. Any decode failure is an eviction with reason 15 (MalformedLogin).

    apache-iggy 0.9.0 sends its token login (``AutoLogin.personal_access_token``) as a Register
    whose header code is 0, like a password login: the body tells them apart. A token body
    (token, then the context str32) cannot read as a password body, which needs a u8 password
    length and a whole str32 after the username, unless its context is 256 bytes or longer and
    crafted to; the password layout is tried first."""
    try:
        return _password_register(payload)
    except IggyError as exc:
        try:
            return _token_register(payload)
        except IggyError:
            raise _malformed_login(exc) from None


def _login_register_with_token(payload: bytes, dialect: Dialect) -> m.Request:
    try:
        return _token_register(payload)
    except IggyError as exc:
        raise _malformed_login(exc) from None


def _create_pat(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    out = m.CreatePersonalAccessToken(r.name8(), r.u64())
    r.done()
    return out


def _delete_pat(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    out = m.DeletePersonalAccessToken(r.name8())
    r.done()
    return out


# -- users and permissions ----------------------------------------------------------------------

_GLOBAL_FLAGS = ("manage_servers", "read_servers", "manage_users", "read_users", "manage_streams",
                 "read_streams", "manage_topics", "read_topics", "poll_messages", "send_messages")
_STREAM_FLAGS = ("manage_stream", "read_stream", "manage_topics", "read_topics", "poll_messages",
                 "send_messages")
_TOPIC_FLAGS = ("manage_topic", "read_topic", "poll_messages", "send_messages")
# Streams and topics one permission set in a request may name, in all: bayou's bound (Iggy sets
# none; broker/authz.py MAX_GRANTS, the same number, holds it for the stored users whichever way
# they came). A 9 MB grant of a million took 5 s to read and 4 s to write back in GET_USER.
MAX_GRANTS = 10_000


def read_permissions(r: Reader, limit: int | None = MAX_GRANTS) -> m.Permissions:
    """The permissions block (``permissions.rs``): ten global flags, then a u8 "streams follow";
    each stream is u32 id, six flags, u8 "topics follow", its topics (u32 id, four flags, u8 "another
    topic follows"), then u8 "another stream follows".

    Every flag must be 0 or 1 (L reads ``== 1``, V ``!= 0``; both clients only send 0 and 1), and a
    stream or topic id may appear once: anything else is INVALID_FORMAT."""
    glob = m.GlobalPermissions(*(r.flag() for _ in _GLOBAL_FLAGS))
    streams: list[m.StreamPermissions] = []
    grants = 0
    try:
        more_streams = r.flag()
        while more_streams:
            grants += 1
            if limit is not None and grants > limit:
                raise IggyError(Status.INVALID_FORMAT, f"more than {limit} stream and topic grants")
            stream_id = r.u32()
            f = [r.flag() for _ in _STREAM_FLAGS]
            topics: list[m.TopicPermissions] = []
            more_topics = r.flag()
            while more_topics:
                grants += 1
                if limit is not None and grants > limit:
                    raise IggyError(Status.INVALID_FORMAT, f"more than {limit} stream and topic grants")
                topic_id = r.u32()
                topics.append(m.TopicPermissions(topic_id, *(r.flag() for _ in _TOPIC_FLAGS)))
                more_topics = r.flag()
            streams.append(m.StreamPermissions(stream_id, f[0], f[1], f[2], f[3], f[4], f[5], tuple(topics)))
            more_streams = r.flag()
        return m.Permissions(glob, tuple(streams))
    except ValueError as exc:  # a duplicate id, from the dataclasses' own check
        raise IggyError(Status.INVALID_FORMAT, str(exc)) from None


def encode_permissions(p: m.Permissions) -> bytes:
    """The inverse of ``read_permissions``; streams and topics go out sorted by id, as V writes
    them. An empty stream (or topic) list is the flag 0, never a flag 1 with nothing after it."""
    g = p.global_permissions
    out = bytearray(getattr(g, f) for f in _GLOBAL_FLAGS)
    out.append(1 if p.streams else 0)
    for i, stream in enumerate(p.streams):
        out += U32.pack(stream.stream_id)
        out += bytes(getattr(stream, f) for f in _STREAM_FLAGS)
        out.append(1 if stream.topics else 0)
        for j, topic in enumerate(stream.topics):
            out += U32.pack(topic.topic_id)
            out += bytes(getattr(topic, f) for f in _TOPIC_FLAGS)
            out.append(1 if j + 1 < len(stream.topics) else 0)
        out.append(1 if i + 1 < len(p.streams) else 0)
    return bytes(out)


def decode_permissions(buf: bytes) -> m.Permissions:
    """A whole buffer holding exactly one permissions block."""
    r = Reader(buf)
    out = read_permissions(r)
    r.done()
    return out


def _read_optional_permissions(r: Reader) -> m.Permissions | None:
    """u8 has_permissions; when 1, a u32 length and exactly that many bytes of permissions. When 0
    nothing follows: both the 0.8 source and the 0.9.0 capture send no length then."""
    if not r.flag():
        return None
    n = r.u32()
    at = r.skip(n)
    inner = Reader(r.buf, at, at + n)
    out = read_permissions(inner)
    inner.done()
    return out


def _enc_optional_permissions(p: m.Permissions | None) -> bytes:
    if p is None:
        return b"\x00"
    block = encode_permissions(p)
    return b"\x01" + U32.pack(len(block)) + block


def _user_status(r: Reader) -> m.UserStatus:
    v = r.u8()
    try:
        return m.UserStatus(v)
    except ValueError:
        raise IggyError(Status.INVALID_COMMAND, f"user status {v}") from None


def _check_username(username: str) -> str:
    if not USERNAME_LENGTH[0] <= len(username.encode()) <= USERNAME_LENGTH[1]:
        raise IggyError(Status.INVALID_USERNAME, "username must be 3..50 bytes")
    return username


def _password(raw: bytes) -> str:
    if not PASSWORD_LENGTH[0] <= len(raw) <= PASSWORD_LENGTH[1]:
        raise IggyError(Status.INVALID_PASSWORD, "password must be 3..100 bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise IggyError(Status.INVALID_PASSWORD, "password is not UTF-8") from None


def _trailing_options(payload: bytes, r: Reader, dialect: Dialect) -> m.Headers:
    """V user commands may end with an options block running to the end of the body; L has none."""
    if dialect is Dialect.VSR:
        return decode_options(payload, r.pos)
    r.done()
    return ()


def _create_user(payload: bytes, dialect: Dialect) -> m.Request:
    """name8 username, u8-length password, u8 status (1 active, 2 inactive), optional permissions;
    V: then options to the end. Limits as the 0.8 server's ``validate`` (E.9): 43 / 44."""
    r = Reader(payload)
    username = r.name8(Status.INVALID_USERNAME)
    password_raw = r.bytes8()
    status = _user_status(r)
    permissions = _read_optional_permissions(r)
    options = _trailing_options(payload, r, dialect)
    return m.CreateUser(_check_username(username), _password(password_raw), status, permissions, options)


def _update_user(payload: bytes, dialect: Dialect) -> m.Request:
    """user Identifier, u8 flag + name8 username, u8 flag + u8 status; V: then options to the end
    (captured from apache-iggy 0.9.0 ``update_user(options=...)``)."""
    r = Reader(payload)
    user = r.identifier()
    username = r.name8(Status.INVALID_USERNAME) if r.flag() else None
    status = _user_status(r) if r.flag() else None
    options = _trailing_options(payload, r, dialect)
    if username is not None:
        _check_username(username)
    return m.UpdateUser(user, username, status, options)


def _update_permissions(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    out = m.UpdatePermissions(r.identifier(), _read_optional_permissions(r))
    r.done()
    return out


def _change_password(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    user, current, new = r.identifier(), r.bytes8(), r.bytes8()
    r.done()
    return m.ChangePassword(user, _password(current), _password(new))


def _consumer_prefix(r: Reader, dialect: Dialect
                     ) -> tuple[m.Consumer, m.Identifier, m.Identifier, int | None]:
    """Consumer, stream, topic and partition: L/V use kind + Identifier and the 5-byte optional
    partition; D uses kind + u32 and a bare u32 partition where 0 means "not specified"."""
    if dialect is Dialect.SEED:
        consumer = r.seed_consumer()
        stream, topic = r.identifier(), r.identifier()
        partition = r.u32()
        return consumer, stream, topic, partition or None
    consumer = r.consumer()
    stream, topic = r.identifier(), r.identifier()
    return consumer, stream, topic, r.optional_partition()


WAIT_MAX_PARTITIONS = 10_000  # partitions one WaitForMessages (or PollPartitions) may list
_T = TypeVar("_T")


def _listed(r: Reader, what: str, entry: Callable[[Reader], _T]
            ) -> list[tuple[m.Identifier, m.Identifier, tuple[_T, ...]]]:
    """The topics of a wait or a poll of several partitions (after its u32 max wait): u32 topic
    count, then per topic stream and topic Identifiers, u32 partition count and that many
    ``entry``s; at most WAIT_MAX_PARTITIONS in all, and nothing after them."""
    topics = []
    listed = 0
    for _ in range(r.u32()):
        stream, topic = r.identifier(), r.identifier()
        n = r.u32()
        listed += n
        if listed > WAIT_MAX_PARTITIONS:
            raise IggyError(Status.INVALID_COMMAND,
                            f"a {what} lists more than {WAIT_MAX_PARTITIONS} partitions")
        topics.append((stream, topic, tuple(entry(r) for _ in range(n))))
    r.done()
    return topics


def _wait(payload: bytes, dialect: Dialect) -> m.Request:
    """u32 max wait (ms), then the listed topics with (u32 partition, u64 offset) each."""
    r = Reader(payload)
    max_wait = r.u32()
    topics = _listed(r, "wait", lambda r: (r.u32(), r.u64()))
    return m.WaitForMessages(max_wait, tuple(m.WaitTopic(*t) for t in topics))


def _poll_partitions(payload: bytes, dialect: Dialect) -> m.Request:
    """WAIT_FOR_MESSAGES' layout with a u32 count after each offset: (u32 partition, u64 offset,
    u32 count) each."""
    r = Reader(payload)
    max_wait = r.u32()
    topics = _listed(r, "poll", lambda r: (r.u32(), r.u64(), r.u32()))
    return m.PollPartitions(max_wait, tuple(m.PollTopic(*t) for t in topics))


def _poll(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    consumer, stream, topic, partition = _consumer_prefix(r, dialect)
    strategy = r.strategy()
    count = r.u32()
    auto_commit = r.flag()
    r.done()
    return m.PollMessages(consumer, stream, topic, partition, strategy, count, auto_commit)


def _poll_batches(payload: bytes, dialect: Dialect) -> m.Request:
    """POLL_MESSAGES' fields, then an optional u32: the longest wait (ms) for a record."""
    r = Reader(payload)
    consumer, stream, topic, partition = _consumer_prefix(r, dialect)
    strategy = r.strategy()
    count = r.u32()
    auto_commit = r.flag()
    max_wait = r.u32() if r.remaining else 0
    r.done()
    return m.PollBatches(consumer, stream, topic, partition, strategy, count, auto_commit, max_wait)


def _send(payload: bytes, dialect: Dialect) -> m.Request:
    if dialect is Dialect.VSR:
        return batches.decode_vsr_send(payload)
    if dialect is Dialect.LEGACY:
        return batches.decode_legacy_send(payload)
    return batches.decode_seed_send(payload)


def _flush(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    out = m.FlushUnsavedBuffer(r.identifier(), r.identifier(), r.u32(), r.flag())
    r.done()
    return out


def _ack(r: Reader) -> m.AckLevel:
    v = r.u8()
    try:
        return m.AckLevel(v)
    except ValueError:
        raise IggyError(Status.INVALID_FORMAT, f"ack level {v}") from None


def _get_offset(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    out = m.GetConsumerOffset(*_consumer_prefix(r, dialect))
    r.done()
    return out


def _store_offset(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    consumer, stream, topic, partition = _consumer_prefix(r, dialect)
    offset = r.u64()
    ack = _ack(r) if dialect is Dialect.VSR else None
    r.done()
    return m.StoreConsumerOffset(consumer, stream, topic, partition, offset, ack)


def _delete_offset(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    consumer, stream, topic, partition = _consumer_prefix(r, dialect)
    ack = _ack(r) if dialect is Dialect.VSR else None
    r.done()
    return m.DeleteConsumerOffset(consumer, stream, topic, partition, ack)


def _create_stream(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    if dialect is Dialect.SEED:
        stream_id = r.u32()
        name = r.name8(Status.INVALID_STREAM_NAME)
        r.done()
        return m.CreateStream(name, stream_id)
    name = r.name8(Status.INVALID_STREAM_NAME)
    if dialect is Dialect.VSR:
        return m.CreateStream(name, options=decode_options(payload, r.pos))
    r.done()
    return m.CreateStream(name)


def _update_stream(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    out = m.UpdateStream(r.identifier(), r.name8(Status.INVALID_STREAM_NAME))
    r.done()
    return out


def _option_int(options: m.Headers, key: str, kind: m.HeaderKind) -> int | None:
    entry = option(options, key)
    if entry is None:
        return None
    if entry.value_kind != kind:
        raise IggyError(Status.INVALID_OPTION_VALUE, f"option {key} must be {kind.name}")
    try:
        value = entry.typed_value
    except IggyError:
        raise IggyError(Status.INVALID_OPTION_VALUE, f"option {key} is not a valid {kind.name}") from None
    assert isinstance(value, int)  # guaranteed by the kind checked above
    return value


def _option_compression(options: m.Headers) -> int | None:
    entry = option(options, "compression_algorithm")
    if entry is None:
        return None
    value = entry.typed_value if entry.value_kind == m.HeaderKind.STRING else None
    if not isinstance(value, str) or value.lower() not in ("none", "gzip"):
        raise IggyError(Status.INVALID_OPTION_VALUE, "compression_algorithm must be none or gzip")
    return m.CompressionAlgorithm.GZIP if value.lower() == "gzip" else m.CompressionAlgorithm.NONE


def _create_topic(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    stream = r.identifier()
    if dialect is Dialect.SEED:
        topic_id, count, expiry = r.u32(), r.u32(), r.u32()
        name = r.name8(Status.INVALID_TOPIC_NAME)
        r.done()
        return m.CreateTopic(stream, name, count, message_expiry=expiry, topic_id=topic_id)
    count = r.u32()
    if dialect is Dialect.VSR:
        name = r.name8(Status.INVALID_TOPIC_NAME)
        opts = decode_options(payload, r.pos)
        return m.CreateTopic(
            stream, name, count, _option_compression(opts),
            _option_int(opts, "message_expiry", m.HeaderKind.UINT64),
            _option_int(opts, "max_topic_size", m.HeaderKind.UINT64),
            _option_int(opts, "replication_factor", m.HeaderKind.UINT8), options=opts)
    compression, expiry, max_size, rf = r.u8(), r.u64(), r.u64(), r.u8()
    name = r.name8(Status.INVALID_TOPIC_NAME)
    return m.CreateTopic(stream, name, count, compression, expiry, max_size, rf,
                         options=_legacy_options(payload, r))


def _legacy_options(payload: bytes, r: Reader) -> m.Headers:
    """bayou's extension of L CREATE_TOPIC and UPDATE_TOPIC: an options block (V's layout, C.8)
    may follow the name, for bayou topic config (``segment.bytes``, ...). The 0.8 layout ends at
    the name, so a 0.8 client's request has none."""
    return decode_options(payload, r.pos) if r.pos < len(payload) else ()


def _update_topic(payload: bytes, dialect: Dialect) -> m.Request:
    """L (B.4): ..., u8 replication_factor, name8. V (as apache-iggy 0.9.0 sends it, checked with
    the SDK): stream, topic, name8, then an options block to the end, as in CREATE_TOPIC;
    compression, expiry and maximum size travel as options (omitted = none / server default)."""
    r = Reader(payload)
    stream, topic = r.identifier(), r.identifier()
    if dialect is Dialect.VSR:
        name = r.name8(Status.INVALID_TOPIC_NAME)
        opts = decode_options(payload, r.pos)
        return m.UpdateTopic(stream, topic, _option_compression(opts) or m.CompressionAlgorithm.NONE,
                             _option_int(opts, "message_expiry", m.HeaderKind.UINT64) or 0,
                             _option_int(opts, "max_topic_size", m.HeaderKind.UINT64) or 0, name,
                             options=opts)
    compression, expiry, max_size = r.u8(), r.u64(), r.u64()
    rf = r.u8()
    name = r.name8(Status.INVALID_TOPIC_NAME)
    return m.UpdateTopic(stream, topic, compression, expiry, max_size, name, rf,
                         options=_legacy_options(payload, r))


def _delete_segments(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    out = m.DeleteSegments(r.identifier(), r.identifier(), r.u32(), r.u32())
    r.done()
    return out


def _create_group(payload: bytes, dialect: Dialect) -> m.Request:
    r = Reader(payload)
    stream, topic = r.identifier(), r.identifier()
    if dialect is Dialect.SEED:
        group_id = r.u32()
        r.done()
        return m.CreateConsumerGroup(stream, topic, None, group_id)
    name = r.name8(Status.INVALID_CONSUMER_GROUP_NAME)
    r.done()
    return m.CreateConsumerGroup(stream, topic, name)


DECODERS: Mapping[Command, Decoder] = MappingProxyType({
    Command.PING: _empty(m.Ping),
    Command.GET_STATS: _empty(m.GetStats),
    Command.GET_SNAPSHOT_FILE: _unsupported(Command.GET_SNAPSHOT_FILE),
    Command.GET_CLUSTER_METADATA: _empty(m.GetClusterMetadata),
    Command.DESCRIBE_OPTIONS: _unsupported(Command.DESCRIBE_OPTIONS),
    Command.GET_ME: _empty(m.GetMe),
    Command.GET_CLIENT: _get_client,
    Command.GET_CLIENTS: _empty(m.GetClients),
    Command.GET_USER: _stream_only(m.GetUser),
    Command.GET_USERS: _empty(m.GetUsers),
    Command.CREATE_USER: _create_user,
    Command.DELETE_USER: _stream_only(m.DeleteUser),
    Command.UPDATE_USER: _update_user,
    Command.UPDATE_PERMISSIONS: _update_permissions,
    Command.CHANGE_PASSWORD: _change_password,
    Command.LOGIN_USER: _login_user,
    Command.LOGOUT_USER: _empty(m.LogoutUser),
    Command.LOGIN_REGISTER: _login_register,
    Command.GET_PERSONAL_ACCESS_TOKENS: _empty(m.GetPersonalAccessTokens),
    Command.CREATE_PERSONAL_ACCESS_TOKEN: _create_pat,
    Command.DELETE_PERSONAL_ACCESS_TOKEN: _delete_pat,
    Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN: _login_with_token,
    Command.LOGIN_REGISTER_WITH_PAT: _login_register_with_token,
    Command.POLL_MESSAGES: _poll,
    Command.WAIT_FOR_MESSAGES: _wait,
    Command.POLL_BATCHES: _poll_batches,
    Command.POLL_PARTITIONS: _poll_partitions,
    Command.SEND_MESSAGES: _send,
    Command.FLUSH_UNSAVED_BUFFER: _flush,
    Command.GET_CONSUMER_OFFSET: _get_offset,
    Command.STORE_CONSUMER_OFFSET: _store_offset,
    Command.DELETE_CONSUMER_OFFSET: _delete_offset,
    Command.GET_STREAM: _stream_only(m.GetStream),
    Command.GET_STREAMS: _empty(m.GetStreams),
    Command.CREATE_STREAM: _create_stream,
    Command.DELETE_STREAM: _stream_only(m.DeleteStream),
    Command.UPDATE_STREAM: _update_stream,
    Command.PURGE_STREAM: _stream_only(m.PurgeStream),
    Command.GET_TOPIC: _stream_topic(m.GetTopic),
    Command.GET_TOPICS: _stream_only(m.GetTopics),
    Command.CREATE_TOPIC: _create_topic,
    Command.DELETE_TOPIC: _stream_topic(m.DeleteTopic),
    Command.UPDATE_TOPIC: _update_topic,
    Command.PURGE_TOPIC: _stream_topic(m.PurgeTopic),
    Command.CREATE_PARTITIONS: _partitions_cmd(m.CreatePartitions),
    Command.DELETE_PARTITIONS: _partitions_cmd(m.DeletePartitions),
    Command.DELETE_SEGMENTS: _delete_segments,
    Command.GET_CONSUMER_GROUP: _group_cmd(m.GetConsumerGroup),
    Command.GET_CONSUMER_GROUPS: _stream_topic(m.GetConsumerGroups),
    Command.CREATE_CONSUMER_GROUP: _create_group,
    Command.DELETE_CONSUMER_GROUP: _group_cmd(m.DeleteConsumerGroup),
    Command.JOIN_CONSUMER_GROUP: _group_cmd(m.JoinConsumerGroup),
    Command.LEAVE_CONSUMER_GROUP: _group_cmd(m.LeaveConsumerGroup),
    Command.SYNC_CONSUMER_GROUP: _group_cmd(m.SyncConsumerGroup),
})


def _command(code: int) -> Command:
    try:
        return Command(code)
    except ValueError:
        raise IggyError(Status.INVALID_COMMAND, f"unknown command code {code}") from None


def decode_request(dialect: Dialect, code: int, payload: bytes) -> m.Request:
    """One legacy-framed request (D or L). Unknown codes, and codes the dialect does not have
    (D: only the seed's list; L: no VSR-only codes), raise INVALID_COMMAND; the connection stays
    open (B.4, D.2 step 2)."""
    command = _command(code)
    if dialect is Dialect.SEED and command not in SEED_COMMANDS:
        raise IggyError(Status.INVALID_COMMAND, f"{command.name} is not a design-document command")
    if dialect is Dialect.LEGACY and command in _LEGACY_ONLY_IN_V:
        raise IggyError(Status.INVALID_COMMAND, f"{command.name} exists only in VSR framing")
    if dialect is Dialect.VSR:
        raise ValueError("VSR frames are decoded by decode_vsr_request")
    return DECODERS[command](payload, dialect)


def check_vsr_header(h: RequestHeader) -> None:
    """The header rules of the real server (C.2). A rule that cannot hold for a live session is an
    eviction: bayou's choice of reason, the captures show none of these."""
    if h.client == 0:
        raise IggyError(Status.INVALID_COMMAND, "client id 0", eviction=EvictionReason.SESSION_ERROR)
    if h.operation == Operation.REGISTER:
        if h.session or h.request:
            raise IggyError(Status.INVALID_SESSION, "register needs session 0 and request 0",
                            eviction=EvictionReason.SESSION_ERROR)
    elif h.operation != Operation.NON_REPLICATED and (h.session == 0 or h.request == 0):
        raise IggyError(Status.UNAUTHENTICATED, "operation needs a session and a request number",
                        eviction=EvictionReason.NO_SESSION)


def decode_vsr_request(frame: VsrFrame) -> m.Request:
    """One V request: header rules, then the command the operation stands for (C.5), then its
    body. Operation 2 may carry only non-replicated codes; an unknown code is INVALID_COMMAND."""
    code = frame.command
    if code is None or frame.header.operation == Operation.RESERVED:
        raise IggyError(Status.INVALID_COMMAND, f"operation {frame.header.operation}",
                        eviction=EvictionReason.INVALID_REQUEST_OPERATION)
    check_vsr_header(frame.header)
    command = _command(code)
    if frame.header.operation == Operation.NON_REPLICATED and command not in NON_REPLICATED_COMMANDS:
        raise IggyError(Status.INVALID_COMMAND, f"{command.name} cannot travel as NonReplicated")
    return DECODERS[command](frame.body, Dialect.VSR)


def decode_frame(dialect: Dialect, frame: LegacyFrame | VsrFrame) -> m.Request:
    if isinstance(frame, VsrFrame):
        return decode_vsr_request(frame)
    return decode_request(dialect, frame.code, frame.payload)


# -- request encoders (client side) -------------------------------------------------------------

Encoder = Callable[[Any, Dialect], bytes]


def _enc_poll(q: m.PollMessages, d: Dialect) -> bytes:
    out = (_enc_consumer_prefix(q.consumer, q.stream, q.topic, q.partition_id, d)
           + enc_strategy(q.strategy) + U32.pack(q.count) + U8.pack(q.auto_commit))
    if isinstance(q, m.PollBatches) and q.max_wait_ms:  # sent only when asked: older brokers take the rest
        out += U32.pack(q.max_wait_ms)
    return out


def _enc_nothing(req: Any, dialect: Dialect) -> bytes:
    return b""


def _enc_consumer_prefix(consumer: m.Consumer, stream: m.Identifier, topic: m.Identifier,
                         partition: int | None, dialect: Dialect) -> bytes:
    if dialect is Dialect.SEED:
        return (enc_seed_consumer(consumer) + enc_identifier(stream) + enc_identifier(topic)
                + U32.pack(partition or 0))
    return (enc_consumer(consumer) + enc_identifier(stream) + enc_identifier(topic)
            + enc_optional_partition(partition))


def _enc_group(stream: m.Identifier, topic: m.Identifier, group: m.Identifier, dialect: Dialect) -> bytes:
    head = enc_identifier(stream) + enc_identifier(topic)
    if dialect is Dialect.SEED:
        if not isinstance(group.value, int):
            raise ValueError("a D consumer group id is a u32")
        return head + U32.pack(group.value)
    return head + enc_identifier(group)


def _enc_ack(ack: m.AckLevel | None, dialect: Dialect) -> bytes:
    if dialect is Dialect.VSR:
        return U8.pack(m.AckLevel.QUORUM if ack is None else ack)
    return b""


def _enc_send(req: m.SendMessages, dialect: Dialect) -> bytes:
    if dialect is Dialect.VSR:
        return batches.encode_vsr_send(req)
    if dialect is Dialect.LEGACY:
        return batches.encode_legacy_send(req)
    return batches.encode_seed_send(req)


def _enc_create_stream(req: m.CreateStream, dialect: Dialect) -> bytes:
    if dialect is Dialect.SEED:
        return U32.pack(req.stream_id or 0) + enc_name8(req.name)
    if dialect is Dialect.VSR:
        return enc_name8(req.name) + enc_user_headers(req.options)
    return enc_name8(req.name)


def _enc_create_topic(req: m.CreateTopic, dialect: Dialect) -> bytes:
    head = enc_identifier(req.stream)
    if dialect is Dialect.SEED:
        return (head + struct.pack("<III", req.topic_id or 0, req.partitions_count, req.message_expiry or 0)
                + enc_name8(req.name))
    if dialect is Dialect.VSR:
        return head + U32.pack(req.partitions_count) + enc_name8(req.name) + enc_user_headers(req.options)
    return (head + U32.pack(req.partitions_count)
            + struct.pack("<BQQB", m.CompressionAlgorithm.NONE if req.compression_algorithm is None
                          else req.compression_algorithm,
                          req.message_expiry or 0, req.max_topic_size or 0, req.replication_factor or 0)
            + enc_name8(req.name) + enc_user_headers(req.options))  # options: a bayou extension in L


def _enc_update_topic(req: m.UpdateTopic, dialect: Dialect) -> bytes:
    head = enc_identifier(req.stream) + enc_identifier(req.topic)
    if dialect is Dialect.VSR:  # the settings travel in the options, as in CREATE_TOPIC
        return head + enc_name8(req.name) + enc_user_headers(req.options)
    return (head + struct.pack("<BQQ", req.compression_algorithm, req.message_expiry, req.max_topic_size)
            + U8.pack(req.replication_factor or 0) + enc_name8(req.name)
            + enc_user_headers(req.options))  # options: a bayou extension in L


def _enc_create_group(req: m.CreateConsumerGroup, dialect: Dialect) -> bytes:
    head = enc_identifier(req.stream) + enc_identifier(req.topic)
    if dialect is Dialect.SEED:
        return head + U32.pack(req.group_id or 0)
    if req.name is None:
        raise ValueError("L and V create consumer groups by name")
    return head + enc_name8(req.name)


def _enc_create_user(req: m.CreateUser, dialect: Dialect) -> bytes:
    out = (enc_name8(req.username) + enc_bytes8(req.password.encode()) + U8.pack(req.status)
           + _enc_optional_permissions(req.permissions))
    return out + enc_user_headers(req.options) if dialect is Dialect.VSR else out


def _enc_update_user(req: m.UpdateUser, dialect: Dialect) -> bytes:
    out = (enc_identifier(req.user)
           + (b"\x00" if req.username is None else b"\x01" + enc_name8(req.username))
           + (b"\x00" if req.status is None else b"\x01" + U8.pack(req.status)))
    return out + enc_user_headers(req.options) if dialect is Dialect.VSR else out


def _enc_register_prefix(version: int, sdk_name: str, sdk_version: str) -> bytes:
    return U32.pack(version) + enc_name8(sdk_name) + enc_name8(sdk_version)


ENCODERS: Mapping[type, Encoder] = MappingProxyType({
    m.Ping: _enc_nothing,
    m.GetStats: _enc_nothing,
    m.GetClusterMetadata: _enc_nothing,
    m.GetMe: _enc_nothing,
    m.GetClient: lambda q, d: U32.pack(q.client_id),
    m.GetClients: _enc_nothing,
    m.GetUser: lambda q, d: enc_identifier(q.user),
    m.GetUsers: _enc_nothing,
    m.DeleteUser: lambda q, d: enc_identifier(q.user),
    m.CreateUser: _enc_create_user,
    m.UpdateUser: _enc_update_user,
    m.UpdatePermissions: lambda q, d: enc_identifier(q.user) + _enc_optional_permissions(q.permissions),
    m.ChangePassword: lambda q, d: (enc_identifier(q.user) + enc_bytes8(q.current_password.encode())
                                    + enc_bytes8(q.new_password.encode())),
    m.LoginUser: lambda q, d: (enc_name8(q.username) + enc_bytes8(q.password.encode())
                               + enc_str32(q.version) + enc_str32(q.context)),
    m.LoginWithToken: lambda q, d: enc_name8(q.token) + (
        b"" if q.version is None and q.context is None else enc_str32(q.version) + enc_str32(q.context)),
    m.LoginRegister: lambda q, d: (_enc_register_prefix(q.protocol_version, q.sdk_name, q.sdk_version)
                                   + enc_name8(q.username) + enc_bytes8(q.password.encode())
                                   + enc_str32(q.context)),
    m.LoginRegisterWithToken: lambda q, d: (
        _enc_register_prefix(q.protocol_version, q.sdk_name, q.sdk_version)
        + enc_bytes8(q.token.encode()) + enc_str32(q.context)),
    m.LogoutUser: _enc_nothing,
    m.GetPersonalAccessTokens: _enc_nothing,
    m.CreatePersonalAccessToken: lambda q, d: enc_name8(q.name) + U64.pack(q.expiry),
    m.DeletePersonalAccessToken: lambda q, d: enc_name8(q.name),
    m.PollMessages: _enc_poll,
    m.PollBatches: _enc_poll,
    m.SendMessages: _enc_send,
    m.WaitForMessages: lambda q, d: U32.pack(q.max_wait_ms) + U32.pack(len(q.topics)) + b"".join(
        enc_identifier(t.stream) + enc_identifier(t.topic) + U32.pack(len(t.partitions))
        + b"".join(U32.pack(p) + U64.pack(o) for p, o in t.partitions) for t in q.topics),
    m.PollPartitions: lambda q, d: U32.pack(q.max_wait_ms) + U32.pack(len(q.topics)) + b"".join(
        enc_identifier(t.stream) + enc_identifier(t.topic) + U32.pack(len(t.partitions))
        + b"".join(U32.pack(p) + U64.pack(o) + U32.pack(n) for p, o, n in t.partitions) for t in q.topics),
    m.FlushUnsavedBuffer: lambda q, d: (enc_identifier(q.stream) + enc_identifier(q.topic)
                                        + U32.pack(q.partition_id) + U8.pack(q.fsync)),
    m.GetConsumerOffset: lambda q, d: _enc_consumer_prefix(q.consumer, q.stream, q.topic, q.partition_id, d),
    m.StoreConsumerOffset: lambda q, d: (
        _enc_consumer_prefix(q.consumer, q.stream, q.topic, q.partition_id, d) + U64.pack(q.offset)
        + _enc_ack(q.ack, d)),
    m.DeleteConsumerOffset: lambda q, d: (
        _enc_consumer_prefix(q.consumer, q.stream, q.topic, q.partition_id, d) + _enc_ack(q.ack, d)),
    m.GetStream: lambda q, d: enc_identifier(q.stream),
    m.GetStreams: _enc_nothing,
    m.CreateStream: _enc_create_stream,
    m.DeleteStream: lambda q, d: enc_identifier(q.stream),
    m.UpdateStream: lambda q, d: enc_identifier(q.stream) + enc_name8(q.name),
    m.PurgeStream: lambda q, d: enc_identifier(q.stream),
    m.GetTopic: lambda q, d: enc_identifier(q.stream) + enc_identifier(q.topic),
    m.GetTopics: lambda q, d: enc_identifier(q.stream),
    m.CreateTopic: _enc_create_topic,
    m.DeleteTopic: lambda q, d: enc_identifier(q.stream) + enc_identifier(q.topic),
    m.UpdateTopic: _enc_update_topic,
    m.PurgeTopic: lambda q, d: enc_identifier(q.stream) + enc_identifier(q.topic),
    m.CreatePartitions: lambda q, d: (enc_identifier(q.stream) + enc_identifier(q.topic)
                                      + U32.pack(q.partitions_count)),
    m.DeletePartitions: lambda q, d: (enc_identifier(q.stream) + enc_identifier(q.topic)
                                      + U32.pack(q.partitions_count)),
    m.DeleteSegments: lambda q, d: (enc_identifier(q.stream) + enc_identifier(q.topic)
                                    + struct.pack("<II", q.partition_id, q.segments_count)),
    m.GetConsumerGroup: lambda q, d: _enc_group(q.stream, q.topic, q.group, d),
    m.GetConsumerGroups: lambda q, d: enc_identifier(q.stream) + enc_identifier(q.topic),
    m.CreateConsumerGroup: _enc_create_group,
    m.DeleteConsumerGroup: lambda q, d: _enc_group(q.stream, q.topic, q.group, d),
    m.JoinConsumerGroup: lambda q, d: _enc_group(q.stream, q.topic, q.group, d),
    m.LeaveConsumerGroup: lambda q, d: _enc_group(q.stream, q.topic, q.group, d),
    m.SyncConsumerGroup: lambda q, d: _enc_group(q.stream, q.topic, q.group, d),
    m.Unsupported: lambda q, d: q.payload,
})


def encode_request(req: m.Request, dialect: Dialect) -> bytes:
    """The payload (L/D) or body (V) of a request."""
    return ENCODERS[type(req)](req, dialect)


def encode_request_frame(req: m.Request, dialect: Dialect, *, client: int = 1, request: int = 0,
                         session: int = 0) -> bytes:
    """A whole request frame. For V the operation, the code field and ``request_checksum`` follow
    from the command as the 0.9 client sets them (C.2); client, request and session come from the
    caller's session."""
    body = encode_request(req, dialect)
    command = req.command
    if dialect is not Dialect.VSR:
        return encode_legacy_request(command, body)
    operation = OPERATION_OF.get(command, Operation.NON_REPLICATED)
    code = command if operation == Operation.NON_REPLICATED or (
        command == Command.LOGIN_REGISTER_WITH_PAT) else 0
    header = RequestHeader(client=client, operation=operation, request=request, session=session,
                           code=code, request_checksum=request_checksum(operation, body))
    return encode_vsr_request(header, body)


# -- reply encoders -----------------------------------------------------------------------------

_STREAM = struct.Struct("<IQIQQ")
_TOPIC_HEAD = struct.Struct("<IQIQBQ")
_TOPIC_TAIL = struct.Struct("<QQ")
_PARTITION = struct.Struct("<IQIQQQ")
_GROUP = struct.Struct("<III")
_OFFSET_INFO = struct.Struct("<IQQ")
_CONFIRMATION = struct.Struct("<IIIQ")
_CLIENT_GROUP = struct.Struct("<III")
_CACHE_METRIC = struct.Struct("<IIIQQf")
_STATS_HEAD = struct.Struct("<IffQQQQQQQQIIIIQII")
_LOGIN_REGISTER = struct.Struct("<IQI")


def _enc_prefixed_options(options: m.Headers) -> bytes:
    block = enc_user_headers(options)
    return U32.pack(len(block)) + block


def encode_stream_info(s: m.StreamInfo, dialect: Dialect) -> bytes:
    out = _STREAM.pack(s.id, s.created_at, s.topics_count, s.size_bytes, s.messages_count) + enc_name8(s.name)
    return out + _enc_prefixed_options(s.options) if dialect is Dialect.VSR else out


def encode_topic_info(t: m.TopicInfo, dialect: Dialect) -> bytes:
    head = _TOPIC_HEAD.pack(t.id, t.created_at, t.partitions_count, t.message_expiry,
                            t.compression_algorithm, t.max_topic_size)
    tail = _TOPIC_TAIL.pack(t.size_bytes, t.messages_count) + enc_name8(t.name)
    if dialect is Dialect.VSR:
        return head + tail + _enc_prefixed_options(t.options) + _enc_prefixed_options(t.derived_options)
    return head + U8.pack(t.replication_factor) + tail


def encode_partition_info(p: m.PartitionInfo) -> bytes:
    return _PARTITION.pack(p.id, p.created_at, p.segments_count, p.current_offset, p.size_bytes,
                           p.messages_count)


def encode_stream_details(d: m.StreamDetails, dialect: Dialect) -> bytes:
    if d.stream.topics_count != len(d.topics):
        raise ValueError("topics_count must equal the number of topic records")
    return encode_stream_info(d.stream, dialect) + b"".join(encode_topic_info(t, dialect) for t in d.topics)


def encode_topic_details(d: m.TopicDetails, dialect: Dialect) -> bytes:
    if d.topic.partitions_count != len(d.partitions):
        raise ValueError("partitions_count must equal the number of partition records")
    return encode_topic_info(d.topic, dialect) + b"".join(encode_partition_info(p) for p in d.partitions)


def encode_group_info(g: m.ConsumerGroupInfo) -> bytes:
    return _GROUP.pack(g.id, g.partitions_count, g.members_count) + enc_name8(g.name)


def encode_group_details(d: m.ConsumerGroupDetails) -> bytes:
    if d.group.members_count != len(d.members):
        raise ValueError("members_count must equal the number of member records")
    return encode_group_info(d.group) + b"".join(
        struct.pack(f"<II{len(x.partitions)}I", x.id, len(x.partitions), *x.partitions) for x in d.members)


def encode_group_assignment(a: m.ConsumerGroupAssignment) -> bytes:
    return struct.pack(f"<QI{len(a.partitions)}I", a.generation, len(a.partitions), *a.partitions)


def encode_offset_info(o: m.ConsumerOffsetInfo) -> bytes:
    return _OFFSET_INFO.pack(o.partition_id, o.current_offset, o.stored_offset)


def encode_polled_messages(p: m.PolledMessages, dialect: Dialect) -> bytes:
    if dialect is Dialect.VSR:
        return batches.encode_vsr_polled(p)
    if dialect is Dialect.LEGACY:
        return batches.encode_legacy_polled(p)
    return batches.encode_seed_polled(p)


def encode_confirmations(c: m.SendConfirmations) -> bytes:
    return U32.pack(len(c.confirmations)) + b"".join(
        _CONFIRMATION.pack(x.stream_id, x.topic_id, x.partition_id, x.base_offset) for x in c.confirmations)


def encode_login_reply(r: m.LoginReply) -> bytes:
    return U32.pack(r.user_id)


def encode_login_register_reply(r: m.LoginRegisterReply) -> bytes:
    """The body after the result section (``framing.encode_vsr_ok`` adds the section)."""
    if r.session == 0:
        raise ValueError("a V login session must be non-zero")
    return _LOGIN_REGISTER.pack(r.user_id, r.session, r.server_protocol_version) + enc_name8(r.server_version)


def encode_cluster_metadata(c: m.ClusterMetadata) -> bytes:
    parts = [enc_str32(c.name), U32.pack(len(c.nodes))]
    for n in c.nodes:
        parts += [enc_str32(n.name), enc_str32(n.ip),
                  struct.pack("<HHHHBB", n.tcp_port, n.quic_port, n.http_port, n.websocket_port, n.role,
                              n.status)]
    return b"".join(parts)


def encode_stats(s: m.Stats) -> bytes:
    return b"".join([
        _STATS_HEAD.pack(s.process_id, s.cpu_usage, s.total_cpu_usage, s.memory_usage, s.total_memory,
                         s.available_memory, s.run_time, s.start_time, s.read_bytes, s.written_bytes,
                         s.messages_size_bytes, s.streams_count, s.topics_count, s.partitions_count,
                         s.segments_count, s.messages_count, s.clients_count, s.consumer_groups_count),
        enc_str32(s.hostname), enc_str32(s.os_name), enc_str32(s.os_version), enc_str32(s.kernel_version),
        enc_str32(s.iggy_server_version), U32.pack(s.iggy_server_semver), U32.pack(len(s.cache_metrics)),
        *(_CACHE_METRIC.pack(c.stream_id, c.topic_id, c.partition_id, c.hits, c.misses, c.hit_ratio)
          for c in s.cache_metrics),
        struct.pack("<IQQ", s.threads_count, s.free_disk_space, s.total_disk_space)])


def encode_client_info(c: m.ClientInfo) -> bytes:
    return (struct.pack("<IIB", c.client_id, c.user_id, c.transport) + enc_str32(c.address)
            + U32.pack(c.consumer_groups_count))


def encode_client_details(d: m.ClientDetails) -> bytes:
    if d.client.consumer_groups_count != len(d.groups):
        raise ValueError("consumer_groups_count must equal the number of group entries")
    return encode_client_info(d.client) + b"".join(
        _CLIENT_GROUP.pack(g.stream_id, g.topic_id, g.group_id) for g in d.groups)


_USER_HEAD = struct.Struct("<IQB")
_NO_PERMISSIONS = bytes(4)


def encode_user_info(u: m.UserInfo, dialect: Dialect) -> bytes:
    out = _USER_HEAD.pack(u.id, u.created_at, u.status) + enc_name8(u.username)
    return out + _enc_prefixed_options(u.options) if dialect is Dialect.VSR else out


def encode_user_details(d: m.UserDetails, dialect: Dialect) -> bytes:
    """No permissions is four zero bytes (u32 0), as both the 0.8 server and the V wire type write
    it: the 0.9.0 client rejects a lone zero byte (captured)."""
    if d.permissions is None:
        return encode_user_info(d.user, dialect) + _NO_PERMISSIONS
    block = encode_permissions(d.permissions)
    return encode_user_info(d.user, dialect) + b"\x01" + U32.pack(len(block)) + block


def encode_pat_info(t: m.PersonalAccessTokenInfo) -> bytes:
    return enc_name8(t.name) + U64.pack(t.expiry_at or 0)


# One table of reply encoders: record type -> encoder (every encoder takes the dialect; those whose
# layout does not depend on it ignore it).
_REPLY_ENCODERS: dict[type[Any], Callable[[Any, Dialect], bytes]] = {
    m.StreamInfo: encode_stream_info,
    m.TopicInfo: encode_topic_info,
    m.ConsumerGroupInfo: lambda r, _d: encode_group_info(r),
    m.StreamDetails: encode_stream_details,
    m.TopicDetails: encode_topic_details,
    m.ConsumerGroupDetails: lambda r, _d: encode_group_details(r),
    m.ConsumerGroupAssignment: lambda r, _d: encode_group_assignment(r),
    m.ConsumerOffsetInfo: lambda r, _d: encode_offset_info(r),
    m.PolledMessages: encode_polled_messages,
    m.SendConfirmations: lambda r, _d: encode_confirmations(r),
    m.LoginReply: lambda r, _d: encode_login_reply(r),
    m.LoginRegisterReply: lambda r, _d: encode_login_register_reply(r),
    m.ClusterMetadata: lambda r, _d: encode_cluster_metadata(r),
    m.Stats: lambda r, _d: encode_stats(r),
    m.ClientInfo: lambda r, _d: encode_client_info(r),
    m.ClientDetails: lambda r, _d: encode_client_details(r),
    m.UserInfo: encode_user_info,
    m.UserDetails: encode_user_details,
    m.PersonalAccessTokenInfo: lambda r, _d: encode_pat_info(r),
    m.RawPersonalAccessToken: lambda r, _d: enc_name8(r.token),
}


def _encode_one(item: Any, dialect: Dialect) -> bytes:
    return _REPLY_ENCODERS[type(item)](item, dialect)


def encode_reply(reply: m.Reply, dialect: Dialect) -> bytes:
    """The payload of a successful reply (the framing adds status/length or the V header and result
    section). Lists are tuples of records; an empty tuple is the empty payload."""
    if isinstance(reply, tuple):
        return b"".join(_encode_one(item, dialect) for item in reply)
    return _encode_one(reply, dialect)


# -- reply decoders (client side) ---------------------------------------------------------------


def _read_prefixed_options(r: Reader) -> m.Headers:
    n = r.u32()
    at = r.skip(n)
    return decode_options(r.buf, at, at + n)


def _read_stream(r: Reader, dialect: Dialect) -> m.StreamInfo:
    sid, created, topics, size, count = r.u32(), r.u64(), r.u32(), r.u64(), r.u64()
    name = r.name8()
    options = _read_prefixed_options(r) if dialect is Dialect.VSR else ()
    return m.StreamInfo(sid, created, topics, size, count, name, options)


def _read_topic(r: Reader, dialect: Dialect) -> m.TopicInfo:
    tid, created, partitions, expiry = r.u32(), r.u64(), r.u32(), r.u64()
    compression, max_size = r.u8(), r.u64()
    rf = 0 if dialect is Dialect.VSR else r.u8()
    size, count = r.u64(), r.u64()
    name = r.name8()
    if dialect is Dialect.VSR:
        options, derived = _read_prefixed_options(r), _read_prefixed_options(r)
        return m.TopicInfo(tid, created, partitions, expiry, compression, max_size, size, count, name, 0,
                           options, derived)
    return m.TopicInfo(tid, created, partitions, expiry, compression, max_size, size, count, name, rf)


def _read_partition(r: Reader) -> m.PartitionInfo:
    return m.PartitionInfo(r.u32(), r.u64(), r.u32(), r.u64(), r.u64(), r.u64())


def _read_group(r: Reader) -> m.ConsumerGroupInfo:
    return m.ConsumerGroupInfo(r.u32(), r.u32(), r.u32(), r.name8())


def _read_client(r: Reader) -> m.ClientInfo:
    return m.ClientInfo(r.u32(), r.u32(), r.u8(), r.str32(), r.u32())


def _read_user(r: Reader, dialect: Dialect) -> m.UserInfo:
    uid, created, status, name = r.u32(), r.u64(), _user_status(r), r.name8()
    options = _read_prefixed_options(r) if dialect is Dialect.VSR else ()
    return m.UserInfo(uid, created, status, name, options)


def _dec_user_details(r: Reader, d: Dialect) -> m.UserDetails:
    user = _read_user(r, d)
    flag = r.u8()
    if flag == 0:
        if r.take(3) != bytes(3):
            raise IggyError(Status.INVALID_FORMAT, "no-permissions marker must be four zero bytes")
        return m.UserDetails(user)
    if flag != 1:
        raise IggyError(Status.INVALID_FORMAT, f"permissions flag {flag}")
    n = r.u32()
    at = r.skip(n)
    inner = Reader(r.buf, at, at + n)
    permissions = read_permissions(inner, limit=None)  # a server's answer: whatever it stores
    inner.done()
    return m.UserDetails(user, permissions)


def _read_pat(r: Reader) -> m.PersonalAccessTokenInfo:
    name, expiry = r.name8(), r.u64()
    return m.PersonalAccessTokenInfo(name, expiry or None)


def _all(r: Reader, read: Callable[[Reader], Any]) -> tuple[Any, ...]:
    out = []
    while r.remaining:
        out.append(read(r))
    return tuple(out)


def _dec_stream_details(r: Reader, d: Dialect) -> m.StreamDetails:
    stream = _read_stream(r, d)
    return m.StreamDetails(stream, tuple(_read_topic(r, d) for _ in range(stream.topics_count)))


def _dec_topic_details(r: Reader, d: Dialect) -> m.TopicDetails:
    topic = _read_topic(r, d)
    return m.TopicDetails(topic, tuple(_read_partition(r) for _ in range(topic.partitions_count)))


def _dec_group_details(r: Reader, d: Dialect) -> m.ConsumerGroupDetails:
    group = _read_group(r)
    members = []
    for _ in range(group.members_count):
        member_id, n = r.u32(), r.u32()
        members.append(m.ConsumerGroupMember(member_id, tuple(r.u32() for _ in range(n))))
    return m.ConsumerGroupDetails(group, tuple(members))


def _dec_client_details(r: Reader, d: Dialect) -> m.ClientDetails:
    client = _read_client(r)
    return m.ClientDetails(client, tuple(m.ClientGroup(r.u32(), r.u32(), r.u32())
                                         for _ in range(client.consumer_groups_count)))


def _dec_cluster(r: Reader, d: Dialect) -> m.ClusterMetadata:
    name = r.str32()
    nodes = tuple(m.ClusterNode(r.str32(), r.str32(), r.u16(), r.u16(), r.u16(), r.u16(), r.u8(), r.u8())
                  for _ in range(r.u32()))
    return m.ClusterMetadata(name, nodes)


def _dec_stats(r: Reader, d: Dialect) -> m.Stats:
    head = (r.u32(), r.f32(), r.f32(), r.u64(), r.u64(), r.u64(), r.u64(), r.u64(), r.u64(), r.u64(),
            r.u64(), r.u32(), r.u32(), r.u32(), r.u32(), r.u64(), r.u32(), r.u32())
    texts = (r.str32(), r.str32(), r.str32(), r.str32(), r.str32())
    semver = r.u32()
    metrics = tuple(m.CacheMetric(r.u32(), r.u32(), r.u32(), r.u64(), r.u64(), r.f32())
                    for _ in range(r.u32()))
    return m.Stats(*head, *texts, semver, metrics, r.u32(), r.u64(), r.u64())


def _dec_login_register(r: Reader, d: Dialect) -> m.LoginRegisterReply:
    return m.LoginRegisterReply(r.u32(), r.u64(), r.u32(), r.name8())


def _dec_confirmations(r: Reader, d: Dialect) -> m.SendConfirmations:
    return m.SendConfirmations(tuple(m.SendConfirmation(r.u32(), r.u32(), r.u32(), r.u64())
                                     for _ in range(r.u32())))


def _dec_assignment(r: Reader, d: Dialect) -> m.ConsumerGroupAssignment:
    generation, n = r.u64(), r.u32()
    return m.ConsumerGroupAssignment(generation, tuple(r.u32() for _ in range(n)))


def _dec_polled(r: Reader, d: Dialect) -> m.PolledMessages:
    payload = r.rest()
    if d is Dialect.VSR:
        return batches.decode_vsr_polled(payload)
    if d is Dialect.LEGACY:
        return batches.decode_legacy_polled(payload)
    return batches.decode_seed_polled(payload)


ReplyDecoder = Callable[[Reader, Dialect], Any]

_LIST_REPLIES = frozenset({Command.GET_STREAMS, Command.GET_TOPICS, Command.GET_CONSUMER_GROUPS,
                           Command.GET_CLIENTS, Command.GET_USERS, Command.GET_PERSONAL_ACCESS_TOKENS})

REPLY_DECODERS: Mapping[Command, ReplyDecoder] = MappingProxyType({
    Command.GET_STATS: _dec_stats,
    Command.GET_CLUSTER_METADATA: _dec_cluster,
    Command.GET_ME: _dec_client_details,
    Command.GET_CLIENT: _dec_client_details,
    Command.GET_CLIENTS: lambda r, d: _all(r, _read_client),
    Command.LOGIN_USER: lambda r, d: m.LoginReply(r.u32()),
    Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN: lambda r, d: m.LoginReply(r.u32()),
    Command.LOGIN_REGISTER: _dec_login_register,
    Command.LOGIN_REGISTER_WITH_PAT: _dec_login_register,
    Command.POLL_MESSAGES: _dec_polled,
    Command.POLL_BATCHES: lambda r, d: batches.decode_vsr_polled(r.rest()),
    Command.SEND_MESSAGES: _dec_confirmations,
    Command.GET_CONSUMER_OFFSET: lambda r, d: m.ConsumerOffsetInfo(r.u32(), r.u64(), r.u64()),
    Command.GET_STREAM: _dec_stream_details,
    Command.CREATE_STREAM: _dec_stream_details,
    Command.GET_STREAMS: lambda r, d: _all(r, lambda x: _read_stream(x, d)),
    Command.GET_TOPIC: _dec_topic_details,
    Command.CREATE_TOPIC: _dec_topic_details,
    Command.GET_TOPICS: lambda r, d: _all(r, lambda x: _read_topic(x, d)),
    Command.GET_CONSUMER_GROUP: _dec_group_details,
    Command.CREATE_CONSUMER_GROUP: _dec_group_details,
    Command.GET_CONSUMER_GROUPS: lambda r, d: _all(r, _read_group),
    Command.SYNC_CONSUMER_GROUP: _dec_assignment,
    Command.GET_USER: _dec_user_details,
    Command.CREATE_USER: _dec_user_details,
    Command.GET_USERS: lambda r, d: _all(r, lambda x: _read_user(x, d)),
    Command.GET_PERSONAL_ACCESS_TOKENS: lambda r, d: _all(r, _read_pat),
    Command.CREATE_PERSONAL_ACCESS_TOKEN: lambda r, d: m.RawPersonalAccessToken(r.name8()),
})


def decode_reply(command: Command, payload: bytes, dialect: Dialect) -> m.Reply | None:
    """A successful reply's payload (after the V result section). An empty payload is None: "not
    found" for the single-object getters and "nothing" for commands whose reply is empty; lists
    decode to tuples (empty when the payload is)."""
    decode = REPLY_DECODERS.get(command)
    if command in _LIST_REPLIES and not payload:
        return ()
    if decode is None or not payload:
        if payload:
            raise IggyError(Status.INVALID_COMMAND, f"{command.name} replies carry no payload")
        return None
    r = Reader(payload)
    out: m.Reply = decode(r, dialect)
    r.done()
    return out
