"""server/frames.py: the one serve loop, over real loopback sockets, with a toy protocol built on
Cursus framing (u32 length + body): each body is echoed upper-cased; b"bye" is answered and then
closes the connection; b"boom" raises the protocol error, which is answered with b"refused".
Every test runs with and without pipelining; with it, b"hold" makes an append (the produce path's
``ordering.begin``/``appended``) and then waits for b"free" to arrive, which only a pipelined loop
can serve meanwhile; b"late" waits for it before its append; b"busy" appends and answers how many
frames are in flight; b"peek" is the toy's one frame that is not a produce, served only once every
frame before it has ended."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator

import pytest

from bayou.broker import ordering
from bayou.protocols.cursus.framing import CursusError, FrameReader, encode_frame
from bayou.server.base import Connection, ConnectionLimits, Listener
from bayou.server.frames import MAX_PIPELINED, Reply, serve_frames
from bayou.server.rtes import _Lines

LIMITS = ConnectionLimits(idle_timeout_s=5, request_timeout_s=5)


STARTED: list[bytes] = []  # every frame the toy began to serve, across its connections
FREED: list[asyncio.Event] = []  # set by b"free", or by a test


async def _toy(conn: Connection, listener: Listener, pipeline: bool = False) -> None:
    said: list[bytes] = []
    freed = FREED[-1] if FREED else asyncio.Event()

    async def handle(body: bytes) -> Reply:
        said.append(body)
        STARTED.append(body)
        if body == b"hold":
            ordering.begin()
            ordering.appended()  # what the produce path does before waiting for its fsync
            await asyncio.wait_for(freed.wait(), 5)
            return encode_frame(b"HELD")
        if body == b"late":  # waits before its append (a producer table being rebuilt, say)
            await asyncio.wait_for(freed.wait(), 5)
            ordering.begin()
            ordering.appended()
            return encode_frame(b"LATE")
        if body == b"busy":  # appends, and says how many frames the connection has in flight
            ordering.begin()
            ordering.appended()
            return encode_frame(str(conn.busy).encode())
        if body == b"free":
            freed.set()
        if body == b"boom":
            raise CursusError(b"refused", close=True)
        if body == b"two":
            return [encode_frame(b"TWO-1"), encode_frame(b"TWO-2")]
        return encode_frame(body.upper())

    async def refuse(exc: CursusError) -> None:
        conn.writer.write(encode_frame(exc.reply or b"refused-by-reader"))
        await conn.writer.drain()

    await serve_frames(conn, listener, FrameReader(1024), handle, error=CursusError, refuse=refuse,
                       done=lambda: said[-1:] == [b"bye"],
                       pipeline=(lambda body: body != b"peek") if pipeline else None)


async def _toy_pipelined(conn: Connection, listener: Listener) -> None:
    await _toy(conn, listener, pipeline=True)


async def _lines(conn: Connection, listener: Listener) -> None:
    reader = _Lines(max_line=64)

    async def handle(line: bytes) -> Reply:
        return b"[" + line + b"]\n"

    async def refuse(_exc: Exception) -> None:
        conn.writer.write(b"too long\n")
        await conn.writer.drain()

    await serve_frames(conn, listener, reader, handle, error=Exception, refuse=refuse, last=reader.eof)


@pytest.fixture(params=[False, True], ids=["sequential", "pipelined"])
async def toy(request: pytest.FixtureRequest) -> AsyncIterator[Listener]:
    listener = Listener("toy", "127.0.0.1", 0, _toy_pipelined if request.param else _toy, LIMITS)
    await listener.start()
    yield listener
    listener.stop_accepting()
    await listener.drain(1)


async def _replies(reader: asyncio.StreamReader) -> list[bytes]:
    """Every frame until the server closes (within 5 s)."""
    data = await asyncio.wait_for(reader.read(), 5)
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


async def _until_started(count: int) -> None:
    """Wait (5 s at most) until ``count`` frames have been begun."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while len(STARTED) < count:
        assert loop.time() < deadline, f"{len(STARTED)} frames started"
        await asyncio.sleep(0.01)


async def _read_frames(reader: asyncio.StreamReader, count: int) -> list[bytes]:
    got = []
    for _ in range(count):
        (n,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 5))
        got.append(await asyncio.wait_for(reader.readexactly(n), 5))
    return got


@contextlib.asynccontextmanager
async def _pipelined_toy() -> AsyncIterator[Listener]:
    """A pipelined toy listener, its frames' record cleared and a fresh b"free" event."""
    STARTED.clear()
    FREED.append(asyncio.Event())
    listener = Listener("toy", "127.0.0.1", 0, _toy_pipelined, LIMITS)
    await listener.start()
    try:
        yield listener
    finally:
        FREED.clear()
        listener.stop_accepting()
        await listener.drain(1)


