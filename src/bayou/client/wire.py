"""The SDK's hot paths, sans-IO: SEND_MESSAGES payloads built from columns in the legacy (0.8)
layout (iggy.md B.5), and poll replies turned into Arrow record batches: bayou's POLL_BATCHES (the
V layout, C.9, which bayou stores) and, from brokers without it, POLL_MESSAGES (the 0.8 layout).

A record key travels as the user header ``bayou.key`` (string key, raw value): that is how bayou's
Iggy listener shows a record key to Iggy clients and how it stores a key an Iggy client sends. A
record Iggy cannot carry as itself (a key of 0 or over 255 bytes, an empty or null value, a header
with an empty, null or long value) travels as bayou's record envelope (``bayou.records.iggy``), so
every Kafka record goes through exactly, both ways.
When every message of a send or a poll has the same size and no headers (or a key of one length),
both directions work column-wise with numpy instead of per message.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import (
    L_HEADER,
    L_HEADER_SIZE,
    L_INDEX,
    POLL_PREFIX,
    V_BATCH,
    V_BATCH_SIZE,
    V_FRAME_SIZE,
)
from bayou.protocols.iggy.codes import Command
from bayou.protocols.iggy.compressed import envelope
from bayou.protocols.iggy.framing import encode_legacy_request
from bayou.protocols.iggy.wire import U32, enc_identifier, enc_partitioning
from bayou.records.compression import Compression
from bayou.records.iggy import ENVELOPE_HEADER, ENVELOPE_VERSION, decode_envelope, encode_envelope, fits_iggy

KEY_HEADER = "bayou.key"
_KEY_HEADER_RAW = KEY_HEADER.encode()
_KIND_STRING = int(m.HeaderKind.STRING)
_KIND_RAW = int(m.HeaderKind.RAW)
_TLV = struct.Struct("<BI")
_LEGACY_REQUEST_HEAD = struct.Struct("<II")  # a legacy request's length and command
_MAX_FIELD = 255
_U64_MASK = 0xFFFF_FFFF_FFFF_FFFF
_KEY_FIELD = _TLV.pack(_KIND_STRING, len(_KEY_HEADER_RAW)) + _KEY_HEADER_RAW
_ENVELOPE_FIELDS = (_TLV.pack(_KIND_STRING, len(ENVELOPE_HEADER)) + ENVELOPE_HEADER
                    + _TLV.pack(_KIND_RAW, len(ENVELOPE_VERSION)) + ENVELOPE_VERSION)

KAFKA_HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
KAFKA_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
    ("headers", KAFKA_HEADERS_TYPE),
])
LOG_APPEND_TIME = 1  # Kafka's timestampType for a broker-assigned timestamp

_L_DTYPE_FIELDS = [("checksum", "<u8"), ("id_lo", "<u8"), ("id_hi", "<u8"), ("offset", "<u8"),
                   ("timestamp", "<u8"), ("origin", "<u8"), ("hl", "<u4"), ("pl", "<u4"),
                   ("reserved", "<u8")]

_V_FRAME_HEAD = struct.Struct("<IIII")  # a V frame's offset delta, origin delta, hl, pl (at byte 24)

HeaderList = Sequence[tuple[str, bytes | None]]  # a None value: Kafka's null header value


def encode_headers(key: bytes | None, headers: HeaderList | None) -> bytes:
    """Iggy user headers (kind u8, u32 length, bytes; key then value) for a record key and
    record headers. Raises ValueError for a field Iggy cannot carry (empty or over 255 bytes)."""
    parts: list[bytes] = []
    if key is not None:
        parts.append(_field(_KIND_STRING, _KEY_HEADER_RAW) + _field(_KIND_RAW, key))
    for name, value in headers or ():
        if value is None:
            raise ValueError("Iggy header values are 1..255 bytes, got null")
        parts.append(_field(_KIND_STRING, name.encode("utf-8")) + _field(_KIND_RAW, value))
    return b"".join(parts)


def _field(kind: int, raw: bytes) -> bytes:
    if not 1 <= len(raw) <= _MAX_FIELD:
        raise ValueError(f"Iggy header fields are 1..255 bytes, got {len(raw)}")
    return _TLV.pack(kind, len(raw)) + raw


def decode_headers(buf: bytes | memoryview, pos: int, end: int
                   ) -> tuple[bytes | None, list[tuple[str, bytes | None]]]:
    """(record key, other headers) from an Iggy user-header block. String-keyed headers keep their
    name; other key kinds are named ``<kind>:<hex>``. A typed value is given as its raw bytes."""
    key: bytes | None = None
    out: list[tuple[str, bytes | None]] = []
    mv = memoryview(buf)
    while pos + 5 <= end:
        kk, kl = _TLV.unpack_from(buf, pos)
        k = bytes(mv[pos + 5 : pos + 5 + kl])
        pos += 5 + kl
        if pos + 5 > end:
            break
        _vk, vl = _TLV.unpack_from(buf, pos)
        v = bytes(mv[pos + 5 : pos + 5 + vl])
        pos += 5 + vl
        if kk == _KIND_STRING:
            name = k.decode("utf-8", "replace")
            if name == KEY_HEADER and key is None:
                key = v
                continue
        else:
            name = f"{kk}:{k.hex()}"
        out.append((name, v))
    return key, out


def send_metadata(stream: m.Identifier, topic: m.Identifier, partition: int, count: int) -> bytes:
    meta = (enc_identifier(stream) + enc_identifier(topic)
            + enc_partitioning(m.Partitioning.partition(partition)) + U32.pack(count))
    return U32.pack(len(meta)) + meta


def codec(compression: str | Compression | None) -> Compression:
    """A producer's ``compression`` setting (none, gzip, snappy, lz4, zstd) as a codec."""
    if compression is None:
        return Compression.NONE
    if isinstance(compression, Compression):
        return compression
    try:
        return Compression[compression.strip().upper()]
    except KeyError:
        raise ValueError(f"compression must be one of none, gzip, snappy, lz4, zstd, not {compression!r}") \
            from None


