"""Replies written once per event-loop pass: ``CoalescingWriter`` wraps a connection's
``asyncio.StreamWriter`` so the replies of the requests served in one pass of the event loop
leave in one ``send`` instead of one each.

A write syscall on a TCP socket is the largest cost of a small reply (on loopback the sender's
send also runs the receiver's side of the stack). A client that pipelines, or several requests
that one read brought, would otherwise cost one send per reply. Redis does the same: it writes
the replies of one pass of its event loop before it sleeps.

* ``write`` buffers; the buffer is handed to the transport by a callback scheduled with
  ``call_soon`` when the first piece arrives, so it leaves after the requests already runnable in
  this pass have been served, and never later than that: no timer.
* ``drain`` keeps back-pressure: it hands the buffer over at once, and waits as asyncio's drain
  does, when it holds ``FLUSH_BYTES`` or more or when the transport still holds bytes the socket
  did not take (a peer that does not keep up); else it returns and the pass's callback sends it.
* ``flush`` hands the buffer over now (a sender that writes on the socket itself, zerocopy.py;
  ``close``).
* **A write deadline.** ``drain`` waits for a peer that reads; one that does not would hold the
  reply's bytes (and its share of the answer budget, answers.py) for ever. With ``deadline_s``,
  at least ``min_progress`` bytes (or all of them) must leave within every ``deadline_s``, or
  ``SlowReader`` is raised and the connection closed: the mirror of the read deadline
  (server/base.py), ``request_timeout_s`` and 500 bytes a second. What has not left counts the
  kernel's send queue too (SIOCOUTQ): the transport's own buffer shrinks only when the kernel
  frees a third of its send buffer, which a client reading 20 KB/s took longer than 30 s to do.

Order is kept: every byte of the connection goes through the one buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

try:  # the kernel's unsent bytes of a socket (Linux: SIOCOUTQ, the same number as TIOCOUTQ)
    import fcntl
    import termios
    _OUTQ: int | None = termios.TIOCOUTQ
except (ImportError, AttributeError):  # not on this platform: the transport's buffer alone
    _OUTQ = None

FLUSH_BYTES = 64 * 1024  # buffered past this, drain() sends at once and waits for the transport


class SlowReader(TimeoutError):
    """The peer did not read its replies fast enough (the write deadline)."""


class CoalescingWriter:
    """A ``StreamWriter`` whose writes leave once per event-loop pass (module docstring)."""

    def __init__(self, writer: asyncio.StreamWriter, *, deadline_s: float | None = None,
                 min_progress: int = 0) -> None:
        self._writer = writer
        self.deadline_s = deadline_s
        self.min_progress = min_progress
        self._pieces: list[bytes | bytearray | memoryview] = []
        self._size = 0
        self._scheduled = False
        self._loop = asyncio.get_running_loop()
        self.transport = writer.transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self._pieces.append(data)
        self._size += len(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._send)

    def writelines(self, data: Any) -> None:
        for piece in data:
            self.write(piece)

    def _send(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        """Hand what is buffered to the transport now."""
        pieces = self._pieces
        if not pieces:
            return
        size = self._size
        self._pieces = []
        self._size = 0
        if self._writer.transport.is_closing():
            return  # the peer is gone: asyncio's writer would drop the bytes too
        if len(pieces) == 1:
            self._writer.write(pieces[0])
        elif size >= FLUSH_BYTES:
            # large pieces (a fetch's stored batches) go uncopied: uvloop's writelines sends
            # them in one writev and keeps references to what the socket did not take
            self._writer.writelines(pieces)
        else:
            self._writer.write(b"".join(pieces))

    def must_drain(self) -> bool:
        """Whether ``drain`` has anything to do (else a caller may skip awaiting it): a buffer at
        ``FLUSH_BYTES``, a transport holding bytes or closing, or nothing buffered (asyncio's drain
        then tells a lost connection)."""
        transport = self._writer.transport
        return bool(self._size >= FLUSH_BYTES or not self._pieces or transport.get_write_buffer_size()
                    or transport.is_closing())

    async def drain(self) -> None:
        transport = self._writer.transport
        if (self._size >= FLUSH_BYTES or transport.get_write_buffer_size()
                or transport.is_closing()):
            # a large buffer, or a peer that does not keep up (the transport holds what the
            # socket did not take): hand it over and wait as asyncio's drain does
            self.flush()
            await self._drained()
        elif not self._pieces:
            await self._drained()  # raises if the connection was lost, waits if paused

    async def _drained(self) -> None:
        """asyncio's drain, within the write deadline (module docstring)."""
        if self.deadline_s is None:
            await self._writer.drain()
            return
        while True:
            before = self._unsent()
            try:
                async with asyncio.timeout(self.deadline_s):
                    await self._writer.drain()
                return
            except TimeoutError:
                left = self._unsent()
                if before - left < min(before, self.min_progress):
                    raise SlowReader(f"{left} bytes of replies not read in {self.deadline_s:g} s") from None

    def _unsent(self) -> int:
        """Bytes written that the peer has not taken: the transport's buffer and the kernel's
        send queue (Linux SIOCOUTQ; elsewhere the buffer alone)."""
        transport = self._writer.transport
        n = transport.get_write_buffer_size()
        sock = transport.get_extra_info("socket")
        if sock is not None and _OUTQ is not None:
            with contextlib.suppress(OSError, ValueError):
                n += int.from_bytes(fcntl.ioctl(sock.fileno(), _OUTQ, bytes(4)), sys.byteorder, signed=True)
        return n

    def close(self) -> None:
        self.flush()
        self._writer.close()

    async def wait_closed(self) -> None:
        await self._writer.wait_closed()

    def is_closing(self) -> bool:
        return self._writer.is_closing()

    def can_write_eof(self) -> bool:
        return self._writer.can_write_eof()

    def write_eof(self) -> None:
        self.flush()
        self._writer.write_eof()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._writer.get_extra_info(name, default)

    async def start_tls(self, *args: Any, **kwargs: Any) -> None:
        self.flush()
        await self._writer.start_tls(*args, **kwargs)
        self.transport = self._writer.transport


__all__ = ["FLUSH_BYTES", "CoalescingWriter", "SlowReader"]
