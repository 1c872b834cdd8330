"""Message layouts of the three dialects: SEND_MESSAGES payloads and POLL_MESSAGES replies.

- D (iggy.md A.4, A.5 items 4-6): per-message id/headers/payload in sends; polled messages carry a
  state byte and a CRC32 of the payload.
- L (B.5): a 16-byte index entry per message, then 64-byte message headers + payload + user
  headers; the message checksum is XXH3-64 of the message bytes after the checksum field.
- V (C.9): one 256-byte batch header, then 48-byte frames + payload + user headers; each frame has
  the same XXH3-64 checksum rule, and the batch checksum chains the header fields and the frame
  checksums.

Every checksum present on input is verified: a mismatch raises ``IggyError`` with
INVALID_MESSAGE_CHECKSUM (4027) or INVALID_BATCH_CHECKSUM (4039). L producers send checksum 0
(the server computes it on append), so 0 is not checked in an L send.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence

import xxhash

from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import IggyError
from bayou.protocols.iggy.messages import (
    Headers,
    Identifier,
    Message,
    Partitioning,
    PolledMessage,
    PolledMessages,
    SendMessages,
)
from bayou.protocols.iggy.wire import (
    MAX_USER_HEADERS,
    U32,
    U64,
    Reader,
    decode_seed_headers,
    decode_user_headers,
    enc_identifier,
    enc_partitioning,
    enc_seed_headers,
    enc_u128,
    enc_user_headers,
)

MAX_PAYLOAD = 64_000_000  # bytes per message (iggy.md E.9)

L_HEADER = struct.Struct("<QQQQQQIIQ")  # checksum, id lo, id hi, offset, timestamp, origin, hl, pl, rsv
L_HEADER_SIZE = L_HEADER.size  # 64
L_INDEX = struct.Struct("<IIQ")  # 0, cumulative end position, 0
V_FRAME = struct.Struct("<QQQIIIIQ")  # checksum, id lo, id hi, offset_delta, ts_delta, hl, pl, rsv
V_FRAME_SIZE = V_FRAME.size  # 48
V_BATCH = struct.Struct("<QQQQQQI")  # partition, base_offset, base_ts, origin_ts, length, checksum, count
V_BATCH_SIZE = 256
_V_BATCH_PAD = bytes(V_BATCH_SIZE - V_BATCH.size)
_V_BATCH_FIELDS = struct.Struct("<QQQQQI")
POLL_PREFIX = struct.Struct("<IQI")  # partition_id, current_offset, messages_count
_SEED_MSG = struct.Struct("<QBQQQI")  # offset, state, timestamp, id lo, id hi, checksum
SEED_STATE_AVAILABLE = 1
U32_MAX = 0xFFFF_FFFF

_xxh3 = xxhash.xxh3_64_intdigest


def _id(lo: int, hi: int) -> int:
    return lo | (hi << 64)


def _split(value: int) -> tuple[int, int]:
    return value & 0xFFFF_FFFF_FFFF_FFFF, value >> 64


def _check_sizes(payload_len: int, headers_len: int) -> None:
    if payload_len > MAX_PAYLOAD:
        raise IggyError(Status.TOO_BIG_MESSAGE_PAYLOAD, f"payload of {payload_len} bytes")
    if headers_len > MAX_USER_HEADERS:
        raise IggyError(Status.TOO_BIG_USER_HEADERS, f"user headers of {headers_len} bytes")


# -- send: metadata shared by L and V -----------------------------------------------------------


SendMetadata = tuple[Identifier, Identifier, Partitioning, int, int]
_METADATA_CACHE: dict[bytes, SendMetadata] = {}
_METADATA_CACHE_MAX = 4096  # distinct (stream, topic, partitioning, count) prefixes remembered


def read_send_metadata(payload: bytes) -> SendMetadata:
    """(stream, topic, partitioning, messages_count, end of metadata) of an L/V send.

    A producer sends the same metadata again and again (the same bytes: stream, topic,
    partitioning, count), so what it reads to is remembered by those bytes (4,096 at most; the
    values are immutable), and a repeat costs a dict lookup instead of two identifiers and a
    partitioning built field by field."""
    if len(payload) >= 4:
        length = int.from_bytes(payload[:4], "little")
        key = bytes(payload[:4 + length])
        hit = _METADATA_CACHE.get(key)
        if hit is not None:
            return hit
        meta = _read_send_metadata(payload)
        if len(_METADATA_CACHE) >= _METADATA_CACHE_MAX:
            _METADATA_CACHE.clear()
        _METADATA_CACHE[key] = meta
        return meta
    return _read_send_metadata(payload)


def _read_send_metadata(payload: bytes) -> SendMetadata:
    r = Reader(payload)
    length = r.u32()
    if length > r.remaining:
        raise IggyError(Status.INVALID_COMMAND, "metadata length exceeds the payload")
    meta = Reader(payload, 4, 4 + length)
    stream = meta.identifier()
    topic = meta.identifier()
    partitioning = meta.partitioning()
    count = meta.u32()
    meta.done()
    if count == 0:
        raise IggyError(Status.INVALID_MESSAGES_COUNT, "no messages")
    return stream, topic, partitioning, count, 4 + length


def _metadata(req: SendMessages) -> bytes:
    meta = (enc_identifier(req.stream) + enc_identifier(req.topic) + enc_partitioning(req.partitioning)
            + U32.pack(len(req.messages)))
    return U32.pack(len(meta)) + meta


# -- L send -------------------------------------------------------------------------------------


def decode_legacy_send(payload: bytes) -> SendMessages:
    """B.5 with the 0.8 server's checks, in its order and with its codes."""
    stream, topic, partitioning, count, pos = read_send_metadata(payload)
    index_end = pos + 16 * count
    if index_end > len(payload):
        raise IggyError(Status.INVALID_COMMAND, "index table truncated")
    area = index_end
    area_len = len(payload) - area
    messages: list[Message] = []
    start = 0
    for i in range(count):
        zero, end, stamp = L_INDEX.unpack_from(payload, pos + 16 * i)
        if zero:
            raise IggyError(Status.NON_ZERO_OFFSET, f"index {i} offset field {zero}")
        if stamp:
            raise IggyError(Status.NON_ZERO_TIMESTAMP, f"index {i} timestamp field {stamp}")
        if end < start or end > area_len:
            raise IggyError(Status.INVALID_MESSAGES_SIZE, f"index {i} position {end}")
        size = end - start
        if size < L_HEADER_SIZE:
            raise IggyError(Status.TOO_SMALL_MESSAGE, f"message {i} of {size} bytes")
        at = area + start
        checksum, lo, hi, _offset, _ts, origin, hl, pl, reserved = L_HEADER.unpack_from(payload, at)
        if reserved:
            raise IggyError(Status.INVALID_RESERVED_FIELD, f"message {i} reserved field {reserved}")
        if L_HEADER_SIZE + pl + hl != size:
            raise IggyError(Status.INVALID_MESSAGES_SIZE, f"message {i} does not fill its index span")
        _check_sizes(pl, hl)
        msg_end = area + end
        if checksum and checksum != _xxh3(payload[at + 8 : msg_end]):
            raise IggyError(Status.INVALID_MESSAGE_CHECKSUM, f"message {i} checksum")
        body = at + L_HEADER_SIZE
        headers = decode_user_headers(payload, body + pl, msg_end) if hl else ()
        messages.append(Message(payload[body : body + pl], _id(lo, hi), headers, origin))
        start = end
    if start != area_len:
        raise IggyError(Status.INVALID_MESSAGES_SIZE, f"{area_len - start} bytes after the last message")
    return SendMessages(stream, topic, partitioning, tuple(messages))


