"""Produce and Fetch responses written directly, without kio's entities: the responses to the
requests producers and consumers send most, at every version bayou serves (Produce 3-12, Fetch
4-12).

kio builds a frozen dataclass per partition and topic and walks its schema to write them; for a
one-partition Produce that is most of the response's cost. ``encode_produce_response`` writes the
same bytes from the handler's fields (tests/unit/protocols/test_kafka_fast.py compares it with kio
for every version), and answers None for what it does not write (record errors, a current leader,
node endpoints): the caller then goes through kio.

Layout (Kafka's ProduceResponse): responses [name, partition_responses [index i16-error base_offset
i64, log_append_time i64 (v2+), log_start_offset i64 (v5+), record_errors (v8+), error_message
(v8+), tagged fields (v9+)], tagged fields (v9+)], throttle_time_ms i32, tagged fields (v9+).
Arrays and strings are compact (unsigned varint of length + 1) from v9 on.

Fetch (Kafka's FetchResponse, v4-12): throttle_time_ms i32, error_code i16 and session_id i32
(v7+), responses [topic, partitions [partition_index i32, error_code i16, high_watermark i64,
last_stable_offset i64, log_start_offset i64 (v5+), aborted_transactions nullable [producer_id
i64, first_offset i64, tagged fields (v12+)], preferred_read_replica i32 (v11+), records nullable
bytes, tagged fields (v12+)], tagged fields (v12+)], tagged fields (v12+); flexible from v12. The
records are the stored batches as they are, written from the bytes the log read (no copy here).

Produce *requests* (v3-12) are read directly too (``decode_produce``): transactional_id nullable
string, acks i16, timeout_ms i32, topic_data [name, partition_data [index i32, records nullable
bytes, tagged fields (v9+)], tagged fields (v9+)], tagged fields (v9+). kio's schema walk and
reader cost 4 us of a one-message Produce's 35; this costs 2. Anything unusual is left to kio.
``codec.decode_request`` calls it for every served Produce version; ``codec.kio_body`` turns
its body into kio's (``encode_request`` does, to write a decoded request back).

Fetch *requests* (v4-12) likewise (``decode_fetch``): replica_id i32, max_wait_ms i32, min_bytes
i32, max_bytes i32, isolation_level i8, session_id i32 and session_epoch i32 (v7+), topics [topic,
partitions [partition i32, current_leader_epoch i32 (v9+), fetch_offset i64, last_fetched_epoch
i32 (v12+), log_start_offset i64 (v5+), partition_max_bytes i32]], forgotten_topics_data (v7+)
[topic, partitions [i32]], rack_id (v11+); v12 is flexible. kio reads a one-partition Fetch in 6-7
us here, this in 4-5 (the wait kept in milliseconds: kio's timedelta alone costs more than a
field).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bayou.protocols.kafka.framing import KafkaError, read_uvarint
from bayou.records.varint import encode_uvarint

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PART = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">ii")  # size, correlation id
FIRST_FLEXIBLE = 9
KNOWN = frozenset({"index", "error_code", "base_offset", "log_append_time", "log_start_offset",
                   "error_message"})


def _uvarint(n: int) -> bytes:
    out = bytearray()
    encode_uvarint(n, out)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw if flexible else _I16.pack(len(raw)) + raw


def _nullable(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\0" if flexible else b"\xff\xff"
    return _string(s, flexible)


def _count(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def encode_produce_response(version: int, correlation_id: int,
                            responses: Sequence[dict[str, Any]]) -> bytes | None:
    """The whole response frame (size included), or None when ``responses`` hold a field this
    writer leaves to kio."""
    if not 3 <= version <= 12:
        return None
    flexible = version >= FIRST_FLEXIBLE
    out = bytearray(_HEAD.size)
    if flexible:
        out += b"\0"  # response header v1: no tagged fields
    out += _count(len(responses), flexible)
    for topic in responses:
        if topic.keys() != {"name", "partition_responses"}:
            return None
        out += _string(topic["name"], flexible)
        parts = topic["partition_responses"]
        out += _count(len(parts), flexible)
        for p in parts:
            if not p.keys() <= KNOWN:
                return None
            ts = p.get("log_append_time")
            out += _PART.pack(p["index"], int(p.get("error_code", 0)), p.get("base_offset", -1),
                              -1 if ts is None else int(ts.timestamp() * 1000))
            if version >= 5:
                out += _I64.pack(p.get("log_start_offset", -1))
            if version >= 8:
                out += _count(0, flexible)  # record_errors
                out += _nullable(p.get("error_message"), flexible)
            if flexible:
                out += b"\0"
        if flexible:
            out += b"\0"
    out += _I32.pack(0)  # throttle_time_ms
    if flexible:
        out += b"\0"
    _HEAD.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)


_FETCH_PART = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_ABORTED = struct.Struct(">qq")
FETCH_FIRST_FLEXIBLE = 12
FETCH_KNOWN = frozenset({"partition_index", "error_code", "high_watermark", "last_stable_offset",
                         "log_start_offset", "preferred_read_replica", "records", "aborted_transactions"})


def _bytes(size: int | None, flexible: bool) -> bytes:
    if size is None:
        return b"\0" if flexible else b"\xff\xff\xff\xff"
    return _uvarint(size + 1) if flexible else _I32.pack(size)


COPY_BELOW = 16 * 1024  # records shorter than this are copied into the frame; longer ones are pieces of it

Piece = bytes | bytearray | memoryview
Buffer = bytes | bytearray | memoryview


def encode_fetch_response(version: int, correlation_id: int, fields: dict[str, Any]
                          ) -> bytes | list[Piece] | None:
    """The whole Fetch response frame (size included), or None when ``fields`` hold something
    this writer leaves to kio (a top-level error, a leader or epoch hint, node endpoints).

    A partition's ``records`` are bytes or a list of pieces (server/kafka.py: views of the bytes
    the log read). Short ones are copied into the frame; otherwise the frame is returned as a list
    of pieces to write one after the other, the records' pieces among them, uncopied."""
    if not 4 <= version <= 12 or not fields.keys() <= {"session_id", "responses"}:
        return None
    flexible = version >= FETCH_FIRST_FLEXIBLE
    chunks: list[Piece] = []
    out = bytearray(_HEAD.size)
    head = out
    if flexible:
        out += b"\0"
    out += _I32.pack(0)  # throttle_time_ms
    if version >= 7:
        out += _I16.pack(0) + _I32.pack(fields.get("session_id", 0))
    responses = fields.get("responses", ())
    out += _count(len(responses), flexible)
    for topic in responses:
        if topic.keys() != {"topic", "partitions"}:
            return None
        out += _string(topic["topic"], flexible)
        parts = topic["partitions"]
        out += _count(len(parts), flexible)
        for p in parts:
            if not p.keys() <= FETCH_KNOWN:
                return None
            out += _FETCH_PART.pack(p["partition_index"], int(p.get("error_code", 0)),
                                    p.get("high_watermark", 0), p.get("last_stable_offset", 0))
            if version >= 5:
                out += _I64.pack(p.get("log_start_offset", 0))
            aborted = p.get("aborted_transactions", ())
            if aborted is None:
                out += b"\0" if flexible else b"\xff\xff\xff\xff"
            else:
                out += _count(len(aborted), flexible)
                for a in aborted:
                    out += _ABORTED.pack(a["producer_id"], a["first_offset"])
                    if flexible:
                        out += b"\0"
            if version >= 11:
                out += _I32.pack(p.get("preferred_read_replica", 0))
            records = p.get("records")
            if records is None:
                out += _bytes(None, flexible)
            elif isinstance(records, list):
                size = sum(len(piece) for piece in records)
                out += _bytes(size, flexible)
                if size < COPY_BELOW:
                    for piece in records:
                        out += piece
                else:
                    chunks.append(out)
                    chunks.extend(records)
                    out = bytearray()
            else:
                out += _bytes(len(records), flexible)
                out += records
            if flexible:
                out += b"\0"
        if flexible:
            out += b"\0"
    if flexible:
        out += b"\0"
    if not chunks:
        _HEAD.pack_into(out, 0, len(out) - 4, correlation_id)
        return bytes(out)
    if out:
        chunks.append(out)
    _HEAD.pack_into(head, 0, sum(len(c) for c in chunks) - 4, correlation_id)
    return chunks


