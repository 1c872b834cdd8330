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

import asyncio
import ipaddress
import struct
import time
from dataclasses import dataclass, field

from bayou.broker import Acks, Broker
from bayou.broker.window import Converted, Stored, served_as_stored, window
from bayou.errors import (
    BayouError,
    CorruptRecord,
    NotEnoughReplicas,
    NotLeader,
    OffsetOutOfRange,
    ReplicationTimeout,
    WouldBlock,
)
from bayou.protocols.tank.bundles import TankMessage, encode_bundle, encode_chunk_record
from bayou.protocols.tank.messages import Endpoint
from bayou.records.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_FORMAT_MASK,
    ATTR_FORMAT_SHIFT,
    ATTR_SPARSE,
    HEADER_SIZE,
    LENGTH_PREFIX,
    MAGIC,
    MAX_OFFSET,
    MAX_OFFSET_DELTA,
    BatchHeader,
    Record,
    assemble_batch,
)
from bayou.records.tank import (
    CODEC_SNAPPY,
    FORMAT_TANK,
    BundleHeader,
    check_bundle,
    parse_bundle_header,
    uniform_bundle,
    write_varint,
)
from bayou.server.workers import OFF_LOOP_BYTES, decode_stored, inflate_pool, parse_pool, run_in
from bayou.storage.log import FileSpan

MAX_FETCH = 64 * 1024 * 1024
ZEROCOPY_MIN = 64 * 1024  # a chunk whose first bundle is this large is sent from the file
GATHER_MAX = 8 * 1024 * 1024  # small bundles: at most this much is gathered in memory per chunk
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
    spans: list[FileSpan] = field(default_factory=list)  # leased files the pieces come from
    base_seq: int = 0  # the first message's seq (0 when sparse_first)
    sparse_first: bool = False  # the first bundle is sparse: flag 0xfe, no base seq on the wire
    next_seq: int = 0

    def add(self, piece: Piece) -> None:
        self.pieces.append(piece)
        self.length += piece.length if isinstance(piece, FileRange) else len(piece)

    @property
    def in_memory(self) -> int:
        """The bytes held in memory until sent (file ranges are sent from the file)."""
        return sum(len(p) for p in self.pieces if not isinstance(p, FileRange))

    def release(self) -> None:
        """The chunk is sent (or dropped): its files' leases end."""
        for span in self.spans:
            span.release()
        self.spans.clear()


def last_assigned(broker: Broker, topic: str, partition: int) -> int:
    """TANK's last assigned sequence: the last record's offset + 1, so not a Kafka transaction
    marker's (a consumer asking past the last record would get an empty chunk forever)."""
    return broker.records_end(topic, partition)


async def first_available(broker: Broker, topic: str, partition: int) -> int:
    start, hw = broker.partition_bounds(topic, partition)
    if start >= hw:
        return 0 if hw == 0 else hw + 1
    base = await broker.first_batch_base(topic, partition)
    return 0 if base is None else base + 1


def _checked_now(bundle: bytes) -> BundleHeader | CorruptRecord | None:
    """``check_received``'s answer when the event loop may work it out (a small bundle, or a large
    one of uniform messages), None when a pool must."""
    try:
        h = parse_bundle_header(bundle)
        if h.codec == CODEC_SNAPPY:
            return None
        if len(bundle) > OFF_LOOP_BYTES:  # check_bundle's quick path, else its walk off the loop
            return h if uniform_bundle(bundle, h) else None
        return check_bundle(bundle, h)
    except CorruptRecord as exc:
        return exc


async def check_received(bundle: bytes) -> BundleHeader | CorruptRecord:
    """A received bundle's header once its whole message set is checked (``check_bundle``), or
    the damage found: nothing unreadable is ever stored. Inflating a Snappy one is CPU work a
    client chooses, so it runs in the inflate pool; walking a large one's messages one by one
    (when they are not of one shape) in the parse pool; neither on the event loop."""
    h = _checked_now(bundle)
    if h is not None:
        return h
    try:
        h = parse_bundle_header(bundle)
        pool = inflate_pool() if h.codec == CODEC_SNAPPY else parse_pool()
        return await run_in(pool, check_bundle, bundle, h)
    except CorruptRecord as exc:
        return exc


