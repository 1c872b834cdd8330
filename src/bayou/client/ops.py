"""Every SDK operation written once, as a generator of requests (sans-IO), run by the blocking
``Client`` and by the asyncio ``AsyncClient`` alike.

An operation yields a request message (the driver answers with the decoded reply) or a ``Raw``
frame (the driver answers with the reply payload); a failed request is thrown into the generator
as a ``BayouClientError``, so an operation can recover (topic resolution tries the next address).

Topics are bayou topic names. A topic made by another protocol, or by this SDK, is the Iggy topic
of that name in the stream ``default``; a topic made by an Iggy client in stream ``s`` is
``s.<topic>``. Resolution tries the first and then the second form and is cached per client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from bayou.client.connection import encode
from bayou.client.errors import BayouClientError, UnknownPartitionError, UnknownTopicError, error_for
from bayou.client.wire import (
    HeaderList,
    UniformSend,
    batches_to_arrow,
    partition_replies,
    polled_to_arrow,
    prepare_send,
)
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codec import WAIT_MAX_PARTITIONS
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.wire import U32
from bayou.records.compression import Compression

T = TypeVar("T")
DEFAULT_STREAM = "default"
SDK_CONSUMER = m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier("bayou-sdk"))


@dataclass(frozen=True, slots=True)
class Raw:
    frame: bytes | UniformSend  # a send's frame is written into the connection's buffer
    what: str


@dataclass(frozen=True, slots=True)
class RawMany:
    """Frames sent together (pipelined) and answered in order: the driver answers with each
    reply's (status, payload), raising nothing, once every reply is read."""

    frames: tuple[bytes, ...]


Op = Generator[Any, Any, T]
Address = tuple[m.Identifier, m.Identifier]


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    partition: int
    earliest: int  # the first offset still stored
    latest: int  # the log end: the next offset a produce gets
    size_bytes: int


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionOffsets, ...]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    name: str
    topic: str
    members: tuple[tuple[int, tuple[int, ...]], ...]  # (member id, partitions)


def run_sync(call: Callable[[Any], Any], op: Op[T]) -> T:
    value: Any = None
    exc: BaseException | None = None
    while True:
        try:
            req = op.throw(exc) if exc is not None else op.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        exc = None
        try:
            value = call(req)
        except BayouClientError as e:
            exc, value = e, None


async def run_async(call: Callable[[Any], Awaitable[Any]], op: Op[T]) -> T:
    value: Any = None
    exc: BaseException | None = None
    while True:
        try:
            req = op.throw(exc) if exc is not None else op.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        exc = None
        try:
            value = await call(req)
        except BayouClientError as e:
            exc, value = e, None


class Resolver:
    """bayou topic name -> (stream, topic) identifiers, cached."""

    def __init__(self) -> None:
        self.cache: dict[str, Address] = {}
        self.poll_batches = True  # until the broker answers POLL_BATCHES as unknown
        self.poll_waits = True  # until it answers a POLL_BATCHES with a wait as unknown
        self.waits = True  # until it answers WAIT_FOR_MESSAGES as unknown
        self.poll_partitions = True  # until it answers POLL_PARTITIONS as unknown

    def forget(self, topic: str) -> None:
        self.cache.pop(topic, None)

    def candidates(self, topic: str) -> list[Address]:
        out = [(m.Identifier(DEFAULT_STREAM), m.Identifier(topic))]
        stream, dot, rest = topic.partition(".")
        if dot and stream and rest:
            out.append((m.Identifier(stream), m.Identifier(rest)))
        return out

    def details(self, topic: str) -> Op[tuple[Address, m.TopicDetails]]:
        """The topic's address and details (partition offsets); UnknownTopicError if none."""
        cached = self.cache.get(topic)
        tries = [cached] if cached is not None else self.candidates(topic)
        for addr in tries:
            try:
                details = yield m.GetTopic(*addr)
            except UnknownTopicError:
                continue
            if details is None:
                continue
            if cached is None and addr[0].value != DEFAULT_STREAM and not _is_iggy_name(details, addr):
                continue
            self.cache[topic] = addr
            return addr, details
        if cached is not None:
            self.forget(topic)
            return (yield from self.details(topic))
        raise UnknownTopicError(f"unknown topic {topic}", Status.TOPIC_NAME_NOT_FOUND)

    def address(self, topic: str) -> Op[Address]:
        cached = self.cache.get(topic)
        if cached is not None:
            return cached
        addr, _details = yield from self.details(topic)
        return addr


def _is_iggy_name(details: m.TopicDetails, addr: Address) -> bool:
    return details.topic.name == addr[1].value