def send_frame(stream: m.Identifier, topic: m.Identifier, partition: int, values: Sequence[bytes | None],
               keys: Sequence[bytes | None] | None = None, headers: Sequence[HeaderList] | None = None,
               message_ids: Sequence[int] | None = None, origin_us: int = 0,
               compression: Compression = Compression.NONE) -> bytes:
    """One SEND_MESSAGES request frame (legacy layout) for ``values`` into one partition.

    ``message_ids`` are u128 (0 lets the broker mint one). Checksums, offsets and timestamps are 0,
    as the 0.8 client sends them: the broker stamps them on append. With ``compression`` the send
    travels as bayou's compressed envelope (``protocols.iggy.compressed``).
    """
    frame = prepare_send(stream, topic, partition, values, keys, headers, message_ids, origin_us, compression)
    return frame if isinstance(frame, bytes) else bytes(frame)


def prepare_send(stream: m.Identifier, topic: m.Identifier, partition: int, values: Sequence[bytes | None],
                 keys: Sequence[bytes | None] | None = None, headers: Sequence[HeaderList] | None = None,
                 message_ids: Sequence[int] | None = None, origin_us: int = 0,
                 compression: Compression = Compression.NONE) -> bytes | UniformSend:
    """``send_frame``'s frame, or, for same-size values without headers and uncompressed, a
    ``UniformSend`` that a connection writes into its ``FrameBuffer`` (no large allocation per
    send)."""
    n = len(values)
    if n == 0:
        raise ValueError("a send needs at least one message")
    uniform = _uniform(values, keys, headers, message_ids, origin_us)
    if compression is not Compression.NONE:
        body = bytes(uniform) if uniform is not None else _general_body(values, keys, headers, message_ids,
                                                                        origin_us)
        return encode_legacy_request(Command.SEND_MESSAGES, send_metadata(stream, topic, partition, 1)
                                     + envelope(n, body, compression))
    meta = send_metadata(stream, topic, partition, n)
    if uniform is not None:
        return uniform.framed(_LEGACY_REQUEST_HEAD.pack(4 + len(meta) + uniform.nbytes, Command.SEND_MESSAGES)
                              + meta)
    return encode_legacy_request(Command.SEND_MESSAGES,
                                 meta + _general_body(values, keys, headers, message_ids, origin_us))


