"""Record batches: the unit on disk and, wherever a protocol allows, on the wire.

The layout is Kafka's v2 RecordBatch, with CRC32C (the crc32c package) over everything from the
attributes to the end, so the broker can assign ``base_offset`` and ``partition_leader_epoch``
without recomputing the checksum:

    offset size field
    0      8    base_offset            int64
    8      4    batch_length           int32  bytes after this field
    12     4    partition_leader_epoch int32
    16     1    magic                  int8   (2)
    17     4    crc                    uint32 CRC32C of bytes [21:]
    21     2    attributes             int16  bits 0-2 compression, bit 3 timestamp type,
                                              bits 8-11 payload format (0: records)
    23     4    last_offset_delta      int32
    27     8    base_timestamp         int64  ms
    35     8    max_timestamp          int64  ms
    43     8    producer_id            int64  (-1 none)
    51     2    producer_epoch         int16
    53     4    base_sequence          int32
    57     4    record_count           int32
    61     ...  records (possibly compressed)

Each record is Kafka's record with one extension: attribute bit 0 says a 16-byte message id
follows the attributes byte.

    length varint | attributes int8 | [message_id 16 bytes] | timestamp_delta varint |
    offset_delta varint | key_length varint (-1: none) | key | value_length varint | value |
    header_count varint | (name_length varint | name utf-8 | value_length varint | value)*
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from bayou.errors import CorruptRecord
from bayou.records.compression import DEFAULT_MAX_DECOMPRESSED, Compression, compress, decompress
from bayou.records.cursus import FORMAT_CURSUS, decode_messages, message_to_record
from bayou.records.iggy import FORMAT_IGGY, decode_frames, frame_ids, frame_positions, frame_stride
from bayou.records.model import Record as Record  # re-exported: the batch API speaks Record
from bayou.records.tank import FORMAT_TANK, decode_bundle_records
from bayou.records.varint import decode_varint, encode_varint

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LENGTH = struct.Struct(">qi")  # base_offset, batch_length
LENGTH_PREFIX = 12  # base_offset + batch_length
# The largest offset a record may have: base_offset is an int64, and the log end (last offset + 1,
# the high watermark every protocol reports) must be one too. Protocols whose wire fields are wider
# (TANK's u64 sequence numbers, Iggy's u64 offsets) refuse values past it with their own error.
MAX_OFFSET = (1 << 63) - 2
MAX_OFFSET_DELTA = (1 << 31) - 1  # last_offset_delta is an int32: the most offsets one batch spans - 1

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
# Offsets are not dense (TANK's sparse bundles name their own sequence numbers): the batch may
# start past the previous batch's end and hold fewer records than its offset span. Inside the CRC,
# so recovery can tell a deliberate gap from a damaged base offset.
ATTR_SPARSE = 0x10
ATTR_FORMAT_SHIFT = 8
ATTR_FORMAT_MASK = 0x0F00

RECORD_HAS_MESSAGE_ID = 0x01

FORMAT_RECORDS = 0  # the record layout above



@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LENGTH_PREFIX

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def sparse(self) -> bool:
        return bool(self.attributes & ATTR_SPARSE)

    @property
    def payload_format(self) -> int:
        return (self.attributes & ATTR_FORMAT_MASK) >> ATTR_FORMAT_SHIFT


Buffer = bytes | bytearray | memoryview


def decode_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the fixed header at ``pos``. Raises CorruptRecord when it is short or malformed."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecord("truncated batch header")
    h = BatchHeader(*HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise CorruptRecord(f"bad batch magic {h.magic}")
    if h.batch_length < HEADER_SIZE - LENGTH_PREFIX or h.record_count < 0 or h.last_offset_delta < 0:
        raise CorruptRecord("bad batch length or counts")
    return h


def batch_crc(buf: Buffer, pos: int, size: int) -> int:
    return int(crc32c.crc32c(memoryview(buf)[pos + 21 : pos + size]))


def verify_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Decode and check a complete batch at ``pos`` (length and CRC)."""
    h = decode_header(buf, pos)
    if len(buf) - pos < h.size:
        raise CorruptRecord("truncated batch")
    if batch_crc(buf, pos, h.size) != h.crc:
        raise CorruptRecord("batch CRC mismatch")
    return h


