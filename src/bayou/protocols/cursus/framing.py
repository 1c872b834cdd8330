"""Frames (cursus.md section 1) and the one protocol error.

A frame is a u32 big-endian body length followed by the body, in both directions. The reader keeps
at most one partial frame and refuses a declared length above ``MAX_FRAME`` before buffering any of
its body, so a hostile length prefix costs nothing.
"""

from __future__ import annotations

import struct

from bayou.protocols import framing

MAX_FRAME = 64 * 1024 * 1024
KEEPALIVE = b"\x00\x00\x00\x00"

_U32 = struct.Struct(">I")


class CursusError(Exception):
    """The one protocol error.

    ``reply`` is the exact reply body to send (None: send nothing); ``close`` asks the server to
    close the connection after that reply.
    """

    def __init__(self, reply: bytes | None, close: bool = False) -> None:
        super().__init__(reply.decode("utf-8", "replace") if reply is not None else "connection closed")
        self.reply = reply
        self.close = close

    def __repr__(self) -> str:
        return f"CursusError({self.reply!r}, close={self.close})"


class FrameReader(framing.FrameReader[bytes]):
    """Splits a byte stream into frame bodies.

    ``feed`` returns every frame the data completes, in order, and keeps a partial one. A declared
    length above ``max_frame`` raises ``CursusError(None, close=True)`` (H closes the connection
    without a reply); frames completed before the oversized header are returned first and
    ``overflowed`` is set, so the next call raises.
    """

    error = CursusError
    head = 4

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        super().__init__()
        self.max_frame = max_frame

    @property
    def overflowed(self) -> bool:
        return self._failed is not None

    def _measure(self, src: framing.Buffer, pos: int, n: int) -> int:
        length: int = _U32.unpack_from(src, pos)[0]
        if length > self.max_frame:
            raise CursusError(None, close=True)
        return 4 + length

    def _frame(self, src: framing.Buffer, pos: int, end: int) -> bytes:
        return bytes(src[pos + 4 : end])

    def _declared(self, buf: bytearray) -> int | None:
        return 4 + int(_U32.unpack_from(buf)[0]) if len(buf) >= 4 else None


def encode_frame(body: bytes) -> bytes:
    return _U32.pack(len(body)) + body
