"""Iggy message frames stored as sent (batch payload format ``FORMAT_IGGY``).

An apache-iggy 0.9 producer sends one batch of 48-byte message frames (iggy.md C.9). bayou stores
those frames unchanged as the records section of a batch, so an Iggy consumer is served the stored
bytes (a fresh 256-byte batch header in front, no per-message re-encoding), and every other
protocol reads them as ``Record`` through ``decode_frames``:

    frame: checksum u64 | id u128 | offset_delta u32 | timestamp_delta u32 |
           user_headers_length u32 | payload_length u32 | reserved u64 | payload | user headers

All integers little-endian, as on the Iggy wire. ``offset_delta`` is the frame's index in the
batch; ``checksum`` is XXH3-64 of the frame from byte 8 to its end. The batch header fields Kafka
uses for idempotent producers carry Iggy's two batch timestamps instead:

- ``base_timestamp``/``max_timestamp`` (ms) = the server append time, so the time index and
  timestamp lookups see it; ``base_sequence`` bits 0-9 = the sub-millisecond part (0..999
  microseconds), bits 10-30 = the frame size when every frame of the batch has the same size
  (0 otherwise), so a reader finds frame boundaries without walking the frames;
- ``producer_id`` = the batch origin timestamp in microseconds (the producer's clock); a frame's
  origin time is that plus its ``timestamp_delta``.

Seen as a ``Record``: value = payload, timestamp = append time (ms), message_id = id (None for 0),
key = the value of the user header ``bayou.key`` (string key, RAW value: the Iggy form of a bayou
record key, so a V1, Cursus or TANK consumer sees the key an Iggy producer set) or None, headers =
``iggy.origin_ts`` (u64 LE microseconds) followed by one header per other user header:
``iggy.h.<key>`` for a UTF-8 string key, ``iggy.hk.<key kind>.<key hex>`` otherwise, the value
being one byte of value kind then the value bytes. Only the first ``bayou.key`` header is the key;
the frame keeps it, so an Iggy consumer served the stored bytes gets it back unchanged.

The record envelope. Iggy cannot carry every Kafka record: a payload is never empty, and each user
header field (so the ``bayou.key`` key header too) is 1..255 bytes. A record outside those limits (a
key of 0 or more than 255 bytes, an empty or null value, a header with an empty, null or long value
or name) travels as one Iggy message whose only user header is ``bayou.record`` (string key, RAW
value ``\x01``, the envelope version) and whose payload is the record itself (``encode_envelope``):
key, value (zig-zag varint length, -1 for null, then the bytes), a varint header count, then per
header a varint name length and UTF-8 name and the value as the key and value are. The SDK writes
and reads it; ``decode_frames`` opens it, so every other protocol sees the record itself, its
headers named as an Iggy producer's are (``iggy.h.<name>``, RAW kind byte, value), and a null value
or header value as empty bytes (the stored record model has no null there).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from bayou.errors import CorruptRecord
from bayou.records.model import Record
from bayou.records.varint import decode_uvarint, decode_varint, encode_uvarint, encode_varint

FORMAT_IGGY = 2

FRAME = struct.Struct("<QQQIIIIQ")  # checksum, id lo, id hi, offset_delta, ts_delta, hlen, plen, rsv
FRAME_SIZE = FRAME.size  # 48
_LENGTHS = struct.Struct("<II")  # user_headers_length, payload_length at frame offset 32
_TLV_LEN = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_ID = struct.Struct("<QQ")  # id lo, id hi at frame offset 8

PREFIX = "iggy."
ORIGIN_TIMESTAMP = "iggy.origin_ts"
STRING_KEY_PREFIX = "iggy.h."
TYPED_KEY_PREFIX = "iggy.hk."
KIND_STRING = 2
KIND_RAW = 1
KEY_HEADER = b"bayou.key"  # a string-keyed RAW user header: the record key (see the docstring)

Buffer = bytes | bytearray | memoryview

ENVELOPE_HEADER = b"bayou.record"  # a string-keyed RAW user header: the payload is a whole record
ENVELOPE_VERSION = b"\x01"
MAX_FIELD = 255  # bytes in one Iggy user header key or value
EnvelopeHeaders = tuple[tuple[str, bytes | None], ...]


def fits_iggy(key: bytes | None, value: bytes | None,
              headers: Sequence[tuple[str, bytes | None]] | None = ()) -> bool:
    """Whether Iggy carries the record as itself (payload, ``bayou.key`` header, one string-keyed
    RAW header per record header); otherwise it travels as an envelope."""
    if not value or (key is not None and not 1 <= len(key) <= MAX_FIELD):
        return False
    for name, hv in headers or ():
        if hv is None or not 1 <= len(hv) <= MAX_FIELD or not 1 <= len(name.encode("utf-8")) <= MAX_FIELD:
            return False
    return True


def _put(out: bytearray, data: bytes | None) -> None:
    if data is None:
        encode_varint(-1, out)
    else:
        encode_varint(len(data), out)
        out += data


def _get(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = decode_varint(buf, pos)
    if n == -1:
        return None, pos
    if n < 0 or pos + n > len(buf):
        raise CorruptRecord("bayou record envelope field past its end")
    return bytes(buf[pos : pos + n]), pos + n


def encode_envelope(key: bytes | None, value: bytes | None,
                    headers: Sequence[tuple[str, bytes | None]] | None = ()) -> bytes:
    """The payload of an enveloped record (module docstring)."""
    out = bytearray()
    _put(out, key)
    _put(out, value)
    hs = headers or ()
    encode_uvarint(len(hs), out)
    for name, hv in hs:
        raw = name.encode("utf-8")
        encode_uvarint(len(raw), out)
        out += raw
        _put(out, hv)
    return bytes(out)


def decode_envelope(buf: Buffer) -> tuple[bytes | None, bytes | None, EnvelopeHeaders]:
    """(key, value, headers) of an envelope payload; CorruptRecord if it is not one."""
    key, pos = _get(buf, 0)
    value, pos = _get(buf, pos)
    count, pos = decode_uvarint(buf, pos)
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        n, pos = decode_uvarint(buf, pos)
        if pos + n > len(buf):
            raise CorruptRecord("bayou record envelope header name past its end")
        try:
            name = bytes(buf[pos : pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecord("bayou record envelope header name is not UTF-8") from None
        hv, pos = _get(buf, pos + n)
        headers.append((name, hv))
    if pos != len(buf):
        raise CorruptRecord("bytes after a bayou record envelope")
    return key, value, tuple(headers)


MAX_STRIDE = (1 << 21) - 1


def split_append_time(append_us: int, stride: int = 0) -> tuple[int, int]:
    """(base_timestamp ms, base_sequence) for a batch appended at ``append_us`` whose frames are
    all ``stride`` bytes long (0: sizes vary, or too large to record)."""
    if not 0 < stride <= MAX_STRIDE:
        stride = 0
    return append_us // 1000, append_us % 1000 | stride << 10


def append_time_us(base_timestamp: int, base_sequence: int) -> int:
    """The append time of a ``FORMAT_IGGY`` batch, from its header fields."""
    sub = base_sequence & 0x3FF if base_sequence > 0 else 0
    return base_timestamp * 1000 + (sub if sub < 1000 else 0)


def frame_stride(base_sequence: int) -> int:
    """The common frame size recorded in a ``FORMAT_IGGY`` header, 0 when not recorded."""
    return base_sequence >> 10 if base_sequence > 0 else 0


def frame_positions(data: Buffer, start: int, end: int, count: int, stride: int = 0) -> Sequence[int]:
    """The start of each of ``count`` frames in ``data[start:end]`` plus ``end``: ``count + 1``
    positions. Raises ``CorruptRecord`` unless the frames tile the range exactly. A ``stride``
    recorded at append time (``frame_stride``) that tiles the range is trusted, and the positions
    are then a ``range`` (nothing built per frame)."""
    if stride >= FRAME_SIZE and stride * count == end - start:
        return range(start, end + 1, stride)
    positions = [start]
    pos = start
    unpack = _LENGTHS.unpack_from
    for _ in range(count):
        if end - pos < FRAME_SIZE:
            raise CorruptRecord("truncated Iggy frame header")
        hlen, plen = unpack(data, pos + 32)
        pos += FRAME_SIZE + hlen + plen
        if pos > end:
            raise CorruptRecord("Iggy frame past the end of its batch")
        positions.append(pos)
    if pos != end:
        raise CorruptRecord("Iggy frames do not fill their batch")
    return positions


def user_headers_to_record(buf: Buffer, pos: int, end: int) -> list[tuple[str, bytes]]:
    """Iggy user headers (key kind u8, key u32-len, value kind u8, value u32-len, repeated) as
    record headers, named as the module docstring says (the key header included)."""
    return split_user_headers(buf, pos, end)[1]


def split_user_headers(buf: Buffer, pos: int, end: int, *, take_key: bool = False
                       ) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    """(record key, record headers) of a frame's user headers; with ``take_key`` the first
    ``bayou.key`` RAW header is the key and not a header."""
    out: list[tuple[str, bytes]] = []
    record_key: bytes | None = None
    mv = memoryview(buf)
    while pos < end:
        if end - pos < 5:
            raise CorruptRecord("truncated Iggy header key")
        key_kind = mv[pos]
        (klen,) = _TLV_LEN.unpack_from(buf, pos + 1)
        key = bytes(mv[pos + 5 : pos + 5 + klen])
        pos += 5 + klen
        if end - pos < 5 or len(key) != klen:
            raise CorruptRecord("truncated Iggy header value")
        value_kind = mv[pos]
        (vlen,) = _TLV_LEN.unpack_from(buf, pos + 1)
        value = bytes(mv[pos + 5 : pos + 5 + vlen])
        pos += 5 + vlen
        if len(value) != vlen or pos > end:
            raise CorruptRecord("Iggy header value past the end of its message")
        if (take_key and record_key is None and key_kind == KIND_STRING and value_kind == KIND_RAW
                and key == KEY_HEADER):
            record_key = value
            continue
        out.append((header_name(key_kind, key), bytes((value_kind,)) + value))
    return record_key, out


ENVELOPE_NAME = STRING_KEY_PREFIX + ENVELOPE_HEADER.decode()  # the envelope header, as a record header
_RAW_KIND = bytes((KIND_RAW,))
ENVELOPE_RECORD_VALUE = _RAW_KIND + ENVELOPE_VERSION


def header_name(key_kind: int, key: bytes) -> str:
    if key_kind == KIND_STRING:
        try:
            return STRING_KEY_PREFIX + key.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return f"{TYPED_KEY_PREFIX}{key_kind}.{key.hex()}"


def decode_frames(data: Buffer, start: int, end: int, count: int, *, base_offset: int,
                  append_ms: int, origin_base_us: int) -> list[Record]:
    """Every frame of a ``FORMAT_IGGY`` records section as a ``Record``."""
    positions = frame_positions(data, start, end, count)
    out: list[Record] = []
    for i in range(count):
        pos = positions[i]
        _ck, lo, hi, _delta, ts_delta, hlen, plen, _rsv = FRAME.unpack_from(data, pos)
        body = pos + FRAME_SIZE
        payload = bytes(data[body : body + plen])
        headers: list[tuple[str, bytes]] = [(ORIGIN_TIMESTAMP, _U64.pack(origin_base_us + ts_delta))]
        key: bytes | None = None
        if hlen:
            key, user = split_user_headers(data, body + plen, body + plen + hlen, take_key=True)
            if user == [(ENVELOPE_NAME, ENVELOPE_RECORD_VALUE)] and key is None:
                key, value, inner = decode_envelope(payload)
                payload = value or b""
                user = [(STRING_KEY_PREFIX + name, _RAW_KIND + (hv or b"")) for name, hv in inner]
            headers.extend(user)
        msg_id = lo | (hi << 64)
        out.append(Record(value=payload, key=key, timestamp=append_ms, headers=tuple(headers),
                          message_id=msg_id or None, offset=base_offset + i))
    return out


def frame_ids(data: Buffer, positions: Sequence[int]) -> list[int]:
    """The u128 id of each frame starting at ``positions[:-1]`` (``frame_positions``' output)."""
    unpack = _ID.unpack_from
    out: list[int] = []
    for p in positions[:-1]:
        lo, hi = unpack(data, p + 8)
        out.append(lo | hi << 64)
    return out

