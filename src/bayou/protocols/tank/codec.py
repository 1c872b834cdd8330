"""Payload decoding and encoding for every TANK 4.0 message, both directions.

Server side: ``decode_request(msg_id, payload)`` turns one frame into a request message or raises
``TankError(close=True)`` (unknown or obsolete ids, 0x4 included, anything truncated or malformed,
trailing bytes: tank.md 1 says close without a reply); ``encode_response(response)`` gives
``(msg_id, payload)``, and a ProduceResponse always goes out as 0x1, also for 0x5. For a consume
answer served with sendfile, ``encode_consume_header`` writes the header from the entries and
the chunk lengths alone (tank.md 12.3); the chunk bytes follow it on the wire.

Client side (tests, fuzzing, a future SDK): ``encode_request`` and ``decode_response``. A produce
response does not say how many entries each topic had, so decoding one needs its request.

Dispatch is a lookup: ``REQUEST_DECODERS`` / ``RESPONSE_DECODERS`` by ``MsgId``,
``REQUEST_ENCODERS`` / ``RESPONSE_ENCODERS`` by message class. Decoders consume their payload
exactly. Encoders raise ValueError (or struct.error for an out-of-range integer) for messages the
wire cannot carry or the 4.0 client would abort on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from bayou.protocols.tank import messages as m
from bayou.protocols.tank.codes import (
    CONSUME_FLAGS_WITH_BASE,
    CONSUME_FLAGS_WITH_CHUNK,
    TOPIC_LEVEL_PRODUCE_ERRORS,
    ConsumeFlag,
    CreateTopicError,
    MsgId,
    PartitionFault,
    ProduceError,
    ReloadConfError,
    TankError,
)
from bayou.protocols.tank.framing import frame_header
from bayou.protocols.tank.wire import (
    U8,
    U16,
    U32,
    U64,
    U64_MAX,
    Reader,
    encode_str8,
    encode_varint,
    raw_of,
    text_of,
)

UNKNOWN_TOPIC_MARK = 0xFFFF
UNKNOWN_PARTITION_ID = 0xFFFF  # never a partition's id; refused in a consume
STANDALONE_TOPOLOGY = 0xFFFF
MAX_DISCOVERED = 0xFFFF  # partition ids one DiscoverPartitions may list (its reply's count is a u16)

RequestDecoder = Callable[[bytes], m.Request]

# -- small shared pieces ------------------------------------------------------------------------


def _member(value: int, enum_cls: Any, what: str) -> int:
    """``value`` if it is one of ``enum_cls``'s values, else TankError (the client would abort)."""
    try:
        return int(enum_cls(value))
    except ValueError:
        raise TankError(f"{what} {value:#x} is not one the 4.0 client understands") from None


def _check(value: int, enum_cls: Any, what: str) -> int:
    try:
        return int(enum_cls(value))
    except ValueError:
        raise ValueError(f"{what} {value!r} is not one the 4.0 client understands") from None


def _endpoint(r: Reader) -> m.Endpoint:
    return m.Endpoint(r.u32(), r.u16())


def _enc_endpoint(ep: m.Endpoint) -> bytes:
    return U32.pack(ep.address) + U16.pack(ep.port)


def _consume_partitions(r: Reader, count: int) -> tuple[m.ConsumePartition, ...]:
    if count * 14 > r.remaining:
        raise TankError(f"{count} consume partition entries do not fit in {r.remaining} bytes")
    parts = tuple(m.ConsumePartition(r.u16(), r.u64(), r.u32()) for _ in range(count))
    if any(p.partition == UNKNOWN_PARTITION_ID for p in parts):
        # No partition has this id (a topic holds at most 65535: ids 0..65534), and its answer
        # cannot be written: first in a topic, ``ffff`` reads as the unknown-topic mark.
        raise TankError("consume of partition id 0xffff")
    return parts


# -- request decoders ---------------------------------------------------------------------------


