"""The TANK protocol bound to the broker (tank.md; TANK 4.0 standalone behaviour).

Frames are ``u8 msgId + u32 LE size + payload``; the broker pings once on accept. Requests are
decoded by the sans-IO codec (``bayou.protocols.tank``) and dispatched through one table keyed by
message id. Produce and the admin requests are answered in arrival order; a Consume that has to
long-poll runs on its own so later requests on the connection overtake it (§1). Every write to a
connection goes through one lock, because a consume response is written in pieces: its header from
memory, then each chunk, stored TANK bundles straight from the segment file with os.sendfile
(``zerocopy``) and records produced elsewhere converted once (``tank_store``).

Malformed requests, unknown message ids (and the obsolete 0x4) close the connection without a
reply, as TANK does; nothing stored changes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bayou.broker import FETCH_MAX_BYTES, YIELD_EVERY, Broker, Pace, ordering
from bayou.broker.authz import Action
from bayou.errors import BayouError, CorruptRecord, NotLeader, OffsetOutOfRange, StorageError, Unauthorized
from bayou.protocols.tank import codec
from bayou.protocols.tank import messages as m
from bayou.protocols.tank.codes import (
    ConsumeFlag,
    CreateTopicError,
    MsgId,
    PartitionFault,
    ProduceError,
    ReloadConfError,
    TankError,
    consume_flag_for,
    create_topic_error_for,
    reload_conf_error_for,
)
from bayou.protocols.tank.framing import MAX_PAYLOAD, PING_FRAME, Frame, FrameReader, frame_header
from bayou.records.tank import BundleHeader
from bayou.server import zerocopy
from bayou.server.answers import Room
from bayou.server.base import Connection, Listener
from bayou.server.frames import serve_frames
from bayou.server.metering import UNKNOWN, RequestMeter
from bayou.server.tank_config import TankConfigError, parse_config, to_bayou, valid_topic_name
from bayou.server.tank_store import (
    MAX_FETCH,
    U64_MAX,
    Chunk,
    FileRange,
    check_received,
    first_available,
    last_assigned,
    produce_bundle,
    read_chunk,
)
from bayou.server.workers import OFF_LOOP_BYTES, parse_pool, run_in

log = logging.getLogger("bayou.tank")

VERSION = 400  # what TANK 4.0 reports in Status (major x 100 + minor)
MAX_WAIT_MS = 3_600_000
# The chunks of one consume answer, over all its partition entries: one Consume may list 65,025
# entries (the same partition again and again, too), each asking for up to 64 MiB, and chunks
# converted from other protocols' records are held in memory until sent. Past the bound, the
# entries still to resolve are answered with an empty chunk (as at the end of the partition,
# with the partition's hwmark above the seq asked for) and the client asks for them again; the
# first entry with data always gets its chunk, so every consumer progresses.
CONSUME_MAX_BYTES = FETCH_MAX_BYTES


def normalise_max_wait(ms: int) -> float:
    """Seconds until a long poll ends (§5.6): 0 stays 0; otherwise capped at one hour, rounded up
    to 64 ms, at least 320 ms, and the deadline aligned up to 128 ms of the clock."""
    if ms == 0:
        return 0.0
    wait = max(320, math.ceil(min(ms, MAX_WAIT_MS) / 64) * 64)
    now = time.time() * 1000
    deadline = math.ceil((now + wait) / 128) * 128
    return (deadline - now) / 1000


Entry = tuple[m.ConsumePartitionResult, Chunk | None, bool]  # (header entry, chunk, at the end)
Answers = list[tuple[Any, list[Entry]]]


class Poll:
    """A consume waiting at the end of its partitions, as a Produce on the same connection sees it.

    ``armed`` are the partitions' data waiters of the current wait. While the poll is not waiting
    on them, or one of them has fired, it is deciding whether to answer: a Produce waits for that
    decision (``settled``), so a consume that its append woke is answered first (tank.md §1,
    ``bm_p2c_default``) and one that keeps waiting (min bytes not reached) holds nothing back.
    """

    def __init__(self) -> None:
        self.armed: list[asyncio.Future[None]] = []
        self.waiting = False
        self._watchers: list[asyncio.Future[None]] = []

    def deciding(self) -> bool:
        return not self.waiting or any(f.done() for f in self.armed)

    def settle(self) -> None:
        watchers, self._watchers = self._watchers, []
        for w in watchers:
            if not w.done():
                w.set_result(None)

    def settled(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._watchers.append(fut)
        return fut


class TankConnection:
    """One client: its writer lock and the consumes it has waiting."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = asyncio.Lock()
        self.polls: dict[asyncio.Task[None], Poll] = {}

    async def woken_polls_answered(self) -> None:
        """Return once no waiting consume of this connection is deciding whether to answer."""
        while deciding := [p.settled() for t, p in self.polls.items() if not t.done() and p.deciding()]:
            await asyncio.wait(deciding)

    async def send(self, msg_id: int, payload: bytes) -> None:
        async with self.lock:
            self.conn.writer.write(frame_header(msg_id, len(payload)) + payload)
            await self.conn.writer.drain()


