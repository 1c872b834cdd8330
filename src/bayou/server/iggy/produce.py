"""Iggy's SEND_MESSAGES (and FLUSH_UNSAVED_BUFFER): the partition a send goes to, and the batch
that stores it.

Messages sent through Iggy are stored as the producer's frames (``bayou.records.iggy``), so that a
poll serves them back from the stored bytes; the V and L send paths cut those frames straight out
of the request (``vsr_send_frames``, ``legacy_send_frames``) and decode nothing per message. A
messages-key send keeps its key, so it is stored as records. On a topic with
``message.deduplication=true`` every send path stores only the messages whose ids are not replays
(``Broker.produce_unique``): a wholly replayed send succeeds and stores nothing (V confirmation: the
partition's log end as base offset).
"""

from __future__ import annotations

import xxhash

from bayou.broker import Acks
from bayou.broker.idempotence import IdRun
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import decode_legacy_send, decode_vsr_send, read_send_metadata
from bayou.protocols.iggy.codec import encode_reply
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.compressed import expand as expand_compressed
from bayou.protocols.iggy.compressed import is_envelope
from bayou.protocols.iggy.convert import send_to_records
from bayou.protocols.iggy.framing import Dialect, IggyError
from bayou.protocols.iggy.stored import (
    frames_from_messages,
    id_run,
    legacy_send_frames,
    mint_uuid4,
    select_frames,
    vsr_send_frames,
)
from bayou.records.batch import assemble_batch, encode_batch
from bayou.records.iggy import FORMAT_IGGY, frame_ids, frame_positions, split_append_time
from bayou.records.model import Record
from bayou.server.iggy.catalog import StreamEntry, TopicEntry
from bayou.server.iggy.context import Context, Session
from bayou.server.iggy.state import now_us
from bayou.server.workers import inflate_pool, parsed, run_in

MAX_ORIGIN_BASE = (1 << 63) - 1  # a send's origin timestamp (us) is kept in an int64 batch field



KEYED_MESSAGE_BYTES = 64  # what one message of a messages-key send weighs for ``parsed``


def _keyed_records(req: m.SendMessages, ms: int) -> list[Record]:
    """A messages-key send's messages as records: it keeps its key, so it is stored as records."""
    return [Record(r.value, r.key, ms, r.headers, r.message_id or mint_uuid4()) for r in send_to_records(req)]


def _keyed_batch(req: m.SendMessages, ms: int) -> bytes:
    return encode_batch(_keyed_records(req, ms))

