"""Frames (tank.md 1): u8 message id, u32 LE payload size, payload. The same in both directions.

The reader keeps at most one partial frame and refuses a declared size above ``MAX_PAYLOAD``
(256 MiB) before buffering any of its payload, so a hostile size costs nothing. It does not look
at message ids: which ids a side accepts is the codec's business (``codec.decode_request``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bayou.protocols.tank.codes import TankError

MAX_PAYLOAD = 256 * 1024 * 1024
HEADER = struct.Struct("<BI")
HEADER_SIZE = HEADER.size  # 5

PING_FRAME = b"\x03\x00\x00\x00\x00"
"""What the broker sends once on every accepted connection (tank.md 1)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One complete frame. ``msg_id`` stays an int: an unknown id must reach the codec to be
    refused there."""

    msg_id: int
    payload: bytes


class FrameReader:
    """Splits a byte stream into ``Frame``s.

    ``feed`` returns every frame the data completes, in order (an empty list means "need more
    bytes"), and keeps a partial one. A declared size above ``max_payload`` raises
    ``TankError(close=True)``; frames completed before the bad header are returned first and the
    next call raises.
    """

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self._buf = bytearray()
        self._failed: TankError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete (0 at a frame boundary)."""
        return len(self._buf)

    @property
    def pending(self) -> int:
        """Bytes the frame in progress will occupy, from its header once that is in (else what is
        held): what a server reserves of its memory budget before reading on."""
        if len(self._buf) >= HEADER_SIZE:
            return HEADER_SIZE + int(HEADER.unpack_from(self._buf)[1])
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if self._failed is not None:
            raise self._failed
        src: bytes | bytearray | memoryview
        if self._buf:
            self._buf += data
            src = self._buf
        else:
            src = data  # common case: parse straight from the chunk, copy only the leftover
        frames: list[Frame] = []
        pos = 0
        n = len(src)
        unpack = HEADER.unpack_from
        while n - pos >= HEADER_SIZE:
            msg_id, size = unpack(src, pos)
            if size > self.max_payload:
                self._failed = TankError(f"frame payload of {size} bytes exceeds {self.max_payload}")
                self._buf = bytearray()
                if frames:
                    return frames
                raise self._failed
            end = pos + HEADER_SIZE + size
            if end > n:
                break
            frames.append(Frame(msg_id, bytes(src[pos + HEADER_SIZE : end])))
            pos = end
        if src is self._buf:
            if pos:
                del self._buf[:pos]
        elif pos < n:
            self._buf = bytearray(memoryview(src)[pos:])
        return frames


def encode_frame(msg_id: int, payload: bytes = b"") -> bytes:
    """One frame. Only the u32 size field limits it: the 256 MiB cap is what a broker accepts."""
    return HEADER.pack(msg_id, len(payload)) + payload


def frame_header(msg_id: int, payload_size: int) -> bytes:
    """The 5 header bytes alone, for a payload that is sent in pieces (a consume response whose
    chunks go out with sendfile)."""
    return HEADER.pack(msg_id, payload_size)

