"""Iggy's streams, topics and partitions: the commands that list, create, change, purge and delete
them, and the records that describe them.

A topic of an Iggy stream is a bayou topic (the catalog, ``catalog``, keeps the mapping); its
expiry and maximum size are bayou's retention (``retention``), and CREATE_TOPIC / UPDATE_TOPIC
options named like bayou topic config keys set that config (``bayou_config``; in L the options
block follows the name).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

from bayou.broker.broker import TOPIC_KEYS
from bayou.errors import BayouError, TopicAlreadyExists
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codec import encode_reply
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import Dialect, IggyError
from bayou.protocols.iggy.wire import option
from bayou.server.iggy.catalog import StreamEntry, TopicEntry
from bayou.server.iggy.context import Context, Session, check_name
from bayou.server.iggy.state import now_us

log = logging.getLogger("bayou.iggy")

MAX_PARTITIONS = 1000
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
OFFLINE_LOG_S = 60.0  # how often a described offline partition is named in the log


class StreamHandlers:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.catalog = ctx.catalog
        self._offline_told: dict[tuple[str, int], float] = {}  # when an offline partition was logged

    # -- records for the getters ---------------------------------------------------------------

    def _partition_infos(self, s: Session, topic: TopicEntry) -> tuple[m.PartitionInfo, ...]:
        info = self.broker.describe_topic(topic.topic)
        for p in info.partitions:
            if p.offline is not None:
                self._report_offline(topic, p.partition, p.offline)
        return tuple(
            m.PartitionInfo(self.ctx.partition_out(s, p.partition), topic.created_at, p.segments,
                            max(p.high_watermark - 1, 0), p.size_bytes,
                            p.high_watermark - p.log_start_offset)
            for p in info.partitions)

    def _report_offline(self, topic: TopicEntry, partition: int, reason: str) -> None:
        """Iggy's partition and topic records have no status field (iggy.md E): a quarantined
        partition an Iggy client describes is named in the log instead (once a minute at most;
        its polls answer CANNOT_READ_MESSAGE)."""
        now = time.monotonic()
        key = (topic.topic, partition)
        if now - self._offline_told.get(key, -OFFLINE_LOG_S) < OFFLINE_LOG_S:
            return
        self._offline_told[key] = now
        log.warning("an Iggy client described topic %s (bayou topic %s): partition %d is offline: %s",
                    topic.name, topic.topic, partition, reason)

    def _topic_info(self, s: Session, topic: TopicEntry,
                    parts: tuple[m.PartitionInfo, ...] | None = None) -> m.TopicInfo:
        parts = self._partition_infos(s, topic) if parts is None else parts
        return m.TopicInfo(
            id=topic.id, created_at=topic.created_at, partitions_count=len(parts),
            message_expiry=topic.message_expiry, compression_algorithm=topic.compression,
            max_topic_size=topic.max_topic_size, size_bytes=sum(p.size_bytes for p in parts),
            messages_count=sum(p.messages_count for p in parts), name=topic.name,
            replication_factor=topic.replication_factor or 1)

    def _topic_details(self, s: Session, topic: TopicEntry) -> m.TopicDetails:
        parts = self._partition_infos(s, topic)
        return m.TopicDetails(self._topic_info(s, topic, parts), parts)

    def _stream_info(self, s: Session, stream: StreamEntry,
                     topics: tuple[m.TopicInfo, ...] | None = None) -> m.StreamInfo:
        topics = self._topic_infos(s, stream) if topics is None else topics
        return m.StreamInfo(stream.id, stream.created_at, len(topics), sum(t.size_bytes for t in topics),
                            sum(t.messages_count for t in topics), stream.name)

    def _topic_infos(self, s: Session, stream: StreamEntry) -> tuple[m.TopicInfo, ...]:
        return tuple(self._topic_info(s, t) for t in sorted(stream.topics.values(), key=lambda t: t.id)
                     if self.broker.topic_exists(t.topic))

    # -- streams -------------------------------------------------------------------------------

    async def get_stream(self, s: Session, req: m.GetStream) -> m.StreamDetails | None:
        stream = await self.ctx.find_stream(req.stream)
        if stream is None:
            return None
        self.ctx.permit(s, "read_streams", stream.id)
        topics = self._topic_infos(s, stream)
        return m.StreamDetails(self._stream_info(s, stream, topics), topics)

    async def get_streams(self, s: Session, req: m.GetStreams) -> tuple[m.StreamInfo, ...]:
        self.ctx.permit(s, "read_streams")
        await self.ctx.state.sync()
        return tuple(self._stream_info(s, st) for st in self.catalog.visible_streams())

    async def create_stream(self, s: Session, req: m.CreateStream) -> m.StreamDetails:
        self.ctx.permit(s, "manage_streams")
        check_name(req.name, Status.INVALID_STREAM_NAME)
        if self.catalog.stream_name_taken(req.name):
            raise IggyError(Status.STREAM_NAME_ALREADY_EXISTS, f"stream {req.name!r} exists")
        if req.stream_id is not None:  # D: the client chooses, from 1
            if req.stream_id < 1 or req.stream_id >= 0x7FFF_FFFF:
                raise IggyError(Status.INVALID_STREAM_ID, f"stream id {req.stream_id}")
            if req.stream_id in self.catalog.streams:
                raise IggyError(Status.STREAM_ID_ALREADY_EXISTS, f"stream {req.stream_id} exists")
        stream = self.catalog.add_stream(req.name, now_us(), req.stream_id)
        await self.ctx.state.save_catalog()
        return m.StreamDetails(self._stream_info(s, stream, ()))

    async def delete_stream(self, s: Session, req: m.DeleteStream) -> None:
        stream = await self.ctx.require_stream(req.stream)
        self.ctx.permit(s, "manage_streams", stream.id)
        for topic in list(stream.topics.values()):
            await self._drop_topic(stream, topic)
        if not stream.is_default:
            self.catalog.remove_stream(stream)
        await self.ctx.state.save_catalog()

    async def update_stream(self, s: Session, req: m.UpdateStream) -> None:
        stream = await self.ctx.require_stream(req.stream)
        self.ctx.permit(s, "manage_streams", stream.id)
        check_name(req.name, Status.INVALID_STREAM_NAME)
        if stream.is_default:
            raise IggyError(Status.INVALID_STREAM_NAME, "the default stream cannot be renamed")
        if req.name != stream.name and self.catalog.stream_name_taken(req.name):
            raise IggyError(Status.STREAM_NAME_ALREADY_EXISTS, f"stream {req.name!r} exists")
        stream.name = req.name
        self.catalog.changed()  # names not yet in the catalog go by stream name prefix
        await self.ctx.state.save_catalog()

    async def purge_stream(self, s: Session, req: m.PurgeStream) -> None:
        stream = await self.ctx.require_stream(req.stream)
        self.ctx.permit(s, "manage_streams", stream.id)
        for topic in stream.topics.values():
            await self.broker.purge_topic(topic.topic)

    # -- topics --------------------------------------------------------------------------------

    async def get_topic(self, s: Session, req: m.GetTopic) -> m.TopicDetails | None:
        try:
            stream, topic = await self.ctx.resolve(req.stream, req.topic)
        except IggyError:
            return None
        self.ctx.permit(s, "read_topics", stream.id, topic.id)
        return self._topic_details(s, topic)

    async def get_topics(self, s: Session, req: m.GetTopics) -> bytes | tuple[m.TopicInfo, ...]:
        stream = await self.ctx.require_stream(req.stream)
        self.ctx.permit(s, "read_topics", stream.id)
        topics = self._topic_infos(s, stream)
        if s.dialect is Dialect.VSR:
            # V lists topics as u32 count + records: apache-iggy 0.9.0 reads the first u32 as the
            # count, so without it a list starting with topic id 0 came back empty (SDK e2e test).
            return len(topics).to_bytes(4, "little") + encode_reply(topics, Dialect.VSR)
        return topics

    async def create_topic(self, s: Session, req: m.CreateTopic) -> m.TopicDetails:
        """A topic of an Iggy stream is the bayou topic ``<stream>.<topic>`` (catalog); one of
        the default stream is the bayou topic of exactly that name (bayou's topic name rule)."""
        stream = await self.ctx.require_stream(req.stream)
        self.ctx.permit(s, "manage_topics", stream.id)
        check_name(req.name, Status.INVALID_TOPIC_NAME)
        if stream.is_default:
            self.broker.check_topic_name(req.name)
            await self.ctx.state.sync()  # the default stream mirrors topics other protocols create and delete
        if stream.topic(req.name) is not None:
            raise IggyError(Status.TOPIC_NAME_ALREADY_EXISTS, f"topic {req.name!r} exists")
        if req.topic_id is not None:
            if req.topic_id < 1:
                raise IggyError(Status.INVALID_TOPIC_ID, f"topic id {req.topic_id}")
            if req.topic_id in stream.topics:
                raise IggyError(Status.TOPIC_ID_ALREADY_EXISTS, f"topic {req.topic_id} exists")
        if not 1 <= req.partitions_count <= MAX_PARTITIONS:
            raise IggyError(Status.INVALID_PARTITIONS_COUNT, f"{req.partitions_count} partitions")
        expiry = req.message_expiry or 0
        max_size = req.max_topic_size or 0
        config = {k: v for k, v in retention(expiry, max_size, req.partitions_count).items()
                  if v is not None}
        if req.replication_factor:
            config["replication.factor"] = str(req.replication_factor)
        segment = option(req.options, "segment_size")  # V: the size at which a segment is sealed
        if segment is not None and segment.value_kind == m.HeaderKind.UINT64 and len(segment.value) == 8:
            size = int.from_bytes(segment.value, "little")
            if size:
                config["segment.bytes"] = str(size)
        config.update(bayou_config(req.options))
        if stream.is_default:
            name = req.name  # TopicAlreadyExists (made elsewhere) answers TOPIC_NAME_ALREADY_EXISTS
            await self.broker.create_topic(name, req.partitions_count, config)
        else:
            taken = set(self.broker.list_topics())
            name = self.catalog.bayou_topic_name(stream.name, req.name, taken)
            try:
                await self.broker.create_topic(name, req.partitions_count, config)
            except TopicAlreadyExists:  # created elsewhere in between: take the next free name
                taken = set(self.broker.list_topics()) | {name}
                name = self.catalog.bayou_topic_name(stream.name, req.name, taken)
                await self.broker.create_topic(name, req.partitions_count, config)
        topic = self.catalog.add_topic(stream, req.name, name, now_us(), topic_id=req.topic_id,
                                       compression=req.compression_algorithm or 1, message_expiry=expiry,
                                       max_topic_size=max_size,
                                       replication_factor=req.replication_factor or 0)
        await self.ctx.state.save_catalog()
        return self._topic_details(s, topic)

    async def _drop_topic(self, stream: StreamEntry, topic: TopicEntry) -> None:
        for g in topic.groups.values():
            await self.broker.delete_group(topic.broker_group(g))
        with contextlib.suppress(BayouError):
            await self.broker.delete_topic(topic.topic)
        self.catalog.remove_topic(stream, topic.id)

    async def delete_topic(self, s: Session, req: m.DeleteTopic) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "manage_topics", stream.id, topic.id)
        await self._drop_topic(stream, topic)
        await self.ctx.state.save_catalog()

    async def update_topic(self, s: Session, req: m.UpdateTopic) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "manage_topics", stream.id, topic.id)
        check_name(req.name, Status.INVALID_TOPIC_NAME)
        other = stream.topic(req.name)
        if other is not None and other is not topic:
            raise IggyError(Status.TOPIC_NAME_ALREADY_EXISTS, f"topic {req.name!r} exists")
        partitions = self.broker.partition_count(topic.topic)
        changes = retention(req.message_expiry, req.max_topic_size, partitions)
        changes.update(bayou_config(req.options))
        await self.broker.alter_topic_config(topic.topic, changes)
        topic.name = req.name
        topic.compression = req.compression_algorithm or 1
        topic.message_expiry = req.message_expiry
        topic.max_topic_size = req.max_topic_size
        if req.replication_factor is not None:
            topic.replication_factor = req.replication_factor
        await self.ctx.state.save_catalog()

    async def purge_topic(self, s: Session, req: m.PurgeTopic) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "manage_topics", stream.id, topic.id)
        await self.broker.purge_topic(topic.topic)

    # -- partitions and segments ---------------------------------------------------------------

    async def _resplit_size(self, topic: TopicEntry) -> None:
        if topic.max_topic_size and topic.max_topic_size != U64_MAX:
            n = self.broker.partition_count(topic.topic)
            await self.broker.alter_topic_config(
                topic.topic, {"retention.bytes": str(max(1, topic.max_topic_size // n))})

    async def create_partitions(self, s: Session, req: m.CreatePartitions) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "manage_topics", stream.id, topic.id)
        have = self.broker.partition_count(topic.topic)
        if not req.partitions_count >= 1 or have + req.partitions_count > MAX_PARTITIONS:
            raise IggyError(Status.INVALID_PARTITIONS_COUNT, f"{req.partitions_count} partitions")
        await self.broker.grow_partitions(topic.topic, req.partitions_count)
        await self._resplit_size(topic)

    async def delete_partitions(self, s: Session, req: m.DeletePartitions) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "manage_topics", stream.id, topic.id)
        have = self.broker.partition_count(topic.topic)
        if not 1 <= req.partitions_count < have:
            raise IggyError(Status.INVALID_PARTITIONS_COUNT,
                            f"cannot delete {req.partitions_count} of {have} partitions")
        await self.broker.remove_partitions(topic.topic, req.partitions_count)
        await self._resplit_size(topic)

    async def delete_segments(self, s: Session, req: m.DeleteSegments) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "manage_topics", stream.id, topic.id)
        p = self.ctx.named_partition(s, topic, req.partition_id)
        await self.broker.delete_segments(topic.topic, p, req.segments_count)


def retention(expiry_us: int, max_size: int, partitions: int) -> dict[str, str | None]:
    """Topic config for Iggy's expiry (us) and maximum size (bytes, split per partition):
    0 = the server default (bayou's retention), u64 max = never / unlimited."""
    cfg: dict[str, str | None] = {"retention.ms": None, "retention.bytes": None}
    if expiry_us == U64_MAX:
        cfg["retention.ms"] = "-1"
    elif expiry_us:
        cfg["retention.ms"] = str(max(1, math.ceil(expiry_us / 1000)))
    if max_size == U64_MAX:
        cfg["retention.bytes"] = "-1"
    elif max_size:
        cfg["retention.bytes"] = str(max(1, max_size // max(partitions, 1)))
    return cfg


def bayou_config(options: m.Headers) -> dict[str, str]:
    """bayou topic config carried in CREATE_TOPIC / UPDATE_TOPIC options: every option whose
    (string) key is a per-topic config key (``segment.bytes``, ``retention.ms``, ``fsync``,
    ``message.deduplication``, ...), its value a UTF-8 string of kind STRING or RAW. Other keys are
    Iggy's own or unknown and left alone; such a key with any other value is INVALID_OPTION_VALUE,
    as is a value the topic refuses (checked when it is applied)."""
    out: dict[str, str] = {}
    for o in options:
        key = o.name
        if key is None or key not in TOPIC_KEYS:
            continue
        if o.value_kind not in (m.HeaderKind.STRING, m.HeaderKind.RAW):
            raise IggyError(Status.INVALID_OPTION_VALUE, f"option {key} must be a string")
        try:
            out[key] = o.value.decode("utf-8")
        except UnicodeDecodeError:
            raise IggyError(Status.INVALID_OPTION_VALUE, f"option {key} is not UTF-8") from None
    return out


__all__ = ["MAX_PARTITIONS", "StreamHandlers", "bayou_config", "retention"]
