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
* **Stalled readers.** A reader that has more to say without new bytes (``stalled``: a frame
  deferred behind a login, or an error found behind frames already returned) is fed ``b""``
  before the loop reads on, so a bad header is answered as soon as the frames before it are.

Per-request metering stays at each protocol's one dispatch point (server/metering.py), the only
place that knows the command's name; TLS and admission are the listener's (server/base.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from bayou.server.base import Connection, Listener

F = TypeVar("F")
F_co = TypeVar("F_co", covariant=True)
E = TypeVar("E", bound=Exception)

Reply = bytes | list[bytes] | None
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


async def serve_frames(conn: Connection, listener: Listener, reader: Framing[F],
                       handle: Callable[[F], Awaitable[Reply]], *, error: type[E],
                       refuse: Callable[[E], Awaitable[None]], done: Callable[[], bool] = _never,
                       first: bytes = b"", last: Callable[[], F | None] | None = None) -> None:
    """Serve ``conn`` until the peer closes, the listener drains, or the stream goes bad.

    ``handle`` serves one frame and returns its reply (see ``Reply``); it may raise ``error`` to
    close the connection, as may the reader. ``refuse`` answers that error (write what the
    protocol sends, if anything) before the connection closes. ``done`` says, after each reply,
    that the connection ends here (Iggy's close-after-reply, a Cursus stream that owned it).
    ``first`` is bytes already read (Iggy's dialect detection); ``last`` gives the frame that the
    end of the stream completes, if the protocol has one (V1's unterminated last line).
    """
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
                    reply = await handle(frame)
                    if reply is not None:
                        if isinstance(reply, list):
                            for piece in reply:
                                writer.write(piece)
                        else:
                            writer.write(reply)
                        await writer.drain()
                finally:
                    conn.busy -= 1
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


__all__ = ["Framing", "Reply", "serve_frames"]
