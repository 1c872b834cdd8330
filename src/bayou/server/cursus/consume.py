"""Cursus's reads: CONSUME (one poll, long-polling up to ``wait_ms``) and STREAM (the broker
pushes new records on the connection until the client sends a byte or closes it, with keepalives
and, outside a group member, auto-commits). A whole stored batch is served as its bytes; a part
of one, or records another protocol stored, as messages cut or encoded once."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from functools import partial

from bayou.broker.window import Stored, window
from bayou.errors import BayouError, CorruptStorage, OffsetOutOfRange, OffsetRegression
from bayou.protocols.cursus import batch as cb
from bayou.protocols.cursus import replies
from bayou.protocols.cursus import requests as rq
from bayou.protocols.cursus.framing import KEEPALIVE, encode_frame
from bayou.records.batch import HEADER_SIZE, BatchHeader, Record, iter_batches
from bayou.records.cursus import (
    FORMAT_CURSUS,
    decode_message,
    encode_message,
    message_starts,
    record_to_message,
)
from bayou.server.answers import Room, answer_room
from bayou.server.base import Connection
from bayou.server.cursus.context import ConnState, Context, err
from bayou.server.workers import decode_stored

READ_MAX_BYTES = 8 << 20  # what one CONSUME or STREAM push reads (a batch at least)
STREAM_KEEPALIVE_S = 5.0
STREAM_COMMIT_S = 5.0
_SEQ = struct.Struct(">Q")


class ConsumeHandlers:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.streams: dict[str, asyncio.Task[object]] = {}  # "topic:partition:group" -> its pushing task

    async def _read_messages(self, topic: str, partition: int, offset: int, limit: int,
                             wait_ms: int, room: Room | None = None) -> tuple[bytes, int, int, int, int]:
        """Up to ``limit`` messages from ``offset``: (message bytes, count, first seq, last seq,
        next offset). ``room``: reserved before the read (after the wait) and kept at the
        answer's size (server/answers.py)."""
        reserve = None if room is None else partial(room.claim, READ_MAX_BYTES)
        res = await self.broker.fetch(topic, partition, offset, max_bytes=READ_MAX_BYTES, max_records=limit,
                                      max_wait_ms=wait_ms, before_read=reserve)
        out = await self._messages(res.data, offset, limit)
        if room is not None:
            room.keep(len(out[0]))
        return out

    async def _messages(self, data: bytes, offset: int, limit: int) -> tuple[bytes, int, int, int, int]:
        """``_read_messages``'s answer from the batches read."""
        chunks: list[bytes] = []
        count = 0
        first_seq = last_seq = 0
        next_offset = offset
        if limit <= 0:
            return b"", count, first_seq, last_seq, next_offset

        async def decode(pos: int, _h: BatchHeader) -> list[Record]:
            return await decode_stored(data, pos)

        async for piece in window(iter_batches(data), FORMAT_CURSUS, offset, decode):
            if isinstance(piece, Stored):
                pos, h = piece.pos, piece.header
                skip = piece.lo - h.base_offset
                take = min(h.record_count - skip, limit - count)
                body = pos + HEADER_SIZE
                if skip == 0 and take == h.record_count and 0 <= h.producer_id < h.size - HEADER_SIZE:
                    # The whole stored batch: serve its bytes without walking the messages.
                    chunks.append(bytes(data[body : pos + h.size]))
                    if count == 0:
                        first_seq = _SEQ.unpack_from(data, body + 8)[0]
                    last_seq = _SEQ.unpack_from(data, body + h.producer_id + 8)[0]
                    count += take
                    next_offset = h.next_offset
                else:
                    starts = message_starts(data, body, h.record_count, pos + h.size)
                    a, b = starts[skip], starts[skip + take]
                    chunks.append(bytes(data[a:b]))
                    m_first, _ = decode_message(data, a)
                    m_last, _ = decode_message(data, starts[skip + take - 1])
                    if count == 0:
                        first_seq = m_first.seq_num
                    last_seq = m_last.seq_num
                    count += take
                    next_offset = h.base_offset + skip + take
            else:
                out = bytearray()
                for rec in piece.records[:limit - count]:
                    m = record_to_message(rec)
                    encode_message(m, out)
                    if count == 0:
                        first_seq = m.seq_num
                    last_seq = m.seq_num
                    count += 1
                    next_offset = rec.offset + 1
                chunks.append(bytes(out))
            if count >= limit:
                break
        return b"".join(chunks), count, first_seq, last_seq, next_offset

    def _start_offset(self, topic: str, partition: int, group: str, explicit: int | None,
                      reset: str | None) -> int:
        committed = self.broker.committed_offset(group, topic, partition)
        if committed is not None:
            return committed
        if explicit is not None:
            return explicit
        earliest, latest = self.broker.partition_bounds(topic, partition)
        return latest if (reset or "").lower() == "latest" else earliest

    async def _check_read_target(self, topic: str, partition: int) -> None:
        if not await self.broker.has_topic(topic):
            raise err("command_failed", ("reason", f"topic '{topic}' does not exist"))
        n = self.broker.partition_count(topic)
        if not 0 <= partition < n:
            raise err("command_failed",
                      ("reason", f"partition {partition} out of range for topic '{topic}' (0-{n - 1})"))

    async def consume(self, req: rq.Consume, state: ConnState, conn: Connection | None) -> bytes:
        topic, p = req.topic, req.partition
        await self._check_read_target(topic, p)
        start = state.positions.get((topic, p))
        if start is None:
            committed = self.broker.committed_offset(req.group, topic, p)
            # Never behind the client's own position: the published client polls on a new
            # connection each time and commits lazily, so a lower committed offset would hand it
            # records it has already processed.
            start = req.offset if committed is None else max(committed, req.offset)
        try:
            messages, count, s0, s1, nxt = await self._read_messages(topic, p, start, req.batch, req.wait_ms,
                                                                     answer_room())
        except OffsetOutOfRange:  # below the start, also when retention moved it during the read
            earliest, latest = self.broker.partition_bounds(topic, p)
            raise err("OFFSET_OUT_OF_RANGE", ("requested", start), ("earliest", earliest),
                      ("latest", latest)) from None
        if count:
            state.positions[(topic, p)] = nxt
        return cb.encode_batch(topic, p, messages, count, s0, s1)

    async def stream(self, req: rq.Stream, state: ConnState, conn: Connection | None) -> bytes | None:
        topic, p, group = req.topic, req.partition, req.group
        await self._check_read_target(topic, p)
        start = self._start_offset(topic, p, group, req.offset, req.auto_offset_reset)
        if conn is None:
            raise err("invalid_stream_syntax")
        state.streaming = True
        key = f"{topic}:{p}:{group}"
        old = self.streams.get(key)
        if old is not None:
            old.cancel()
        task = asyncio.current_task()
        assert task is not None
        self.streams[key] = task
        conn.busy -= 1  # a stream is not an in-flight request: shutdown cancels it at once
        try:
            # A group member commits what it processed itself; auto-committing the push position
            # would move the group past records it never handled.
            await self._push(conn, topic, p, group, start, max(1, req.batch), key,
                             auto_commit=not req.member)
        finally:
            conn.busy += 1
            if self.streams.get(key) is task:
                del self.streams[key]
        return None

    async def _push(self, conn: Connection, topic: str, p: int, group: str, position: int, limit: int,
                    key: str, auto_commit: bool = True) -> None:
        """Push new records as they arrive, keepalives every 5 s, auto-commit every 5 s."""
        loop = asyncio.get_running_loop()
        next_keepalive = loop.time() + STREAM_KEEPALIVE_S
        next_commit = loop.time() + STREAM_COMMIT_S
        committed = position
        eof = loop.create_task(conn.reader.read(1))  # any inbound byte or EOF ends the stream
        reason = "stopped"
        room = Room(conn.answers) if conn.answers is not None else None  # each push's, until sent
        try:
            while not eof.done():
                if room is not None:
                    room.release()  # the push before has left (drained below)
                wait = max(0.0, min(next_keepalive, next_commit) - loop.time())
                try:
                    messages, count, s0, s1, nxt = await self._read_messages(
                        topic, p, position, limit, int(wait * 1000), room)
                except OffsetOutOfRange:
                    earliest, latest = self.broker.partition_bounds(topic, p)
                    conn.writer.write(encode_frame(
                        f"STREAM_CONTROL type=CLOSE reason=offset_out_of_range offset={position} "
                        f"requested={position} earliest={earliest} latest={latest}".encode()))
                    reason = ""
                    return
                except CorruptStorage:  # the partition is quarantined from ``position`` on
                    reason = replies.ErrorCode.STORAGE_ERROR
                    return
                if count:
                    conn.writer.write(encode_frame(cb.encode_batch(topic, p, messages, count, s0, s1)))
                    position = nxt
                now = loop.time()
                if now >= next_keepalive:
                    conn.writer.write(KEEPALIVE)
                    next_keepalive = now + STREAM_KEEPALIVE_S
                if now >= next_commit and position != committed and auto_commit:
                    committed = await self._auto_commit(group, topic, p, position, committed)
                    next_commit = now + STREAM_COMMIT_S
                elif now >= next_commit:
                    next_commit = now + STREAM_COMMIT_S
                await conn.writer.drain()
                if count >= limit:  # a full batch: a backlog, read from the page cache without a
                    await asyncio.sleep(0)  # wait; let the loop's other work run between batches
        except asyncio.CancelledError:
            reason = "replaced" if self.streams.get(key) is not asyncio.current_task() else "stopped"
            raise
        finally:
            eof.cancel()
            if room is not None:
                room.release()
            if position != committed and auto_commit:
                with contextlib.suppress(Exception):
                    await self._auto_commit(group, topic, p, position, committed)
            if reason:
                with contextlib.suppress(Exception):
                    conn.writer.write(encode_frame(
                        f"STREAM_CONTROL type=CLOSE reason={reason} offset={position}".encode()))
                    await conn.writer.drain()

    async def _auto_commit(self, group: str, topic: str, p: int, position: int, committed: int) -> int:
        """Commit the stream position for its group (the issue's auto-commit); never backwards."""
        if self.broker.group_topic(group) != topic:
            return committed
        try:
            await self.broker.commit_offset(group, topic, p, position)
        except (OffsetRegression, BayouError):
            return committed
        return position
