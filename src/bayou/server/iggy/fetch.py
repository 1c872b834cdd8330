"""Iggy's POLL_MESSAGES: the partition a poll reads, where it starts (offset, timestamp, first,
last, next), and the messages it answers.

What Iggy producers sent is stored as their frames and served back from the stored bytes (the
``Stored`` pieces of ``broker.window``: V and L reply records cut from the stored frames); records
produced through other protocols are converted once, when an Iggy client polls them. In cluster
mode a broker holding no replica of the partition reads at its leader.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bayou.broker import FETCH_MAX_BYTES, YIELD_EVERY
from bayou.broker.window import Stored, window
from bayou.errors import NotLeader
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import POLL_PREFIX
from bayou.protocols.iggy.codec import encode_reply
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.convert import micros, record_to_polled
from bayou.protocols.iggy.framing import Dialect, IggyError
from bayou.protocols.iggy.stored import legacy_messages, legacy_messages_uniform, vsr_record
from bayou.protocols.iggy.wire import U32
from bayou.records.batch import HEADER_SIZE, BatchHeader, iter_batches
from bayou.records.iggy import FORMAT_IGGY, append_time_us, frame_positions, frame_stride
from bayou.records.model import Record
from bayou.server.answers import Room, answer_room
from bayou.server.iggy.catalog import StreamEntry, TopicEntry
from bayou.server.iggy.context import Context, Session
from bayou.server.iggy.groups import GroupHandlers
from bayou.server.workers import decode_stored

POLL_MAX_BYTES = FETCH_MAX_BYTES  # the most one poll reads, over all its reads (at least a batch)
WAIT_MAX_MS = 30_000  # the longest WAIT_FOR_MESSAGES holds a connection
REMOTE_WAIT_MS = 100  # ... when a listed partition is read at another broker (cluster mode)
# the consumer a POLL_PARTITIONS polls as: a plain one (its offsets are the client's own)
_PLAIN_CONSUMER = m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(0))


class FetchHandlers:
    def __init__(self, ctx: Context, groups: GroupHandlers) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.groups = groups  # a group consumer polls the partitions its group assigns it

    async def _poll_partition(self, s: Session, stream: StreamEntry, topic: TopicEntry,
                              req: m.PollMessages) -> tuple[int | None, bool]:
        """The partition a poll reads, or None for "nothing to read" (a member without
        partitions, or a V member naming a partition it no longer owns); and whether it is one of
        several the member is given in turn (a member naming none)."""
        p = self.ctx.partition_in(s, req.partition_id)
        if req.consumer.kind != m.ConsumerKind.GROUP:
            p = 0 if p is None else p
            self.ctx.check_partition(topic, p)
            return p, False
        group = self.ctx.group(topic, req.consumer.id)
        owned = await self.groups.member_partitions(s, stream, topic, group)
        if p is None:
            if not owned:
                return None, False
            key = (stream.id, topic.id, group.id)
            i = s.cursor.get(key, -1) + 1
            s.cursor[key] = i
            return owned[i % len(owned)], len(owned) > 1
        self.ctx.check_partition(topic, p)
        return (p if p in owned else None), False

    async def poll(self, s: Session, req: m.PollMessages) -> bytes | m.PolledMessages:
        reply, empty, target = await self._poll(s, req, room=answer_room())
        wait_ms = min(req.max_wait_ms, WAIT_MAX_MS) if isinstance(req, m.PollBatches) else 0
        if not empty or wait_ms <= 0 or self.broker.closing:
            return reply
        return await self._poll_waiting(s, req, reply, target, wait_ms)

    async def _poll_waiting(self, s: Session, req: m.PollMessages, reply: bytes | m.PolledMessages,
                            target: tuple[str, int, int] | None, wait_ms: int) -> bytes | m.PolledMessages:
        """A POLL_BATCHES with ``max_wait_ms`` that found nothing: poll again once a record
        arrives past its start (``target``: topic, partition, start), or answer empty when the
        time passes. Records past the start that the poll did not return (transaction markers, a
        timestamp not reached) end the wait at once, as they end WAIT_FOR_MESSAGES'. Without a
        partition to watch, the wait is cut to REMOTE_WAIT_MS."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        if target is None:
            # nothing to wait on here: a group member without partitions or naming none, a
            # partition read at its leader
            await asyncio.sleep(min(wait_ms, REMOTE_WAIT_MS) / 1000)  # a client looping on it does not spin
            return (await self._poll(s, req, room=answer_room()))[0]
        topic, p, start = target
        await self.broker.known_records_end(topic, p)
        polled_again = False
        while True:
            # registered before the end is read: an append in between still wakes the wait
            waiters = self.broker.data_waiters([(topic, p)])
            try:
                if not waiters:  # the partition is gone
                    return reply
                if self.broker.records_end(topic, p) > start:
                    if polled_again:
                        return reply
                else:
                    left = deadline - loop.time()
                    if left <= 0 or self.broker.closing:
                        return reply
                    await asyncio.wait(waiters, timeout=left)
            finally:
                for fut in waiters:
                    fut.cancel()
            reply, empty, target = await self._poll(s, req, room=answer_room())
            polled_again = True
            if not empty or target is None:
                return reply
            topic, p, start = target

    async def _poll(self, s: Session, req: m.PollMessages, *, max_bytes: int | None = None,
                    room: Room | None = None
                    ) -> tuple[bytes | m.PolledMessages, bool, tuple[str, int, int] | None]:
        """The poll's reply; whether it holds no message; and when it does not because its start
        is at the log end, what a wait would watch (topic, partition, start; None: nothing).
        ``room``: the answer room its read reserves from (answers.py; None: the caller's)."""
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "poll", stream.id, topic.id)
        dialect = s.dialect or Dialect.LEGACY
        # ``turns``: a group member naming no partition is given its several in turn; a wait on
        # the one this poll got would hold back records on the others (cut as for "remote")
        p, turns = await self._poll_partition(s, stream, topic, req)
        if p is None:
            pid = m.RESYNC_PARTITION if dialect is Dialect.VSR and req.partition_id is not None else 0
            return POLL_PREFIX.pack(pid, 0, 0), True, None
        kind = req.strategy.kind
        try:
            self.broker.check_readable(topic.topic, p)
            remote = False
        except NotLeader:  # cluster mode, no replica here: read at the leader (not by timestamp)
            if not self.broker.clustered or kind == m.PollingKind.TIMESTAMP:
                raise
            remote = True
        if remote:
            probe = await self.broker.fetch_at_leader(topic.topic, p, 0, 0)
            hw, start_of_log = probe.high_watermark, probe.log_start_offset
        else:
            start_of_log, hw = self.broker.partition_bounds(topic.topic, p)
        current = max(hw - 1, 0)
        key = self.groups.consumer_key(topic, req.consumer)
        not_before_us = 0
        if kind == m.PollingKind.OFFSET:
            start = req.strategy.value
        elif kind == m.PollingKind.TIMESTAMP:
            not_before_us = req.strategy.value
            found = await self.broker.offset_for_timestamp(topic.topic, p, not_before_us // 1000)
            start = hw if found is None else found
        elif kind == m.PollingKind.FIRST:
            start = start_of_log
        elif kind == m.PollingKind.LAST:
            start = hw - min(req.count, hw)
        else:  # NEXT
            committed = await self.broker.current_committed_offset(key, topic.topic, p)
            start = start_of_log if committed is None else committed
        start = max(start, start_of_log)
        out_pid = self.ctx.partition_out(s, p)
        if req.count == 0 or start >= hw:
            waits_on = None if remote or turns or req.count == 0 else (topic.topic, p, start)
            return POLL_PREFIX.pack(out_pid, current, 0), True, waits_on
        # bayou's POLL_BATCHES: the V layout on the legacy transport (the stored frames as they are)
        layout = Dialect.VSR if isinstance(req, m.PollBatches) else dialect
        parts, count, last = await self._read(topic.topic, p, out_pid, start, req.count, hw, layout,
                                              not_before_us, remote=remote, envelope=s.envelopes,
                                              max_bytes=max_bytes, room=room)
        if req.auto_commit and count:
            await self.broker.commit_offset(key, topic.topic, p, last + 1)
        # nothing read past the start (transaction markers only): a wait goes on from there
        waits_on = None if count or remote or turns else (topic.topic, p, start)
        if dialect is Dialect.SEED:
            assert isinstance(parts, list)
            return m.PolledMessages(out_pid, current, tuple(parts)), not count, waits_on
        return b"".join([POLL_PREFIX.pack(out_pid, current, count), *parts]), not count, waits_on

    async def poll_partitions(self, s: Session, req: m.PollPartitions) -> bytes:
        """bayou's POLL_PARTITIONS (messages.PollPartitions): with ``max_wait_ms``, WAIT_FOR_MESSAGES'
        wait on the listed partitions first (which checks each as a poll does), then each polled
        from its offset, its reply as POLL_BATCHES'. The answer holds at most POLL_MAX_BYTES over
        all of them (one partition's batches at least): those past it are answered empty, and the
        client polls them on from the same offsets."""
        if s.dialect is Dialect.SEED:  # the design document's layouts have no batch records
            raise IggyError(Status.INVALID_COMMAND, "POLL_PARTITIONS is served to legacy-transport clients")
        if req.max_wait_ms > 0:
            await self.wait(s, m.WaitForMessages(req.max_wait_ms, tuple(
                m.WaitTopic(t.stream, t.topic, tuple((p, offset) for p, offset, _n in t.partitions))
                for t in req.topics)))
        out = [U32.pack(sum(len(t.partitions) for t in req.topics))]
        left = POLL_MAX_BYTES
        room = answer_room()
        if room is not None:  # the whole answer's, before its reads (answers.py)
            await room.reserve(POLL_MAX_BYTES)
        done = 0
        for t in req.topics:
            for p, offset, count in t.partitions:
                done += 1
                if done % YIELD_EVERY == 0:  # reads from the page cache do not suspend: let the
                    await asyncio.sleep(0)  # loop's other connections in (10,000 polls take 0.4 s)
                strategy = m.PollingStrategy(m.PollingKind.OFFSET, offset)
                poll = m.PollBatches(_PLAIN_CONSUMER, t.stream, t.topic, p, strategy,
                                     count if left > 0 else 0, False)
                reply, _empty, _target = await self._poll(s, poll, max_bytes=max(left, 1))
                assert isinstance(reply, bytes)  # the V layout, never the seed's messages
                left -= len(reply) - POLL_PREFIX.size
                out.append(U32.pack(len(reply)))
                out.append(reply)
        if room is not None:
            room.keep(POLL_MAX_BYTES - left)
        return b"".join(out)

    async def wait(self, s: Session, req: m.WaitForMessages) -> bytes:
        """bayou's WAIT_FOR_MESSAGES (messages.WaitForMessages): a u32, how many of the listed
        partitions hold messages at or past their offset, once one does or ``max_wait_ms``
        (at most WAIT_MAX_MS) has passed. Partitions are checked as POLL_MESSAGES checks them
        (the topic resolved, ``poll`` permitted, the partition existing). In cluster mode a
        partition this broker holds no replica of cannot be waited on here: the wait is then
        cut to REMOTE_WAIT_MS, so the client polls it at its leader that often."""
        listed: list[tuple[str, int, int]] = []
        remote = False
        seen = 0  # a counter, not a Pace: this is every waiting consumer's request
        for t in req.topics:
            stream, topic = await self.ctx.resolve(t.stream, t.topic)
            self.ctx.permit(s, "poll", stream.id, topic.id)
            for partition_id, offset in t.partitions:
                seen += 1
                if seen % YIELD_EVERY == 0:  # as in poll_partitions
                    await asyncio.sleep(0)
                p = self.ctx.partition_in(s, partition_id)
                if p is None:
                    raise IggyError(Status.PARTITION_NOT_FOUND, f"partition {partition_id}")
                self.ctx.check_partition(topic, p)
                try:
                    self.broker.check_readable(topic.topic, p)
                except NotLeader:
                    remote = True
                    continue
                await self.broker.known_records_end(topic.topic, p)
                listed.append((topic.topic, p, offset))
        wait_s = min(req.max_wait_ms, WAIT_MAX_MS, REMOTE_WAIT_MS if remote else WAIT_MAX_MS) / 1000
        if not listed:  # nothing to wait on here (none listed, or all read at other brokers)
            await asyncio.sleep(wait_s)  # the time asked: a client looping on it does not spin
            return U32.pack(0)
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            # registered before the ends are read: an append in between still wakes the wait
            waiters = self.broker.data_waiters((t, p) for t, p, _o in listed) if wait_s > 0 else []
            try:
                # past the last record, not the high watermark: Kafka transaction markers at the
                # end are nothing a poll returns, and would end every wait at once; and past the
                # log start (a poll from below it reads from there: a purged, empty partition has
                # nothing for it)
                bounds = self.broker.partition_bounds
                ready = sum(1 for t, p, offset in listed
                            if self.broker.records_end(t, p) > max(offset, bounds(t, p)[0]))
                left = deadline - asyncio.get_running_loop().time()
                if ready or left <= 0 or not waiters or self.broker.closing:
                    return U32.pack(ready)
                await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for fut in waiters:
                    fut.cancel()

    async def _read(self, topic: str, p: int, out_pid: int, start: int, count: int, hw: int,
                    dialect: Dialect, not_before_us: int, *, remote: bool = False,
                    envelope: bool = False, max_bytes: int | None = None,
                    room: Room | None = None) -> tuple[list[Any], int, int]:
        """Up to ``count`` messages from ``start``: reply parts (bytes for L and V, PolledMessage
        for D), how many, and the last offset. ``remote``: read at the partition's leader.
        ``max_bytes`` (at most POLL_MAX_BYTES, the default): the bytes read, and the bytes of the
        answer, stop there (a batch at least: records converted from a compressed batch may be
        many times its stored size). ``room``: reserves ``max_bytes`` before the reads and keeps
        what the answer holds (answers.py)."""
        budget = POLL_MAX_BYTES if max_bytes is None else min(max_bytes, POLL_MAX_BYTES)
        if room is not None:
            waiting = room.claim(budget)
            if waiting is not None:
                await waiting
        parts: list[Any] = []
        taken = 0
        last = start - 1
        offset = start
        # bytes read so far and bytes answered: a poll of a large count stops at the budget (its
        # answer is held in memory; the client polls on from the last offset it got, as after any poll)
        read = answered = 0
        while taken < count and offset < hw and read < budget and answered < budget:
            before = offset
            if remote:
                r = await self.broker.fetch_at_leader(topic, p, offset, budget - read)
            else:
                r = await self.broker.fetch(topic, p, offset, max_bytes=budget - read,
                                            max_records=count - taken, from_log_start=True)
            if not r.data:
                break
            data = r.data
            read += len(data)
            # The read clamps to the log start now, which retention may have moved past the
            # high watermark taken before it: what it returned is bounded by its own.
            hw = max(hw, r.high_watermark)

            async def decode(pos: int, _h: BatchHeader, data: bytes = data) -> list[Record]:
                return await decode_stored(data, pos)

            async for piece in window(iter_batches(data), FORMAT_IGGY, offset, decode, stop=hw):
                had = len(parts)
                h, lo = piece.header, piece.lo
                hi = min(piece.hi, lo + count - taken)
                if isinstance(piece, Stored):
                    append = append_time_us(h.base_timestamp, h.base_sequence)
                    if append < not_before_us:
                        offset = h.next_offset
                        continue
                    pos = piece.pos
                    body = pos + HEADER_SIZE
                    positions = frame_positions(data, body, pos + h.size, h.record_count,
                                                frame_stride(h.base_sequence))
                    i0, i1 = lo - h.base_offset, hi - h.base_offset
                    if dialect is Dialect.VSR:
                        parts.append(vsr_record(out_pid, data, positions, i0, i1, base_offset=h.base_offset,
                                                append_us=append, origin_base=h.producer_id))
                    elif dialect is Dialect.LEGACY:
                        stride = frame_stride(h.base_sequence)
                        if stride and positions[1] - positions[0] == stride:
                            parts.append(legacy_messages_uniform(
                                data, body, stride, i0, i1, base_offset=h.base_offset, append_us=append,
                                origin_base=h.producer_id))
                        else:
                            parts.extend(legacy_messages(data, positions, i0, i1, base_offset=h.base_offset,
                                                         append_us=append, origin_base=h.producer_id))
                    else:
                        parts.extend(record_to_polled(rec, timestamp=append, envelope=envelope)
                                     for rec in (await decode_stored(data, pos))[i0:i1])
                    taken += i1 - i0
                    last = hi - 1
                else:
                    polled = [record_to_polled(rec, timestamp=micros(rec.timestamp), envelope=envelope)
                              for rec in piece.records
                              if rec.offset < hi and micros(rec.timestamp) >= not_before_us]
                    if polled:
                        if dialect is Dialect.SEED:
                            parts.extend(polled)
                        else:
                            reply = m.PolledMessages(out_pid, 0, tuple(polled))
                            parts.append(encode_reply(reply, dialect)[POLL_PREFIX.size:])
                        taken += len(polled)
                        last = polled[-1].offset
                offset = hi
                answered += sum(len(x) if isinstance(x, bytes | bytearray | memoryview) else len(x.payload)
                                for x in parts[had:])
                if taken >= count or answered >= budget:
                    break
            if offset == before:  # nothing below hw in what came back (retention moved the start past it)
                break
        if room is not None:
            room.keep(max(read, answered))
        return parts, taken, last


__all__ = ["POLL_MAX_BYTES", "FetchHandlers"]