class FrameBuffer:
    """A connection's reusable buffer for the frames it sends, written in place and sent from
    there. A frame of 5,000 messages of 100 B is about 880 KB: glibc hands blocks that large back
    to the kernel when they are freed, so a frame built in fresh memory pays a page fault for every
    4 KiB it writes. On this project's VMs that was 1.6 of the 1.8 ms of encoding such a send; in
    a buffer that stays mapped it takes about 0.2 ms. Used under the connection's lock, one send at
    a time; a send larger than ``KEEP`` (16 MiB) gets a buffer of its own, not kept."""

    KEEP = 16 << 20

    def __init__(self) -> None:
        self._buf = np.empty(0, np.uint8)

    def take(self, size: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """``size`` bytes of the buffer (their content is whatever was there)."""
        if size > len(self._buf):
            if size > self.KEEP:
                return np.empty(size, np.uint8)
            self._buf = np.empty(min(max(size, 2 * len(self._buf)), self.KEEP), np.uint8)
        return self._buf[:size]

    def frames(self, frames: Sequence[bytes | UniformSend]) -> bytes | memoryview:
        """``frames`` one after another, as one buffer to send."""
        if len(frames) == 1 and isinstance(frames[0], bytes):
            return frames[0]
        out = self.take(sum(len(f) if isinstance(f, bytes) else f.nbytes for f in frames))
        pos = 0
        for f in frames:
            if isinstance(f, bytes):
                out[pos:pos + len(f)] = np.frombuffer(f, np.uint8)
                pos += len(f)
            else:
                f.write_into(out[pos:pos + f.nbytes])
                pos += f.nbytes
        return out.data


def _uniform(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
             headers: Sequence[HeaderList] | None, message_ids: Sequence[int] | None,
             origin_us: int) -> UniformSend | None:
    """The column-wise send, when the values allow it (same size, no headers, no empty or null
    value, keys of one length or none)."""
    has_keys = keys is not None and any(k is not None for k in keys)
    has_headers = headers is not None and any(headers)
    if has_headers or not all(values):  # empty or null values travel as envelopes
        return None
    return _uniform_body(values, message_ids, origin_us,  # type: ignore[arg-type]
                         keys if has_keys else None)


def _general_body(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                  headers: Sequence[HeaderList] | None, message_ids: Sequence[int] | None,
                  origin_us: int) -> bytes:
    """The index and messages of an L send (B.5, after the metadata), a message at a time: any
    mix of sizes, keys, headers and null values."""
    index = bytearray()
    parts: list[bytes] = []
    end = 0
    pack = L_HEADER.pack
    key_field = _TLV.pack
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        hs = headers[i] if headers is not None else None
        if headers is None and value and (key is None or 1 <= len(key) <= _MAX_FIELD):
            # the common keyed case, without a call per message
            hdr = b"" if key is None else _KEY_FIELD + key_field(_KIND_RAW, len(key)) + key
        elif value and fits_iggy(key, value, hs):
            hdr = encode_headers(key, hs)
        else:  # Iggy cannot carry it as itself: the whole record in bayou's envelope
            value = encode_envelope(key, value, hs)
            hdr = _ENVELOPE_FIELDS
        mid = message_ids[i] if message_ids is not None else 0
        parts.append(pack(0, mid & _U64_MASK, mid >> 64, 0, 0, origin_us, len(hdr), len(value), 0))
        parts.append(value)
        if hdr:
            parts.append(hdr)
        end += L_HEADER_SIZE + len(value) + len(hdr)
        index += L_INDEX.pack(0, end, 0)
    return bytes(index) + b"".join(parts)


def _uniform_body(values: Sequence[bytes], message_ids: Sequence[int] | None, origin_us: int,
                  keys: Sequence[bytes | None] | None = None) -> UniformSend | None:
    """Index + messages for same-size values without headers, to be built as numpy columns
    (``bytes()`` of it is the body); with ``keys``, every one of them of one length (1-255 bytes),
    each the message's one user header (what ``_general_body`` writes for it). None when they are
    not so."""
    n = len(values)
    size = len(values[0])
    data = b"".join(values)
    if len(data) != n * size:
        return None
    key_data = b""
    key_size = 0
    if keys is not None:
        key_size = len(keys[0] or b"")
        if not 1 <= key_size <= _MAX_FIELD:
            return None
        try:
            key_data = b"".join(keys)  # type: ignore[arg-type]
        except TypeError:  # a record without a key among keyed ones
            return None
        if len(key_data) != n * key_size:
            return None
    return UniformSend(n, size, data, key_size, key_data, message_ids, origin_us)


_INDEX_DTYPE = np.dtype([("zero", "<u4"), ("end", "<u4"), ("ts", "<u8")])
IdColumns = tuple[int | np.ndarray[Any, np.dtype[np.uint64]], int | np.ndarray[Any, np.dtype[np.uint64]]]


def _id_columns(message_ids: Sequence[int] | None, n: int) -> IdColumns | None:
    """u128 message ids as their low and high u64 halves: (first low, high) for one producer's
    consecutive sequences (the idempotent producer, the Spark sink: no Python int per message),
    else two arrays."""
    if message_ids is None:
        return None
    if isinstance(message_ids, range) and message_ids.step == 1 and n and \
            message_ids.start >> 64 == message_ids[-1] >> 64:
        return message_ids.start & _U64_MASK, message_ids.start >> 64
    ids = [int(i) for i in message_ids]
    return (np.array([i & _U64_MASK for i in ids], dtype=np.uint64),
            np.array([i >> 64 for i in ids], dtype=np.uint64))


@functools.lru_cache(maxsize=256)
def _send_dtype(size: int, key_size: int) -> np.dtype[Any]:
    """A sent message: its 64-byte L header, payload and, with a key, the key's user header."""
    fields = [*_L_DTYPE_FIELDS, ("payload", f"V{size}")] if size else list(_L_DTYPE_FIELDS)
    if key_size:
        fields += [("key_prefix", f"V{len(_KEY_FIELD) + _TLV.size}"), ("key", f"V{key_size}")]
    return np.dtype(fields)


class UniformSend:
    """A SEND_MESSAGES body (and, from ``prepare_send``, the frame's head) of same-size values,
    written column-wise into a buffer by ``write_into``; ``bytes()`` of it is the encoding."""

    __slots__ = ("data", "head", "ids", "key_data", "key_size", "n", "nbytes", "origin_us", "size")

    def __init__(self, n: int, size: int, data: bytes, key_size: int, key_data: bytes,
                 message_ids: Sequence[int] | None, origin_us: int) -> None:
        self.n, self.size, self.data, self.key_size, self.key_data = n, size, data, key_size, key_data
        self.ids = _id_columns(message_ids, n)  # read now: the caller may reuse its list before the send
        self.origin_us = origin_us
        self.head = b""  # what goes before the index (the frame header and metadata), if any
        self.nbytes = n * (_INDEX_DTYPE.itemsize + _send_dtype(size, key_size).itemsize)

    def framed(self, head: bytes) -> UniformSend:
        """This body behind ``head`` (the request's header and metadata)."""
        self.head = head
        self.nbytes += len(head)
        return self

    def __bytes__(self) -> bytes:
        out = bytearray(self.nbytes)
        self.write_into(np.frombuffer(out, np.uint8))
        return bytes(out)

    def write_into(self, out: np.ndarray[Any, np.dtype[np.uint8]]) -> None:
        """Write the encoding into ``out`` (``nbytes`` long, any content)."""
        n, size, key_size = self.n, self.size, self.key_size
        dtype = _send_dtype(size, key_size)
        stride = dtype.itemsize
        start = len(self.head)
        out[:start] = np.frombuffer(self.head, np.uint8)
        out[start:] = 0
        index = out[start:start + n * _INDEX_DTYPE.itemsize].view(_INDEX_DTYPE)
        rows = out[start + n * _INDEX_DTYPE.itemsize:].view(dtype)
        index["end"] = np.arange(1, n + 1, dtype=np.uint64) * stride
        if key_size:
            key_prefix = _KEY_FIELD + _TLV.pack(_KIND_RAW, key_size)
            rows["hl"] = len(key_prefix) + key_size
            rows["key_prefix"] = np.frombuffer(key_prefix, f"V{len(key_prefix)}")[0]
            rows["key"] = np.frombuffer(self.key_data, f"V{key_size}")
        if self.ids is not None:
            lo, hi = self.ids
            rows["id_lo"] = np.arange(lo, lo + n, dtype=np.uint64) if isinstance(lo, int) else lo
            rows["id_hi"] = hi
        rows["origin"] = self.origin_us
        rows["pl"] = size
        if size:
            rows["payload"] = np.frombuffer(self.data, dtype=f"V{size}")


def polled_to_arrow(payload: bytes, topic: str, partition: int, *, end_offset: int | None = None,
                    include_headers: bool = True) -> tuple[pa.RecordBatch, int]:
    """A legacy POLL_MESSAGES reply as a record batch in ``KAFKA_SCHEMA`` (rows at or past
    ``end_offset`` left out), and the broker's current offset (its last visible offset)."""
    _pid, current, count = POLL_PREFIX.unpack_from(payload, 0)
    pos = POLL_PREFIX.size
    body_len = len(payload) - pos
    if count:
        first_hl, first_pl = struct.unpack_from("<II", payload, pos + 48)
        stride = L_HEADER_SIZE + first_hl + first_pl
        if first_hl == 0 and stride * count == body_len:
            batch = _uniform_to_arrow(payload, pos, count, first_pl, topic, partition)
            if batch is not None:
                return _cut(batch, end_offset), current
    return _cut(_walk_to_arrow(payload, pos, count, topic, partition, include_headers), end_offset), current


def _cut(batch: pa.RecordBatch, end_offset: int | None) -> pa.RecordBatch:
    if end_offset is None or batch.num_rows == 0:
        return batch
    offsets = batch.column(4).to_numpy()
    keep = int(np.searchsorted(offsets, end_offset, side="left"))
    return batch if keep == batch.num_rows else batch.slice(0, keep)


def _uniform_to_arrow(payload: bytes, pos: int, count: int, size: int, topic: str,
                      partition: int) -> pa.RecordBatch | None:
    dtype = np.dtype([*_L_DTYPE_FIELDS, ("payload", f"V{size}")] if size else _L_DTYPE_FIELDS)
    rows = np.frombuffer(payload, dtype=dtype, count=count, offset=pos)
    if not (np.all(rows["hl"] == 0) and np.all(rows["pl"] == size)):
        return None
    data = rows["payload"].tobytes() if size else b""
    value_offsets = np.arange(0, (count + 1) * size, size, dtype=np.int32) if size else np.zeros(
        count + 1, dtype=np.int32)
    values = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(value_offsets),
                                                        pa.py_buffer(data)])
    return _batch(values, pa.nulls(count, pa.binary()), rows["offset"].astype(np.int64),
                  rows["timestamp"].astype(np.int64), _empty_headers(count), topic, partition)


