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

A reply with a diverging end offset says the follower's log diverged from the leader's after
that offset (KIP-320's diverging epoch): the follower truncates there and fetches again. Errors:
NONE, NOT_LEADER (this broker does not lead the partition in that epoch), FENCED (the follower's
epoch is older than the leader's: it must learn the new state first), UNKNOWN_PARTITION,
OFFSET_OUT_OF_RANGE (the fetch offset is past the leader's log end, or below its start).

Readers return (message, bytes used), None for "need more bytes", or raise ``ReplicaProtocolError``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

MAX_FRAME = 256 * 1024 * 1024
_LEN = struct.Struct(">IB")
_FETCH = struct.Struct(">IiiqiII")
_REPLY = struct.Struct(">Biqqqi")
_U16 = struct.Struct(">H")


class ReplicaProtocolError(Exception):
    """The one protocol error: the peer sent bytes that are not a replication frame."""


class Kind(enum.IntEnum):
    FETCH = 1
    FETCH_REPLY = 2


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


Message = Fetch | FetchReply


def encode(msg: Message) -> bytes:
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
        if kind == Kind.FETCH:
            (n,) = _U16.unpack_from(body, 0)
            if 2 + n + _FETCH.size != len(body):
                raise ReplicaProtocolError("FETCH body has the wrong size")
            topic = body[2 : 2 + n].decode()
            fields = _FETCH.unpack_from(body, 2 + n)
            if fields[3] < 0 or fields[0] > 0x7FFF_FFFF:
                raise ReplicaProtocolError("negative fetch offset or partition")
            return Fetch(topic, *fields), end
        if kind == Kind.FETCH_REPLY:
            if len(body) < _REPLY.size:
                raise ReplicaProtocolError("FETCH_REPLY body too short")
            error, epoch, hw, start, div_end, div_epoch = _REPLY.unpack_from(body, 0)
            reply = FetchReply(FetchError(error), epoch, hw, start, div_end, div_epoch, body[_REPLY.size :])
            return reply, end
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise ReplicaProtocolError(f"malformed frame: {exc}") from None
    raise ReplicaProtocolError(f"unknown frame kind {kind}")