class TankService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.started = time.time()
        self.meter = RequestMeter("tank")
        self.handlers: dict[type[Any], Callable[[TankConnection, Any], Awaitable[None]]] = {
            m.Produce: self._produce, m.Consume: self._consume, m.ConsumePeer: self._consume,
            m.Ping: self._ping,
            m.DiscoverPartitions: self._discover_partitions, m.CreateTopic: self._create_topic,
            m.ReloadConf: self._reload_conf, m.Status: self._status,
            m.DiscoverTopics: self._discover_topics, m.DiscoverTopology: self._topology,
        }

    async def handle(self, c: TankConnection, req: Any) -> None:
        handler = self.handlers.get(type(req))
        started = time.perf_counter()
        failed = True
        try:
            if handler is None:
                raise TankError(f"{type(req).__name__} is not a request", close=True)
            await handler(c, req)
            failed = False
        finally:  # TANK's errors travel per partition inside the replies: only a failure counts
            self.meter.record(type(req).__name__ if handler is not None else UNKNOWN, started, failed)

    def _count_out(self, topic: str, partition: int, seq: int, chunk: Chunk) -> None:
        """Client bytes and records out for /metrics (a chunk ends before ``next_seq``)."""
        self.broker.count_out(topic, partition, chunk.length, max(0, chunk.next_seq - seq))

    def _may(self, action: Action, topic: str) -> bool:
        """Whether the connection's principal may (the broker checks again in each call)."""
        try:
            self.broker.authorize(action, topic)
        except Unauthorized:
            return False
        return True

    async def _reply(self, c: TankConnection, resp: Any, size: int = 0) -> None:
        """Encode and send ``resp``; ``size``: about its bytes, when it may be large."""
        if size > OFF_LOOP_BYTES:  # inline otherwise: a coroutine per reply is 2 % of a produce
            msg_id, payload = await run_in(parse_pool(), codec.encode_response, resp)
        else:
            msg_id, payload = codec.encode_response(resp)
        await c.send(msg_id, payload)

    async def _ping(self, c: TankConnection, req: m.Ping) -> None:
        return None  # the broker never answers pings

    # -- produce -------------------------------------------------------------------------------

    async def _produce(self, c: TankConnection, req: m.Produce) -> None:
        results: list[m.ProduceTopicResult] = []
        pace = Pace()  # one count over every topic's entries
        count = sum(len(t.entries) for t in req.topics)  # up to 255 x 255: then yield as they go
        # a pipelining connection serves the next request once every entry has appended
        ordering.expect(count)

        async def entry(topic: str, e: m.ProduceEntry,
                        checked: BundleHeader | CorruptRecord | None = None) -> int | m.Endpoint:
            with ordering.slot():
                return await produce_bundle(self.broker, topic, e.partition, e.bundle,
                                            e.base_seq if req.with_seqnum else None, req.required_acks,
                                            checked)

        for topic in req.topics:
            if not self._may("send", topic.name):  # tank-cli: the "not allowed" fault, exit 1
                ordering.skip(len(topic.entries))
                results.append(m.ProduceTopicResult(topic_error=ProduceError.READ_ONLY) if topic.entries
                               else m.ProduceTopicResult())
                continue
            if not (self.broker.topic_exists(topic.name) or await self.broker.has_topic(topic.name)):
                ordering.skip(len(topic.entries))
                results.append(m.ProduceTopicResult(topic_error=ProduceError.UNKNOWN_TOPIC) if topic.entries
                               else m.ProduceTopicResult())
                continue
            # Each append happens, in request order, before its coroutine first waits (for the
            # fsync under fsync=always), so the entries of one request share group commits.
            # Where nothing waits after an append (fsync is not "always", one broker), and for one
            # entry, the entries are awaited in turn, each done at its append: a task per entry
            # (tank-cli's bm p2b sends 86) cost more than the append itself.
            if len(topic.entries) == 1 or not self.broker.produce_may_wait(topic.name):
                if count <= YIELD_EVERY:
                    outcomes = [await entry(topic.name, e) for e in topic.entries]
                else:
                    outcomes = []
                    for e in topic.entries:
                        await pace()
                        outcomes.append(await entry(topic.name, e))
            else:
                # the bundles are checked first, in turn: a check may wait (a pool inflates or
                # walks a large one), and no append may start before those ahead of it
                checks = []
                for e in topic.entries:
                    await pace()
                    checks.append(await check_received(e.bundle))
                outcomes = await asyncio.gather(*(entry(topic.name, e, h)
                                                  for e, h in zip(topic.entries, checks, strict=True)))
            errors = tuple(ProduceError.OTHER_LEADER if isinstance(o, m.Endpoint) else o for o in outcomes)
            leaders = tuple(o for o in outcomes if isinstance(o, m.Endpoint))
            results.append(m.ProduceTopicResult(errors=errors, leaders=leaders))
        if c.polls:  # a consume of this connection that the append woke is answered first (§1)
            await c.woken_polls_answered()
        await self._reply(c, m.ProduceResponse(req.request_id, tuple(results)))

    # -- consume -------------------------------------------------------------------------------

    async def _resolve(self, topic: str, p: m.ConsumePartition, space: int) -> Entry:
        """(entry, chunk, at end of partition) for one requested partition (§5.4); ``space``: the
        bytes the answer may still carry (CONSUME_MAX_BYTES), none left: an empty chunk."""
        if not 0 <= p.partition < self.broker.partition_count(topic):
            return m.ConsumePartitionResult(p.partition, ConsumeFlag.UNKNOWN_PARTITION), None, False
        try:
            self.broker.check_readable(topic, p.partition)
        except NotLeader as exc:  # cluster mode: no replica here; TANK's clients retry at the leader
            return _consume_fault(p.partition, exc), None, False
        try:
            await self.broker.known_records_end(topic, p.partition)
            last = last_assigned(self.broker, topic, p.partition)
            first = await first_available(self.broker, topic, p.partition)
        except StorageError as exc:  # damaged stored data (a quarantined partition), I/O failure
            return _consume_fault(p.partition, exc), None, False
        seq = p.seq
        if seq == 0:
            seq = first if first else last + 1
        if seq == U64_MAX or seq == last + 1:
            return m.ConsumePartitionResult(p.partition, ConsumeFlag.OK, first, last), None, True
        if seq > last + 1 or seq < first:
            return (m.ConsumePartitionResult(p.partition, ConsumeFlag.BOUNDARY_FAULT, 0, last, first),
                    None, False)
        if space <= 0:  # the answer is full: nothing this time, the client asks again (hwmark > seq)
            return m.ConsumePartitionResult(p.partition, ConsumeFlag.OK, first, last), None, False
        try:
            chunk = await read_chunk(self.broker, topic, p.partition, seq, min(p.fetch_size, space))
        except OffsetOutOfRange:  # retention removed ``seq`` since first_available: the same fault
            try:
                first = await first_available(self.broker, topic, p.partition)
            except StorageError as exc:
                return _consume_fault(p.partition, exc), None, False
            return (m.ConsumePartitionResult(p.partition, ConsumeFlag.BOUNDARY_FAULT, 0, last, first),
                    None, False)
        except StorageError as exc:
            return _consume_fault(p.partition, exc), None, False
        self._count_out(topic, p.partition, seq, chunk)
        flags = ConsumeFlag.SPARSE if chunk.sparse_first else ConsumeFlag.OK
        return m.ConsumePartitionResult(p.partition, flags, chunk.base_seq, last), chunk, False

    async def _consume(self, c: TankConnection, req: m.Consume | m.ConsumePeer) -> None:
        """Consume (0x2), and ConsumePeer (0x9, a replica's consume: no request id, u16 counts;
        standalone, the high water mark is the log end, so it reads the same data)."""
        room = Room(c.conn.answers) if c.conn.answers is not None else None
        if room is not None:  # the most the answer may hold, before its reads (answers.py)
            await room.reserve(min(CONSUME_MAX_BYTES, sum(min(p.fetch_size, MAX_FETCH)
                                                          for t in req.topics for p in t.partitions)))
        try:
            await self._resolve_all(c, req, room)
        except BaseException:
            if room is not None:
                room.release()
            raise

    async def _resolve_all(self, c: TankConnection, req: m.Consume | m.ConsumePeer,
                           room: Room | None) -> None:
        """``_consume`` once its answer's room is held: each entry resolved, then answered now or
        after a long poll."""
        answers: Answers = []
        immediate = req.max_wait == 0
        space = CONSUME_MAX_BYTES
        seen = 0
        for t in req.topics:
            # a topic the connection may not read is answered as unknown: TANK's consume has no
            # "not allowed" code (tank-cli reports "Unknown topic" and exits 1)
            if not self._may("poll", t.name) or not (self.broker.topic_exists(t.name)
                                                      or await self.broker.has_topic(t.name)):
                answers.append((m.ConsumeUnknownTopic(t.name, len(t.partitions)), []))
                immediate = True
                continue
            entries: list[Entry] = []
            answers.append((t, entries))
            try:
                for p in t.partitions:
                    seen += 1
                    if seen % YIELD_EVERY == 0:  # a counter, not a Pace: every consumer's request
                        await asyncio.sleep(0)
                    entry = await self._resolve(t.name, p, space)
                    if entry[1] is not None:
                        space -= entry[1].length
                    entries.append(entry)
            except BaseException:  # chunks resolved so far hold segment leases: give them back
                for _t, done in answers:
                    for _r, chunk, _eop in done:
                        if chunk is not None:
                            chunk.release()
                raise
            immediate = immediate or any(not eop for _r, _c, eop in entries)
        if immediate:
            if room is not None:  # what its chunks hold in memory (not what sendfile sends)
                room.keep(sum(ch.in_memory for _t, entries in answers for _r, ch, _e in entries
                              if ch is not None))
            await self._send_consume(c, req, answers, room)
            return
        if room is not None:
            room.release()  # nothing read: the long poll reserves again once woken
        poll = Poll()
        task = asyncio.get_running_loop().create_task(self._long_poll(c, req, answers, poll))
        c.polls[task] = poll
        task.add_done_callback(lambda t: c.polls.pop(t, None))

    async def _long_poll(self, c: TankConnection, req: m.Consume | m.ConsumePeer,
                         answers: Answers, poll: Poll) -> None:
        try:
            await self._wait_and_answer(c, req, answers, poll)
        finally:
            poll.waiting = True
            poll.armed = []
            poll.settle()

    async def _wait_and_answer(self, c: TankConnection, req: m.Consume | m.ConsumePeer,
                               answers: Answers, poll: Poll) -> None:
        """Every requested partition is at its end: wait for appends worth ``min_bytes`` (§5.6)."""
        deadline = time.monotonic() + normalise_max_wait(req.max_wait)
        min_bytes = min(req.min_bytes, MAX_FETCH, CONSUME_MAX_BYTES)  # a full answer is enough
        starts = {(t.name, r.partition): r.hwmark for t, entries in answers for r, _c, _e in entries}
        budget = c.conn.answers
        room = Room(budget) if budget is not None else None
        try:
            await self._wait_in_room(c, req, answers, poll, deadline, min_bytes, starts, room)
        finally:
            if room is not None:
                room.release()

    async def _wait_in_room(self, c: TankConnection, req: m.Consume | m.ConsumePeer, answers: Answers,
                            poll: Poll, deadline: float, min_bytes: int,
                            starts: dict[tuple[str, int], int], room: Room | None) -> None:
        """``_wait_and_answer``'s wait: each wake reads in the answer's room (answers.py), which
        it gives back before it waits again."""
        while True:
            # The partitions' waiters are registered before their ends are read, so an append
            # between the check and the wait (a produce pipelined behind this consume) wakes it.
            poll.waiting = False
            poll.armed = self.broker.data_waiters(starts)
            try:
                grown: dict[tuple[str, int], Chunk] = {}
                total = 0
                claimed = room is None
                for (topic, p), last in starts.items():
                    if topic not in self.broker.topics or p >= self.broker.partition_count(topic):
                        continue
                    if total >= CONSUME_MAX_BYTES:
                        break  # the answer is full: the partitions after it say "nothing new" this time
                    if last_assigned(self.broker, topic, p) > last:
                        if not claimed:  # before the first read (answers.py)
                            claimed = True
                            await self._claim(room, poll)  # type: ignore[arg-type]
                        try:
                            chunk = await read_chunk(self.broker, topic, p, last + 1,
                                                     min(MAX_FETCH, CONSUME_MAX_BYTES - total))
                        except (StorageError, OffsetOutOfRange):
                            # answered by the next consume (0xfb; a boundary fault when retention
                            # or a purge moved the log start past ``last``)
                            continue
                        except BaseException:
                            for kept in grown.values():
                                kept.release()
                            raise
                        if chunk.length:
                            grown[(topic, p)] = chunk
                            total += chunk.length
                left = deadline - time.monotonic()
                if grown and (total >= min_bytes or min_bytes == 0 or left <= 0):
                    break
                for dropped in grown.values():  # not sent: read again after the wait
                    dropped.release()
                if room is not None:
                    room.release()
                if left <= 0 or self.broker.closing:
                    grown = {}
                    break
                poll.waiting = True
                poll.settle()
                if poll.armed:
                    await asyncio.wait(poll.armed, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                else:
                    await asyncio.sleep(left)
            finally:
                for fut in poll.armed:
                    fut.cancel()
        out: Answers = []
        for t, entries in answers:
            rows: list[Entry] = []
            for r, _chunk, _eop in entries:
                key = (t.name, r.partition)
                hw = (last_assigned(self.broker, t.name, r.partition)
                      if t.name in self.broker.topics and r.partition < self.broker.partition_count(t.name)
                      else r.hwmark)
                ch = grown.pop(key, None)  # a partition listed again gets its chunk once
                if ch is None:
                    # not sent (nothing new, or the answer was full): the hwmark seen when the
                    # wait began, or lower, so a tail consumer (which goes on at hwmark + 1 after
                    # an empty chunk, §5.7) asks again for what it was not sent
                    hw = min(hw, starts[key])
                    rows.append((m.ConsumePartitionResult(r.partition, ConsumeFlag.OK, 0, hw), None, False))
                else:
                    flags = ConsumeFlag.SPARSE if ch.sparse_first else ConsumeFlag.OK
                    rows.append((m.ConsumePartitionResult(r.partition, flags, ch.base_seq, hw), ch, False))
                    self._count_out(t.name, r.partition, starts[key] + 1, ch)
            out.append((t, rows))
        for unsent in grown.values():  # (none: every chunk's key is listed)
            unsent.release()
        if room is not None:
            room.keep(sum(ch.in_memory for _t, rows in out for _r, ch, _e in rows if ch is not None))
        try:
            await self._send_consume(c, req, out, room)
        except ConnectionError:
            pass
        except Exception as exc:  # a reader too slow (SlowReader), or anything that cut the answer
            # short: the header promised chunk bytes, so the stream is out of step; close it
            log.info("closing TANK connection: %s", exc or type(exc).__name__, extra={"peer": c.conn.peer})
            c.conn.writer.transport.abort()

    @staticmethod
    async def _claim(room: Room, poll: Poll) -> None:
        """A woken long poll's answer room. While it waits for the budget the poll is not
        deciding, so a Produce on its connection is not held back by other clients' answers."""
        waiting = room.claim(CONSUME_MAX_BYTES)
        if waiting is None:
            return
        armed, poll.armed, poll.waiting = poll.armed, [], True
        poll.settle()
        try:
            await waiting
        finally:
            poll.armed, poll.waiting = armed, False

    async def _send_consume(self, c: TankConnection, req: m.Consume | m.ConsumePeer,
                            answers: Answers, room: Room | None) -> None:
        """Write the answer (its header, then each chunk); its chunks' leases end, and ``room`` is
        given back, once it has left."""
        topics: list[m.ConsumeTopicAnswer] = []
        chunks: list[Chunk] = []
        lengths: list[int] = []
        for t, entries in answers:
            if isinstance(t, m.ConsumeUnknownTopic):
                topics.append(t)
                continue
            topics.append(m.ConsumeTopicResult(t.name, tuple(r for r, _c, _e in entries)))
            for _r, chunk, _e in entries:
                lengths.append(chunk.length if chunk is not None else 0)
                if chunk is not None and chunk.length:
                    chunks.append(chunk)
        size = 16 * len(lengths)  # about the header's bytes: a ConsumePeer may list a million partitions
        if size > OFF_LOOP_BYTES:
            header = await run_in(parse_pool(), _consume_header, req, topics, lengths)
        else:
            header = _consume_header(req, topics, lengths)
        try:
            async with c.lock:
                writer = c.conn.writer
                writer.write(header)
                for ch in chunks:
                    await _send_chunk(writer, ch)
                await writer.drain()
        finally:  # the segment files' leases end: one removed meanwhile is closed now
            for ch in chunks:
                ch.release()
            if room is not None:
                room.release()

    # -- admin ---------------------------------------------------------------------------------

    async def _discover_partitions(self, c: TankConnection, req: m.DiscoverPartitions) -> None:
        entries: list[m.DiscoveredPartition] = []
        if req.topic in self.broker.topics and self.broker.visible_topics_of((req.topic,)):
            n = self.broker.partition_count(req.topic)
            pace = Pace()
            for p in req.partitions or tuple(range(n)):
                await pace()
                if not 0 <= p < n:
                    entries.append(m.DiscoveredPartition(U64_MAX, U64_MAX, fault=PartitionFault.SYSTEM_ERROR))
                    continue
                entries.append(m.DiscoveredPartition(await first_available(self.broker, req.topic, p),
                                                     last_assigned(self.broker, req.topic, p)))
        await self._reply(c, m.DiscoverPartitionsResponse(req.request_id, req.topic, tuple(entries)),
                          size=16 * len(entries))

    async def _create_topic(self, c: TankConnection, req: m.CreateTopic) -> None:
        error = CreateTopicError.OK
        if req.partitions == 0 or not valid_topic_name(req.topic):
            error = CreateTopicError.INVALID_REQUEST
        else:
            try:
                config = to_bayou(parse_config(req.config))
                await self.broker.create_topic(req.topic, req.partitions, config)
            except TankConfigError:
                error = CreateTopicError.INVALID_CONFIG
            except BayouError as exc:
                error = create_topic_error_for(exc)
        await self._reply(c, m.CreateTopicResponse(req.request_id, req.topic, error))

    async def _reload_conf(self, c: TankConnection, req: m.ReloadConf) -> None:
        """Re-read ``<data>/topics/<topic>/<partition>/config`` (TANK reads a per-partition file,
        §8) and apply it: bayou's configuration is per topic, so it applies to the whole topic."""
        error = ReloadConfError.OK
        if req.topic not in self.broker.topics:
            error = ReloadConfError.UNKNOWN_TOPIC
        elif not 0 <= req.partition < self.broker.partition_count(req.topic):
            error = ReloadConfError.UNKNOWN_PARTITION
        else:
            path = self.broker.partition_dir(req.topic, req.partition) / "config"
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError):
                text = ""
            if not text.strip():
                error = ReloadConfError.SYSTEM_ERROR
            else:
                try:
                    changes: dict[str, str | None] = dict(to_bayou(parse_config(text)))
                    await self.broker.alter_topic_config(req.topic, changes)
                except TankConfigError:
                    error = ReloadConfError.PARSE_FAILURE
                except BayouError as exc:
                    error = reload_conf_error_for(exc)
        await self._reply(c, m.ReloadConfResponse(req.request_id, req.topic, req.partition, error))

    async def _status(self, c: TankConnection, req: m.Status) -> None:
        partitions = sum(len(t.partitions) for t in self.broker.topics.values())
        await self._reply(c, m.StatusResponse(req.request_id, len(self.broker.topics), partitions,
                                              open_partitions=partitions, open_time_ms=0,
                                              start_time=int(self.started), version=VERSION))

    async def _discover_topics(self, c: TankConnection, req: m.DiscoverTopics) -> None:
        topics = tuple(m.TopicInfo(name, len(self.broker.topics[name].partitions))
                       for name in self.broker.visible_topics())
        await self._reply(c, m.DiscoverTopicsResponse(req.request_id, topics))

    async def _topology(self, c: TankConnection, req: m.DiscoverTopology) -> None:
        await self._reply(c, m.DiscoverTopologyResponse(req.request_id))