def _walk_to_arrow(payload: bytes, pos: int, count: int, topic: str, partition: int,
                   include_headers: bool) -> pa.RecordBatch:
    offsets = np.empty(count, dtype=np.int64)
    stamps = np.empty(count, dtype=np.int64)
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    headers: list[list[tuple[str, bytes | None]]] = []
    unpack = L_HEADER.unpack_from
    mv = memoryview(payload)
    for i in range(count):
        _ck, _lo, _hi, offset, ts, _origin, hl, pl, _rsv = unpack(payload, pos)
        body = pos + L_HEADER_SIZE
        offsets[i] = offset
        stamps[i] = ts
        _message(payload, mv, body, pl, hl, keys, values, headers)
        pos = body + pl + hl
    return _batch(pa.array(values, type=pa.binary()), pa.array(keys, type=pa.binary()), offsets, stamps,
                  _headers_array(headers, count, include_headers), topic, partition)


def _message(payload: bytes, mv: memoryview, body: int, pl: int, hl: int, keys: list[bytes | None],
             values: list[bytes | None], headers: list[list[tuple[str, bytes | None]]]) -> None:
    """One message's key, value and headers (its body at ``body``: payload, then user headers)."""
    value: bytes | None = bytes(mv[body : body + pl])
    if hl:
        if hl == len(_ENVELOPE_FIELDS) and mv[body + pl : body + pl + hl] == _ENVELOPE_FIELDS:
            key, value, inner = decode_envelope(value or b"")
            hdrs = list(inner)
        else:
            key, hdrs = decode_headers(payload, body + pl, body + pl + hl)
    else:
        key, hdrs = None, []
    values.append(value)
    keys.append(key)
    headers.append(hdrs)


