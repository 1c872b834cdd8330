"""The records section of a ``FORMAT_RECORDS`` batch: Kafka's v2 record, plus an optional message
id (the layout is drawn in records/batch.py). Encode, decode, read the message ids only, and walk
the records without building them (a Kafka produce's check, a Kafka fetch's question)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bayou.errors import CorruptRecord
from bayou.records.model import Record
from bayou.records.v2columns import COLUMN_WISE_FROM, walk_columns
from bayou.records.v2columns import RECORD_HAS_MESSAGE_ID as RECORD_HAS_MESSAGE_ID  # re-exported
from bayou.records.varint import decode_varint, encode_varint

if TYPE_CHECKING:
    from bayou.records.batch import BatchHeader, Buffer


def encode_record(out: bytearray, rec: Record, offset_delta: int, base_ts: int) -> None:
    body = bytearray()
    if rec.message_id is not None:
        body.append(RECORD_HAS_MESSAGE_ID)
        body += rec.message_id.to_bytes(16, "big")
    else:
        body.append(0)
    encode_varint(rec.timestamp - base_ts, body)
    encode_varint(offset_delta, body)
    if rec.key is None:
        encode_varint(-1, body)
    else:
        encode_varint(len(rec.key), body)
        body += rec.key
    encode_varint(len(rec.value), body)
    body += rec.value
    encode_varint(len(rec.headers), body)
    for name, value in rec.headers:
        nb = name.encode("utf-8")
        encode_varint(len(nb), body)
        body += nb
        encode_varint(len(value), body)
        body += value
    encode_varint(len(body), out)
    out += body


def decode_v2(data: bytes, h: BatchHeader) -> list[Record]:
    """Every record of a (decompressed) records section, with absolute offsets and timestamps."""
    out: list[Record] = []
    p = 0
    n = len(data)
    for _ in range(h.record_count):
        length, p = decode_varint(data, p)
        end = p + length
        if length < 1 or end > n:
            raise CorruptRecord("record length past the end of the batch")
        attrs = data[p]
        p += 1
        msg_id: int | None = None
        if attrs & RECORD_HAS_MESSAGE_ID:
            if p + 16 > end:
                raise CorruptRecord("truncated message id")
            msg_id = int.from_bytes(data[p : p + 16], "big")
            p += 16
        ts_delta, p = decode_varint(data, p)
        off_delta, p = decode_varint(data, p)
        klen, p = decode_varint(data, p)
        key: bytes | None
        if klen == -1:
            key = None
        elif klen < 0:
            raise CorruptRecord("bad key length")
        else:
            if p + klen > end:
                raise CorruptRecord("key past the end of the record")
            key = data[p : p + klen]
            p += klen
        vlen, p = decode_varint(data, p)
        if vlen < -1 or p + vlen > end:
            raise CorruptRecord("value past the end of the record")
        value = data[p : p + vlen] if vlen > 0 else b""  # a null value (Kafka's tombstone) reads as empty
        p += max(vlen, 0)
        hcount, p = decode_varint(data, p)
        if hcount < 0 or hcount > end - p:
            raise CorruptRecord("bad header count")
        headers: list[tuple[str, bytes]] = []
        for _h in range(hcount):
            nlen, p = decode_varint(data, p)
            if nlen < 0 or p + nlen > end:
                raise CorruptRecord("header name past the end of the record")
            try:
                name = data[p : p + nlen].decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptRecord("header name is not UTF-8") from None
            p += nlen
            hvlen, p = decode_varint(data, p)
            if hvlen < -1 or p + hvlen > end:
                raise CorruptRecord("header value past the end of the record")
            headers.append((name, data[p : p + hvlen] if hvlen > 0 else b""))  # null reads as empty
            p += max(hvlen, 0)
        if p != end:
            raise CorruptRecord("record length mismatch")
        out.append(
            Record(
                value=value,
                key=key,
                timestamp=h.base_timestamp + ts_delta,
                headers=tuple(headers),
                message_id=msg_id,
                offset=h.base_offset + off_delta,
            )
        )
    if p != n:
        raise CorruptRecord("trailing bytes after the last record")
    return out


def v2_message_ids(data: Buffer, h: BatchHeader) -> list[tuple[int, int]]:
    """(offset, message id) of every record that carries an id, without decoding the rest."""
    out: list[tuple[int, int]] = []
    p = 0
    n = len(data)
    for _ in range(h.record_count):
        length, p = decode_varint(data, p)
        end = p + length
        if length < 1 or end > n:
            raise CorruptRecord("record length past the end of the batch")
        if data[p] & RECORD_HAS_MESSAGE_ID:
            if p + 17 > end:
                raise CorruptRecord("truncated message id")
            msg_id = int.from_bytes(data[p + 1 : p + 17], "big")
            _ts_delta, q = decode_varint(data, p + 17)
            off_delta, _q = decode_varint(data, q)
            out.append((h.base_offset + off_delta, msg_id))
        p = end
    return out


def _varint(data: Buffer, p: int) -> tuple[int, int]:
    """``decode_varint`` with the one- and two-byte cases inline (the lengths of a record walk)."""
    b = data[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    if p + 1 < len(data) and data[p + 1] < 0x80:
        raw = (b & 0x7F) | (data[p + 1] << 7)
        return (raw >> 1) ^ -(raw & 1), p + 2
    return decode_varint(data, p)


def walk_v2(data: Buffer, count: int) -> bool:
    """Check that a (decompressed) records section holds exactly ``count`` well-formed records,
    without building them (a produce's check: Kafka's broker validates records too); whether any
    carries a message id. CorruptRecord for the first fault. A null value or header value (length
    -1) is a Kafka record: ``decode_v2`` reads it as empty.

    The hot loop of a Kafka produce (every record of every batch). A section of
    ``COLUMN_WISE_FROM`` records or more is first walked run by run (records/v2columns.py), which
    settles a producer's usual batch at a tenth of the cost; anything it cannot settle is walked
    record by record (``walk_records``)."""
    if count >= COLUMN_WISE_FROM and walk_columns(data, count) is False:
        return False
    return walk_records(data, count)


def walk_records(data: Buffer, count: int) -> bool:
    """``walk_v2`` record by record: the one- and two-byte varints small records are made of are
    read inline, longer ones through ``_varint``."""
    p = 0
    n = len(data)
    ids = False
    try:
        for _ in range(count):
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                length, p = _varint(data, p)
            end = p + length
            if length < 1 or end > n:
                raise CorruptRecord("record length past the end of the batch")
            if data[p] & RECORD_HAS_MESSAGE_ID:
                ids = True
                p += 16
            p += 1
            # the timestamp and offset deltas: any value
            if data[p] < 0x80:
                p += 1
            elif data[p + 1] < 0x80:
                p += 2
            else:
                _ts, p = _varint(data, p)
            if data[p] < 0x80:
                p += 1
            elif data[p + 1] < 0x80:
                p += 2
            else:
                _off, p = _varint(data, p)
            b = data[p]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                klen, p = _varint(data, p)
            if klen < -1:
                raise CorruptRecord("bad key length")
            if klen > 0:
                p += klen
            b = data[p]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                vlen = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                vlen, p = _varint(data, p)
            if vlen < -1:  # -1: a null value (Kafka's tombstone)
                raise CorruptRecord("bad value length")
            if vlen > 0:
                p += vlen
            if data[p] == 0:  # no headers
                p += 1
            else:
                hcount, p = _varint(data, p)
                if hcount < 0 or hcount > end - p:
                    raise CorruptRecord("bad header count")
                for _h in range(hcount):
                    nlen, p = _varint(data, p)
                    if nlen < 0:
                        raise CorruptRecord("bad header name length")
                    hvlen, p = _varint(data, p + nlen)
                    if hvlen < -1:  # -1: a null header value
                        raise CorruptRecord("bad header value length")
                    if hvlen > 0:
                        p += hvlen
            if p != end:
                raise CorruptRecord("record length mismatch")
    except IndexError:
        raise CorruptRecord("record past the end of the batch") from None
    if p != n:
        raise CorruptRecord("trailing bytes after the last record")
    return ids


def has_message_ids(data: Buffer, count: int) -> bool:
    """Whether any of the ``count`` records of a (decompressed) records section carries a message
    id: the walk reads each record's length and attribute byte only (a fetch's question). A large
    section is first walked run by run, as by ``walk_v2`` (a third of the cost for 1,000 records)."""
    if count >= COLUMN_WISE_FROM and walk_columns(data, count) is False:
        return False
    p = 0
    n = len(data)
    try:
        for _ in range(count):
            b = data[p]  # the length: one- and two-byte varints inline, as in walk_v2
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                length, p = _varint(data, p)
            if length < 1 or p + length > n:
                raise CorruptRecord("record length past the end of the batch")
            if data[p] & RECORD_HAS_MESSAGE_ID:
                return True
            p += length
    except IndexError:
        raise CorruptRecord("record past the end of the batch") from None
    return False