def _consume_fault(partition: int, exc: BayouError) -> m.ConsumePartitionResult:
    """The entry of a partition this broker cannot serve: the table's flag, or, for a partition
    led elsewhere whose leader has a TANK listener, that leader (TANK's clients retry there)."""
    addr = exc.leader_address("tank") if isinstance(exc, NotLeader) else None
    if addr is not None:
        return m.ConsumePartitionResult(partition, ConsumeFlag.OTHER_LEADER,
                                        leader=m.Endpoint(int(ipaddress.IPv4Address(addr[0])), addr[1]))
    return m.ConsumePartitionResult(partition, consume_flag_for(exc))


async def _send_chunk(writer: asyncio.StreamWriter, ch: Chunk) -> None:
    ranges: list[tuple[int, int]] = []
    fd = -1
    for piece in [*ch.pieces, b""]:
        if isinstance(piece, FileRange) and (fd == piece.fd or not ranges):
            fd = piece.fd
            ranges.append((piece.offset, piece.length))
            continue
        if ranges:  # one sendfile run per stretch of stored bundles
            await zerocopy.send_ranges(writer, fd, ranges)
            ranges = []
        if isinstance(piece, FileRange):
            fd = piece.fd
            ranges.append((piece.offset, piece.length))
        elif piece:
            writer.write(piece)


