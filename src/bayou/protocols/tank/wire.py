"""Primitive encodings shared by every TANK payload (tank.md 2).

Integers are little-endian. A varint is unsigned LEB128 of a 32-bit value, 1 to 5 bytes, exactly
as TANK's ``Switch/compress.h`` reads it: the fifth byte must end the varint and its bits above
bit 31 are dropped. str8 is a u8 length and that many bytes.

Text fields (topic names, client ids, configuration) are ``str`` decoded as UTF-8 with
``surrogateescape``: TANK treats them as bytes, so any byte string must decode (a bad name is an
unknown topic, not a broken connection) and re-encode to exactly the bytes received.

``Reader`` walks one complete payload. Running off its end, an over-long varint or trailing bytes
raise ``TankError(close=True)``: inside a complete frame nothing can "need more", it is malformed.
The ``enc_*`` functions raise ValueError (struct.error for an out-of-range integer) for values
that cannot be put on the wire, a bug in the caller rather than a protocol error.
"""

from __future__ import annotations

import struct

from bayou.protocols.framing import ByteCursor
from bayou.protocols.tank.codes import TankError

U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")

U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
MAX_VARINT_BYTES = 5

Buffer = bytes | bytearray | memoryview


def decode_varint(buf: Buffer, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """(value, position after it). Truncation or a fifth byte with its high bit set raises
    ``TankError(close=True)``."""
    stop = len(buf) if end is None else end
    result = 0
    shift = 0
    for _ in range(MAX_VARINT_BYTES):
        if pos >= stop:
            raise TankError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & U32_MAX, pos
        shift += 7
    raise TankError(f"varint longer than {MAX_VARINT_BYTES} bytes at byte {pos - MAX_VARINT_BYTES}")


def varint_size(value: int) -> int:
    if not 0 <= value <= U32_MAX:
        raise ValueError(f"varint {value} is outside 0..2^32-1")
    n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


def encode_varint(value: int) -> bytes:
    """The minimal encoding, as TANK's ``PackUInt32`` writes it."""
    if not 0 <= value <= U32_MAX:
        raise ValueError(f"varint {value} is outside 0..2^32-1")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def text_of(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def raw_of(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def decode_str8(buf: Buffer, pos: int = 0, end: int | None = None) -> tuple[str, int]:
    """(text, position after it)."""
    stop = len(buf) if end is None else end
    if pos >= stop:
        raise TankError(f"truncated str8 at byte {pos}")
    n = buf[pos]
    if n > stop - pos - 1:
        raise TankError(f"str8 of {n} bytes at byte {pos} runs past the end")
    return text_of(bytes(buf[pos + 1 : pos + 1 + n])), pos + 1 + n


def encode_str8(text: str) -> bytes:
    return enc_bytes8(raw_of(text))


def enc_bytes8(raw: bytes) -> bytes:
    if len(raw) > 255:
        raise ValueError(f"str8 field of {len(raw)} bytes (at most 255)")
    return U8.pack(len(raw)) + raw


class Reader(ByteCursor):
    """A cursor over ``buf[pos:end]`` of one complete payload."""

    __slots__ = ()

    def _error(self, message: str) -> TankError:
        return TankError(message)

    def peek_u16(self) -> int | None:
        if self.end - self.pos < 2:
            return None
        v: int = U16.unpack_from(self.buf, self.pos)[0]
        return v

    def varint(self) -> int:
        value, self.pos = decode_varint(self.buf, self.pos, self.end)
        return value

    def str8(self) -> str:
        return text_of(self.bytes8())