def _headers_array(headers: list[list[tuple[str, bytes | None]]], count: int, include: bool) -> pa.Array:
    if include and any(headers):
        return pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], type=KAFKA_HEADERS_TYPE)
    return _empty_headers(count)


# -- bayou's POLL_BATCHES reply: the V layout (C.9), the frames the broker stores ----------------

_V_FRAME_FIELDS = (("id_lo", "<u8", 8), ("id_hi", "<u8", 16), ("od", "<u4", 24), ("hl", "<u4", 32),
                   ("pl", "<u4", 36))  # a V frame's header fields: name, format, position
_KEY_PREFIX_SIZE = len(_KEY_FIELD) + _TLV.size  # the "bayou.key" name field and the value's kind, length


class _Run:
    """The messages of one batch record: their columns (values and keys as Arrow arrays)."""

    __slots__ = ("headers", "keys", "offsets", "timestamp", "values")

    def __init__(self, offsets: np.ndarray, timestamp: int, values: pa.Array, keys: pa.Array,
                 headers: list[list[tuple[str, bytes | None]]] | None) -> None:
        self.offsets, self.timestamp, self.values, self.keys = offsets, timestamp, values, keys
        self.headers = headers  # None: no message has headers


def partition_replies(payload: bytes) -> list[memoryview]:
    """A POLL_PARTITIONS reply (bayou's extension): a u32 count, then for each partition a u32
    length and POLL_BATCHES' reply for it, as views of ``payload`` (no copy)."""
    view = memoryview(payload)
    (count,) = U32.unpack_from(payload, 0)
    pos, out = 4, list[memoryview]()
    for _ in range(count):
        if len(payload) - pos < 4:
            raise ValueError(f"POLL_PARTITIONS reply: cut short after {len(out)} of {count} partitions")
        (n,) = U32.unpack_from(payload, pos)
        pos += 4
        if n < POLL_PREFIX.size or n > len(payload) - pos:
            raise ValueError(f"POLL_PARTITIONS reply: a partition's reply of {n} bytes")
        out.append(view[pos:pos + n])
        pos += n
    if pos != len(payload):
        raise ValueError(f"POLL_PARTITIONS reply: {len(payload) - pos} bytes after its last partition")
    return out