async def test_pipelined_frames_are_answered_in_order_and_a_bad_header_right_after(toy: Listener) -> None:
    """The oversized header behind complete frames is refused as soon as they are answered: the
    client sends nothing more and does not close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", toy.port)
    writer.write(encode_frame(b"a") + encode_frame(b"two") + encode_frame(b"c") + struct.pack(">I", 4096))
    await writer.drain()
    assert await _replies(reader) == [b"A", b"TWO-1", b"TWO-2", b"C", b"refused-by-reader"]
    writer.close()


async def test_a_handler_error_is_refused_and_done_closes_after_the_reply(toy: Listener) -> None:
    """The frames behind the one that ends the connection, sent in the same write, are not served
    (a pipelined loop has already started them: they end without being served)."""
    STARTED.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", toy.port)
    writer.write(encode_frame(b"x") + encode_frame(b"boom") + encode_frame(b"never"))
    assert await _replies(reader) == [b"X", b"refused"]
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", toy.port)
    writer.write(encode_frame(b"bye") + encode_frame(b"never") + encode_frame(b"hold"))
    assert await _replies(reader) == [b"BYE"]
    writer.close()
    assert STARTED == [b"x", b"boom", b"bye"]


async def test_a_connection_counts_its_requests_and_frees_its_budget(toy: Listener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", toy.port)
    writer.write(encode_frame(b"a") + encode_frame(b"b")[:4])
    assert await asyncio.wait_for(reader.readexactly(5), 5) == encode_frame(b"A")
    (conn,) = toy.connections
    assert conn.requests == 1 and conn.held == 5  # the partial frame's declared size is reserved
    writer.write(encode_frame(b"b")[4:])
    assert await asyncio.wait_for(reader.readexactly(5), 5) == encode_frame(b"B")
    writer.close()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while toy.connections and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert conn.requests == 2 and toy.admission.budget.used == 0


async def test_the_last_frame_at_eof_and_an_over_long_line() -> None:
    listener = Listener("lines", "127.0.0.1", 0, _lines, LIMITS)
    await listener.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"one\ntwo")
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5) == b"[one]\n[two]\n"
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"one\n" + b"x" * 100)
        assert await asyncio.wait_for(reader.read(), 5) == b"[one]\ntoo long\n"
        writer.close()
    finally:
        listener.stop_accepting()
        await listener.drain(1)


async def test_a_released_frame_lets_the_next_ones_be_served_and_replies_keep_their_order() -> None:
    async with _pipelined_toy() as listener:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"".join(encode_frame(f) for f in (b"hold", b"a", b"free", b"bye")))
        assert await _replies(reader) == [b"HELD", b"A", b"FREE", b"BYE"]
        writer.close()


async def test_a_sequential_loop_serves_nothing_behind_a_waiting_frame() -> None:
    """The same frames without pipelining: "hold" waits for a "free" that is never served."""
    listener = Listener("toy", "127.0.0.1", 0, _toy, LIMITS)
    await listener.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(encode_frame(b"hold") + encode_frame(b"free"))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 1.0)  # "hold" still waits (5 s)
        writer.close()
    finally:
        listener.stop_accepting()
        await listener.drain(6)


async def test_frames_in_flight_are_bounded() -> None:
    """Released frames still waiting hold the loop at ``MAX_PIPELINED`` in flight: it reads no
    further until the oldest reply is written."""
    async with _pipelined_toy() as listener:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"".join(encode_frame(b"hold") for _ in range(MAX_PIPELINED + 5)))
        await _until_started(MAX_PIPELINED)
        await asyncio.sleep(0.2)  # nothing more is started (a bound, not a race: read no further)
        (conn,) = listener.connections
        assert len(STARTED) == conn.busy == MAX_PIPELINED
        FREED[-1].set()
        replies = await _read_frames(reader, MAX_PIPELINED + 5)
        assert replies == [b"HELD"] * (MAX_PIPELINED + 5)
        writer.close()


async def test_a_frame_that_is_not_a_produce_waits_for_the_ones_before_it() -> None:
    async with _pipelined_toy() as listener:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(encode_frame(b"hold") + encode_frame(b"peek") + encode_frame(b"a"))
        await _until_started(1)
        await asyncio.sleep(0.2)
        assert STARTED == [b"hold"]  # "peek" waits for "hold" to end, and "a" behind it
        FREED[-1].set()
        got = await _read_frames(reader, 3)
        assert got == [b"HELD", b"PEEK", b"A"] and STARTED == [b"hold", b"peek", b"a"]
        writer.close()


async def test_a_frame_waiting_before_its_append_holds_the_ones_behind_it() -> None:
    """Appends keep the arrival order: "a" is not begun while "late", ahead of it, has not made
    its append."""
    async with _pipelined_toy() as listener:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(encode_frame(b"late") + encode_frame(b"a"))
        await _until_started(1)
        await asyncio.sleep(0.2)  # "a" is not begun meanwhile
        assert STARTED == [b"late"]
        FREED[-1].set()
        got = await _read_frames(reader, 2)
        assert got == [b"LATE", b"A"] and STARTED == [b"late", b"a"]
        writer.close()


async def test_the_produce_frames_of_one_read_are_all_started_in_one_pass() -> None:
    """Five appending frames and "bye" sent in one write: the first is served with all six in flight (not
    one event-loop pass per frame, which made a pipelining client's requests and replies travel
    one per read and write)."""
    async with _pipelined_toy() as listener:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"".join(encode_frame(b"busy") for _ in range(5)) + encode_frame(b"bye"))
        got = await _replies(reader)
        assert len(got) == 6 and got[-1] == b"BYE"
        assert got[0] == b"6", got  # all six frames in flight (the old loop: b"1")
        writer.close()
