"""The binary batch (cursus.md 5.1, as the real encoder writes it).

    magic u16 BA7C | topic u16-len UTF-8 | partition i32 | acks u8-len text | idempotent u8 |
    seq_start u64 | seq_end u64 | count i32 | count message records

Only the header is decoded into an object; the message records stay bytes. ``message_starts``
walks their length fields so the server can validate, stamp offsets into and store the records as
they arrived (bayou.records.cursus), and serve them back without re-encoding.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from bayou.errors import CorruptRecord
from bayou.protocols.cursus.framing import CursusError
from bayou.protocols.cursus.replies import ErrorCode, Quoted, error
from bayou.records import cursus as records
from bayou.records.cursus import MIN_MESSAGE_SIZE, CursusMessage

MAGIC = 0xBA7C
MAX_MESSAGES = 100_000

_MAGIC_TLEN = struct.Struct(">HH")
_PART_ALEN = struct.Struct(">iB")
_TAIL = struct.Struct(">BQQi")  # idempotent, seq_start, seq_end, count
_MAGIC_BYTES = b"\xba\x7c"


@dataclass(frozen=True, slots=True)
class BatchHead:
    topic: str
    partition: int
    acks: str  # as sent; an empty acks field reads as "1" (cursus.md 5.1)
    idempotent: bool
    seq_start: int
    seq_end: int
    count: int
    messages_at: int  # where the first message record starts in the body


def _bad(reason: str) -> CursusError:
    return CursusError(error(ErrorCode.BATCH_DECODE_FAILED, ("reason", Quoted(reason))))


def is_batch(body: bytes) -> bool:
    """cursus.md 2.2 step 1: magic, a non-empty topic, and a topic length that fits the body."""
    if len(body) < 6 or not body.startswith(_MAGIC_BYTES):
        return False
    tlen = (body[2] << 8) | body[3]
    return tlen != 0 and tlen + 2 <= len(body)


def decode_head(body: bytes) -> BatchHead:
    """The batch header. Raises CursusError(batch_decode_failed) for anything that does not fit."""
    n = len(body)
    if n < 4:
        raise _bad("truncated batch header")
    magic, tlen = _MAGIC_TLEN.unpack_from(body, 0)
    if magic != MAGIC:
        raise _bad("invalid batch magic")
    if tlen == 0:
        raise _bad("empty topic")
    pos = 4 + tlen
    if pos + _PART_ALEN.size > n:
        raise _bad("truncated batch header")
    try:
        topic = body[4:pos].decode("utf-8")
    except UnicodeDecodeError:
        raise _bad("topic is not valid UTF-8") from None
    partition, alen = _PART_ALEN.unpack_from(body, pos)
    pos += _PART_ALEN.size
    if pos + alen + _TAIL.size > n:
        raise _bad("truncated batch header")
    try:
        acks = body[pos : pos + alen].decode("utf-8") or "1"
    except UnicodeDecodeError:
        raise _bad("acks is not valid UTF-8") from None
    pos += alen
    idem, seq_start, seq_end, count = _TAIL.unpack_from(body, pos)
    pos += _TAIL.size
    if count < 0 or count > MAX_MESSAGES:
        raise _bad(f"invalid message count {count}")
    if count > (n - pos) // MIN_MESSAGE_SIZE:
        raise _bad(f"message count {count} is larger than the frame")
    return BatchHead(topic, partition, acks, idem != 0, seq_start, seq_end, count, pos)


def message_starts(body: bytes, head: BatchHead) -> list[int]:
    """Start of each message record, plus the end of the last one (``count + 1`` positions).
    Bytes after the last record are ignored, as the real decoder does."""
    try:
        return records.message_starts(body, head.messages_at, head.count)
    except CorruptRecord as exc:
        raise _bad(exc.message) from None


def decode_messages(body: bytes, head: BatchHead) -> list[CursusMessage]:
    """Every record as an object: for tests and clients; the server keeps records as bytes."""
    try:
        return records.decode_messages(body, head.messages_at, head.count)
    except CorruptRecord as exc:
        raise _bad(exc.message) from None


def encode_batch(topic: str, partition: int, messages: bytes, count: int, seq_start: int, seq_end: int,
                 acks: str = "1", *, idempotent: bool = False) -> bytes:
    """The body (not framed) of a batch: what CONSUME, STREAM and READ_STREAM send, with the
    broker's acks ``1`` and idempotent 0. ``messages`` is ``count`` records, concatenated."""
    t = topic.encode("utf-8")
    a = acks.encode("utf-8")
    if not t or len(t) > 0xFFFF:
        raise ValueError("batch topic must be 1..65535 bytes")
    if len(a) > 0xFF:
        raise ValueError("batch acks must be at most 255 bytes")
    return b"".join((
        _MAGIC_TLEN.pack(MAGIC, len(t)), t,
        _PART_ALEN.pack(partition, len(a)), a,
        _TAIL.pack(1 if idempotent else 0, seq_start, seq_end, count),
        messages,
    ))


def encode_messages(msgs: Sequence[CursusMessage]) -> bytes:
    out = bytearray()
    for m in msgs:
        records.encode_message(m, out)
    return bytes(out)
