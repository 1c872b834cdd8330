"""Zero-copy sends: byte ranges of a file written to a connection's socket with ``os.sendfile``.

uvloop (bayou's event loop) does not implement ``loop.sendfile``, so the ranges are sent from a
worker thread straight on the socket's descriptor, after the transport's own buffer has drained;
the caller must not write anything else on the connection until this returns (a per-connection
write lock). The kernel copies file pages to the socket; the bytes never enter Python.

On a TLS connection the bytes must pass through the TLS layer: the ranges are read (``os.pread``,
in the worker thread) and written through the transport like any reply.
"""

from __future__ import annotations

import asyncio
import os
import select
from collections.abc import Sequence
from concurrent.futures import Executor

SEND_TIMEOUT_S = 60.0


def prepare(writer: asyncio.StreamWriter) -> None:
    """Make ``drain()`` wait until the transport buffer is empty, so a sendfile never overtakes
    bytes written earlier."""
    writer.transport.set_write_buffer_limits(high=0)


def _read_blocking(file_fd: int, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
    out = []
    for offset, count in ranges:
        data = os.pread(file_fd, count, offset)
        if len(data) < count:
            raise ConnectionResetError("file shorter than the range to send")
        out.append(data)
    return out


def _send_blocking(sock_fd: int, file_fd: int, ranges: Sequence[tuple[int, int]]) -> int:
    sent = 0
    for offset, count in ranges:
        while count > 0:
            try:
                n = os.sendfile(sock_fd, file_fd, offset, count)
            except BlockingIOError:
                _, writable, _ = select.select([], [sock_fd], [], SEND_TIMEOUT_S)
                if not writable:
                    raise TimeoutError("socket not writable") from None
                continue
            if n == 0:
                raise ConnectionResetError("file shorter than the range to send")
            offset += n
            count -= n
            sent += n
    return sent


async def send_ranges(writer: asyncio.StreamWriter, file_fd: int, ranges: Sequence[tuple[int, int]],
                      executor: Executor | None = None) -> int:
    """Write ``(offset, length)`` ranges of ``file_fd`` on the connection, in order; returns the
    number of bytes sent. Everything written before is flushed first."""
    loop = asyncio.get_running_loop()
    flush = getattr(writer, "flush", None)  # a CoalescingWriter's buffer goes first (writes.py)
    if flush is not None:
        flush()
    if writer.get_extra_info("sslcontext") is not None:  # encrypted: no sendfile
        chunks = await loop.run_in_executor(executor, _read_blocking, file_fd, list(ranges))
        writer.writelines(chunks)
        await writer.drain()
        return sum(map(len, chunks))
    await writer.drain()
    transport = writer.transport
    while transport.get_write_buffer_size():
        await asyncio.sleep(0.001)
    if transport.is_closing():
        raise ConnectionResetError("connection closed")
    sock = transport.get_extra_info("socket")
    if sock is None:
        raise ConnectionResetError("no socket")
    return await loop.run_in_executor(
        executor, _send_blocking, sock.fileno(), file_fd, list(ranges))