def _consume_header(req: m.Consume | m.ConsumePeer, topics: list[m.ConsumeTopicAnswer],
                    lengths: list[int]) -> bytes:
    if isinstance(req, m.ConsumePeer):
        return codec.encode_consume_peer_header(topics, lengths, framed=True)
    return codec.encode_consume_header(req.request_id, topics, lengths, framed=True)


def _produces(frame: Frame) -> bool:
    """A produce (with or without sequence numbers): what a pipelining connection serves before
    the requests ahead of it are answered (server/frames.py)."""
    return frame.msg_id in (MsgId.PRODUCE, MsgId.PRODUCE_WITH_SEQNUM)


def tank_handler(service: TankService) -> Callable[[Connection, Listener], Awaitable[None]]:
    async def serve(conn: Connection, listener: Listener) -> None:
        zerocopy.prepare(conn.writer)
        c = TankConnection(conn)
        conn.writer.write(PING_FRAME)  # once, on accept (§1)

        async def handle(frame: Frame) -> None:
            # replies are written by the service (pipelined, long polls, sendfile chunks); a
            # large request other than a produce (whose entries are at most 255 x 255) is read
            # off the event loop: a ConsumePeer may list a million partitions
            if len(frame.payload) > OFF_LOOP_BYTES and not _produces(frame):
                request = await run_in(parse_pool(), codec.decode_request, frame.msg_id, frame.payload)
            else:
                request = codec.decode_request(frame.msg_id, frame.payload)
            await service.handle(c, request)

        async def refuse(exc: TankError) -> None:
            log.info("closing TANK connection: %s", exc, extra={"peer": conn.peer})

        try:
            # a connection that never sends a request is closed after idle_timeout_s (TANK: 16 s)
            await serve_frames(conn, listener, FrameReader(listener.limits.frame_cap(MAX_PAYLOAD)), handle,
                               error=TankError, refuse=refuse,
                               pipeline=_produces if service.broker.produce_waits() else None)
        finally:
            for task in list(c.polls):
                task.cancel()

    return serve


__all__ = ["TankService", "tank_handler"]