def _legacy_message(m: Message | PolledMessage, offset: int, timestamp: int, *, checksum: bool) -> bytes:
    headers = enc_user_headers(m.headers)
    lo, hi = _split(m.id)
    tail = L_HEADER.pack(0, lo, hi, offset, timestamp, m.origin_timestamp, len(headers), len(m.payload),
                         0)[8:] + m.payload + headers
    return U64.pack(_xxh3(tail) if checksum else 0) + tail


def encode_legacy_send(req: SendMessages) -> bytes:
    """As the 0.8 client writes it: checksum, offset and timestamp 0 (the server stamps them)."""
    bodies = [_legacy_message(m, 0, 0, checksum=False) for m in req.messages]
    index = bytearray()
    end = 0
    for b in bodies:
        end += len(b)
        index += L_INDEX.pack(0, end, 0)
    return _metadata(req) + bytes(index) + b"".join(bodies)


# -- V send -------------------------------------------------------------------------------------


def _batch_checksum(fields: tuple[int, int, int, int, int, int], frame_checksums: Iterable[bytes]) -> int:
    h = xxhash.xxh3_64(_V_BATCH_FIELDS.pack(*fields))
    for c in frame_checksums:
        h.update(c)
    return h.intdigest()


def _read_batch(buf: bytes, at: int, end: int
                ) -> tuple[int, int, int, int, list[tuple[int, int, int, int, bytes, Headers]], int]:
    """One batch record at ``buf[at:]`` within ``end``: (partition_id, base_offset, base_timestamp,
    origin_timestamp, frames as (id, offset_delta, timestamp_delta, ..., payload, headers), end)."""
    if end - at < V_BATCH_SIZE:
        raise IggyError(Status.INVALID_COMMAND, "batch header truncated")
    pid, base_offset, base_ts, origin, length, checksum, count = V_BATCH.unpack_from(buf, at)
    if any(buf[at + V_BATCH.size : at + V_BATCH_SIZE]):
        raise IggyError(Status.INVALID_RESERVED_FIELD, "batch header reserved bytes are not zero")
    if length < V_BATCH_SIZE or length > end - at:
        raise IggyError(Status.INVALID_MESSAGES_SIZE, f"batch length {length}")
    batch_end = at + length
    pos = at + V_BATCH_SIZE
    frames: list[tuple[int, int, int, int, bytes, Headers]] = []
    sums: list[bytes] = []
    for i in range(count):
        if batch_end - pos < V_FRAME_SIZE:
            raise IggyError(Status.INVALID_MESSAGES_SIZE, f"frame {i} header beyond the batch")
        ck, lo, hi, od, td, hl, pl, reserved = V_FRAME.unpack_from(buf, pos)
        if reserved:
            raise IggyError(Status.INVALID_RESERVED_FIELD, f"frame {i} reserved field {reserved}")
        frame_end = pos + V_FRAME_SIZE + pl + hl
        if frame_end > batch_end:
            raise IggyError(Status.INVALID_MESSAGES_SIZE, f"frame {i} beyond the batch")
        _check_sizes(pl, hl)
        if ck != _xxh3(buf[pos + 8 : frame_end]):
            raise IggyError(Status.INVALID_MESSAGE_CHECKSUM, f"frame {i} checksum")
        body = pos + V_FRAME_SIZE
        headers = decode_user_headers(buf, body + pl, frame_end) if hl else ()
        frames.append((_id(lo, hi), od, td, i, buf[body : body + pl], headers))
        sums.append(buf[pos : pos + 8])
        pos = frame_end
    if pos != batch_end:
        raise IggyError(Status.INVALID_MESSAGES_SIZE, f"{batch_end - pos} bytes after the last frame")
    if checksum != _batch_checksum((pid, base_offset, base_ts, origin, length, count), sums):
        raise IggyError(Status.INVALID_BATCH_CHECKSUM, f"batch at base offset {base_offset}")
    return pid, base_offset, base_ts, origin, frames, batch_end