def batches_to_arrow(payload: bytes | memoryview, topic: str, partition: int, *,
                     end_offset: int | None = None, include_headers: bool = True
                     ) -> tuple[pa.RecordBatch, int]:
    """A POLL_BATCHES reply (bayou's extension: the 16-byte prefix, then V batch records of
    256-byte headers and 48-byte frames) as a record batch in ``KAFKA_SCHEMA`` (rows at or past
    ``end_offset`` left out), and the broker's current offset. A record whose frames all have one
    size and no user headers, or one ``bayou.key`` of one length, is read column-wise."""
    _pid, current, count = POLL_PREFIX.unpack_from(payload, 0)
    pos, end = POLL_PREFIX.size, len(payload)
    runs: list[_Run] = []
    total = 0
    walked = payload if isinstance(payload, bytes) else None
    while pos < end:
        if end - pos < V_BATCH_SIZE:
            raise ValueError(f"POLL_BATCHES reply: {end - pos} bytes where a batch header should be")
        _p, base, ts, _origin, length, _ck, n = V_BATCH.unpack_from(payload, pos)
        if length < V_BATCH_SIZE + n * V_FRAME_SIZE or length > end - pos:
            raise ValueError(f"POLL_BATCHES reply: a batch of {n} frames is {length} bytes")
        if n:
            run = _uniform_run(payload, pos + V_BATCH_SIZE, pos + length, n, base, ts)
            if run is None:  # walked message by message, from bytes (a view is copied once)
                if walked is None:
                    walked = bytes(payload)
                run = _walk_run(walked, pos + V_BATCH_SIZE, pos + length, n, base, ts)
            runs.append(run)
        total += n
        pos += length
    if total != count:
        raise ValueError(f"POLL_BATCHES reply: {total} messages, its prefix says {count}")
    return _cut(_runs_batch(runs, total, topic, partition, include_headers), end_offset), current