def _produce(payload: bytes, with_seqnum: bool) -> m.Produce:
    r = Reader(payload)
    client_version = r.u16()
    request_id = r.u32()
    client_id = r.str8()
    required_acks = r.u8()
    ack_timeout = r.u32()
    topics: list[m.ProduceTopic] = []
    for _ in range(r.u8()):
        name = r.str8()
        entries: list[m.ProduceEntry] = []
        for _ in range(r.u8()):
            partition = r.u16()
            length = r.varint()
            base_seq = r.u64() if with_seqnum else 0
            entries.append(m.ProduceEntry(partition, r.take(length), base_seq))
        topics.append(m.ProduceTopic(name, tuple(entries)))
    r.done()
    return m.Produce(request_id, tuple(topics), client_version, client_id, required_acks, ack_timeout,
                     with_seqnum)


def _consume(payload: bytes) -> m.Request:
    r = Reader(payload)
    client_version = r.u16()
    request_id = r.u32()
    client_id = r.str8()
    max_wait = r.u64()
    min_bytes = r.u32()
    op_flags = r.u8() if client_version >= 3 else 0
    topics = tuple(m.ConsumeTopic(r.str8(), _consume_partitions(r, r.u8())) for _ in range(r.u8()))
    r.done()
    return m.Consume(request_id, topics, max_wait, min_bytes, client_version, client_id, op_flags)


def _consume_peer(payload: bytes) -> m.Request:
    r = Reader(payload)
    replica_id = r.u16()
    max_wait = r.u64()
    min_bytes = r.u32()
    count = r.u16()
    topics: list[m.ConsumeTopic] = []
    for _ in range(count):
        name = r.str8()
        topics.append(m.ConsumeTopic(name, _consume_partitions(r, r.u16())))
    r.done()
    return m.ConsumePeer(replica_id, tuple(topics), max_wait, min_bytes)


def _ping(payload: bytes) -> m.Request:
    Reader(payload).done()
    return m.Ping()


