"""The replication protocol, sans-IO: how a follower fetches a partition's batches from its leader.

One request in flight per connection; a frame is ``u32 length`` (of what follows), ``u8 kind``,
then the body, all big-endian (as the stored batches are).

FETCH (kind 1), follower -> leader::

    u16 topic length, topic (UTF-8), u32 partition, i32 replica id (the follower's broker id),
    i32 leader epoch (the epoch the follower follows), i64 fetch offset (the follower's log end),
    i32 last fetched epoch (the epoch of the follower's last batch, -1 for an empty log),
    u32 max bytes, u32 max wait ms (long poll while the leader has nothing past the fetch offset)

FETCH_REPLY (kind 2), leader -> follower::

    u8 error, i32 leader epoch, i64 high watermark (exclusive), i64 log start offset,
    i64 diverging end offset (-1: none), i32 diverging epoch, then the stored batches as they are

PRODUCE (kind 3), any broker -> the partition's leader (a send taken by a broker that does not
lead the partition, forwarded for clients that cannot follow a redirect)::

    u16 topic length, topic (UTF-8), u32 partition, i8 acks (0, 1, -1 = all), u8 flags (bit 0:
    de-duplicate by the records' message ids; bit 1: the batch is a transaction marker, a control
    batch the transaction coordinator has the leader append), then one stored record batch as it is

PRODUCE_REPLY (kind 4), leader -> broker::

    u8 error, i64 base offset, i64 last offset, i64 high watermark, i64 log start offset,
    u16 message length, message (UTF-8: the error's text)

Produce errors: NONE, NOT_LEADER, REPLICATION_TIMEOUT (acks=all not met in time), UNKNOWN_TOPIC,
UNKNOWN_PARTITION, REJECTED (any other refusal; the message says why).

A reply with a diverging end offset says the follower's log diverged from the leader's after
that offset (KIP-320's diverging epoch): the follower truncates there and fetches again. Errors:
NONE, NOT_LEADER (this broker does not lead the partition in that epoch), FENCED (the follower's
epoch is older than the leader's: it must learn the new state first), UNKNOWN_PARTITION,
OFFSET_OUT_OF_RANGE (the fetch offset is past the leader's log end, or below its start).

CHALLENGE (kind 5), leader -> any broker, first on every connection when the cluster has a shared
secret (``[cluster] secret``)::

    16 bytes nonce

AUTH (kind 6), the connecting broker's answer, before any other frame::

    i32 broker id, 32 bytes HMAC-SHA256(secret, "bayou-replication-v1" + nonce + broker id)

Readers return (message, bytes used), None for "need more bytes", or raise ``ReplicaProtocolError``.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from dataclasses import dataclass

from bayou.records.batch import MAX_OFFSET

MAX_FRAME = 256 * 1024 * 1024
LOG_END_MAX = MAX_OFFSET + 1  # offsets and log ends a partition can hold (-1: none, where allowed)
_LEN = struct.Struct(">IB")
_FETCH = struct.Struct(">IiiqiII")
_REPLY = struct.Struct(">Biqqqi")
_U16 = struct.Struct(">H")
_PRODUCE = struct.Struct(">IbB")
_PRODUCE_REPLY = struct.Struct(">BqqqqH")
DEDUPLICATE = 0x01
TXN_MARKER = 0x02


class ReplicaProtocolError(Exception):
    """The one protocol error: the peer sent bytes that are not a replication frame."""


class Kind(enum.IntEnum):
    FETCH = 1
    FETCH_REPLY = 2
    PRODUCE = 3
    PRODUCE_REPLY = 4
    CHALLENGE = 5
    AUTH = 6


NONCE_SIZE = 16
MAC_SIZE = 32
_AUTH = struct.Struct(">i")
AUTH_FRAME_MAX = _AUTH.size + MAC_SIZE + 1  # the largest frame length a broker reads before AUTH
HEADER_SIZE = _LEN.size  # u32 length + u8 kind


class ProduceError(enum.IntEnum):
    NONE = 0
    NOT_LEADER = 1
    REPLICATION_TIMEOUT = 2
    UNKNOWN_TOPIC = 3
    UNKNOWN_PARTITION = 4
    REJECTED = 5


class FetchError(enum.IntEnum):
    NONE = 0
    NOT_LEADER = 1
    FENCED = 2
    UNKNOWN_PARTITION = 3
    OFFSET_OUT_OF_RANGE = 4


@dataclass(frozen=True, slots=True)
class Fetch:
    topic: str
    partition: int
    replica_id: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int
    max_wait_ms: int


@dataclass(frozen=True, slots=True)
class FetchReply:
    error: FetchError
    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    diverging_end_offset: int = -1
    diverging_epoch: int = -1
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class Produce:
    topic: str
    partition: int
    acks: int
    flags: int
    batch: bytes


@dataclass(frozen=True, slots=True)
class ProduceReply:
    error: ProduceError
    base_offset: int = -1
    last_offset: int = -1
    high_watermark: int = -1
    log_start_offset: int = -1
    message: str = ""


@dataclass(frozen=True, slots=True)
class Challenge:
    nonce: bytes


@dataclass(frozen=True, slots=True)
class Auth:
    broker_id: int
    mac: bytes


def auth_mac(secret: str, nonce: bytes, broker_id: int) -> bytes:
    """What a broker that knows the cluster's secret answers to ``nonce``."""
    return hmac.new(secret.encode(), b"bayou-replication-v1" + nonce + _AUTH.pack(broker_id),
                    hashlib.sha256).digest()