def decode_vsr_send(payload: bytes) -> SendMessages:
    """C.9: metadata, exactly one batch filling the rest, frames numbered 0..count-1."""
    stream, topic, partitioning, count, pos = read_send_metadata(payload)
    _pid, _bo, _bt, origin, frames, end = _read_batch(payload, pos, len(payload))
    if end != len(payload):
        raise IggyError(Status.INVALID_MESSAGES_SIZE, "bytes after the batch")
    if len(frames) != count:
        raise IggyError(Status.INVALID_MESSAGES_COUNT,
                        f"batch holds {len(frames)} messages, metadata says {count}")
    messages = []
    for msg_id, od, td, i, body, headers in frames:
        if od != i:
            raise IggyError(Status.INVALID_FORMAT, f"frame {i} has offset delta {od}")
        messages.append(Message(body, msg_id, headers, origin + td))
    return SendMessages(stream, topic, partitioning, tuple(messages))


def _vsr_batch(messages: Sequence[Message | PolledMessage], partition_id: int, base_offset: int,
               base_timestamp: int, offset_deltas: Sequence[int]) -> bytes:
    origin = min((m.origin_timestamp for m in messages), default=0)
    frames: list[bytes] = []
    for m, od in zip(messages, offset_deltas, strict=True):
        td = m.origin_timestamp - origin
        if td > U32_MAX:
            raise ValueError("a batch spans at most 2**32 - 1 microseconds of origin time")
        headers = enc_user_headers(m.headers)
        lo, hi = _split(m.id)
        tail = V_FRAME.pack(0, lo, hi, od, td, len(headers), len(m.payload), 0)[8:] + m.payload + headers
        frames.append(U64.pack(_xxh3(tail)) + tail)
    length = V_BATCH_SIZE + sum(len(f) for f in frames)
    fields = (partition_id, base_offset, base_timestamp, origin, length, len(frames))
    checksum = _batch_checksum(fields, (f[:8] for f in frames))
    return (V_BATCH.pack(partition_id, base_offset, base_timestamp, origin, length, checksum, len(frames))
            + _V_BATCH_PAD + b"".join(frames))