def partition_offsets(details: m.TopicDetails) -> tuple[PartitionOffsets, ...]:
    out = []
    for p in details.partitions:
        # The broker reports current_offset = high watermark - 1 (0 when empty) and the number of
        # messages still stored, so the log end and log start follow from the two.
        latest = p.current_offset + 1 if (p.messages_count or p.current_offset) else 0
        out.append(PartitionOffsets(p.id, latest - p.messages_count, latest, p.size_bytes))
    return tuple(sorted(out, key=lambda x: x.partition))


def describe_topic(r: Resolver, topic: str) -> Op[TopicDescription]:
    _addr, details = yield from r.details(topic)
    return TopicDescription(topic, partition_offsets(details))


def partition_offset(r: Resolver, topic: str, partition: int) -> Op[PartitionOffsets]:
    d = yield from describe_topic(r, topic)
    if not 0 <= partition < len(d.partitions):
        raise UnknownPartitionError(f"topic {topic} has no partition {partition}", Status.PARTITION_NOT_FOUND)
    return d.partitions[partition]


def list_topics() -> Op[list[str]]:
    streams = yield m.GetStreams()
    names: list[str] = []
    for s in streams or ():
        topics = yield m.GetTopics(m.Identifier(s.id))
        for t in topics or ():
            names.append(t.name if s.name == DEFAULT_STREAM else f"{s.name}.{t.name}")
    return sorted(names)


def config_options(config: dict[str, str] | None) -> tuple[m.UserHeader, ...]:
    return tuple(m.UserHeader.of(k, m.HeaderKind.STRING, str(v)) for k, v in (config or {}).items())


def create_topic(r: Resolver, topic: str, partitions: int, config: dict[str, str] | None) -> Op[None]:
    yield m.CreateTopic(m.Identifier(DEFAULT_STREAM), topic, partitions, options=config_options(config))
    r.forget(topic)


def delete_topic(r: Resolver, topic: str) -> Op[None]:
    addr = yield from r.address(topic)
    yield m.DeleteTopic(*addr)
    r.forget(topic)


def create_partitions(r: Resolver, topic: str, total: int) -> Op[None]:
    addr, details = yield from r.details(topic)
    have = len(details.partitions)
    if total < have:
        raise BayouClientError(f"topic {topic} already has {have} partitions",
                               Status.INVALID_PARTITIONS_COUNT)
    if total > have:
        yield m.CreatePartitions(*addr, total - have)


def offset_for_time(r: Resolver, topic: str, partition: int, timestamp_ms: int) -> Op[int | None]:
    addr = yield from r.address(topic)
    req = m.PollMessages(SDK_CONSUMER, *addr, partition, m.PollingStrategy(m.PollingKind.TIMESTAMP,
                                                                          max(timestamp_ms, 0) * 1000),
                         1, False)
    polled = yield req
    return polled.messages[0].offset if polled is not None and polled.messages else None


def fetch_arrow_many(r: Resolver, wants: Sequence[tuple[str, int, int, int]], include_headers: bool = True,
                     max_wait_ms: int = 0) -> Op[list[pa.RecordBatch]]:
    """``fetch_arrow`` of several partitions (topic, partition, offset, max records) in one round
    trip: one POLL_PARTITIONS (bayou's extension), which with ``max_wait_ms`` waits until a record
    is there in any of them (or the time passes). Batches in the order asked; a refusal of any
    partition raises its error. A broker without POLL_PARTITIONS (bayou before stop 40) answers it
    INVALID_COMMAND (``r.poll_partitions`` goes False): their POLL_BATCHES are then sent together
    and answered in order, with a WAIT_FOR_MESSAGES for all of them first when the poll may wait
    (the broker serves a connection's polls in order, so they are answered once the wait ends,
    still in one round trip; a broker without the wait answers it INVALID_COMMAND and ``r.waits``
    goes False); the first refusal raises its error, every reply read first so the connection
    stays in step. A broker without POLL_BATCHES is asked a partition at a time with
    POLL_MESSAGES. (More than 10,000 partitions, which one POLL_PARTITIONS cannot list, go the
    pipelined way too.) One answer holds at most 64 MiB: the partitions listed after those that
    fill it come back empty, so a caller listing a large backlog first every time starves the
    ones after it (the ``Consumer`` starts each poll at the next partition)."""
    if not wants:
        return []
    addrs = []
    for topic, _partition, _offset, _count in wants:
        addrs.append((yield from r.address(topic)))
    if r.poll_partitions and (len(wants) > 1 or max_wait_ms > 0) and len(wants) <= WAIT_MAX_PARTITIONS:
        polled = yield from _poll_partitions(r, wants, addrs, include_headers, max_wait_ms)
        if polled is not None:
            return polled
    out: list[pa.RecordBatch] = []
    if r.poll_batches and (len(wants) > 1 or max_wait_ms > 0):
        frames = [encode(m.PollBatches(SDK_CONSUMER, *addr, partition,
                                       m.PollingStrategy(m.PollingKind.OFFSET, offset), count, False))
                  for addr, (_topic, partition, offset, count) in zip(addrs, wants, strict=True)]
        wait = max_wait_ms > 0 and r.waits
        if wait:
            watched: dict[Address, list[tuple[int, int]]] = {}
            for addr, (_topic, partition, offset, _count) in zip(addrs, wants, strict=True):
                watched.setdefault(addr, []).append((partition, offset))
            topics = tuple(m.WaitTopic(*addr, tuple(sorted(parts))) for addr, parts in watched.items())
            frames.insert(0, encode(m.WaitForMessages(max_wait_ms, topics)))
        replies: list[tuple[int, bytes]] = yield RawMany(tuple(frames))
        if wait:
            status, _payload = replies.pop(0)
            if status == Status.INVALID_COMMAND:
                r.waits = False
            elif status:
                raise error_for(status, "wait for messages")
        for (topic, partition, _offset, _count), (status, payload) in zip(wants, replies, strict=True):
            if status == Status.INVALID_COMMAND and not out:  # no POLL_BATCHES: every reply says so
                r.poll_batches = False
                break
            if status:
                raise error_for(status, f"poll {topic}/{partition}")
            batch, _current = batches_to_arrow(payload, topic, partition, include_headers=include_headers)
            out.append(batch)
        else:
            return out
    for topic, partition, offset, count in wants:
        out.append((yield from fetch_arrow(r, topic, partition, offset, count,
                                           include_headers=include_headers)))
    return out


