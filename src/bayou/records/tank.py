"""TANK bundles stored as sent (batch payload format ``FORMAT_TANK``; tank.md §3).

A TANK producer's bundle is stored byte for byte, preceded by its varint length, as the records
section of one batch: exactly one record of a TANK segment log (§3.6, §12.2). A TANK consumer is
then served those bytes straight from the segment file (os.sendfile), and every other protocol
reads them as ``Record`` through ``decode_bundle_records``:

- the batch's base offset is the bundle's first sequence number - 1 (TANK numbers from 1);
- a sparse bundle (flag bit 6) names its own first and last sequence numbers; its batch is marked
  ``ATTR_SPARSE`` and spans first..last, so the gaps stay unused offsets;
- ``base_timestamp``/``max_timestamp`` are the append time (TANK never interprets timestamps on
  the wire path; each record still carries the message's own timestamp).

Record view: value = content, key = the message key (None when absent), timestamp = the message
timestamp in ms. TANK has no headers.

Bundle layout: flags u8 (bits 0-1 codec: 0 none, 1 Snappy raw block; bits 2-5 count 1..15, 0 =
varint count follows; bit 6 sparse; bit 7 reserved), [count varint], [sparse: first u64,
(count > 1) varint last - first - 1], message set. Message: flags u8 (bit0 key, bit1 reuse the last
timestamp, bit2 seq = previous + 1), [sparse middle message without bit2: varint seq delta],
[u64 timestamp unless bit1], [str8 key if bit0], varint length, content.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam

from bayou.errors import CorruptRecord
from bayou.records.model import Record

FORMAT_TANK = 3

CODEC_NONE = 0
CODEC_SNAPPY = 1
FLAG_SPARSE = 0x40
FLAG_EXTENDED = 0x80
MSG_HAVE_KEY = 0x01
MSG_USE_LAST_TS = 0x02
MSG_SEQ_PREV_PLUS_ONE = 0x04
MAX_DECOMPRESSED = 256 * 1024 * 1024
MIN_MESSAGE_SIZE = 2  # flags byte + content length varint
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

_U64 = struct.Struct("<Q")

Buffer = bytes | bytearray | memoryview


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """A TANK varint (unsigned LEB128 of a 32-bit value, at most 5 bytes) at ``pos``."""
    value = 0
    for i in range(5):
        if pos >= end:
            raise CorruptRecord("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value & 0xFFFF_FFFF, pos
    raise CorruptRecord("varint longer than 5 bytes")


def write_varint(value: int) -> bytes:
    if not 0 <= value <= 0xFFFF_FFFF:
        raise ValueError("TANK varints hold 32-bit values")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class BundleHeader:
    """What the broker reads of a bundle on produce (§4.2): never the message set."""

    codec: int
    count: int
    sparse: bool
    first_seq: int  # 0 when not sparse
    last_seq: int  # 0 when not sparse
    size: int  # header bytes; the message set follows

    @property
    def span(self) -> int:
        """Sequence numbers the bundle covers: ``count`` unless sparse."""
        return self.last_seq - self.first_seq + 1 if self.sparse else self.count


def parse_bundle_header(bundle: Buffer) -> BundleHeader:
    """The header of one bundle. Raises ``CorruptRecord`` for an empty bundle, an unknown codec,
    the unimplemented extra-flags bit, a count of 0 or a sparse last seq below its first."""
    end = len(bundle)
    if end < 1:
        raise CorruptRecord("empty bundle")
    flags = bundle[0]
    codec = flags & 0x03
    if codec > CODEC_SNAPPY:
        raise CorruptRecord(f"unknown bundle codec {codec}")
    if flags & FLAG_EXTENDED:
        raise CorruptRecord("bundle flag bit 7 (extra flags byte) is not supported")
    pos = 1
    count = (flags >> 2) & 0x0F
    if count == 0:
        count, pos = read_varint(bundle, pos, end)
        if count == 0:
            raise CorruptRecord("bundle message count 0")
    first = last = 0
    sparse = bool(flags & FLAG_SPARSE)
    if sparse:
        if end - pos < 8:
            raise CorruptRecord("truncated sparse bundle header")
        (first,) = _U64.unpack_from(bundle, pos)
        pos += 8
        last = first
        if count > 1:
            gap, pos = read_varint(bundle, pos, end)
            last = first + gap + 1
        if last > U64_MAX:
            raise CorruptRecord("sparse bundle last seq past 2^64-1")
    # Every message takes at least 2 bytes: a tiny bundle cannot claim billions of seqs.
    room = end - pos
    if codec == CODEC_SNAPPY and room:
        room, _ = read_varint(bundle, pos, end)
    if room < count * MIN_MESSAGE_SIZE:
        raise CorruptRecord(f"message set of {room} bytes cannot hold {count} messages")
    return BundleHeader(codec, count, sparse, first, last, pos)


@dataclass(frozen=True, slots=True)
class TankMessage:
    """One message. ``key`` None means no key; b"" is an empty key (only flag bit 0 says which)."""

    seq: int = 0
    timestamp: int = 0
    key: bytes | None = None
    value: bytes = b""


def decode_bundle(bundle: Buffer, base_seq: int, *, max_decompressed: int = MAX_DECOMPRESSED
                  ) -> list[TankMessage]:
    """Every message of a bundle with its sequence number (§3.4); ``base_seq`` is the first
    message's seq for a non-sparse bundle (ignored for sparse ones)."""
    h = parse_bundle_header(bundle)
    data: Buffer = bundle
    pos, end = h.size, len(bundle)
    if h.codec == CODEC_SNAPPY:
        raw = bytes(memoryview(bundle)[h.size :])
        declared, _ = read_varint(raw, 0, len(raw))
        if declared > max_decompressed:
            raise CorruptRecord(f"message set inflates to {declared} bytes (limit {max_decompressed})")
        try:
            data = bytes(cramjam.snappy.decompress_raw(raw))
        except cramjam.DecompressionError as exc:
            raise CorruptRecord(f"bad Snappy data: {exc}") from None
        if len(data) != declared:
            raise CorruptRecord("Snappy block size mismatch")
        pos, end = 0, len(data)
    out: list[TankMessage] = []
    seq = h.first_seq if h.sparse else base_seq
    ts = 0
    for i in range(h.count):
        if pos >= end:
            raise CorruptRecord("message set shorter than the bundle's count")
        mflags = data[pos]
        pos += 1
        if i > 0:
            if mflags & MSG_SEQ_PREV_PLUS_ONE or not h.sparse:
                seq += 1
            elif i == h.count - 1:
                seq = h.last_seq
            else:
                delta, pos = read_varint(data, pos, end)
                seq += delta + 1
        if not mflags & MSG_USE_LAST_TS:
            if end - pos < 8:
                raise CorruptRecord("truncated message timestamp")
            (ts,) = _U64.unpack_from(data, pos)
            pos += 8
        key: bytes | None = None
        if mflags & MSG_HAVE_KEY:
            if pos >= end:
                raise CorruptRecord("truncated message key")
            klen = data[pos]
            key = bytes(data[pos + 1 : pos + 1 + klen])
            pos += 1 + klen
            if len(key) != klen:
                raise CorruptRecord("truncated message key")
        if seq > U64_MAX:
            raise CorruptRecord("message seq past 2^64-1")
        vlen, pos = read_varint(data, pos, end)
        value = bytes(data[pos : pos + vlen])
        if len(value) != vlen:
            raise CorruptRecord("truncated message content")
        pos += vlen
        out.append(TankMessage(seq, ts, key, value))
    if pos != end:
        raise CorruptRecord(f"{end - pos} bytes after the bundle's {h.count} messages")
    return out


