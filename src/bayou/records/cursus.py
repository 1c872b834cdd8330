"""Cursus message records: the layout the Cursus clients' batch encoder writes (cursus.md 5.1).

bayou stores a Cursus batch's message records as they arrived (batch payload format
``FORMAT_CURSUS``), with each record's offset field stamped at append time, so a Cursus consumer is
served the stored bytes. Other protocols read them through ``message_to_record``; records produced
elsewhere reach Cursus consumers through ``record_to_message``. The fields Cursus has and the
common record model lacks travel as headers named ``cursus.*`` (decimal text for numbers), so a
round trip through any protocol keeps them.

    offset u64 | seq u64 | producer_id u16-len bytes | key u16-len bytes | epoch i64 |
    payload u32-len bytes | event_type u16-len bytes | schema_version u32 |
    aggregate_version u64 | metadata u16-len bytes

In a ``FORMAT_CURSUS`` batch the header's ``producer_id`` field (Kafka's, unused by this format)
holds the byte position of the last message within the records section, so a reader can serve a
whole batch, and report its first and last sequence numbers, without walking every message.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from bayou.errors import CorruptRecord
from bayou.records.model import Record

FORMAT_CURSUS = 1
MIN_MESSAGE_SIZE = 48

_OFF_SEQ_PLEN = struct.Struct(">QQH")
_U16 = struct.Struct(">H")
_EPOCH_PLEN = struct.Struct(">qI")
_SCHEMA_AGG_DLEN = struct.Struct(">IQH")
_U64 = struct.Struct(">Q")

H_SEQ = "cursus.seq"
H_PRODUCER = "cursus.producer_id"
H_EPOCH = "cursus.epoch"
H_EVENT_TYPE = "cursus.event_type"
H_SCHEMA = "cursus.schema_version"
H_AGGREGATE = "cursus.aggregate_version"
H_METADATA = "cursus.metadata"


@dataclass(frozen=True, slots=True)
class CursusMessage:
    payload: bytes
    offset: int = 0
    seq_num: int = 0
    producer_id: bytes = b""
    key: bytes = b""
    epoch: int = 0
    event_type: bytes = b""
    schema_version: int = 0
    aggregate_version: int = 0
    metadata: bytes = b""


Buffer = bytes | bytearray | memoryview


def message_starts(buf: Buffer, pos: int, count: int, end: int | None = None) -> list[int]:
    """Start positions of ``count`` messages from ``pos``, plus the end of the last one.

    Walks only the length fields. Raises CorruptRecord when a length runs past ``end``.
    """
    stop = len(buf) if end is None else end
    if count < 0 or count > (stop - pos) // MIN_MESSAGE_SIZE:
        raise CorruptRecord(f"message count {count} is larger than the frame")
    u16 = _U16.unpack_from
    u32 = struct.unpack_from
    starts = [pos]
    for _ in range(count):
        if stop - pos < MIN_MESSAGE_SIZE:
            raise CorruptRecord("truncated message")
        p = pos + 16
        (plen,) = u16(buf, p)
        p += 2 + plen
        if p + 2 > stop:
            raise CorruptRecord("producer id past the end of the frame")
        (klen,) = u16(buf, p)
        p += 2 + klen + 8
        if p + 4 > stop:
            raise CorruptRecord("key past the end of the frame")
        (vlen,) = u32(">I", buf, p)
        p += 4 + vlen
        if p + 2 > stop:
            raise CorruptRecord("payload past the end of the frame")
        (elen,) = u16(buf, p)
        p += 2 + elen + 12
        if p + 2 > stop:
            raise CorruptRecord("event type past the end of the frame")
        (dlen,) = u16(buf, p)
        p += 2 + dlen
        if p > stop:
            raise CorruptRecord("metadata past the end of the frame")
        pos = p
        starts.append(pos)
    return starts


def stamp_offsets(buf: bytearray, starts: Sequence[int], base_offset: int) -> None:
    """Write consecutive offsets into the messages that begin at ``starts[:-1]``."""
    pack = _U64.pack_into
    for i, s in enumerate(starts[:-1]):
        pack(buf, s, base_offset + i)


def decode_message(buf: Buffer, pos: int) -> tuple[CursusMessage, int]:
    off, seq, plen = _OFF_SEQ_PLEN.unpack_from(buf, pos)
    p = pos + 18
    producer = bytes(buf[p : p + plen])
    p += plen
    (klen,) = _U16.unpack_from(buf, p)
    key = bytes(buf[p + 2 : p + 2 + klen])
    p += 2 + klen
    epoch, vlen = _EPOCH_PLEN.unpack_from(buf, p)
    p += 12
    payload = bytes(buf[p : p + vlen])
    p += vlen
    (elen,) = _U16.unpack_from(buf, p)
    event_type = bytes(buf[p + 2 : p + 2 + elen])
    p += 2 + elen
    schema, agg, dlen = _SCHEMA_AGG_DLEN.unpack_from(buf, p)
    p += 14
    metadata = bytes(buf[p : p + dlen])
    p += dlen
    return CursusMessage(payload, off, seq, producer, key, epoch, event_type, schema, agg, metadata), p


def decode_messages(buf: Buffer, pos: int, count: int, end: int | None = None) -> list[CursusMessage]:
    message_starts(buf, pos, count, end)  # validates every length first
    out = []
    for _ in range(count):
        m, pos = decode_message(buf, pos)
        out.append(m)
    return out


def encode_message(m: CursusMessage, out: bytearray) -> None:
    out += _OFF_SEQ_PLEN.pack(m.offset, m.seq_num, len(m.producer_id))
    out += m.producer_id
    out += _U16.pack(len(m.key))
    out += m.key
    out += _EPOCH_PLEN.pack(m.epoch, len(m.payload))
    out += m.payload
    out += _U16.pack(len(m.event_type))
    out += m.event_type
    out += _SCHEMA_AGG_DLEN.pack(m.schema_version, m.aggregate_version, len(m.metadata))
    out += m.metadata


_NO_EVENT = _U16.pack(0) + _SCHEMA_AGG_DLEN.pack(0, 0, 0)  # no event type, versions 0, no metadata


def encode_plain_message(payload: bytes, seq_num: int, producer_id: bytes, key: bytes, epoch: int) -> bytes:
    """``encode_message`` of a message at offset 0 without the event-sourcing fields (PUBLISH's),
    in one join instead of a ``CursusMessage`` and ten appends."""
    return b"".join((_OFF_SEQ_PLEN.pack(0, seq_num, len(producer_id)), producer_id, _U16.pack(len(key)), key,
                     _EPOCH_PLEN.pack(epoch, len(payload)), payload, _NO_EVENT))


def message_to_record(m: CursusMessage, offset: int, timestamp: int) -> Record:
    headers: list[tuple[str, bytes]] = []
    if m.producer_id:
        headers.append((H_PRODUCER, m.producer_id))
    if m.seq_num:
        headers.append((H_SEQ, b"%d" % m.seq_num))
    if m.epoch:
        headers.append((H_EPOCH, b"%d" % m.epoch))
    if m.event_type:
        headers.append((H_EVENT_TYPE, m.event_type))
    if m.schema_version:
        headers.append((H_SCHEMA, b"%d" % m.schema_version))
    if m.aggregate_version:
        headers.append((H_AGGREGATE, b"%d" % m.aggregate_version))
    if m.metadata:
        headers.append((H_METADATA, m.metadata))
    return Record(m.payload, m.key or None, timestamp, tuple(headers), None, offset)


def _int(value: bytes | None, bits: int, signed: bool = False) -> int:
    if not value:
        return 0
    try:
        v = int(value)
    except ValueError:
        return 0
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return v if lo <= v <= hi else 0


def record_to_message(r: Record) -> CursusMessage:
    h = dict(r.headers)
    return CursusMessage(
        payload=r.value,
        offset=r.offset,
        seq_num=_int(h.get(H_SEQ), 64),
        producer_id=h.get(H_PRODUCER, b"")[:0xFFFF],
        key=(r.key or b"")[:0xFFFF],
        epoch=_int(h.get(H_EPOCH), 64, signed=True),
        event_type=h.get(H_EVENT_TYPE, b"")[:0xFFFF],
        schema_version=_int(h.get(H_SCHEMA), 32),
        aggregate_version=_int(h.get(H_AGGREGATE), 64),
        metadata=h.get(H_METADATA, b"")[:0xFFFF],
    )