async def produce_bundle(broker: Broker, topic: str, partition: int, bundle: bytes,
                         base_seq: int | None, required_acks: int = 0,
                         checked: BundleHeader | CorruptRecord | None = None) -> int | Endpoint:
    """Append one bundle exactly as received; returns TANK's produce error byte, or in cluster
    mode the leader's TANK endpoint when another broker leads the partition (error 0xfc, which
    TANK clients follow). ``base_seq`` is ProduceWithSeqnum's (0x5) explicit first seq (None for
    0x1). ``required_acks`` (cluster mode; ignored standalone, as TANK does): 0 or 1 waits for the
    leader only; more waits for every in-sync replica and needs at least that many of them (capped
    by the replication factor), else 0x04 before anything is stored; 0x03 when the wait times
    out. ``checked``: ``check_received(bundle)``, when the caller made it beforehand (it may wait,
    and the appends of one request's entries must keep their order)."""
    if not 0 <= partition < broker.partition_count(topic):
        return PRODUCE_UNKNOWN_PARTITION
    acks = Acks.LEADER
    if broker.clustered and required_acks > 1:
        view = broker.leader_isr(topic, partition)
        if view is not None and len(view[1]) < min(required_acks, len(view[0])):
            return PRODUCE_INSUFFICIENT_REPLICAS
        acks = Acks.ALL
    h = checked if checked is not None else _checked_now(bundle) or await check_received(bundle)
    if isinstance(h, CorruptRecord):
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
    one holding ``seq``, at least that one, about ``fetch_size`` bytes (counting bundle bytes, as
    TANK does: bundles are added until the size is reached or passed), one segment file.

    Large bundles are sent from the segment file (sendfile). Small ones are gathered: the batches
    are read in one go (the log's read, CRC-checked), their headers walked in memory and the
    bundles joined into one piece, one write, instead of a file position and a send per bundle
    (20,000 one-message bundles: one read and one write, not 20,000)."""
    limit = max(1, min(fetch_size, MAX_FETCH))
    span = await broker.locate(topic, partition, seq - 1, max_bytes=1, payload_only=True)
    chunk = Chunk()
    if span is None:
        chunk.next_seq = seq
        return chunk
    pos, h = span.batches[0]
    if served_as_stored(h, FORMAT_TANK) and h.size - HEADER_SIZE < ZEROCOPY_MIN:
        # span.limit: the high watermark, or the damage of a quarantined partition if lower
        try:
            return await _gather_chunk(span, pos, seq, span.limit, min(limit, GATHER_MAX))
        finally:
            span.release()
    if limit > 1:
        span.release()
        span = await broker.locate(topic, partition, seq - 1, max_bytes=limit, payload_only=True)
        if span is None:
            chunk.next_seq = seq
            return chunk
    chunk.spans.append(span)  # until the chunk is sent
    try:
        async def decode(pos: int, h: BatchHeader) -> list[Record]:
            # CRC-checked: converted bytes must be the stored ones
            return await decode_stored(span.read_batch(pos, h))

        expect = -1  # the offset the previous piece ended at: a bundle after a gap must say so
        async for piece in window(span.batches, FORMAT_TANK, 0, decode):
            h, first = piece.header, not chunk.pieces
            after_gap = not first and h.base_offset != expect
            expect = h.next_offset
            if isinstance(piece, Stored) and (h.sparse or not after_gap):
                if first:
                    chunk.sparse_first = h.sparse
                    chunk.base_seq = 0 if h.sparse else h.base_offset + 1
                chunk.add(FileRange(span.fd, piece.pos + HEADER_SIZE, h.size - HEADER_SIZE))
            else:
                # converted: another format, or a dense TANK bundle after a gap (offsets no
                # record holds, such as a Kafka transaction marker's), re-sent as a sparse one
                records = piece.records if isinstance(piece, Converted) else await decode(piece.pos, h)
                if first:
                    chunk.base_seq = h.base_offset + 1
                # TANK's key is a str8: a longer key (V1, Cursus, the SDK) is cut at 255 bytes
                msgs = [TankMessage(r.offset + 1, r.timestamp, r.key[:255] if r.key else r.key, r.value)
                        for r in records]
                dense = not after_gap and all(m.seq == h.base_offset + 1 + j for j, m in enumerate(msgs))
                if not dense and first:
                    chunk.sparse_first = True
                    chunk.base_seq = 0
                chunk.add(encode_chunk_record(encode_bundle(msgs, compress=False, sparse=not dense)))
                if chunk.length >= limit:
                    # converted records can be many times their stored size (another protocol's
                    # compressed batch is sent decompressed): the chunk ends at the first bundle
                    # boundary at or past the fetch size, counted in bytes sent, as TANK does
                    chunk.next_seq = expect + 1
                    return chunk
    except BaseException:
        chunk.release()
        raise
    chunk.next_seq = span.next_offset + 1
    return chunk


_BATCH_HEAD = struct.Struct(">qi4xb4xhi")  # base offset, batch length, magic, attributes, last delta
_MIN_BATCH_LENGTH = HEADER_SIZE - LENGTH_PREFIX
_PLAIN_TANK = FORMAT_TANK << ATTR_FORMAT_SHIFT  # format TANK, no compression


def _gather(span: FileSpan, pos: int, hw: int, limit: int,
            nowait: bool = False) -> tuple[list[memoryview], int, bool, int]:
    """Stored TANK bundles from the batch at ``pos`` of ``span``'s segment file, read in large preads
    and cut out of their batches in memory: the bytes sendfile would send. Stops once ``limit``
    bundle bytes are reached or passed (at least one bundle), at the high watermark ``hw``, before
    a batch of another format or compressed (the next consume converts it), at the file's end.
    Returns (bundles, next offset, first is sparse, first base offset). ``nowait``: from the page
    cache only, or WouldBlock (storage/cached.py)."""
    parts: list[memoryview] = []
    taken = 0
    next_offset = -1
    sparse_first = False
    first_base = -1
    unpack = _BATCH_HEAD.unpack_from
    while not parts or taken < limit:
        want = min(max(limit - taken, ZEROCOPY_MIN) * 2 + HEADER_SIZE * 64, 2 * GATHER_MAX)
        data = span.pread(want, pos, nowait=nowait)
        view = memoryview(data)
        at, n = 0, len(data)
        while n - at >= HEADER_SIZE and (not parts or taken < limit):
            base, length, magic, attributes, last_delta = unpack(data, at)
            if (magic != MAGIC or length < _MIN_BATCH_LENGTH or base + last_delta >= hw
                    or attributes & (ATTR_FORMAT_MASK | ATTR_COMPRESSION_MASK) != _PLAIN_TANK):
                return parts, next_offset, sparse_first, first_base
            end = at + LENGTH_PREFIX + length
            if end > n:
                break  # read on from this batch
            if not parts:
                sparse_first = bool(attributes & ATTR_SPARSE)
                first_base = base
            parts.append(view[at + HEADER_SIZE : end])
            taken += end - at - HEADER_SIZE
            next_offset = base + last_delta + 1
            at = end
        if at == 0 or n < want:  # a batch larger than a read, or the end of the file
            break
        pos += at
    return parts, next_offset, sparse_first, first_base


async def _gather_chunk(span: FileSpan, pos: int, seq: int, hw: int, limit: int) -> Chunk:
    """``read_chunk`` for small stored bundles: gathered in memory and sent as one piece."""
    try:  # bundles in the page cache (a reader at the tail) are gathered here, at once
        parts, next_offset, sparse_first, first_base = _gather(span, pos, hw, limit, nowait=True)
    except WouldBlock:
        parts, next_offset, sparse_first, first_base = await asyncio.get_running_loop().run_in_executor(
            None, _gather, span, pos, hw, limit)
    chunk = Chunk()
    if not parts:  # the log changed under us (truncated): nothing to send this time
        chunk.next_seq = seq
        return chunk
    chunk.sparse_first = sparse_first
    chunk.base_seq = 0 if sparse_first else first_base + 1
    chunk.add(b"".join(parts))
    chunk.next_seq = next_offset + 1
    return chunk