def iter_batches(buf: Buffer, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch in ``buf[pos:end]``.

    Stops quietly at a trailing partial batch (a fetch may end mid-batch); CRCs are not checked.
    """
    stop = len(buf) if end is None else end
    while stop - pos >= HEADER_SIZE:
        h = decode_header(buf, pos)
        if pos + h.size > stop:
            return
        yield pos, h
        pos += h.size


def set_base_offset(batch: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Assign the batch's base offset in place (outside the CRC)."""
    _BASE_OFFSET.pack_into(batch, pos, base_offset)


def refresh_crc(batch: bytearray, pos: int = 0) -> None:
    """Recompute the CRC after changing bytes inside the CRC-covered part (offset stamping)."""
    size = _LENGTH.unpack_from(batch, pos)[1] + LENGTH_PREFIX
    struct.pack_into(">I", batch, pos + 17, crc32c.crc32c(memoryview(batch)[pos + 21 : pos + size]))


def set_leader_epoch(batch: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    _LEADER_EPOCH.pack_into(batch, pos + 12, epoch)


def _encode_record(out: bytearray, rec: Record, offset_delta: int, base_ts: int) -> None:
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


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = -1,
    payload_format: int = 0,
) -> bytes:
    """Build one batch from records (their ``offset`` fields are ignored)."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = records[0].timestamp
    max_ts = max(r.timestamp for r in records)
    body = bytearray()
    for i, rec in enumerate(records):
        _encode_record(body, rec, i, base_ts)
    payload = compress(compression, bytes(body))
    attributes = int(compression) | ((payload_format << ATTR_FORMAT_SHIFT) & ATTR_FORMAT_MASK)
    return assemble_batch(
        payload,
        record_count=len(records),
        base_offset=base_offset,
        attributes=attributes,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        leader_epoch=leader_epoch,
    )


def assemble_batch(
    payload: bytes,
    *,
    record_count: int,
    base_offset: int,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = -1,
    last_offset_delta: int | None = None,
) -> bytes:
    """Wrap an already-encoded records section in a header and compute its CRC. A sparse batch
    (``ATTR_SPARSE``) gives its offset span with ``last_offset_delta``; otherwise it is
    ``record_count - 1``."""
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        out,
        0,
        base_offset,
        HEADER_SIZE - LENGTH_PREFIX + len(payload),
        leader_epoch,
        MAGIC,
        0,
        attributes,
        record_count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    out[HEADER_SIZE:] = payload
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


def decode_records(
    buf: Buffer, pos: int = 0, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
) -> list[Record]:
    """Decode every record of the batch at ``pos``, with absolute offsets and timestamps."""
    h = decode_header(buf, pos)
    if len(buf) - pos < h.size:
        raise CorruptRecord("truncated batch")
    raw = bytes(memoryview(buf)[pos + HEADER_SIZE : pos + h.size])
    data = decompress(h.compression, raw, max_decompressed)
    if h.payload_format == FORMAT_CURSUS:
        msgs = decode_messages(data, 0, h.record_count)
        return [message_to_record(m, h.base_offset + i, h.base_timestamp) for i, m in enumerate(msgs)]
    if h.payload_format == FORMAT_TANK:
        return decode_bundle_records(data, h.base_offset)
    if h.payload_format == FORMAT_IGGY:
        return decode_frames(data, 0, len(data), h.record_count, base_offset=h.base_offset,
                             append_ms=h.base_timestamp, origin_base_us=h.producer_id)
    if h.payload_format != FORMAT_RECORDS:
        raise CorruptRecord(f"unknown payload format {h.payload_format}")
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
        if vlen < 0 or p + vlen > end:
            raise CorruptRecord("value past the end of the record")
        value = data[p : p + vlen]
        p += vlen
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
            if hvlen < 0 or p + hvlen > end:
                raise CorruptRecord("header value past the end of the record")
            headers.append((name, data[p : p + hvlen]))
            p += hvlen
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


def message_ids(buf: Buffer, pos: int = 0, *,
                max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> list[tuple[int, int]]:
    """(offset, message id) of every record of the batch at ``pos`` that carries an id, in order,
    without decoding keys, values or headers (the de-duplication rebuild reads only these). Iggy
    frames (``FORMAT_IGGY``) carry theirs in the frame header; Cursus and TANK payloads carry none."""
    h = decode_header(buf, pos)
    if len(buf) - pos < h.size:
        raise CorruptRecord("truncated batch")
    if h.payload_format not in (FORMAT_RECORDS, FORMAT_IGGY) or not h.record_count:
        return []
    body = memoryview(buf)[pos + HEADER_SIZE : pos + h.size]
    data: Buffer = body if not h.compression else decompress(h.compression, bytes(body), max_decompressed)
    if h.payload_format == FORMAT_IGGY:
        stride = frame_stride(h.base_sequence) if not h.compression else 0
        ids = frame_ids(data, frame_positions(data, 0, len(data), h.record_count, stride))
        return [(h.base_offset + i, mid) for i, mid in enumerate(ids) if mid]
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