def encode_vsr_send(req: SendMessages) -> bytes:
    """As the 0.9 client writes it: batch origin = the smallest message origin, partition, base
    offset and base timestamp 0 (the server stamps them)."""
    batch = _vsr_batch(req.messages, 0, 0, 0, range(len(req.messages)))
    return _metadata(req) + batch


# -- D send -------------------------------------------------------------------------------------


def decode_seed_send(payload: bytes) -> SendMessages:
    """A.4/A.5 item 4: stream, topic, partitioning, then {id u128, headers_length u32, headers,
    payload_length u32, payload} to the end of the payload (no count)."""
    r = Reader(payload)
    stream = r.identifier()
    topic = r.identifier()
    partitioning = r.partitioning()
    messages: list[Message] = []
    while r.remaining:
        msg_id = r.u128()
        hl = r.u32()
        h_at = r.skip(hl)
        headers = decode_seed_headers(payload, h_at, h_at + hl) if hl else ()
        pl = r.u32()
        _check_sizes(pl, hl)
        messages.append(Message(r.take(pl), msg_id, headers))
    if not messages:
        raise IggyError(Status.INVALID_MESSAGES_COUNT, "no messages")
    return SendMessages(stream, topic, partitioning, tuple(messages))


def encode_seed_send(req: SendMessages) -> bytes:
    parts = [enc_identifier(req.stream), enc_identifier(req.topic), enc_partitioning(req.partitioning)]
    for m in req.messages:
        headers = enc_seed_headers(m.headers)
        parts += [enc_u128(m.id), U32.pack(len(headers)), headers, U32.pack(len(m.payload)), m.payload]
    return b"".join(parts)


# -- POLL_MESSAGES replies ----------------------------------------------------------------------


def encode_legacy_polled(polled: PolledMessages) -> bytes:
    """B.5: the 16-byte prefix (always, even with no messages), then 64-byte-header messages."""
    return POLL_PREFIX.pack(polled.partition_id, polled.current_offset, len(polled.messages)) + b"".join(
        _legacy_message(m, m.offset, m.timestamp, checksum=True) for m in polled.messages)


def decode_legacy_polled(payload: bytes) -> PolledMessages:
    r = Reader(payload)
    partition_id, current_offset, count = r.u32(), r.u64(), r.u32()
    out: list[PolledMessage] = []
    for i in range(count):
        at = r.skip(L_HEADER_SIZE)
        checksum, lo, hi, offset, ts, origin, hl, pl, reserved = L_HEADER.unpack_from(payload, at)
        if reserved:
            raise IggyError(Status.INVALID_RESERVED_FIELD, f"message {i} reserved field {reserved}")
        body = r.skip(pl + hl)
        end = body + pl + hl
        if checksum != _xxh3(payload[at + 8 : end]):
            raise IggyError(Status.INVALID_MESSAGE_CHECKSUM, f"message {i} checksum")
        headers = decode_user_headers(payload, body + pl, end) if hl else ()
        out.append(PolledMessage(offset, ts, origin, _id(lo, hi), payload[body : body + pl], headers))
    r.done()
    return PolledMessages(partition_id, current_offset, tuple(out))