@functools.lru_cache(maxsize=256)  # one per (payload, key) size in use: building one costs microseconds
def _run_dtype(pl: int, hl: int) -> np.dtype[Any]:
    """A V frame of ``pl`` payload bytes and ``hl`` header bytes (a ``bayou.key`` or nothing) as
    one numpy record: the frame header's fields, the payload, the key's prefix and the key."""
    fields = list(_V_FRAME_FIELDS)
    if pl:
        fields.append(("payload", f"V{pl}", V_FRAME_SIZE))
    if hl:
        fields += [("key_prefix", f"V{_KEY_PREFIX_SIZE}", V_FRAME_SIZE + pl),
                   ("key", f"V{hl - _KEY_PREFIX_SIZE}", V_FRAME_SIZE + pl + _KEY_PREFIX_SIZE)]
    names, formats, offsets = zip(*fields, strict=True)
    return np.dtype({"names": list(names), "formats": list(formats), "offsets": list(offsets),
                     "itemsize": V_FRAME_SIZE + pl + hl})


def _uniform_run(payload: bytes | memoryview, body: int, end: int, n: int, base: int, ts: int
                 ) -> _Run | None:
    _od, _td, hl, pl = _V_FRAME_HEAD.unpack_from(payload, body + 24)  # the first frame's sizes
    stride = V_FRAME_SIZE + pl + hl
    if stride * n != end - body:
        return None
    key_size = hl - _KEY_PREFIX_SIZE
    if hl and not 1 <= key_size <= _MAX_FIELD:
        return None
    rows = np.frombuffer(payload, _run_dtype(pl, hl), n, body)
    if not ((rows["pl"] == pl).all() and (rows["hl"] == hl).all()):
        return None
    keys: pa.Array = pa.nulls(n, pa.binary())
    if hl:
        prefix = _KEY_FIELD + _TLV.pack(_KIND_RAW, key_size)
        if not (rows["key_prefix"] == np.frombuffer(prefix, f"V{_KEY_PREFIX_SIZE}")[0]).all():
            return None
        keys = _fixed_binary(rows["key"].tobytes(), n, key_size)
    values = _fixed_binary(rows["payload"].tobytes() if pl else b"", n, pl)
    return _Run(rows["od"].astype(np.int64) + base, ts, values, keys, None)


def _fixed_binary(data: bytes, n: int, size: int) -> pa.Array:
    value_offsets = np.arange(0, (n + 1) * size, size, dtype=np.int32) if size else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(value_offsets), pa.py_buffer(data)])