def uniform_bundle(bundle: Buffer, h: BundleHeader) -> bool:
    """Whether ``check_bundle`` passes this uncompressed bundle on its quick path (messages of one
    shape, found in a few vectorised steps) rather than walking its messages one by one, which
    costs about 0.4 us a message (a large bundle's walk is then worth doing off the event loop)."""
    return (h.codec != CODEC_SNAPPY and not h.sparse and h.count > 2
            and _uniform_tail(bundle, h.size, len(bundle), h.count))


def check_bundle(bundle: Buffer, h: BundleHeader | None = None, *,
                 max_decompressed: int = MAX_DECOMPRESSED) -> BundleHeader:
    """Check that a bundle's message set holds exactly what its header says (``count`` messages,
    each field inside the set, a sparse bundle's deltas within first..last), without building
    messages: what the broker does before storing a bundle, so nothing unreadable is ever stored.
    Raises ``CorruptRecord``."""
    h = parse_bundle_header(bundle) if h is None else h
    if h.sparse and h.span < h.count:
        raise CorruptRecord("sparse bundle spans fewer sequence numbers than it holds messages")
    data: Buffer = bundle
    pos, end = h.size, len(bundle)
    if h.codec == CODEC_SNAPPY:
        raw = bytes(memoryview(bundle)[h.size :])
        declared, _ = read_varint(raw, 0, len(raw))
        if declared > max_decompressed:
            raise CorruptRecord(f"message set inflates to {declared} bytes (limit {max_decompressed})")
        try:
            data = bytes(cramjam.snappy.decompress_raw(raw))
        except cramjam.DecompressionError as exc:
            raise CorruptRecord(f"bad Snappy data: {exc}") from None
        pos, end = 0, len(data)
    if not h.sparse and h.count > 2 and _uniform_tail(data, pos, end, h.count):
        return h
    sparse, last_index, seq, last_seq = h.sparse, h.count - 1, h.first_seq, h.last_seq
    for i in range(h.count):
        if pos >= end:
            raise CorruptRecord("message set shorter than the bundle's count")
        mflags = data[pos]
        pos += 1
        if mflags & 0xF8:
            raise CorruptRecord(f"unknown message flags {mflags:#x}")
        if sparse and i > 0:
            if mflags & MSG_SEQ_PREV_PLUS_ONE:
                seq += 1
            elif i == last_index:
                seq = last_seq
            else:
                delta, pos = read_varint(data, pos, end)
                seq += delta + 1
            if seq > last_seq:
                raise CorruptRecord("sparse message seq beyond the bundle's last")
        if not mflags & MSG_USE_LAST_TS:
            pos += 8
        if mflags & MSG_HAVE_KEY:
            if pos >= end:
                raise CorruptRecord("truncated message key")
            pos += 1 + data[pos]
        if pos > end:
            raise CorruptRecord("message fields past the end of the message set")
        length, pos = read_varint(data, pos, end)
        pos += length
        if pos > end:
            raise CorruptRecord("message content past the end of the message set")
    if pos != end:
        raise CorruptRecord(f"{end - pos} bytes after the bundle's last message")
    return h


