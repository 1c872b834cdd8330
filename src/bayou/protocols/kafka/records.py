"""Record batches between Kafka clients and bayou's log: what a produce may store, what a fetch sends.

A Kafka client's v2 batch is bayou's batch layout (records/batch.py), so a produced batch is
stored as received: the broker writes its base offset in place (outside the CRC). Before that,
``check_produced`` refuses what Kafka refuses and what bayou would read differently: anything
but exactly one v2 batch, a control batch (markers are the broker's to write), a transactional
batch without a producer id and sequence, payload-format bits (8-11: bayou's, never a Kafka
client's), and records that do not decode (Kafka's broker decompresses and checks them too).

A fetch sends stored v2 batches as they are when a Kafka client reads them the same way:
payload format 0, no sparse flag, no record carrying bayou's message-id extension (record
attribute bit 0, which a Kafka client would misread). Every other batch (Cursus, Iggy, TANK, or
V1 records with message ids) is converted once to a plain v2 batch with the same offsets.
Whether a stored v2 batch carries message ids takes a walk of its records; ``PlainBatches``
remembers the batches known not to (a produced one was walked by ``check_produced``, a fetched
one by ``as_stored``), so that a batch is walked once, not once per fetch. A fetch's batches are
returned as pieces of the bytes read (no copy): the response is written from them.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable

from bayou.errors import CorruptRecord, InvalidRecord
from bayou.records.batch import (
    ATTR_CONTROL,
    ATTR_FORMAT_MASK,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    BatchHeader,
    Buffer,
    assemble_batch,
    decode_header,
    decode_records,
    iter_batches,
)
from bayou.records.compression import decompress
from bayou.records.formats import FORMAT_RECORDS
from bayou.records.iggy import FORMAT_IGGY, KIND_RAW, ORIGIN_TIMESTAMP, STRING_KEY_PREFIX
from bayou.records.model import Record
from bayou.records.v2 import encode_record, has_message_ids, walk_v2


def check_produced(records: Buffer) -> BatchHeader:
    """The header of the one batch a Produce carries for a partition; CorruptRecord (Kafka's
    CORRUPT_MESSAGE) when it does not parse or decode, InvalidRecord (INVALID_RECORD) for a
    batch Kafka's broker would refuse or that bayou cannot store as a Kafka client meant it. The
    CRC is checked by the log's append."""
    h = decode_header(records)
    if h.size > len(records):
        raise CorruptRecord(f"a batch of {h.size} bytes in {len(records)}")
    if h.size != len(records):
        raise InvalidRecord("a produce must carry exactly one record batch per partition")
    if h.attributes & ATTR_CONTROL:
        raise InvalidRecord("a control batch from a client")
    if h.attributes & ATTR_TRANSACTIONAL and (h.producer_id < 0 or h.base_sequence < 0):
        raise InvalidRecord("a transactional batch without a producer id and sequence")
    if h.attributes & ATTR_FORMAT_MASK:
        raise InvalidRecord(f"batch attributes 0x{h.attributes:04x}: bits 8-11 are not Kafka's")
    if h.record_count < 1:
        raise CorruptRecord("a batch without records")
    if walk_v2(_section(records, 0, h), h.record_count):  # every record parses, none carries an id
        raise InvalidRecord("record attributes other than 0")
    return h


PLAIN_BATCHES = 65_536  # batches PlainBatches remembers (about 14 MB, measured with tracemalloc)


class PlainBatches:
    """Stored v2 batches known to hold no record with a message id, so sent to Kafka clients as
    stored without a walk of their records. Keyed by topic, partition and base offset, holding the
    batch's CRC: a batch written at that offset again later (a log truncated by replication, a
    topic deleted and created again) is another batch, known only if its CRC (which covers every
    record) is the same. Bounded: past ``capacity`` the oldest entry goes (a consumer at the tail
    reads what was produced last)."""

    def __init__(self, capacity: int = PLAIN_BATCHES) -> None:
        self.capacity = capacity
        # an OrderedDict: a plain dict's oldest key, after many deletions at its front, takes a
        # scan over the deleted slots to find (about 25 us here, once full)
        self._crc: OrderedDict[tuple[str, int, int], int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._crc)

    def add(self, topic: str, partition: int, base_offset: int, crc: int) -> None:
        known = self._crc
        key = (topic, partition, base_offset)
        if key not in known and len(known) >= self.capacity:
            known.popitem(last=False)
        known[key] = crc

    def knows(self, topic: str, partition: int, h: BatchHeader) -> bool:
        return self._crc.get((topic, partition, h.base_offset)) == h.crc

    def of(self, topic: str, partition: int) -> tuple[Callable[[BatchHeader], bool],
                                                        Callable[[BatchHeader], None]]:
        """The (knows, learn) pair ``for_kafka`` takes for one partition's batches."""
        return (lambda h: self.knows(topic, partition, h),
                lambda h: self.add(topic, partition, h.base_offset, h.crc))