def _walk_run(payload: bytes, pos: int, end: int, n: int, base: int, ts: int) -> _Run:
    offsets = np.empty(n, dtype=np.int64)
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    headers: list[list[tuple[str, bytes | None]]] = []
    mv = memoryview(payload)
    unpack = _V_FRAME_HEAD.unpack_from
    for i in range(n):
        if end - pos < V_FRAME_SIZE:
            raise ValueError(f"POLL_BATCHES reply: frame {i} of {n} beyond its batch")
        od, _td, hl, pl = unpack(payload, pos + 24)
        body = pos + V_FRAME_SIZE
        pos = body + pl + hl
        if pos > end:
            raise ValueError(f"POLL_BATCHES reply: frame {i} of {n} beyond its batch")
        offsets[i] = base + od
        _message(payload, mv, body, pl, hl, keys, values, headers)
    if pos != end:
        raise ValueError(f"POLL_BATCHES reply: {end - pos} bytes after a batch's last frame")
    return _Run(offsets, ts, pa.array(values, type=pa.binary()), pa.array(keys, type=pa.binary()),
                headers if any(headers) else None)


def _runs_batch(runs: list[_Run], total: int, topic: str, partition: int, include_headers: bool
                ) -> pa.RecordBatch:
    if not runs:
        return _batch(pa.array([], type=pa.binary()), pa.array([], type=pa.binary()),
                      np.empty(0, np.int64), np.empty(0, np.int64), _empty_headers(0), topic, partition)
    if len(runs) == 1:
        r = runs[0]
        values, keys, offsets = r.values, r.keys, r.offsets
        stamps = np.full(total, r.timestamp, dtype=np.int64)
    else:
        values = pa.concat_arrays([r.values for r in runs])
        keys = pa.concat_arrays([r.keys for r in runs])
        offsets = np.concatenate([r.offsets for r in runs])
        stamps = np.concatenate([np.full(len(r.offsets), r.timestamp, dtype=np.int64) for r in runs])
    if include_headers and any(r.headers for r in runs):
        headers = _headers_array([h for r in runs for h in (r.headers or [[]] * len(r.offsets))], total, True)
    else:
        headers = _empty_headers(total)
    return _batch(values, keys, offsets, stamps, headers, topic, partition)


_TIMESTAMP_TYPE = KAFKA_SCHEMA.field("timestamp").type
_NO_HEADERS = pa.array([], type=KAFKA_HEADERS_TYPE.value_type)


def _fixed(type_: pa.DataType, n: int, data: np.ndarray) -> pa.Array:
    """A fixed-width column without nulls over ``data``'s buffer (``pa.array`` costs several
    times more for the few rows of a poll at the log end)."""
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(data)])


def _empty_headers(count: int) -> pa.Array:
    offsets = pa.py_buffer(np.zeros(count + 1, np.int32))
    return pa.Array.from_buffers(KAFKA_HEADERS_TYPE, count, [None, offsets], children=[_NO_HEADERS])


def _batch(values: pa.Array, keys: pa.Array, offsets: np.ndarray, stamps: np.ndarray, headers: pa.Array,
           topic: str, partition: int) -> pa.RecordBatch:
    n = len(values)
    name = topic.encode()
    topics = pa.Array.from_buffers(pa.string(), n, [
        None, pa.py_buffer(np.arange(0, (n + 1) * len(name), len(name) or 1, dtype=np.int32)
                           if name else np.zeros(n + 1, np.int32)), pa.py_buffer(name * n)])
    return pa.RecordBatch.from_arrays([
        keys,
        values,
        topics,
        _fixed(pa.int32(), n, np.full(n, partition, dtype=np.int32)),
        _fixed(pa.int64(), n, np.ascontiguousarray(offsets, dtype=np.int64)),
        _fixed(_TIMESTAMP_TYPE, n, np.ascontiguousarray(stamps, dtype=np.int64)),
        _fixed(pa.int32(), n, np.full(n, LOG_APPEND_TIME, dtype=np.int32)),
        headers,
    ], schema=KAFKA_SCHEMA)