def _message_end(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    """(end of the message at ``pos``, its flags) of a non-sparse message set."""
    mflags = data[pos]
    p = pos + 1 + (0 if mflags & MSG_USE_LAST_TS else 8)
    if mflags & MSG_HAVE_KEY:
        if p >= end:
            raise CorruptRecord("truncated message key")
        p += 1 + data[p]
    length, p = read_varint(data, p, min(p + 5, end) if p < end else p)
    return p + length, mflags


def _uniform_tail(data: Buffer, pos: int, end: int, count: int) -> bool:
    """True when every message after the first reuses the timestamp, has no key, and repeats the
    second message's header and size exactly (what tank-cli bm and most producers send): then
    the set is checked column-wise with strided slices instead of a loop per message."""
    try:
        second, _ = _message_end(data, pos, end)
        third, mflags = _message_end(data, second, end)
    except (CorruptRecord, IndexError):
        return False
    stride = third - second
    if (mflags & (MSG_HAVE_KEY | 0xF8) or not mflags & MSG_USE_LAST_TS or stride <= 0
            or end - second != stride * (count - 1) or second >= end):
        return False
    _length, content = read_varint(data, second + 1, end)
    view = bytes(data[second:end])
    n = count - 1
    return all(view[j::stride] == view[j : j + 1] * n for j in range(content - second))


def stored_bundle(records_section: Buffer) -> memoryview:
    """The bundle inside a ``FORMAT_TANK`` records section (varint length + bundle)."""
    length, pos = read_varint(records_section, 0, len(records_section))
    if pos + length != len(records_section):
        raise CorruptRecord("TANK record length does not match its batch")
    return memoryview(records_section)[pos:]


def decode_bundle_records(records_section: Buffer, base_offset: int) -> list[Record]:
    """A ``FORMAT_TANK`` records section as records (offset = seq - 1)."""
    msgs = decode_bundle(stored_bundle(records_section), base_offset + 1)
    return [Record(value=m.value, key=m.key, timestamp=m.timestamp, offset=m.seq - 1) for m in msgs]
