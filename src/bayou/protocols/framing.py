"""The framing kit every binary codec builds on: one frame reader's feed loop and one byte cursor.

``FrameReader`` splits a byte stream into frames whose header declares their size (Cursus's u32
length, TANK's id + u32 size, Iggy's legacy length + code and its 256-byte VSR header). What
differs between protocols is only how a header is read and judged (``_measure``), what a complete
frame becomes (``_frame``) and how far ahead the declared size is known (``_declared``); the loop,
the buffering and the error discipline are the same, written here once:

* ``feed`` returns every frame the data completes, in order, and keeps at most one partial frame
  (an empty list means "need more bytes"). It parses straight from the chunk when nothing is held
  and copies only the leftover.
* A header is judged before any of its body is buffered, so a hostile size costs nothing. A bad
  header raises the protocol's one error (``error``); frames completed before it are returned first
  and the next call raises it (``failed`` is then set). Nothing else escapes.
* A header whose verdict depends on the frames before it being served first (Iggy's cap on
  connections that have not logged in: a pipelined login changes it) raises ``AtBoundary`` from
  ``_measure``: behind a complete frame it is not judged yet (``deferred`` is set and the caller
  feeds ``b""`` once it has served the frames); at a frame boundary its error is raised.

``ByteCursor`` walks one complete little-endian payload (Iggy and TANK payloads): running off its
end is the protocol's error (``_error``), never "need more", since the frame is complete.

Model: h11's reader contract (a complete message, "need more", or one protocol error).
"""

from __future__ import annotations

import struct
from typing import Generic, TypeVar

Buffer = bytes | bytearray | memoryview
F = TypeVar("F")

U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")


class AtBoundary(Exception):
    """Raised by ``_measure`` for a header that may only be judged at a frame boundary; ``error``
    is the protocol error it becomes there."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class FrameReader(Generic[F]):
    """The feed loop; subclasses say how a header reads (see the module docstring)."""

    error: type[Exception] = Exception
    """The protocol's one error type: what ``_measure`` and ``_frame`` raise for bad bytes."""
    head: int = 4
    """Bytes ``_measure`` needs before it can say anything about a frame."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._failed: Exception | None = None
        self.deferred = False

    # -- hooks -----------------------------------------------------------------------------------

    def _measure(self, src: Buffer, pos: int, n: int) -> int:
        """The whole size of the frame whose header starts at ``src[pos]`` (at least ``head`` bytes
        are there, ``n`` in all), or 0 when more header bytes are needed. Raises ``error`` for a
        header that can never be valid, ``AtBoundary`` for one judged only at a frame boundary."""
        raise NotImplementedError

    def _frame(self, src: Buffer, pos: int, end: int) -> F:
        """The frame ``src[pos:end]`` (header included) becomes."""
        raise NotImplementedError

    def _declared(self, buf: bytearray) -> int | None:
        """The size of the frame in progress from its header (``buf`` starts at a frame), or None
        while the header is not in."""
        raise NotImplementedError

    # -- the loop --------------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete (0 at a frame boundary)."""
        return len(self._buf)

    @property
    def pending(self) -> int:
        """Bytes the frame in progress will occupy, from its header once that is in (else what is
        held): what a server reserves of its memory budget before reading on."""
        declared = self._declared(self._buf) if self._buf else None
        return len(self._buf) if declared is None else declared

    @property
    def failed(self) -> Exception | None:
        """The error the next ``feed`` raises: a bad header came after frames already returned."""
        return self._failed

    @property
    def stalled(self) -> bool:
        """``feed(b"")`` has something to say without more data: a deferred frame or an error."""
        return self.deferred or self._failed is not None

    def feed(self, data: Buffer) -> list[F]:
        if self._failed is not None:
            raise self._failed
        src: Buffer
        if self._buf:
            self._buf += data
            src = self._buf
        else:
            src = data  # common case: parse straight from the chunk, copy only the leftover
        frames: list[F] = []
        pos = 0
        n = len(src)
        head = self.head
        measure = self._measure
        make = self._frame
        self.deferred = False
        try:
            while n - pos >= head:
                size = measure(src, pos, n)
                end = pos + size
                if size == 0 or end > n:
                    break
                frames.append(make(src, pos, end))
                pos = end
        except AtBoundary as wait:
            if not frames:
                return self._fail(frames, wait.error)
            self.deferred = True
        except self.error as exc:
            return self._fail(frames, exc)
        if src is self._buf:
            if pos:
                del self._buf[:pos]
        elif pos < n:
            self._buf = bytearray(memoryview(src)[pos:])
        return frames

    def _fail(self, frames: list[F], error: Exception) -> list[F]:
        self._failed = error
        self._buf = bytearray()
        if frames:
            return frames
        raise error


class ByteCursor:
    """A cursor over ``buf[pos:end]`` of one complete little-endian payload. Subclasses name the
    protocol's error (``_error``) and add the protocol's composite fields."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def _error(self, message: str) -> Exception:
        """The protocol error for a payload that runs short."""
        raise NotImplementedError

    def _trailing_error(self, message: str) -> Exception:
        """The protocol error for bytes left after a payload (``done``)."""
        return self._error(message)

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def skip(self, n: int) -> int:
        """Step over ``n`` bytes; their start position."""
        at = self.pos
        if n > self.end - at:
            raise self._error(f"payload truncated at byte {at}: {n} more needed")
        self.pos = at + n
        return at

    def u8(self) -> int:
        return self.buf[self.skip(1)]

    def u16(self) -> int:
        v: int = U16.unpack_from(self.buf, self.skip(2))[0]
        return v

    def u32(self) -> int:
        v: int = U32.unpack_from(self.buf, self.skip(4))[0]
        return v

    def u64(self) -> int:
        v: int = U64.unpack_from(self.buf, self.skip(8))[0]
        return v

    def take(self, n: int) -> bytes:
        at = self.skip(n)
        return self.buf[at : at + n]

    def bytes8(self) -> bytes:
        """u8 length + that many bytes."""
        return self.take(self.u8())

    def done(self) -> None:
        if self.pos != self.end:
            raise self._trailing_error(f"{self.end - self.pos} unexpected bytes after the payload")


__all__ = ["AtBoundary", "Buffer", "ByteCursor", "FrameReader"]