def auth_ok(secret: str, nonce: bytes, auth: Auth) -> bool:
    return hmac.compare_digest(auth.mac, auth_mac(secret, nonce, auth.broker_id))


Message = Fetch | FetchReply | Produce | ProduceReply | Challenge | Auth


def encode(msg: Message) -> bytes:
    if isinstance(msg, Challenge):
        return _LEN.pack(len(msg.nonce) + 1, Kind.CHALLENGE) + msg.nonce
    if isinstance(msg, Auth):
        return _LEN.pack(_AUTH.size + len(msg.mac) + 1, Kind.AUTH) + _AUTH.pack(msg.broker_id) + msg.mac
    if isinstance(msg, Produce):
        name = msg.topic.encode()
        body = _U16.pack(len(name)) + name + _PRODUCE.pack(msg.partition, msg.acks, msg.flags) + msg.batch
        return _LEN.pack(len(body) + 1, Kind.PRODUCE) + body
    if isinstance(msg, ProduceReply):
        text = msg.message.encode()[:0xFFFF]
        body = _PRODUCE_REPLY.pack(msg.error, msg.base_offset, msg.last_offset, msg.high_watermark,
                                   msg.log_start_offset, len(text)) + text
        return _LEN.pack(len(body) + 1, Kind.PRODUCE_REPLY) + body
    if isinstance(msg, Fetch):
        name = msg.topic.encode()
        body = (_U16.pack(len(name)) + name
                + _FETCH.pack(msg.partition, msg.replica_id, msg.leader_epoch, msg.fetch_offset,
                              msg.last_fetched_epoch, msg.max_bytes, msg.max_wait_ms))
        kind = Kind.FETCH
    else:
        body = _REPLY.pack(msg.error, msg.leader_epoch, msg.high_watermark, msg.log_start_offset,
                           msg.diverging_end_offset, msg.diverging_epoch) + msg.data
        kind = Kind.FETCH_REPLY
    return _LEN.pack(len(body) + 1, kind) + body


def decode(buf: bytes | bytearray | memoryview) -> tuple[Message, int] | None:
    """One frame from the front of ``buf``."""
    if len(buf) < _LEN.size:
        return None
    length, kind = _LEN.unpack_from(buf, 0)
    if length < 1 or length > MAX_FRAME:
        raise ReplicaProtocolError(f"frame length {length} out of range")
    end = 4 + length
    if len(buf) < end:
        return None
    body = bytes(buf[_LEN.size : end])
    try:
        if kind == Kind.CHALLENGE:
            if len(body) != NONCE_SIZE:
                raise ReplicaProtocolError("CHALLENGE body has the wrong size")
            return Challenge(body), end
        if kind == Kind.AUTH:
            if len(body) != _AUTH.size + MAC_SIZE:
                raise ReplicaProtocolError("AUTH body has the wrong size")
            return Auth(_AUTH.unpack_from(body, 0)[0], body[_AUTH.size :]), end
        if kind == Kind.FETCH:
            (n,) = _U16.unpack_from(body, 0)
            if 2 + n + _FETCH.size != len(body):
                raise ReplicaProtocolError("FETCH body has the wrong size")
            topic = body[2 : 2 + n].decode()
            fields = _FETCH.unpack_from(body, 2 + n)
            if not 0 <= fields[3] <= LOG_END_MAX or fields[0] > 0x7FFF_FFFF:
                raise ReplicaProtocolError("fetch offset or partition out of range")
            return Fetch(topic, *fields), end
        if kind == Kind.FETCH_REPLY:
            if len(body) < _REPLY.size:
                raise ReplicaProtocolError("FETCH_REPLY body too short")
            error, epoch, hw, start, div_end, div_epoch = _REPLY.unpack_from(body, 0)
            if not (0 <= hw <= LOG_END_MAX and 0 <= start <= LOG_END_MAX and -1 <= div_end <= LOG_END_MAX):
                raise ReplicaProtocolError("FETCH_REPLY offset out of range")
            reply = FetchReply(FetchError(error), epoch, hw, start, div_end, div_epoch, body[_REPLY.size :])
            return reply, end
        if kind == Kind.PRODUCE:
            (n,) = _U16.unpack_from(body, 0)
            if 2 + n + _PRODUCE.size > len(body):
                raise ReplicaProtocolError("PRODUCE body too short")
            topic = body[2 : 2 + n].decode()
            partition, acks, flags = _PRODUCE.unpack_from(body, 2 + n)
            if partition > 0x7FFF_FFFF or acks not in (0, 1, -1) or flags & ~(DEDUPLICATE | TXN_MARKER):
                raise ReplicaProtocolError("PRODUCE with a bad partition, acks or flags")
            return Produce(topic, partition, acks, flags, body[2 + n + _PRODUCE.size :]), end
        if kind == Kind.PRODUCE_REPLY:
            if len(body) < _PRODUCE_REPLY.size:
                raise ReplicaProtocolError("PRODUCE_REPLY body too short")
            error, base, last, hw, start, n = _PRODUCE_REPLY.unpack_from(body, 0)
            if not all(-1 <= v <= LOG_END_MAX for v in (base, last, hw, start)):
                raise ReplicaProtocolError("PRODUCE_REPLY offset out of range")
            if _PRODUCE_REPLY.size + n != len(body):
                raise ReplicaProtocolError("PRODUCE_REPLY body has the wrong size")
            text = body[_PRODUCE_REPLY.size :].decode()
            return ProduceReply(ProduceError(error), base, last, hw, start, text), end
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise ReplicaProtocolError(f"malformed frame: {exc}") from None
    raise ReplicaProtocolError(f"unknown frame kind {kind}")