def _unknown(_h: BatchHeader) -> bool:
    return False


def _ignore(_h: BatchHeader) -> None:
    return None


def as_stored(buf: Buffer, pos: int, h: BatchHeader) -> bool:
    """Whether a Kafka client reads the stored batch at ``pos`` as bayou does (see the module
    docstring): then it is sent as stored. Only each record's length and attribute byte are read
    (a compressed batch is decompressed for it)."""
    if h.payload_format != FORMAT_RECORDS or h.sparse:
        return False
    return not has_message_ids(_section(buf, pos, h), h.record_count)


def _section(buf: Buffer, pos: int, h: BatchHeader) -> Buffer:
    """The records section of the batch at ``pos``, decompressed (bounded, as every read is)."""
    body = memoryview(buf)[pos + HEADER_SIZE:pos + h.size]
    return body if not h.compression else decompress(h.compression, bytes(body))


def plain_headers(headers: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]:
    """An Iggy message's headers as a Kafka client expects them: a string-keyed raw user header
    ``iggy.h.<name>`` (kind byte 1, value) is ``<name>``, the origin timestamp (the record's own
    timestamp, in ms) is dropped; typed Iggy headers keep bayou's ``iggy.*`` names."""
    out = []
    for name, value in headers:
        if name == ORIGIN_TIMESTAMP:
            continue
        if name.startswith(STRING_KEY_PREFIX) and value[:1] == bytes([KIND_RAW]):
            out.append((name[len(STRING_KEY_PREFIX):], value[1:]))
        else:
            out.append((name, value))
    return tuple(out)


def converted(records: list[Record], h: BatchHeader) -> bytes:
    """A plain v2 batch of ``records`` (decoded from a batch stored otherwise, with absolute
    offsets and timestamps): the stored batch's base offset, each record's own offset delta, no
    message ids, uncompressed."""
    base = h.base_offset
    base_ts = min((r.timestamp for r in records), default=h.base_timestamp)
    body = bytearray()
    for r in records:
        plain = r if r.message_id is None else dataclasses.replace(r, message_id=None)
        if h.payload_format == FORMAT_IGGY:
            plain = dataclasses.replace(plain, headers=plain_headers(plain.headers))
        encode_record(body, plain, r.offset - base, base_ts)
    last = records[-1].offset - base if records else 0
    return assemble_batch(bytes(body), record_count=len(records), base_offset=base,
                          attributes=h.attributes & ATTR_LOG_APPEND_TIME, base_timestamp=base_ts,
                          max_timestamp=max((r.timestamp for r in records), default=base_ts),
                          leader_epoch=h.leader_epoch, last_offset_delta=last)


def for_kafka(data: bytes, start: int, known: Callable[[BatchHeader], bool] = _unknown,
              learn: Callable[[BatchHeader], None] = _ignore, limit: int | None = None) -> list[Buffer]:
    """The batches of a fetched window (whole stored batches, in log order) as a Kafka client
    reads them, in pieces to be written one after the other: stored v2 batches as they are (views
    of ``data``, runs of them one piece), the rest converted, those wholly before ``start`` left
    out (a converted batch keeps only records at or past ``start``). ``known`` says a batch is
    known to be sent as stored (``PlainBatches``); ``learn`` is told of each one found so.
    ``limit``: no batch is added once the pieces hold that many bytes (one at least): a converted
    batch, decompressed, may be many times its stored size."""
    out: list[Buffer] = []
    view = memoryview(data)
    run = -1  # where the current run of stored batches began, -1: none
    end = 0
    size = 0  # bytes of the pieces in ``out``
    for pos, h in iter_batches(data):
        if h.next_offset <= start:
            continue
        held = size + (end - run if run >= 0 else 0)
        if limit is not None and held and held >= limit:
            break
        stored = known(h)
        if not stored and as_stored(data, pos, h):
            learn(h)
            stored = True
        if stored:
            if run < 0:
                run = pos
            end = pos + h.size
            continue
        if run >= 0:
            out.append(view[run:end])
            size += end - run
            run = -1
        recs = [r for r in decode_records(data, pos) if r.offset >= start]
        if recs:
            out.append(converted(recs, h))
            size += len(out[-1])
    if run >= 0:
        out.append(view[run:end])
    return out
