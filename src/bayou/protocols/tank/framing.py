"""Frames (tank.md 1): u8 message id, u32 LE payload size, payload. The same in both directions.

The reader keeps at most one partial frame and refuses a declared size above ``MAX_PAYLOAD``
(256 MiB) before buffering any of its payload, so a hostile size costs nothing. It does not look
at message ids: which ids a side accepts is the codec's business (``codec.decode_request``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bayou.protocols import framing
from bayou.protocols.tank.codes import TankError

MAX_PAYLOAD = 256 * 1024 * 1024
HEADER = struct.Struct("<BI")
HEADER_SIZE = HEADER.size  # 5
_SIZE = struct.Struct("<I")

PING_FRAME = b"\x03\x00\x00\x00\x00"
"""What the broker sends once on every accepted connection (tank.md 1)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One complete frame. ``msg_id`` stays an int: an unknown id must reach the codec to be
    refused there."""

    msg_id: int
    payload: bytes


class FrameReader(framing.FrameReader[Frame]):
    """Splits a byte stream into ``Frame``s.

    ``feed`` returns every frame the data completes, in order (an empty list means "need more
    bytes"), and keeps a partial one. A declared size above ``max_payload`` raises
    ``TankError(close=True)``; frames completed before the bad header are returned first and the
    next call raises.
    """

    error = TankError
    head = HEADER_SIZE

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        super().__init__()
        self.max_payload = max_payload

    def _measure(self, src: framing.Buffer, pos: int, n: int) -> int:
        size: int = _SIZE.unpack_from(src, pos + 1)[0]
        if size > self.max_payload:
            raise TankError(f"frame payload of {size} bytes exceeds {self.max_payload}")
        return HEADER_SIZE + size

    def _frame(self, src: framing.Buffer, pos: int, end: int) -> Frame:
        return Frame(src[pos], bytes(src[pos + HEADER_SIZE : end]))

    def _declared(self, buf: bytearray) -> int | None:
        return HEADER_SIZE + int(_SIZE.unpack_from(buf, 1)[0]) if len(buf) >= HEADER_SIZE else None


def encode_frame(msg_id: int, payload: bytes = b"") -> bytes:
    """One frame. Only the u32 size field limits it: the 256 MiB cap is what a broker accepts."""
    return HEADER.pack(msg_id, len(payload)) + payload


def frame_header(msg_id: int, payload_size: int) -> bytes:
    """The 5 header bytes alone, for a payload that is sent in pieces (a consume response whose
    chunks go out with sendfile)."""
    return HEADER.pack(msg_id, payload_size)

