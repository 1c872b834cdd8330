"""server/writes.py over real sockets, on uvloop and on asyncio's own loop: the replies written in
one pass of the event loop leave in one send, in order; drain keeps back-pressure; a zero-copy
send after buffered bytes still comes after them; a connection the peer closed drops bytes
quietly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from bayou.server import zerocopy
from bayou.server.writes import FLUSH_BYTES, CoalescingWriter, SlowReader

Serve = Callable[[CoalescingWriter, list[bytes]], Awaitable[None]]


async def _exchange(serve: Serve) -> tuple[bytes, list[bytes]]:
    """Run ``serve`` on the server end of a loopback connection; (what the client read, what the
    inner transport was handed, one item per transport write)."""
    handed: list[bytes] = []
    done = asyncio.Event()
    failed: list[BaseException] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        inner_write, inner_writelines = writer.write, writer.writelines

        def spy(data: bytes) -> None:
            handed.append(bytes(data))
            inner_write(data)

        def spy_lines(pieces: list[bytes]) -> None:  # one hand-over of several pieces
            handed.append(b"".join(pieces))
            HANDED_PIECES.append(list(pieces))
            inner_writelines(pieces)

        writer.write = spy  # type: ignore[method-assign]
        writer.writelines = spy_lines  # type: ignore[method-assign]
        out = CoalescingWriter(writer)
        try:
            await serve(out, handed)
        except BaseException as exc:  # the test's asserts in ``serve`` fail the test
            failed.append(exc)
        finally:
            out.close()
            done.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = await asyncio.wait_for(reader.read(-1), 30)
    await asyncio.wait_for(done.wait(), 30)
    writer.close()
    server.close()
    if failed:
        raise failed[0]
    return data, handed


HANDED_PIECES: list[list[bytes]] = []  # the pieces of each writelines hand-over


def _run(loop_kind: str, coro: Awaitable[tuple[bytes, list[bytes]]]) -> tuple[bytes, list[bytes]]:
    return (uvloop.run if loop_kind == "uvloop" else asyncio.run)(coro)  # type: ignore[arg-type]


LOOPS = pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])


@LOOPS
def test_the_replies_of_one_pass_leave_in_one_send(loop_kind: str) -> None:
    async def serve(out: CoalescingWriter, handed: list[bytes]) -> None:
        for i in range(10):  # ten requests served without yielding: ten replies
            out.write(b"reply%d;" % i)
            await out.drain()  # below FLUSH_BYTES: returns at once
        assert handed == []  # nothing sent yet: the pass is not over
        await asyncio.sleep(0)  # the pass ends
        await asyncio.sleep(0)
        assert len(handed) == 1
        out.write(b"later;")

    data, handed = _run(loop_kind, _exchange(serve))
    assert data == b"".join(b"reply%d;" % i for i in range(10)) + b"later;"
    assert handed == [data[:-6], b"later;"]


@LOOPS
def test_drain_sends_a_large_buffer_at_once(loop_kind: str) -> None:
    async def serve(out: CoalescingWriter, handed: list[bytes]) -> None:
        out.write(b"a" * (FLUSH_BYTES - 1))
        await out.drain()
        assert handed == []
        out.write(b"b")
        await out.drain()  # FLUSH_BYTES reached: handed over before drain returns
        assert [len(h) for h in handed] == [FLUSH_BYTES]

    data, _handed = _run(loop_kind, _exchange(serve))
    assert data == b"a" * (FLUSH_BYTES - 1) + b"b"


@LOOPS
def test_large_pieces_are_handed_over_uncopied_in_order(loop_kind: str) -> None:
    big = [memoryview(bytes([i]) * FLUSH_BYTES) for i in range(3)]

    async def serve(out: CoalescingWriter, handed: list[bytes]) -> None:
        HANDED_PIECES.clear()
        out.write(b"head;")
        for piece in big:  # a fetch's stored batches
            out.write(piece)
        await out.drain()
        assert len(handed) == 1 and len(HANDED_PIECES) == 1
        assert HANDED_PIECES[0][0] == b"head;" and all(
            a is b for a, b in zip(HANDED_PIECES[0][1:], big, strict=True))
        out.write(b"small;")
        out.write(b"tail;")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert handed[1:] == [b"small;tail;"] and len(HANDED_PIECES) == 1  # small ones: one copy

    data, _handed = _run(loop_kind, _exchange(serve))
    assert data == b"head;" + b"".join(big) + b"small;tail;"


@LOOPS
def test_a_zero_copy_send_comes_after_the_buffered_bytes(tmp_path: Path, loop_kind: str) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(b"0123456789")
    fd = os.open(path, os.O_RDONLY)

    async def serve(out: CoalescingWriter, handed: list[bytes]) -> None:
        zerocopy.prepare(out)  # type: ignore[arg-type]
        out.write(b"HEAD")
        await zerocopy.send_ranges(out, fd, [(2, 5)])  # type: ignore[arg-type]
        out.write(b"TAIL")
        await out.drain()

    try:
        data, _handed = _run(loop_kind, _exchange(serve))
    finally:
        os.close(fd)
    assert data == b"HEAD23456TAIL"


@LOOPS
def test_bytes_for_a_closed_connection_are_dropped_quietly(loop_kind: str) -> None:
    async def main() -> bool:
        closed = asyncio.Event()
        ok = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            out = CoalescingWriter(writer)
            await reader.read()  # the client closed
            writer.transport.abort()
            out.write(b"too late")
            await asyncio.sleep(0.01)  # the pass's send finds the transport closing
            with contextlib.suppress(ConnectionError):  # what asyncio's drain raises once lost
                await out.drain()
            ok.set()
            closed.set()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.close()
        await asyncio.wait_for(closed.wait(), 10)
        server.close()
        return ok.is_set()

    assert (uvloop.run if loop_kind == "uvloop" else asyncio.run)(main())


@LOOPS
def test_a_peer_that_does_not_read_stops_the_writer(loop_kind: str) -> None:
    """Back-pressure holds with small replies too: a handler that writes 1 KiB, drains and yields,
    again and again, to a peer that reads nothing, ends up waiting in ``drain`` with a bounded
    buffer (a drain that found its small buffer not yet sent used to return at once, and the
    transport buffer grew without end); once the peer reads, it goes on."""

    async def main() -> tuple[int, int, bool]:
        written = 0
        largest = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal written, largest
            out = CoalescingWriter(writer)
            for _ in range(20_000):
                out.write(b"r" * 1024)
                await out.drain()
                await asyncio.sleep(0)  # the pass ends: the buffer goes to the transport
                written += 1024
                largest = max(largest, writer.transport.get_write_buffer_size())
            out.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
        await asyncio.sleep(1.0)  # the peer reads nothing meanwhile
        stalled_at = written
        got = 0
        while chunk := await asyncio.wait_for(r.read(1 << 16), 20):
            got += len(chunk)
        w.close()
        server.close()
        return stalled_at, largest, got == 20_000 * 1024

    stalled_at, largest, all_read = (uvloop.run if loop_kind == "uvloop" else asyncio.run)(main())
    assert stalled_at < 8 * 1024 * 1024  # it stopped long before writing the 20 MiB
    assert largest <= 1024 * 1024  # the transport never held more than its limits allow
    assert all_read


@LOOPS
def test_a_peer_that_stops_reading_is_cut_off_by_the_write_deadline(loop_kind: str) -> None:
    """A reply the peer never reads held its bytes (and its share of the answer budget,
    server/answers.py) for ever: with a deadline, drain raises SlowReader once ``min_progress``
    bytes have not left within it; a peer that reads slowly but steadily is served to the end."""

    async def main() -> tuple[float, bool]:
        outcome: dict[str, object] = {}

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            out = CoalescingWriter(writer, deadline_s=0.3, min_progress=4096)
            started = asyncio.get_running_loop().time()
            try:
                out.write(b"r" * (8 << 20))  # past what the sockets' buffers hold
                await out.drain()
                outcome["drained"] = True
            except TimeoutError as exc:
                outcome["error"] = exc
            outcome["after"] = asyncio.get_running_loop().time() - started
            out.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        deadline = asyncio.get_running_loop().time() + 10
        while "after" not in outcome and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)  # the client reads nothing
        sock.close()
        server.close()
        return float(outcome["after"]), isinstance(outcome.get("error"), SlowReader)  # type: ignore[arg-type]

    after, slow = (uvloop.run if loop_kind == "uvloop" else asyncio.run)(main())
    assert slow and 0.25 <= after < 5


@LOOPS
def test_a_slow_but_steady_reader_is_served_to_the_end(loop_kind: str) -> None:
    async def main() -> tuple[int, bool]:
        outcome: dict[str, object] = {}

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            out = CoalescingWriter(writer, deadline_s=0.3, min_progress=4096)
            try:
                out.write(b"s" * (8 << 20))
                await out.drain()
                outcome["drained"] = True
            except TimeoutError as exc:
                outcome["error"] = exc
            out.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        got = 0
        while True:  # about 4 MB/s: far below the sender, far above 4 KiB in 0.3 s
            chunk = await asyncio.wait_for(reader.read(256 * 1024), 10)
            if not chunk:
                break
            got += len(chunk)
            await asyncio.sleep(0.05)
        writer.close()
        server.close()
        return got, bool(outcome.get("drained"))

    got, drained = (uvloop.run if loop_kind == "uvloop" else asyncio.run)(main())
    assert drained and got == 8 << 20