def _poll_partitions(r: Resolver, wants: Sequence[tuple[str, int, int, int]], addrs: list[Address],
                     include_headers: bool, max_wait_ms: int) -> Op[list[pa.RecordBatch] | None]:
    """``fetch_arrow_many`` with POLL_PARTITIONS; None when the broker lacks it."""
    groups: dict[Address, list[int]] = {}  # the request lists partitions topic by topic
    for i, addr in enumerate(addrs):
        groups.setdefault(addr, []).append(i)
    req = m.PollPartitions(max_wait_ms, tuple(
        m.PollTopic(*addr, tuple((wants[i][1], wants[i][2], wants[i][3]) for i in listed))
        for addr, listed in groups.items()))
    try:
        payload = yield Raw(encode(req), "poll " + ", ".join(f"{t}/{p}" for t, p, _o, _n in wants))
    except BayouClientError as exc:
        if exc.status != Status.INVALID_COMMAND:
            raise
        r.poll_partitions = False
        return None
    order = [i for listed in groups.values() for i in listed]
    replies = partition_replies(payload)
    if len(replies) != len(order):
        raise ValueError(f"POLL_PARTITIONS reply: {len(replies)} partitions, {len(order)} asked")
    out: list[pa.RecordBatch | None] = [None] * len(wants)
    for i, reply in zip(order, replies, strict=True):
        out[i] = batches_to_arrow(reply, wants[i][0], wants[i][1], include_headers=include_headers)[0]
    return [batch for batch in out if batch is not None]


def fetch_arrow(r: Resolver, topic: str, partition: int, offset: int, max_records: int,
                end_offset: int | None = None, include_headers: bool = True,
                consumer: m.Consumer = SDK_CONSUMER, max_wait_ms: int = 0) -> Op[pa.RecordBatch]:
    """Records from ``offset``, as an Arrow record batch. Asked with bayou's POLL_BATCHES (the V
    layout: the broker sends the frames it stores as they are); a broker without it (a real Iggy
    server, an older bayou) answers InvalidCommand, and this client polls with POLL_MESSAGES.
    ``max_wait_ms``: when nothing is there yet, the broker answers once a record arrives or the
    time passes (POLL_BATCHES' wait); a broker without that wait answers at once
    (``r.poll_waits`` is then False)."""
    addr = yield from r.address(topic)
    strategy = m.PollingStrategy(m.PollingKind.OFFSET, offset)
    # the waiting POLL_BATCHES, then the plain one: each asked until the broker says it lacks it
    for wait in ((max_wait_ms, 0) if max_wait_ms > 0 and r.poll_waits else (0,)):
        if not r.poll_batches:
            break
        try:
            batches = m.PollBatches(consumer, *addr, partition, strategy, max_records, False, wait)
            payload = yield Raw(encode(batches), f"poll {topic}/{partition}")
        except BayouClientError as exc:
            if exc.status != Status.INVALID_COMMAND:
                raise
            if wait:
                r.poll_waits = False
            else:
                r.poll_batches = False
        else:
            batch, _current = batches_to_arrow(payload, topic, partition, end_offset=end_offset,
                                               include_headers=include_headers)
            return batch
    req = m.PollMessages(consumer, *addr, partition, strategy, max_records, False)
    payload = yield Raw(encode(req), f"poll {topic}/{partition}")
    batch, _current = polled_to_arrow(payload, topic, partition, end_offset=end_offset,
                                      include_headers=include_headers)
    return batch


