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
                                              bit 4 transactional (Kafka) or sparse (TANK),
                                              bit 5 control (Kafka's transaction markers),
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
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, TypeVar

import crc32c

from bayou.errors import CorruptRecord
from bayou.records.compression import DEFAULT_MAX_DECOMPRESSED, Compression, compress, decompress
from bayou.records.formats import FORMAT_RECORDS as FORMAT_RECORDS  # re-exported
from bayou.records.formats import FORMATS, PayloadFormat, ProducerSequence, payload_format
from bayou.records.model import Record as Record  # re-exported: the batch API speaks Record
from bayou.records.tank import FORMAT_TANK
from bayou.records.v2 import RECORD_HAS_MESSAGE_ID as RECORD_HAS_MESSAGE_ID  # re-exported
from bayou.records.v2 import encode_record

R = TypeVar("R")

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
# The bit is Kafka's "transactional" in a batch of format 0 (records): it means sparse only in a
# TANK batch (the only format that can hold gaps), so a Kafka transactional batch is stored as sent.
ATTR_SPARSE = 0x10
ATTR_TRANSACTIONAL = 0x10
# Kafka's control batch (format 0 only): a transaction marker (commit or abort), one record whose
# key says which. Not data: no protocol's reader sees it as a record (``decode_records``).
ATTR_CONTROL = 0x20
ATTR_FORMAT_SHIFT = 8
ATTR_FORMAT_MASK = 0x0F00
_TANK_SPARSE = ATTR_FORMAT_MASK | ATTR_SPARSE
_SPARSE_TANK = (FORMAT_TANK << ATTR_FORMAT_SHIFT) | ATTR_SPARSE
_CONTROL_MASK = ATTR_FORMAT_MASK | ATTR_CONTROL


def is_sparse(attributes: int) -> bool:
    """Whether a batch with these attributes may leave offset gaps: a TANK batch with bit 4."""
    return attributes & _TANK_SPARSE == _SPARSE_TANK


def is_control(attributes: int) -> bool:
    """Whether a batch with these attributes is a Kafka control batch (a transaction marker)."""
    return attributes & _CONTROL_MASK == ATTR_CONTROL


class BatchHeader(NamedTuple):
    """The fixed header of a stored batch (a named tuple: made once or more per request on the
    produce and fetch paths, where a frozen dataclass's constructor cost a microsecond more)."""

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
        return is_sparse(self.attributes)

    @property
    def transactional(self) -> bool:
        """A Kafka transactional producer's batch (data or marker); never a TANK batch."""
        return self.attributes & (ATTR_FORMAT_MASK | ATTR_TRANSACTIONAL) == ATTR_TRANSACTIONAL

    @property
    def control(self) -> bool:
        return is_control(self.attributes)

    @property
    def payload_format(self) -> int:
        return (self.attributes & ATTR_FORMAT_MASK) >> ATTR_FORMAT_SHIFT


Buffer = bytes | bytearray | memoryview
_new_header = tuple.__new__  # a BatchHeader from the unpacked fields, without NamedTuple's __new__


def decode_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the fixed header at ``pos``. Raises CorruptRecord when it is short or malformed."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecord("truncated batch header")
    h = _new_header(BatchHeader, HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise CorruptRecord(f"bad batch magic {h.magic}")
    if h.batch_length < HEADER_SIZE - LENGTH_PREFIX or h.record_count < 0 or h.last_offset_delta < 0:
        raise CorruptRecord("bad batch length or counts")
    return h


def rebased(h: BatchHeader, base_offset: int) -> BatchHeader:
    """``h`` with another base offset (faster than ``_replace``: a produce makes one)."""
    return _new_header(BatchHeader, (base_offset, *h[1:]))


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
        encode_record(body, rec, i, base_ts)
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
    """Decode every record of the batch at ``pos``, with absolute offsets and timestamps, whatever
    its payload format (records/formats.py). A control batch (a Kafka transaction marker) holds
    none: its offset is a gap to every reader."""
    h = decode_header(buf, pos)
    if len(buf) - pos < h.size:
        raise CorruptRecord("truncated batch")
    if h.control:
        return []
    raw = bytes(memoryview(buf)[pos + HEADER_SIZE : pos + h.size])
    data = decompress(h.compression, raw, max_decompressed)
    return payload_format(h.payload_format).decode(data, h)


def _read_section(buf: Buffer, pos: int, max_decompressed: int,
                  reader: Callable[[PayloadFormat], Callable[[Buffer, BatchHeader], list[R]] | None]
                  ) -> list[R]:
    """``reader(format)`` applied to the (decompressed) records section of the batch at ``pos``;
    nothing when its format has no such reader or it holds no record."""
    h = decode_header(buf, pos)
    if len(buf) - pos < h.size:
        raise CorruptRecord("truncated batch")
    fmt = FORMATS.get(h.payload_format)
    read = reader(fmt) if fmt is not None else None
    if read is None or not h.record_count or h.control:
        return []
    body = memoryview(buf)[pos + HEADER_SIZE : pos + h.size]
    data: Buffer = body if not h.compression else decompress(h.compression, bytes(body), max_decompressed)
    return read(data, h)


def message_ids(buf: Buffer, pos: int = 0, *,
                max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> list[tuple[int, int]]:
    """(offset, message id) of every record of the batch at ``pos`` that carries an id, in order,
    without decoding keys, values or headers (the de-duplication rebuild reads only these). Only
    the formats with ``message_ids`` in records/formats.py carry ids (records and Iggy frames)."""
    return _read_section(buf, pos, max_decompressed, lambda f: f.message_ids)


def producer_sequences(buf: Buffer, pos: int = 0, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
                       ) -> list[tuple[int, ProducerSequence]]:
    """(offset, (producer id, epoch, sequence)) of every idempotent send's record of the batch at
    ``pos`` (Cursus messages carry them): what the producer state is rebuilt from."""
    return _read_section(buf, pos, max_decompressed, lambda f: f.producer_sequences)
