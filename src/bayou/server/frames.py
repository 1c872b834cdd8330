"""The one per-connection serve loop: read, split into frames, serve each in order, write its reply.

Every front end's connection handler is ``serve_frames`` with the protocol's own pieces: its
framing reader (protocols/framing.py, or V1's line reader), a ``handle`` that serves one frame and
returns the reply bytes, and ``refuse`` for the protocol's error. What protects the broker is then
applied in one place, by construction:

* **Deadlines and the byte budget.** Every read goes through ``Connection.read`` with what the reader
  is assembling (``pending``: the size its header declared), so the idle and request deadlines and
  the broker-wide in-flight budget hold for every protocol (server/base.py).
* **Frame caps from the header alone.** The reader refuses an oversized frame before buffering its
  body (its cap is ``ConnectionLimits.frame_cap``); the loop answers with ``refuse`` and closes.
* **Busy and draining.** A frame is "busy" from dispatch until its reply is written (a draining
  listener lets it finish); a draining listener reads no further request.
* **Order and back-pressure.** Frames are served strictly in arrival order, each reply written
  and drained before the next frame is served: a client that pipelines and does not read cannot
  make the server buffer every reply of one read.
* **Pipelining** (``pipeline``: the protocol's test of a frame that only appends, its produce
  request). Such a frame is served as soon as the one before it is *released*
  (broker/ordering.py): it has made every append it began and only waits for the fsync or the
  replicas, or it has ended. Every other frame waits until the ones before it have ended, so it
  sees what they did (a fetch behind a produce reads it). Appends keep the arrival order, the
  waits of produce requests overlap (one connection's fsyncs are shared as different
  connections' are), and replies are still written in arrival order, by one writer task. At most
  ``MAX_PIPELINED`` frames are in flight: past that the loop reads nothing more until the oldest
  reply is written. ``done`` is asked when a frame ends before any later one has started (a
  released frame, one that appended, is not asked: no protocol ends a connection after a produce
  that appended, while one refused before its append, such as an Iggy send of a revoked user, is);
  the frames behind one that ended the connection are not served.
  The produce frames of one read are all started in one pass, each waiting at its start for the
  one before it to be released (which it usually is by then: an append is made without a wait).
  Were the loop to wait for each release in turn, every frame would cost an event-loop pass, and
  a pipelining client would get its replies one per pass and send its requests one per reply:
  one frame per read, a reply per write (45 us more per request, measured).
* **Stalled readers.** A reader that has more to say without new bytes (``stalled``: a frame
  deferred behind a login, or an error found behind frames already returned) is fed ``b""``
  before the loop reads on, so a bad header is answered as soon as the frames before it are.

* **Answers in flight.** A frame's handler reserves what its answer may hold from the broker-wide
  answer budget (server/answers.py, through ``answer_room()``); the loop releases it once the
  reply is written and drained. Frames served one at a time share the connection's room; in a
  pipeline each frame that is not an append gets its own, released by the writer task.

Per-request metering stays at each protocol's one dispatch point (server/metering.py), the only
place that knows the command's name; TLS and admission are the listener's (server/base.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

from bayou.broker.ordering import Ordered, serving
from bayou.server.answers import ROOM, Room
from bayou.server.base import Connection, Listener
from bayou.server.writes import CoalescingWriter

F = TypeVar("F")
F_co = TypeVar("F_co", covariant=True)
E = TypeVar("E", bound=Exception)

Reply = bytes | list[bytes] | list[bytes | bytearray | memoryview] | None
"""What serving one frame writes: one piece, several in order, or nothing (the handler wrote it,
or the frame has no reply)."""


class Framing(Protocol[F_co]):
    """What the loop needs of a reader (protocols/framing.FrameReader, V1's LineReader)."""

    @property
    def pending(self) -> int: ...

    @property
    def stalled(self) -> bool: ...

    def feed(self, data: bytes) -> Sequence[F_co]: ...


def _never() -> bool:
    return False


async def _write(writer: asyncio.StreamWriter, reply: Reply) -> None:
    """Write one frame's reply and drain it (back-pressure: a peer that does not read stops us)."""
    if reply is None:
        return
    if isinstance(reply, list):
        for piece in reply:
            writer.write(piece)
    else:
        writer.write(reply)
    if not isinstance(writer, CoalescingWriter) or writer.must_drain():
        await writer.drain()


MAX_PIPELINED = 64  # frames of one connection in flight at once (served, reply not yet written)


async def serve_frames(conn: Connection, listener: Listener, reader: Framing[F],
                       handle: Callable[[F], Awaitable[Reply]], *, error: type[E],
                       refuse: Callable[[E], Awaitable[None]], done: Callable[[], bool] = _never,
                       first: bytes = b"", last: Callable[[], F | None] | None = None,
                       pipeline: Callable[[F], bool] | None = None) -> None:
    """Serve ``conn`` until the peer closes, the listener drains, or the stream goes bad.

    ``handle`` serves one frame and returns its reply (see ``Reply``); it may raise ``error`` to
    close the connection, as may the reader. ``refuse`` answers that error (write what the
    protocol sends, if anything) before the connection closes. ``done`` says, after each reply,
    that the connection ends here (Iggy's close-after-reply, a Cursus stream that owned it).
    ``first`` is bytes already read (Iggy's dialect detection); ``last`` gives the frame that the
    end of the stream completes, if the protocol has one (V1's unterminated last line).
    ``pipeline``: which frames only append, and may be served as soon as the one before them is
    released rather than once it is answered (see the module docstring).
    """
    if pipeline is not None:
        await _Pipeline[F, E](conn, listener, reader, handle, error, refuse, done, last,
                              pipeline).run(first)
        return
    room = Room(conn.answers) if conn.answers is not None else None
    token = ROOM.set(room)
    try:
        await _serve_in_turn(conn, listener, reader, handle, error, refuse, done, first, last, room)
    finally:
        ROOM.reset(token)
        if room is not None:
            room.release()


async def _serve_in_turn(conn: Connection, listener: Listener, reader: Framing[F],
                         handle: Callable[[F], Awaitable[Reply]], error: type[E],
                         refuse: Callable[[E], Awaitable[None]], done: Callable[[], bool],
                         first: bytes, last: Callable[[], F | None] | None, room: Room | None) -> None:
    """``serve_frames`` without pipelining: each frame served, its reply written, then the next."""
    writer = conn.writer
    data = first
    at_eof = False
    frames: Sequence[F]
    while True:
        try:
            if at_eof:
                final = last() if last is not None else None
                frames = [] if final is None else [final]
            else:
                frames = reader.feed(data)
            for frame in frames:
                conn.busy += 1
                try:
                    await _write(writer, await handle(frame))
                finally:
                    conn.busy -= 1
                    if room is not None and room.held:
                        room.release()  # the answer has left (or never will)
                if done():
                    return
        except error as exc:
            await refuse(exc)
            return
        if at_eof or listener.draining:
            return
        if reader.stalled:
            data = b""
            continue
        data = await conn.read(reader.pending)
        if not data:
            if last is None:
                return
            at_eof = True


class _Pipeline(Generic[F, E]):
    """``serve_frames`` with pipelining: this task reads and starts frames, ``_write`` writes their
    replies in order."""

    def __init__(self, conn: Connection, listener: Listener, reader: Framing[F],
                 handle: Callable[[F], Awaitable[Reply]], error: type[E],
                 refuse: Callable[[E], Awaitable[None]], done: Callable[[], bool],
                 last: Callable[[], F | None] | None, appends_only: Callable[[F], bool]) -> None:
        self.conn, self.listener, self.reader, self.handle = conn, listener, reader, handle
        self.appends_only = appends_only
        self.error, self.refuse, self.done, self.last = error, refuse, done, last
        self.queue: deque[asyncio.Task[Reply]] = deque()
        self.changed = asyncio.Event()  # a frame queued, a reply written, or the writer ended
        self.closed = False  # the writer ended the connection (``done``, an error)
        self.ending: set[asyncio.Task[Reply]] = set()  # frames after whose reply ``done`` held
        self.stopped = False  # a frame ended the connection (``done``, an error): serve no more
        self.last_released: asyncio.Future[None] | None = None  # the newest frame's ``released``
        self.rooms: dict[asyncio.Task[Reply], Room] = {}  # answer rooms of frames not yet written
        self.reading = True

    async def run(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        writer = loop.create_task(self._write())
        at_eof = False
        try:
            while not self.closed:
                try:
                    if at_eof:
                        final = self.last() if self.last is not None else None
                        frames: Sequence[F] = [] if final is None else [final]
                    else:
                        frames = self.reader.feed(data)
                except self.error as exc:
                    await self._finish(writer)  # the replies before it first
                    if not self.closed:
                        await self.refuse(exc)
                    return
                for frame in frames:
                    while len(self.queue) >= MAX_PIPELINED and not self.closed:
                        self.changed.clear()
                        await self.changed.wait()
                    if self.closed or self.stopped:
                        break
                    appends = self.appends_only(frame)
                    if not appends:  # after every frame before it has ended
                        running = [t for t in self.queue if not t.done()]
                        if running:
                            await asyncio.wait(running)
                    await self._start(loop, frame, appends)
                    if self.stopped:  # it ends the connection: read no further
                        break
                else:
                    if not (at_eof or self.listener.draining or self.closed or self.stopped):
                        if self.reader.stalled:
                            data = b""
                            continue
                        data = await self.conn.read(self.reader.pending)
                        if not data:
                            if self.last is None:
                                break
                            at_eof = True
                        continue
                break
            await self._finish(writer)
        finally:
            writer.cancel()
            for task in self.queue:
                task.cancel()
            for room in self.rooms.values():  # frames never written (the connection ended)
                room.release()
            self.rooms.clear()

    async def _start(self, loop: asyncio.AbstractEventLoop, frame: F, appends: bool) -> None:
        """Serve ``frame`` in a task of its own. A frame that only appends is started at once and
        begins once the frame before it is released (so one read's frames are all started in one
        pass, and their replies leave together); any other frame is started once every frame
        before it has ended, and returned once it is released or done."""
        self.conn.busy += 1
        request = Ordered(loop.create_future())
        gate = self.last_released
        context = serving(request)
        # a frame that is not an append (a fetch) gets an answer room of its own
        room = None if appends or self.conn.answers is None else Room(self.conn.answers)
        if room is not None:
            context.run(ROOM.set, room)
        task: asyncio.Task[Reply] = loop.create_task(
            self._serve(frame, request, None if gate is None or gate.done() else gate),
            context=context)
        task.add_done_callback(lambda _t: request.release())
        if room is not None:
            self.rooms[task] = room
        self.queue.append(task)
        self.last_released = request.released
        self.changed.set()
        if not appends:
            await request.released

    async def _serve(self, frame: F, request: Ordered, gate: asyncio.Future[None] | None) -> Reply:
        if gate is not None and not gate.done():
            # the frame before it has made its appends (or ended); shielded, so that cancelling
            # this frame (the connection's end) leaves the other's ``released`` alone
            await asyncio.shield(gate)
        if self.stopped:
            return None  # a frame before it ended the connection: never written
        try:
            reply = await self.handle(frame)
        except self.error:
            self.stopped = True
            raise
        if not request.released.done() and self.done():
            # ``done`` is the state the newest frame left: a frame that ran to its end before
            # the next one began ends the connection after its reply. (A released frame, one
            # that appended, is not asked: no protocol's ``done`` follows an append. A produce
            # refused before its append, an Iggy send of a revoked user, is asked.)
            self.stopped = True
            self.ending.add(asyncio.current_task())  # type: ignore[arg-type]
        return reply

    async def _finish(self, writer: asyncio.Task[None]) -> None:
        """No more frames: let the writer write what is queued, then end."""
        self.reading = False
        self.changed.set()
        await asyncio.shield(writer)

    async def _write(self) -> None:
        """The replies, in arrival order; ends the connection on ``error`` or ``done``."""
        out = self.conn.writer
        try:
            while True:
                if not self.queue:
                    if not self.reading:
                        return
                    self.changed.clear()
                    await self.changed.wait()
                    continue
                task = self.queue[0]
                try:
                    try:
                        reply = await task  # (this task is cancelled only with the frames)
                    except self.error as exc:
                        self.closed = True
                        await self.refuse(exc)
                        return
                    await _write(out, reply)
                finally:
                    self.queue.popleft()
                    self.conn.busy -= 1
                    self.changed.set()
                    room = self.rooms.pop(task, None)
                    if room is not None:
                        room.release()  # the answer has left (or never will)
                if task in self.ending:
                    self.closed = True
                    return
        except BaseException:
            self.closed = True
            raise
        finally:
            if self.closed:
                for task in self.queue:
                    task.cancel()
                if self.reading:
                    out.close()  # the reader, waiting for bytes, sees the end and stops
            self.changed.set()


__all__ = ["MAX_PIPELINED", "Framing", "Reply", "serve_frames"]
