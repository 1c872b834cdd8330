"""Zig-zag base-128 varints, as in Kafka's record format and protobuf ``sint64``."""

from __future__ import annotations

from bayou.errors import CorruptRecord


def encode_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag varint encoding of a signed 64-bit ``value`` to ``out``."""
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"varint {value} is outside the int64 range")
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint at ``pos``; return (value, next position).

    Raises CorruptRecord on a truncated or over-long (more than 10 bytes) varint.
    """
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptRecord("truncated varint")
        b = buf[pos]
        pos += 1
        if shift == 63 and b > 1:
            raise CorruptRecord("varint too long")  # a tenth byte may only hold bit 63
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


def encode_uvarint(value: int, out: bytearray) -> None:
    """Append an unsigned base-128 varint."""
    if value < 0:
        raise ValueError("uvarint must be non-negative")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; return (value, next position)."""
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise CorruptRecord("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise CorruptRecord("varint too long")