def _discover_partitions(payload: bytes) -> m.Request:
    r = Reader(payload)
    request_id = r.u32()
    topic = r.str8()
    if r.remaining % 2:
        raise TankError("odd number of bytes in the partition id list")
    if r.remaining // 2 > MAX_DISCOVERED:  # the reply's count is a u16: it could not answer them
        raise TankError(f"{r.remaining // 2} partition ids listed: a reply counts at most {MAX_DISCOVERED}")
    ids = tuple(r.u16() for _ in range(r.remaining // 2))
    r.done()
    return m.DiscoverPartitions(request_id, topic, ids)


def _create_topic(payload: bytes) -> m.Request:
    r = Reader(payload)
    request_id = r.u32()
    topic = r.str8()
    partitions = r.u16()
    config = text_of(r.take(r.varint()))
    r.done()
    return m.CreateTopic(request_id, topic, partitions, config)


def _reload_conf(payload: bytes) -> m.Request:
    r = Reader(payload)
    out = m.ReloadConf(r.u32(), r.str8(), r.u16())
    r.done()
    return out


def _status(payload: bytes) -> m.Request:
    r = Reader(payload)
    out = m.Status(r.u32())
    r.done()
    return out


def _discover_topics(payload: bytes) -> m.Request:
    r = Reader(payload)
    out = m.DiscoverTopics(r.u32(), r.u8())
    r.done()
    return out


def _discover_topology(payload: bytes) -> m.Request:
    r = Reader(payload)
    out = m.DiscoverTopology(r.u32(), r.u8())
    r.done()
    return out


REQUEST_DECODERS: Mapping[MsgId, RequestDecoder] = MappingProxyType({
    MsgId.PRODUCE: lambda p: _produce(p, False),
    MsgId.CONSUME: _consume,
    MsgId.PING: _ping,
    MsgId.PRODUCE_WITH_SEQNUM: lambda p: _produce(p, True),
    MsgId.DISCOVER_PARTITIONS: _discover_partitions,
    MsgId.CREATE_TOPIC: _create_topic,
    MsgId.RELOAD_CONF: _reload_conf,
    MsgId.CONSUME_PEER: _consume_peer,
    MsgId.STATUS: _status,
    MsgId.DISCOVER_TOPICS: _discover_topics,
    MsgId.DISCOVER_TOPOLOGY: _discover_topology,
})
"""Every id a client may send. REG_REPLICA (0x4) is absent on purpose: 4.0 closes on it."""

_REQUEST_BY_ID: dict[int, RequestDecoder] = {int(k): v for k, v in REQUEST_DECODERS.items()}


def decode_request(msg_id: int, payload: bytes) -> m.Request:
    """A request message from one frame, or ``TankError(close=True)``."""
    decoder = _REQUEST_BY_ID.get(msg_id)
    if decoder is None:
        if msg_id == MsgId.REG_REPLICA:
            raise TankError("obsolete RegReplica (0x4)")
        raise TankError(f"unknown message id {msg_id:#x}")
    return decoder(payload)


# -- request encoders ---------------------------------------------------------------------------


def _enc_consume_partitions(parts: Sequence[m.ConsumePartition]) -> bytes:
    return b"".join(U16.pack(p.partition) + U64.pack(p.seq) + U32.pack(p.fetch_size) for p in parts)


def _enc_produce(req: m.Produce) -> bytes:
    out = bytearray(U16.pack(req.client_version) + U32.pack(req.request_id) + encode_str8(req.client_id)
                    + U8.pack(req.required_acks) + U32.pack(req.ack_timeout) + U8.pack(len(req.topics)))
    for t in req.topics:
        out += encode_str8(t.name) + U8.pack(len(t.entries))
        for e in t.entries:
            out += U16.pack(e.partition) + encode_varint(len(e.bundle))
            if req.with_seqnum:
                out += U64.pack(e.base_seq)
            elif e.base_seq:
                raise ValueError("base_seq travels only in ProduceWithSeqnum (with_seqnum=True)")
            out += e.bundle
    return bytes(out)


def _enc_consume(req: m.Consume) -> bytes:
    out = bytearray(U16.pack(req.client_version) + U32.pack(req.request_id) + encode_str8(req.client_id)
                    + U64.pack(req.max_wait) + U32.pack(req.min_bytes))
    if req.client_version >= 3:
        out += U8.pack(req.op_flags)
    elif req.op_flags:
        raise ValueError("op_flags needs client version 3 or later")
    out += U8.pack(len(req.topics))
    for t in req.topics:
        out += encode_str8(t.name) + U8.pack(len(t.partitions)) + _enc_consume_partitions(t.partitions)
    return bytes(out)


def _enc_consume_peer(req: m.ConsumePeer) -> bytes:
    out = bytearray(U16.pack(req.replica_id) + U64.pack(req.max_wait) + U32.pack(req.min_bytes)
                    + U16.pack(len(req.topics)))
    for t in req.topics:
        out += encode_str8(t.name) + U16.pack(len(t.partitions)) + _enc_consume_partitions(t.partitions)
    return bytes(out)


REQUEST_ENCODERS: Mapping[type, Callable[[Any], bytes]] = MappingProxyType({
    m.Produce: _enc_produce,
    m.Consume: _enc_consume,
    m.ConsumePeer: _enc_consume_peer,
    m.Ping: lambda req: b"",
    m.DiscoverPartitions: lambda req: (U32.pack(req.request_id) + encode_str8(req.topic)
                                       + b"".join(U16.pack(p) for p in req.partitions)),
    m.CreateTopic: lambda req: (U32.pack(req.request_id) + encode_str8(req.topic) + U16.pack(req.partitions)
                                + encode_varint(len(raw_of(req.config))) + raw_of(req.config)),
    m.ReloadConf: lambda req: U32.pack(req.request_id) + encode_str8(req.topic) + U16.pack(req.partition),
    m.Status: lambda req: U32.pack(req.request_id),
    m.DiscoverTopics: lambda req: U32.pack(req.request_id) + U8.pack(req.flags),
    m.DiscoverTopology: lambda req: U32.pack(req.request_id) + U8.pack(req.flags),
})


def encode_request(req: m.Request) -> tuple[int, bytes]:
    """(msg_id, payload) of a request; ``Produce`` picks 0x1 or 0x5 from ``with_seqnum``."""
    msg_id = req.msg_id if isinstance(req, m.Produce) else req.MSG_ID
    return int(msg_id), REQUEST_ENCODERS[type(req)](req)


# -- consume responses (tank.md 5.2, 5.3, 5.8) --------------------------------------------------


def _enc_partition_entry(p: m.ConsumePartitionResult, chunk_length: int) -> bytes:
    flags = _check(p.flags, ConsumeFlag, "consume errorOrFlags")
    out = bytearray(U16.pack(p.partition) + U8.pack(flags))
    if flags == ConsumeFlag.OTHER_LEADER:
        if p.leader is None:
            raise ValueError("errorOrFlags 0xfc needs a leader endpoint")
        out += _enc_endpoint(p.leader)
    elif p.leader is not None:
        raise ValueError("a leader endpoint goes only with errorOrFlags 0xfc")
    if flags in CONSUME_FLAGS_WITH_BASE:
        out += U64.pack(p.base_seq)
    if flags in CONSUME_FLAGS_WITH_CHUNK:
        out += U64.pack(p.hwmark) + U32.pack(chunk_length)
    elif chunk_length:
        raise ValueError(f"errorOrFlags {flags:#x} carries no chunk")
    if flags == ConsumeFlag.BOUNDARY_FAULT:
        out += U64.pack(p.first_available)
    return bytes(out)


def _consume_header(request_id: int | None, topics: Sequence[m.ConsumeTopicAnswer],
                    chunk_lengths: Sequence[int] | None) -> tuple[bytes, int]:
    """(u32 header length + header, sum of chunk lengths). ``request_id`` None = ConsumePeer."""
    peer = request_id is None
    count = U16 if peer else U8
    out = bytearray()
    if not peer:
        out += U32.pack(request_id)
    out += count.pack(len(topics))
    lengths = iter(chunk_lengths) if chunk_lengths is not None else None
    total = 0
    for t in topics:
        out += encode_str8(t.name)
        if isinstance(t, m.ConsumeUnknownTopic):
            out += count.pack(t.partition_count) + U16.pack(UNKNOWN_TOPIC_MARK)
            continue
        out += count.pack(len(t.partitions))
        if t.partitions and t.partitions[0].partition == UNKNOWN_TOPIC_MARK:
            raise ValueError("a first partition id 0xffff reads as the unknown-topic mark")
        for p in t.partitions:
            if lengths is None:
                length = len(p.chunk)
            else:
                try:
                    length = next(lengths)
                except StopIteration:
                    raise ValueError("fewer chunk lengths than partition entries") from None
            out += _enc_partition_entry(p, length)
            total += length
    if lengths is not None and next(lengths, None) is not None:
        raise ValueError("more chunk lengths than partition entries")
    return U32.pack(len(out)) + bytes(out), total


def encode_consume_header(request_id: int, topics: Sequence[m.ConsumeTopicAnswer],
                          chunk_lengths: Sequence[int] | None = None, *, framed: bool = False) -> bytes:
    """The start of a consume response payload: u32 header length, then the header.

    ``chunk_lengths`` gives one length per partition entry, in header order across all known
    topics (0 for entries that carry no chunk), and the entries' ``chunk`` fields are then ignored;
    None takes ``len(entry.chunk)``. An entry for partition 0xffff cannot come first in a topic
    (clients read ``ff ff`` there as "unknown topic"): that is a ValueError. The header length
    covers the header only; the chunks, concatenated in the same order, follow it. With
    ``framed`` the 5-byte frame header is prepended, its size counting the chunks, so a server
    can write this and then ``sendfile`` each chunk's file range.
    """
    head, total = _consume_header(request_id, topics, chunk_lengths)
    return frame_header(MsgId.CONSUME, len(head) + total) + head if framed else head


def encode_consume_peer_header(topics: Sequence[m.ConsumeTopicAnswer],
                               chunk_lengths: Sequence[int] | None = None, *, framed: bool = False) -> bytes:
    """``encode_consume_header`` for ConsumePeer (0x9): no request id, u16 counts."""
    head, total = _consume_header(None, topics, chunk_lengths)
    return frame_header(MsgId.CONSUME_PEER, len(head) + total) + head if framed else head


def _chunks(topics: Sequence[m.ConsumeTopicAnswer]) -> bytes:
    return b"".join(p.chunk for t in topics if isinstance(t, m.ConsumeTopicResult) for p in t.partitions)


def _enc_consume_response(resp: m.ConsumeResponse) -> bytes:
    return encode_consume_header(resp.request_id, resp.topics) + _chunks(resp.topics)


def _enc_consume_peer_response(resp: m.ConsumePeerResponse) -> bytes:
    return encode_consume_peer_header(resp.topics) + _chunks(resp.topics)


def _decode_consume(payload: bytes, peer: bool) -> tuple[int, tuple[m.ConsumeTopicAnswer, ...]]:
    r = Reader(payload)
    header_end = 4 + r.u32()
    if header_end > len(payload):
        raise TankError(f"consume header length {header_end - 4} runs past the payload")
    h = Reader(payload, 4, header_end)
    request_id = 0 if peer else h.u32()
    count = h.u16 if peer else h.u8
    pending: list[tuple[str, int, list[tuple[m.ConsumePartitionResult, int]] | None]] = []
    for _ in range(count()):
        name = h.str8()
        n = count()
        if h.peek_u16() == UNKNOWN_TOPIC_MARK:
            h.skip(2)
            pending.append((name, n, None))
            continue
        entries: list[tuple[m.ConsumePartitionResult, int]] = []
        for _ in range(n):
            entries.append(_partition_entry(h))
        pending.append((name, n, entries))
    h.done()
    pos = header_end
    topics: list[m.ConsumeTopicAnswer] = []
    for name, n, maybe_entries in pending:
        if maybe_entries is None:
            topics.append(m.ConsumeUnknownTopic(name, n))
            continue
        parts: list[m.ConsumePartitionResult] = []
        for entry, length in maybe_entries:
            if length:
                if length > len(payload) - pos:
                    raise TankError("consume chunks run past the payload")
                entry = m.ConsumePartitionResult(entry.partition, entry.flags, entry.base_seq, entry.hwmark,
                                                 entry.first_available, entry.leader,
                                                 payload[pos : pos + length])
                pos += length
            parts.append(entry)
        topics.append(m.ConsumeTopicResult(name, tuple(parts)))
    if pos != len(payload):
        raise TankError(f"{len(payload) - pos} bytes after the consume chunks")
    return request_id, tuple(topics)


def _partition_entry(h: Reader) -> tuple[m.ConsumePartitionResult, int]:
    partition = h.u16()
    flags = _member(h.u8(), ConsumeFlag, "consume errorOrFlags")
    leader = _endpoint(h) if flags == ConsumeFlag.OTHER_LEADER else None
    base_seq = h.u64() if flags in CONSUME_FLAGS_WITH_BASE else 0
    hwmark = length = 0
    if flags in CONSUME_FLAGS_WITH_CHUNK:
        hwmark = h.u64()
        length = h.u32()
    first_available = h.u64() if flags == ConsumeFlag.BOUNDARY_FAULT else 0
    return m.ConsumePartitionResult(partition, flags, base_seq, hwmark, first_available, leader), length


def _consume_response(payload: bytes, request: m.Request | None) -> m.Response:
    request_id, topics = _decode_consume(payload, False)
    return m.ConsumeResponse(request_id, topics)


def _consume_peer_response(payload: bytes, request: m.Request | None) -> m.Response:
    _, topics = _decode_consume(payload, True)
    return m.ConsumePeerResponse(topics)


# -- produce responses (tank.md 4.3) ------------------------------------------------------------


def _enc_produce_response(resp: m.ProduceResponse) -> bytes:
    out = bytearray(U32.pack(resp.request_id))
    for t in resp.topics:
        if t.topic_error is not None:
            if t.topic_error not in TOPIC_LEVEL_PRODUCE_ERRORS or t.errors or t.leaders:
                raise ValueError("a topic-level produce error is 0xff or 0xfe alone")
            out += U8.pack(t.topic_error)
            continue
        leaders = iter(t.leaders)
        for i, code in enumerate(t.errors):
            code = _check(code, ProduceError, "produce error")
            if code == ProduceError.UNKNOWN_TOPIC or (i == 0 and code in TOPIC_LEVEL_PRODUCE_ERRORS):
                raise ValueError(f"produce error {code:#x} here reads as a topic-level byte; use topic_error")
            out += U8.pack(code)
            if code == ProduceError.OTHER_LEADER:
                ep = next(leaders, None)
                if ep is None:
                    raise ValueError("produce error 0xfc needs a leader endpoint")
                out += _enc_endpoint(ep)
        if next(leaders, None) is not None:
            raise ValueError("more leaders than 0xfc error bytes")
    return bytes(out)


def _produce_response(payload: bytes, request: m.Request | None) -> m.Response:
    if not isinstance(request, m.Produce):
        raise ValueError("decoding a produce response needs its Produce request (entry counts per topic)")
    r = Reader(payload)
    request_id = r.u32()
    topics: list[m.ProduceTopicResult] = []
    for t in request.topics:
        if not t.entries:
            topics.append(m.ProduceTopicResult())
            continue
        first = _member(r.u8(), ProduceError, "produce error")
        if first in TOPIC_LEVEL_PRODUCE_ERRORS:
            topics.append(m.ProduceTopicResult(topic_error=first))
            continue
        errors = [first]
        leaders: list[m.Endpoint] = []
        if first == ProduceError.OTHER_LEADER:
            leaders.append(_endpoint(r))
        for _ in range(len(t.entries) - 1):
            code = _member(r.u8(), ProduceError, "produce error")
            if code == ProduceError.UNKNOWN_TOPIC:
                raise TankError("produce error 0xff after a topic's first entry")
            errors.append(code)
            if code == ProduceError.OTHER_LEADER:
                leaders.append(_endpoint(r))
        topics.append(m.ProduceTopicResult(tuple(errors), None, tuple(leaders)))
    r.done()
    return m.ProduceResponse(request_id, tuple(topics))


# -- the other responses ------------------------------------------------------------------------


def _enc_discover_partitions_response(resp: m.DiscoverPartitionsResponse) -> bytes:
    out = bytearray(U32.pack(resp.request_id) + encode_str8(resp.topic) + U16.pack(len(resp.partitions)))
    for p in resp.partitions:
        if p.fault is None:
            if p.first_available == U64_MAX and p.hwmark == U64_MAX:
                raise ValueError("2^64-1 / 2^64-1 is the fault marker; set fault")
            if p.leader is not None:
                raise ValueError("a leader endpoint goes only with fault 0xfc")
            out += U64.pack(p.first_available) + U64.pack(p.hwmark)
            continue
        fault = _check(p.fault, PartitionFault, "partition fault")
        out += U64.pack(U64_MAX) + U64.pack(U64_MAX) + U8.pack(fault)
        if fault == PartitionFault.OTHER_LEADER:
            if p.leader is None:
                raise ValueError("fault 0xfc needs a leader endpoint")
            out += _enc_endpoint(p.leader)
        elif p.leader is not None:
            raise ValueError("a leader endpoint goes only with fault 0xfc")
    return bytes(out)


def _discover_partitions_response(payload: bytes, request: m.Request | None) -> m.Response:
    r = Reader(payload)
    request_id = r.u32()
    topic = r.str8()
    parts: list[m.DiscoveredPartition] = []
    for _ in range(r.u16()):
        first, hwmark = r.u64(), r.u64()
        if first == U64_MAX and hwmark == U64_MAX:
            fault = _member(r.u8(), PartitionFault, "partition fault")
            leader = _endpoint(r) if fault == PartitionFault.OTHER_LEADER else None
            parts.append(m.DiscoveredPartition(U64_MAX, U64_MAX, fault, leader))
        else:
            parts.append(m.DiscoveredPartition(first, hwmark))
    r.done()
    return m.DiscoverPartitionsResponse(request_id, topic, tuple(parts))


def _enc_create_topic_response(resp: m.CreateTopicResponse) -> bytes:
    return (U32.pack(resp.request_id) + encode_str8(resp.topic)
            + U8.pack(_check(resp.error, CreateTopicError, "CreateTopic error")))


def _create_topic_response(payload: bytes, request: m.Request | None) -> m.Response:
    r = Reader(payload)
    out = m.CreateTopicResponse(r.u32(), r.str8(), _member(r.u8(), CreateTopicError, "CreateTopic error"))
    r.done()
    return out


def _enc_reload_conf_response(resp: m.ReloadConfResponse) -> bytes:
    return (U32.pack(resp.request_id) + encode_str8(resp.topic) + U16.pack(resp.partition)
            + U8.pack(_check(resp.error, ReloadConfError, "ReloadConf error")))


def _reload_conf_response(payload: bytes, request: m.Request | None) -> m.Response:
    r = Reader(payload)
    out = m.ReloadConfResponse(r.u32(), r.str8(), r.u16(),
                               _member(r.u8(), ReloadConfError, "ReloadConf error"))
    r.done()
    return out


def _flag_byte(r: Reader, what: str) -> bool:
    v = r.u8()
    if v > 1:
        raise TankError(f"{what} byte {v}")
    return v == 1


def _enc_status_response(resp: m.StatusResponse) -> bytes:
    out = bytearray(U32.pack(resp.request_id) + U8.pack(resp.global_flags)
                    + U8.pack(resp.cluster is not None) + U32.pack(resp.topics) + U32.pack(resp.partitions))
    if resp.cluster is not None:
        c = resp.cluster
        out += U8.pack(c.flags) + encode_str8(c.name) + U32.pack(c.nodes)
    tail = (resp.open_partitions, resp.open_time_ms, resp.start_time)
    if None in tail:
        if tail != (None, None, None) or resp.version is not None:
            raise ValueError("open_partitions, open_time_ms and start_time come together, before version")
        return bytes(out)
    out += b"".join(U32.pack(v) for v in tail if v is not None)
    if resp.version is not None:
        out += U32.pack(resp.version)
    return bytes(out)


def _status_response(payload: bytes, request: m.Request | None) -> m.Response:
    r = Reader(payload)
    request_id = r.u32()
    global_flags = r.u8()
    cluster_aware = _flag_byte(r, "cluster aware")
    topics, partitions = r.u32(), r.u32()
    cluster = m.StatusCluster(r.u8(), r.str8(), r.u32()) if cluster_aware else None
    open_partitions = open_time_ms = start_time = version = None
    if r.remaining:
        open_partitions, open_time_ms, start_time = r.u32(), r.u32(), r.u32()
        if r.remaining:
            version = r.u32()
    r.done()
    return m.StatusResponse(request_id, topics, partitions, open_partitions, open_time_ms, start_time,
                            version, global_flags, cluster)


def _enc_discover_topics_response(resp: m.DiscoverTopicsResponse) -> bytes:
    out = bytearray(U32.pack(resp.request_id) + U32.pack(len(resp.topics)) + U8.pack(resp.cluster_aware))
    for t in resp.topics:
        out += encode_str8(t.name) + U8.pack(t.enabled) + U16.pack(t.partitions)
        if resp.cluster_aware:
            out += U8.pack(t.replication_factor)
        elif t.replication_factor != 1:
            raise ValueError("a replication factor is on the wire only when cluster aware")
    return bytes(out)


def _discover_topics_response(payload: bytes, request: m.Request | None) -> m.Response:
    r = Reader(payload)
    request_id = r.u32()
    count = r.u32()
    cluster_aware = _flag_byte(r, "cluster aware")
    if count * 4 > r.remaining:
        raise TankError(f"{count} topics do not fit in {r.remaining} bytes")
    topics: list[m.TopicInfo] = []
    for _ in range(count):
        name, enabled, partitions = r.str8(), r.u8(), r.u16()
        rf = r.u8() if cluster_aware else 1
        topics.append(m.TopicInfo(name, partitions, enabled, rf))
    r.done()
    return m.DiscoverTopicsResponse(request_id, tuple(topics), cluster_aware)


def _enc_discover_topology_response(resp: m.DiscoverTopologyResponse) -> bytes:
    if resp.cluster_name is None:
        if resp.nodes:
            raise ValueError("a standalone topology has no nodes")
        return U32.pack(resp.request_id) + U16.pack(STANDALONE_TOPOLOGY)
    if len(resp.nodes) >= STANDALONE_TOPOLOGY:
        raise ValueError("too many topology nodes")
    out = bytearray(U32.pack(resp.request_id) + U16.pack(len(resp.nodes)) + encode_str8(resp.cluster_name))
    for node in resp.nodes:
        if bool(node.flags & 1) != (node.endpoint is not None):
            raise ValueError("topology node flag bit0 says whether an endpoint follows")
        out += U16.pack(node.id) + U8.pack(node.flags)
        if node.endpoint is not None:
            out += _enc_endpoint(node.endpoint)
        out += U16.pack(node.partitions)
    return bytes(out)


def _discover_topology_response(payload: bytes, request: m.Request | None) -> m.Response:
    r = Reader(payload)
    request_id = r.u32()
    n = r.u16()
    if n == STANDALONE_TOPOLOGY:
        r.done()
        return m.DiscoverTopologyResponse(request_id)
    name = r.str8()
    nodes: list[m.TopologyNode] = []
    for _ in range(n):
        node_id, flags = r.u16(), r.u8()
        endpoint = _endpoint(r) if flags & 1 else None
        nodes.append(m.TopologyNode(node_id, flags, r.u16(), endpoint))
    r.done()
    return m.DiscoverTopologyResponse(request_id, name, tuple(nodes))


def _ping_response(payload: bytes, request: m.Request | None) -> m.Response:
    Reader(payload).done()
    return m.Ping()


RESPONSE_ENCODERS: Mapping[type, Callable[[Any], bytes]] = MappingProxyType({
    m.ProduceResponse: _enc_produce_response,
    m.ConsumeResponse: _enc_consume_response,
    m.Ping: lambda resp: b"",
    m.DiscoverPartitionsResponse: _enc_discover_partitions_response,
    m.CreateTopicResponse: _enc_create_topic_response,
    m.ReloadConfResponse: _enc_reload_conf_response,
    m.ConsumePeerResponse: _enc_consume_peer_response,
    m.StatusResponse: _enc_status_response,
    m.DiscoverTopicsResponse: _enc_discover_topics_response,
    m.DiscoverTopologyResponse: _enc_discover_topology_response,
})

ResponseDecoder = Callable[[bytes, m.Request | None], m.Response]

RESPONSE_DECODERS: Mapping[MsgId, ResponseDecoder] = MappingProxyType({
    MsgId.PRODUCE: _produce_response,
    MsgId.CONSUME: _consume_response,
    MsgId.PING: _ping_response,
    MsgId.DISCOVER_PARTITIONS: _discover_partitions_response,
    MsgId.CREATE_TOPIC: _create_topic_response,
    MsgId.RELOAD_CONF: _reload_conf_response,
    MsgId.CONSUME_PEER: _consume_peer_response,
    MsgId.STATUS: _status_response,
    MsgId.DISCOVER_TOPICS: _discover_topics_response,
    MsgId.DISCOVER_TOPOLOGY: _discover_topology_response,
})
"""Every id a broker may send; 0x5 is never a response id (its answer is 0x1)."""

_RESPONSE_BY_ID: dict[int, ResponseDecoder] = {int(k): v for k, v in RESPONSE_DECODERS.items()}


def encode_response(resp: m.Response) -> tuple[int, bytes]:
    """(msg_id, payload) of a response. A ProduceResponse is 0x1 whether the request was 0x1 or
    0x5 (tank.md 1)."""
    return int(resp.MSG_ID), RESPONSE_ENCODERS[type(resp)](resp)


def decode_response(msg_id: int, payload: bytes, *, request: m.Request | None = None) -> m.Response:
    """A response message from one frame, or ``TankError``. ``request`` is required for a produce
    response (0x1), whose layout depends on how many entries each requested topic had."""
    decoder = _RESPONSE_BY_ID.get(msg_id)
    if decoder is None:
        raise TankError(f"message id {msg_id:#x} is not a response")
    return decoder(payload, request)


def encode_request_frame(req: m.Request) -> bytes:
    msg_id, payload = encode_request(req)
    return frame_header(msg_id, len(payload)) + payload


def encode_response_frame(resp: m.Response) -> bytes:
    msg_id, payload = encode_response(resp)
    return frame_header(msg_id, len(payload)) + payload

