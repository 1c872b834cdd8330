"""TANK's view of a bayou partition (tank.md §4.2, §5.4, §5.5): sequence numbers, produce of a
bundle, and the chunk a consume serves, built from file ranges wherever the bytes are stored
TANK's way.

Sequence numbers are offsets + 1. The last assigned seq (TANK's high water mark) is the
partition's high watermark as an exclusive offset; the first available seq is the first stored
batch's first seq (0 for an empty partition).

A chunk is a list of pieces, each either bytes (records produced through another protocol,
converted once into one bundle per stored batch) or a range of the segment file (a stored TANK
bundle: its varint length and bytes, sent with os.sendfile). It never spans two segment files.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field

from bayou.broker import Acks, Broker
from bayou.errors import (
    BayouError,
    CorruptRecord,
    NotEnoughReplicas,
    NotLeader,
    OffsetOutOfRange,
    ReplicationTimeout,
)
from bayou.protocols.tank.bundles import TankMessage, encode_bundle, encode_chunk_record
from bayou.protocols.tank.messages import Endpoint
from bayou.records.batch import (
    ATTR_SPARSE,
    HEADER_SIZE,
    MAX_OFFSET,
    MAX_OFFSET_DELTA,
    assemble_batch,
    decode_records,
)
from bayou.records.tank import FORMAT_TANK, check_bundle, write_varint

MAX_FETCH = 64 * 1024 * 1024
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

# produce error bytes (tank.md §4.3)
PRODUCE_OK = 0x00
PRODUCE_UNKNOWN_PARTITION = 0x01
PRODUCE_SYSTEM_ERROR = 0x02
PRODUCE_INVALID_SEQ = 0x0A
PRODUCE_ACK_TIMEOUT = 0x03  # cluster mode: the replicas did not acknowledge in time
PRODUCE_INSUFFICIENT_REPLICAS = 0x04  # cluster mode: fewer in-sync replicas than required acks
PRODUCE_NO_LEADER = 0xFD  # cluster mode: no broker leads the partition now


@dataclass(frozen=True, slots=True)
class FileRange:
    fd: int
    offset: int
    length: int


Piece = bytes | FileRange


@dataclass(slots=True)
class Chunk:
    """The bytes one partition entry of a consume response carries."""

    pieces: list[Piece] = field(default_factory=list)
    length: int = 0
    base_seq: int = 0  # the first message's seq (0 when sparse_first)
    sparse_first: bool = False  # the first bundle is sparse: flag 0xfe, no base seq on the wire
    next_seq: int = 0

    def add(self, piece: Piece) -> None:
        self.pieces.append(piece)
        self.length += piece.length if isinstance(piece, FileRange) else len(piece)


def last_assigned(broker: Broker, topic: str, partition: int) -> int:
    return broker.partition(topic, partition).high_watermark


async def first_available(broker: Broker, topic: str, partition: int) -> int:
    part = broker.partition(topic, partition)
    start = part.log.log_start_offset
    if start >= part.high_watermark:
        return 0 if part.high_watermark == 0 else part.high_watermark + 1
    span = await broker.locate(topic, partition, start, max_bytes=1)
    return 0 if span is None else span.batches[0][1].base_offset + 1


async def produce_bundle(broker: Broker, topic: str, partition: int, bundle: bytes,
                         base_seq: int | None, required_acks: int = 0) -> int | Endpoint:
    """Append one bundle exactly as received; returns TANK's produce error byte, or in cluster
    mode the leader's TANK endpoint when another broker leads the partition (error 0xfc, which
    TANK clients follow). ``base_seq`` is ProduceWithSeqnum's (0x5) explicit first seq (None for
    0x1). ``required_acks`` (cluster mode; ignored standalone, as TANK does): 0 or 1 waits for the
    leader only; more waits for every in-sync replica and needs at least that many of them (capped
    by the replication factor), else 0x04 before anything is stored; 0x03 when the wait times
    out."""
    if not 0 <= partition < broker.partition_count(topic):
        return PRODUCE_UNKNOWN_PARTITION
    acks = Acks.LEADER
    if broker.cluster is not None and required_acks > 1:
        rs = broker.partition(topic, partition).cluster
        if rs is not None and rs.is_leader and len(rs.isr) < min(required_acks, len(rs.replicas)):
            return PRODUCE_INSUFFICIENT_REPLICAS
        acks = Acks.ALL
    try:
        h = check_bundle(bundle)  # the whole message set is checked: nothing unreadable is stored
    except CorruptRecord:
        return PRODUCE_INVALID_SEQ
    at: int | None = None
    if h.sparse:  # the header's seqs win over a 0x5 base seq (§4.2 rule 3)
        if h.last_seq - 1 > MAX_OFFSET or h.span - 1 > MAX_OFFSET_DELTA:
            return PRODUCE_INVALID_SEQ  # past what the log can store (seq = offset + 1), or one batch spans
        at = h.first_seq - 1
    elif base_seq:
        # A non-sparse bundle at an explicit seq: TANK's own readers count it from the previous
        # bundle, so it could never be read back at that seq; bayou refuses it.
        return PRODUCE_INVALID_SEQ
    now = time.time_ns() // 1_000_000
    attributes = FORMAT_TANK << 8 | (ATTR_SPARSE if h.sparse else 0)
    batch = assemble_batch(write_varint(len(bundle)) + bundle, record_count=h.count, base_offset=0,
                           attributes=attributes, base_timestamp=now, max_timestamp=now,
                           last_offset_delta=h.span - 1)
    try:
        await broker.produce(topic, partition, batch, acks, create=False, at_offset=at)
    except OffsetOutOfRange:  # a sparse first seq at or below the high water mark
        return PRODUCE_INVALID_SEQ
    except NotEnoughReplicas:  # fewer in sync than min.insync.replicas: nothing was stored
        return PRODUCE_INSUFFICIENT_REPLICAS
    except ReplicationTimeout:
        return PRODUCE_ACK_TIMEOUT
    except NotLeader as exc:
        addr = exc.leader_address("tank")
        if addr is None:
            return PRODUCE_NO_LEADER
        return Endpoint(int(ipaddress.IPv4Address(addr[0])), addr[1])
    except BayouError:
        return PRODUCE_SYSTEM_ERROR
    return PRODUCE_OK


async def read_chunk(broker: Broker, topic: str, partition: int, seq: int, fetch_size: int) -> Chunk:
    """The chunk for ``seq`` (between first available and last assigned): whole bundles from the
    one holding ``seq``, at least that one, about ``fetch_size`` bytes, one segment file."""
    span = await broker.locate(topic, partition, seq - 1, max_bytes=max(1, min(fetch_size, MAX_FETCH)),
                               payload_only=True)
    chunk = Chunk()
    if span is None:
        chunk.next_seq = seq
        return chunk
    for i, (pos, h) in enumerate(span.batches):
        if h.payload_format == FORMAT_TANK and h.compression == 0:
            if i == 0:
                chunk.sparse_first = h.sparse
                chunk.base_seq = 0 if h.sparse else h.base_offset + 1
            chunk.add(FileRange(span.fd, pos + HEADER_SIZE, h.size - HEADER_SIZE))
        else:
            if i == 0:
                chunk.base_seq = h.base_offset + 1
            raw = span.read_batch(pos, h)  # CRC-checked: converted bytes must be the stored ones
            records = decode_records(raw)
            # TANK's key is a str8: a longer key (V1, Cursus, the SDK) is cut at 255 bytes
            msgs = [TankMessage(r.offset + 1, r.timestamp, r.key[:255] if r.key else r.key, r.value)
                    for r in records]
            dense = all(m.seq == h.base_offset + 1 + j for j, m in enumerate(msgs))
            if not dense and i == 0:
                chunk.sparse_first = True
                chunk.base_seq = 0
            chunk.add(encode_chunk_record(encode_bundle(msgs, compress=False, sparse=not dense)))
    chunk.next_seq = span.next_offset + 1
    return chunk