def wait_for_messages(r: Resolver, positions: dict[str, dict[int, int]], max_wait_ms: int) -> Op[int]:
    """bayou's WAIT_FOR_MESSAGES: once any partition of ``positions`` (topic -> partition -> the
    offset a poll would read next) holds a message at or past it, or after ``max_wait_ms``: how
    many do. A broker without the extension answers INVALID_COMMAND (a BayouClientError)."""
    topics = []
    for topic, parts in positions.items():
        addr = yield from r.address(topic)
        topics.append(m.WaitTopic(*addr, tuple(sorted(parts.items()))))
    payload = yield Raw(encode(m.WaitForMessages(max_wait_ms, tuple(topics))), "wait for messages")
    ready: int = U32.unpack_from(payload)[0]
    return ready


def send(r: Resolver, topic: str, partition: int, values: Sequence[bytes | None],
         keys: Sequence[bytes | None] | None = None, headers: Sequence[HeaderList] | None = None,
         message_ids: Sequence[int] | None = None, origin_us: int = 0,
         compression: Compression = Compression.NONE) -> Op[None]:
    addr = yield from r.address(topic)
    yield Raw(prepare_send(*addr, partition, values, keys, headers, message_ids, origin_us, compression),
              f"send {topic}/{partition}")


def group_consumer(group: str) -> m.Consumer:
    return m.Consumer(m.ConsumerKind.GROUP, m.Identifier(group))


def ensure_group(r: Resolver, group: str, topic: str) -> Op[Address]:
    addr = yield from r.address(topic)
    existing = yield m.GetConsumerGroup(*addr, m.Identifier(group))
    if existing is None:
        try:
            yield m.CreateConsumerGroup(*addr, group)
        except BayouClientError as exc:
            if exc.status not in (Status.CONSUMER_GROUP_NAME_ALREADY_EXISTS,
                                  Status.CONSUMER_GROUP_ID_ALREADY_EXISTS):
                raise
    return addr


def committed(r: Resolver, group: str, topic: str) -> Op[dict[int, int]]:
    """Committed offsets (the next offset to read, Kafka's convention) per partition."""
    addr, details = yield from r.details(topic)
    out: dict[int, int] = {}
    for p in details.partitions:
        try:
            info = yield m.GetConsumerOffset(group_consumer(group), *addr, p.id)
        except BayouClientError as exc:
            if exc.status in (Status.CONSUMER_GROUP_NAME_NOT_FOUND, Status.CONSUMER_GROUP_ID_NOT_FOUND,
                              Status.CONSUMER_OFFSET_NOT_FOUND):
                continue
            raise
        if info is not None:
            out[p.id] = info.stored_offset + 1
    return out


def commit(r: Resolver, group: str, topic: str, offsets: dict[int, int]) -> Op[None]:
    """Commit next-offsets (Kafka's convention); Iggy stores the last consumed one."""
    addr = yield from ensure_group(r, group, topic)
    for partition, next_offset in sorted(offsets.items()):
        if next_offset > 0:
            yield m.StoreConsumerOffset(group_consumer(group), *addr, partition, next_offset - 1)


def lag(r: Resolver, group: str, topic: str) -> Op[dict[int, int]]:
    d = yield from describe_topic(r, topic)
    done = yield from committed(r, group, topic)
    return {p.partition: p.latest - max(done.get(p.partition, p.earliest), p.earliest) for p in d.partitions}


def list_groups(r: Resolver, topic: str) -> Op[list[str]]:
    addr = yield from r.address(topic)
    groups = yield m.GetConsumerGroups(*addr)
    return sorted(g.name for g in groups or ())


def describe_group(r: Resolver, group: str, topic: str) -> Op[GroupDescription]:
    addr = yield from r.address(topic)
    d = yield m.GetConsumerGroup(*addr, m.Identifier(group))
    if d is None:
        raise error_for(Status.CONSUMER_GROUP_NAME_NOT_FOUND, f"group {group}")
    return GroupDescription(group, topic, tuple((mem.id, tuple(mem.partitions)) for mem in d.members))


def delete_group(r: Resolver, group: str, topic: str) -> Op[None]:
    addr = yield from r.address(topic)
    yield m.DeleteConsumerGroup(*addr, m.Identifier(group))