class ProduceHandlers:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self._balanced: dict[str, int] = {}  # a topic's balanced sends: the last partition's turn

    def _route(self, s: Session, topic: TopicEntry, partitioning: m.Partitioning) -> int:
        n = self.broker.partition_count(topic.topic)
        kind = partitioning.kind
        if kind == m.PartitioningKind.PARTITION_ID:
            pid = partitioning.partition_id
            if pid is None:
                raise IggyError(Status.INVALID_FORMAT, "partition id must be a u32")
            return self.ctx.named_partition(s, topic, pid)
        if kind == m.PartitioningKind.MESSAGES_KEY:
            if not partitioning.value:
                raise IggyError(Status.INVALID_FORMAT, "empty messages key")
            return xxhash.xxh32_intdigest(partitioning.value) % n
        counter = self._balanced.get(topic.topic, -1) + 1
        self._balanced[topic.topic] = counter
        return counter % n

    async def _append_frames(self, s: Session, stream: StreamEntry, topic: TopicEntry, partition: int,
                             frames: bytes, count: int, origin_base: int, stride: int) -> int:
        self.ctx.permit(s, "send", stream.id, topic.id)
        if origin_base > MAX_ORIGIN_BASE:  # stored as the batch's int64 producer id
            raise IggyError(Status.INVALID_FORMAT, f"origin timestamp {origin_base} past 2^63-1 microseconds")
        if self.broker.deduplicating(topic.topic):
            return await self._append_unique_frames(topic, partition, frames, count, origin_base, stride)
        ms, sub = split_append_time(now_us(), stride)
        batch = assemble_batch(frames, record_count=count, base_offset=0,
                               attributes=FORMAT_IGGY << 8, base_timestamp=ms, max_timestamp=ms,
                               producer_id=origin_base, base_sequence=sub)
        result = await self.broker.produce(topic.topic, partition, batch, Acks.LEADER, create=False,
                                           forward=True)
        return result.base_offset

    async def _append_unique_frames(self, topic: TopicEntry, partition: int, frames: bytes, count: int,
                                    origin_base: int, stride: int) -> int:
        """A send to a topic with ``message.deduplication``: only messages whose ids are not
        replays are stored (``Broker.produce_unique``), renumbered when some are dropped. Returns
        the base offset of what was stored, or the log end when every message was a replay."""
        positions = frame_positions(frames, 0, len(frames), count, stride)

        def build(keep: list[bool]) -> bytes:
            data, n, size = frames, count, stride
            if not all(keep):
                data, size = select_frames(frames, positions, keep)
                n = sum(keep)
            ms, sub = split_append_time(now_us(), size)
            return assemble_batch(data, record_count=n, base_offset=0, attributes=FORMAT_IGGY << 8,
                                  base_timestamp=ms, max_timestamp=ms, producer_id=origin_base,
                                  base_sequence=sub)

        run = id_run(frames, count, stride)
        ids: list[int] | IdRun = frame_ids(frames, positions) if run is None else IdRun(*run, count)
        result = await self.broker.produce_unique(topic.topic, partition, ids, build, Acks.LEADER,
                                                  forward=True)
        return result.base_offset

    async def _append_keyed(self, s: Session, stream: StreamEntry, topic: TopicEntry, partition: int,
                            req: m.SendMessages) -> int:
        """A messages-key send keeps its key, so it is stored as records (key included)."""
        self.ctx.permit(s, "send", stream.id, topic.id)
        ms = now_us() // 1000
        # records built one by one (about 8 us a message): past OFF_LOOP_BYTES' worth, off the loop
        size = KEYED_MESSAGE_BYTES * len(req.messages)
        if not self.broker.deduplicating(topic.topic):
            batch = await parsed(size, _keyed_batch, req, ms)
            result = await self.broker.produce(topic.topic, partition, batch, Acks.LEADER, create=False,
                                               forward=True)
            return result.base_offset
        records = await parsed(size, _keyed_records, req, ms)

        def build(keep: list[bool]) -> bytes:
            return encode_batch([r for r, k in zip(records, keep, strict=True) if k])
        ids = [r.message_id or 0 for r in records]
        result = await self.broker.produce_unique(topic.topic, partition, ids, build, Acks.LEADER,
                                                  forward=True)
        return result.base_offset

    async def send_vsr(self, s: Session, body: bytes) -> bytes:
        """A V SEND_MESSAGES operation's body -> its reply body (the send confirmation)."""
        stream_id, topic_id, partitioning, count, pos = read_send_metadata(body)
        stream, topic = await self.ctx.resolve(stream_id, topic_id)
        partition = self._route(s, topic, partitioning)
        if partitioning.kind == m.PartitioningKind.MESSAGES_KEY:
            req = await parsed(len(body), decode_vsr_send, body)
            base = await self._append_keyed(s, stream, topic, partition, req)
        else:
            frames, origin, stride = vsr_send_frames(body, pos, count)
            base = await self._append_frames(s, stream, topic, partition, frames, count, origin, stride)
        confirmation = m.SendConfirmation(stream.id, topic.id, partition, base)
        return encode_reply(m.SendConfirmations((confirmation,)), Dialect.VSR)

    async def send_legacy(self, s: Session, payload: bytes) -> bytes:
        """An L SEND_MESSAGES payload -> its (empty) reply payload."""
        stream_id, topic_id, partitioning, count, pos = read_send_metadata(payload)
        # a one-message send may be bayou's compressed envelope: inflated off the loop
        expanded = (await run_in(inflate_pool(), expand_compressed, payload, pos, count)
                    if is_envelope(payload, pos, count) else None)
        if expanded is not None:  # bayou's compressed send: the real one, inflated
            payload = expanded
            stream_id, topic_id, partitioning, count, pos = read_send_metadata(payload)
        fast = None
        if partitioning.kind != m.PartitioningKind.MESSAGES_KEY:
            fast = legacy_send_frames(payload, pos, count, now_us=now_us())
        if fast is None:
            await self.send_decoded(s, await parsed(len(payload), decode_legacy_send, payload))
            return b""
        frames, origin, stride = fast
        stream, topic = await self.ctx.resolve(stream_id, topic_id)
        partition = self._route(s, topic, partitioning)
        await self._append_frames(s, stream, topic, partition, frames, count, origin, stride)
        return b""

    async def send_decoded(self, s: Session, req: m.SendMessages) -> None:
        """A send decoded into messages (D, and L sends the fast path does not take)."""
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        partition = self._route(s, topic, req.partitioning)
        if req.partitioning.kind == m.PartitioningKind.MESSAGES_KEY:
            await self._append_keyed(s, stream, topic, partition, req)
            return None
        frames, origin, stride = frames_from_messages(req.messages, now_us=now_us())
        await self._append_frames(s, stream, topic, partition, frames, len(req.messages), origin, stride)
        return None

    async def flush(self, s: Session, req: m.FlushUnsavedBuffer) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "send", stream.id, topic.id)
        p = self.ctx.named_partition(s, topic, req.partition_id)
        await self.broker.flush_partition(topic.topic, p)


__all__ = ["ProduceHandlers"]