def _records(messages: Sequence[PolledMessage]) -> list[list[PolledMessage]]:
    """Split polled messages into V batch records: a record shares one server timestamp, its
    offsets rise from its first message's, and its origin times span less than 2**32 us."""
    groups: list[list[PolledMessage]] = []
    lo = hi = 0
    for m in messages:
        g = groups[-1] if groups else None
        if g is not None:
            first = g[0]
            nlo, nhi = min(lo, m.origin_timestamp), max(hi, m.origin_timestamp)
            if (m.timestamp == first.timestamp and 0 <= m.offset - first.offset <= U32_MAX
                    and m.offset > g[-1].offset and nhi - nlo <= U32_MAX):
                g.append(m)
                lo, hi = nlo, nhi
                continue
        groups.append([m])
        lo = hi = m.origin_timestamp
    return groups


def encode_vsr_polled(polled: PolledMessages) -> bytes:
    """C.9: the 16-byte prefix, then batch records (see ``_records`` for how messages are grouped).
    Each record's partition is the reply's; its base offset is its first message's offset."""
    records = [
        _vsr_batch(g, polled.partition_id, g[0].offset, g[0].timestamp, [m.offset - g[0].offset for m in g])
        for g in _records(polled.messages)]
    return POLL_PREFIX.pack(polled.partition_id, polled.current_offset, len(polled.messages)) + b"".join(
        records)


def decode_vsr_polled(payload: bytes) -> PolledMessages:
    r = Reader(payload)
    partition_id, current_offset, count = r.u32(), r.u64(), r.u32()
    pos = r.pos
    out: list[PolledMessage] = []
    while pos < len(payload):
        _pid, base_offset, base_ts, origin, frames, pos = _read_batch(payload, pos, len(payload))
        out += [PolledMessage(base_offset + od, base_ts, origin + td, msg_id, body, headers)
                for msg_id, od, td, _i, body, headers in frames]
    if len(out) != count:
        raise IggyError(Status.INVALID_MESSAGES_COUNT, f"{len(out)} messages, prefix says {count}")
    return PolledMessages(partition_id, current_offset, tuple(out))


def encode_seed_polled(polled: PolledMessages) -> bytes:
    """A.3/A.5 item 6: offset, state (1 = available), timestamp, id, CRC32 of the payload,
    headers_length, headers, length, payload."""
    parts = [POLL_PREFIX.pack(polled.partition_id, polled.current_offset, len(polled.messages))]
    for m in polled.messages:
        lo, hi = _split(m.id)
        headers = enc_seed_headers(m.headers)
        parts += [_SEED_MSG.pack(m.offset, SEED_STATE_AVAILABLE, m.timestamp, lo, hi, zlib.crc32(m.payload)),
                  U32.pack(len(headers)), headers, U32.pack(len(m.payload)), m.payload]
    return b"".join(parts)


def decode_seed_polled(payload: bytes) -> PolledMessages:
    """The D poll reply; the state byte is read and not kept (bayou serves only available ones).
    D messages have no origin timestamp: it is reported as the server timestamp."""
    r = Reader(payload)
    partition_id, current_offset, count = r.u32(), r.u64(), r.u32()
    out: list[PolledMessage] = []
    for i in range(count):
        at = r.skip(_SEED_MSG.size)
        offset, _state, ts, lo, hi, crc = _SEED_MSG.unpack_from(payload, at)
        hl = r.u32()
        h_at = r.skip(hl)
        headers = decode_seed_headers(payload, h_at, h_at + hl) if hl else ()
        body = r.take(r.u32())
        if crc != zlib.crc32(body):
            raise IggyError(Status.INVALID_MESSAGE_CHECKSUM, f"message {i} CRC32")
        out.append(PolledMessage(offset, ts, ts, _id(lo, hi), body, headers))
    r.done()
    return PolledMessages(partition_id, current_offset, tuple(out))