__all__ = ["decode_fetch", "decode_produce", "encode_fetch_response", "encode_produce_response"]


# -- Produce requests -----------------------------------------------------------------------------

_ACKS_TIMEOUT = struct.Struct(">hi")
_PRODUCE_FIRST, _PRODUCE_LAST = 3, 12


@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: bytes | None


@dataclass(slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(slots=True)
class ProduceRequest:
    """A Produce request body with the fields (and field names) of kio's ProduceRequest that
    the handler reads. Not frozen: a frozen dataclass costs four times as much to build."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


class _Unusual(Exception):
    """Anything ``decode_produce`` leaves to kio's reader."""


def _uv(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned varint (framing.read_uvarint); a bad one is unusual."""
    try:
        return read_uvarint(buf, pos)
    except KafkaError:
        raise _Unusual from None


# Partitions a request read directly may list: past it, the request goes to kio, which the
# server runs off the event loop for a large frame (a direct read is made on the loop).
DIRECT_MAX_PARTITIONS = 1_000


def decode_produce(frame: Buffer, version: int, pos: int) -> tuple[ProduceRequest, int] | None:
    """The Produce body (v3-12) at ``pos`` and the bytes the frame holds after it, read directly:
    the request producers send most, for which kio's schema walk (``guard.check_body``) and its
    reader cost more than the append. Anything but the usual shape (a null or over-long length, a
    tagged field, a name that is not UTF-8, a body cut short) answers None: the caller then reads
    it through kio, which gives the exact error or the same body (tests/unit/protocols/
    test_kafka_fast.py compares the two)."""
    if not _PRODUCE_FIRST <= version <= _PRODUCE_LAST:
        return None
    flexible = version >= FIRST_FLEXIBLE
    end = len(frame)
    try:
        # transactional_id: nullable string
        if flexible:
            n, pos = _uv(frame, pos)
            n -= 1
        else:
            (n,), pos = _I16.unpack_from(frame, pos), pos + 2
        txn: str | None = None
        if n >= 0:
            if pos + n > end:
                return None
            txn = str(frame[pos:pos + n], "utf-8")
            pos += n
        elif n != -1:
            return None
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
        pos += 6
        topics, pos = _array_count(frame, pos, flexible)
        topic_data = []
        listed = 0
        for _ in range(topics):
            n, pos = _length(frame, pos, flexible)
            if n < 0 or pos + n > end:
                return None
            name = str(frame[pos:pos + n], "utf-8")
            pos += n
            count, pos = _array_count(frame, pos, flexible)
            listed += count
            if listed > DIRECT_MAX_PARTITIONS:
                return None
            parts = []
            for _ in range(count):
                (index,) = _I32.unpack_from(frame, pos)
                if flexible:
                    n, pos = _uv(frame, pos + 4)
                    n -= 1
                else:
                    (n,), pos = _I32.unpack_from(frame, pos + 4), pos + 8
                records: bytes | None = None
                if n >= 0:
                    if pos + n > end:
                        return None
                    records = bytes(frame[pos:pos + n])
                    pos += n
                elif n != -1:
                    return None
                if flexible:
                    pos = _no_tags(frame, pos)
                parts.append(PartitionProduceData(index, records))
            if flexible:
                pos = _no_tags(frame, pos)
            topic_data.append(TopicProduceData(name, tuple(parts)))
        if flexible:
            pos = _no_tags(frame, pos)
    except (_Unusual, struct.error, IndexError, UnicodeDecodeError):
        return None
    if pos > end:
        return None
    return (ProduceRequest(txn, acks, timeout_ms, tuple(topic_data)),
            end - pos)


def _length(frame: Buffer, pos: int, flexible: bool) -> tuple[int, int]:
    """A string's length (-1 for null) and the position after it."""
    if flexible:
        n, pos = _uv(frame, pos)
        return n - 1, pos
    return _I16.unpack_from(frame, pos)[0], pos + 2


def _array_count(frame: Buffer, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's element count; a null array, or more elements than bytes left, is unusual."""
    if flexible:
        n, pos = _uv(frame, pos)
        n -= 1
    else:
        (n,), pos = _I32.unpack_from(frame, pos), pos + 4
    if not 0 <= n <= len(frame) - pos:
        raise _Unusual
    return n, pos


def _no_tags(frame: Buffer, pos: int) -> int:
    """The position after an empty tagged-field section; any tagged field is unusual."""
    if frame[pos] != 0:
        raise _Unusual
    return pos + 1


# -- Fetch requests -------------------------------------------------------------------------------

_FETCH_FIRST, _FETCH_LAST = 4, 12
_FETCH_HEAD = struct.Struct(">iiiib")  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
_SESSION = struct.Struct(">ii")  # session_id, session_epoch (v7+)
_I32_I64 = struct.Struct(">iq")  # partition, fetch_offset (v4-8)
_I32_I32_I64 = struct.Struct(">iiq")  # partition, current_leader_epoch, fetch_offset (v9+)


@dataclass(slots=True)
class FetchPartition:
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchTopic:
    topic: str
    partitions: tuple[FetchPartition, ...]


@dataclass(slots=True)
class ForgottenTopic:
    topic: str
    partitions: tuple[int, ...]


@dataclass(slots=True)
class FetchRequest:
    """A Fetch request body with the fields (and field names) of kio's FetchRequest, the wait in
    milliseconds (``max_wait`` gives kio's timedelta). Not frozen, as ProduceRequest."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: tuple[FetchTopic, ...]
    forgotten_topics_data: tuple[ForgottenTopic, ...]
    rack_id: str

    @property
    def max_wait(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.max_wait_ms)


def _name(frame: Buffer, pos: int, flexible: bool) -> tuple[str, int]:
    """A non-null string (a topic name, the rack id); null or past the end is unusual."""
    n, pos = _length(frame, pos, flexible)
    if n < 0 or pos + n > len(frame):
        raise _Unusual
    return str(frame[pos:pos + n], "utf-8"), pos + n


def decode_fetch(frame: Buffer, version: int, pos: int) -> tuple[FetchRequest, int] | None:
    """The Fetch body (v4-12) at ``pos`` and the bytes the frame holds after it, read directly,
    as ``decode_produce`` reads Produce: the request every waiting consumer sends, for which kio's
    schema walk and reader cost a fifth of a one-record fetch at the log end. Anything but the
    usual shape (a null string or array, a tagged field such as v12's cluster id, a body cut
    short, a name that is not UTF-8) answers None: the caller then reads it through kio
    (tests/unit/protocols/test_kafka_fast.py compares the two)."""
    if not _FETCH_FIRST <= version <= _FETCH_LAST:
        return None
    flexible = version >= FETCH_FIRST_FLEXIBLE
    end = len(frame)
    try:
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation = _FETCH_HEAD.unpack_from(frame, pos)
        pos += _FETCH_HEAD.size
        session_id, session_epoch = 0, -1
        if version >= 7:
            session_id, session_epoch = _SESSION.unpack_from(frame, pos)
            pos += 8
        count, pos = _array_count(frame, pos, flexible)
        topics = []
        listed = 0
        for _ in range(count):
            name, pos = _name(frame, pos, flexible)
            n, pos = _array_count(frame, pos, flexible)
            listed += n
            if listed > DIRECT_MAX_PARTITIONS:
                return None
            parts = []
            for _ in range(n):
                leader_epoch, last_epoch, log_start = -1, -1, -1
                if version >= 9:
                    partition, leader_epoch, offset = _I32_I32_I64.unpack_from(frame, pos)
                    pos += 16
                else:
                    partition, offset = _I32_I64.unpack_from(frame, pos)
                    pos += 12
                if version >= 12:
                    (last_epoch,) = _I32.unpack_from(frame, pos)
                    pos += 4
                if version >= 5:
                    (log_start,) = _I64.unpack_from(frame, pos)
                    pos += 8
                (part_max,) = _I32.unpack_from(frame, pos)
                pos += 4
                if flexible:
                    pos = _no_tags(frame, pos)
                parts.append(FetchPartition(partition, leader_epoch, offset, last_epoch, log_start, part_max))
            if flexible:
                pos = _no_tags(frame, pos)
            topics.append(FetchTopic(name, tuple(parts)))
        forgotten = []
        if version >= 7:
            count, pos = _array_count(frame, pos, flexible)
            for _ in range(count):
                name, pos = _name(frame, pos, flexible)
                n, pos = _array_count(frame, pos, flexible)
                if pos + 4 * n > end:
                    return None
                ids = struct.unpack_from(f">{n}i", frame, pos)
                pos += 4 * n
                if flexible:
                    pos = _no_tags(frame, pos)
                forgotten.append(ForgottenTopic(name, ids))
        rack = ""
        if version >= 11:
            rack, pos = _name(frame, pos, flexible)
        if flexible:
            pos = _no_tags(frame, pos)
    except (_Unusual, struct.error, IndexError, UnicodeDecodeError):
        return None
    if pos > end:
        return None
    return (FetchRequest(replica_id, max_wait_ms, min_bytes, max_bytes, isolation, session_id,
                         session_epoch, tuple(topics), tuple(forgotten), rack), end - pos)
