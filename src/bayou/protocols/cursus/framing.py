"""Frames (cursus.md section 1) and the one protocol error.

A frame is a u32 big-endian body length followed by the body, in both directions. The reader keeps
at most one partial frame and refuses a declared length above ``MAX_FRAME`` before buffering any of
its body, so a hostile length prefix costs nothing.
"""

from __future__ import annotations

import struct

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


class FrameReader:
    """Splits a byte stream into frame bodies.

    ``feed`` returns every frame the data completes, in order, and keeps a partial one. A declared
    length above ``max_frame`` raises ``CursusError(None, close=True)`` (H closes the connection
    without a reply); frames completed before the oversized header are returned first and
    ``overflowed`` is set, so the next call raises.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self.overflowed = False

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete (0 at a frame boundary)."""
        return len(self._buf)

    @property
    def pending(self) -> int:
        """Bytes the frame in progress will occupy, from its length prefix once that is in (else
        what is held): what a server reserves of its memory budget before reading on."""
        if len(self._buf) >= 4:
            return 4 + int(_U32.unpack_from(self._buf)[0])
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        if self.overflowed:
            raise CursusError(None, close=True)
        src: bytes | bytearray
        if self._buf:
            self._buf += data
            src = self._buf
        else:
            src = data  # common case: parse straight from the chunk, copy only the leftover
        frames: list[bytes] = []
        pos = 0
        n = len(src)
        unpack = _U32.unpack_from
        while n - pos >= 4:
            (length,) = unpack(src, pos)
            if length > self.max_frame:
                self.overflowed = True
                self._buf = bytearray()
                if frames:
                    return frames
                raise CursusError(None, close=True)
            end = pos + 4 + length
            if end > n:
                break
            frames.append(bytes(src[pos + 4 : end]))
            pos = end
        if src is self._buf:
            if pos:
                del self._buf[:pos]
        elif pos < n:
            self._buf = bytearray(memoryview(src)[pos:])
        return frames


def encode_frame(body: bytes) -> bytes:
    return _U32.pack(len(body)) + body
