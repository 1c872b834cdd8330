"""Iggy messages between the wire and the frames bayou stores (``bayou.records.iggy``).

The hot paths work on bytes, batch at a time (STYLE performance habits):

- ``vsr_send_frames`` checks an apache-iggy 0.9 SEND_MESSAGES batch (every frame checksum, the
  batch checksum, sizes, reserved fields) and returns its frames ready to store, usually the very
  bytes that arrived;
- ``frames_from_messages`` builds stored frames for D and L sends, which arrive in other layouts;
- ``select_frames`` renumbers the frames de-duplication keeps of a send;
- ``vsr_record`` serves a run of stored frames to a V consumer as one batch record (a new 256-byte
  header in front of the stored bytes); ``legacy_messages`` rewrites them as L's 64-byte-header
  messages.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xxhash

from bayou.protocols.iggy.batches import (
    L_HEADER,
    L_HEADER_SIZE,
    L_INDEX,
    MAX_PAYLOAD,
    U32_MAX,
    V_BATCH,
    V_BATCH_SIZE,
    V_FRAME,
    V_FRAME_SIZE,
)
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import IggyError
from bayou.protocols.iggy.messages import Message
from bayou.protocols.iggy.wire import MAX_FIELD, MAX_USER_HEADERS, decode_user_headers, enc_user_headers

_xxh3 = xxhash.xxh3_64_intdigest
_V_BATCH_FIELDS = struct.Struct("<QQQQQI")
_V_BATCH_PAD = bytes(V_BATCH_SIZE - V_BATCH.size)
_L_TAIL = struct.Struct("<QQQQQIIQ")  # id lo, id hi, offset, timestamp, origin, hlen, plen, reserved
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_MASK64 = 0xFFFF_FFFF_FFFF_FFFF

Mint = Callable[[], int]


_RANDOM_POOL: list[int] = []  # 128-bit random values from os.urandom, drawn 1,024 per refill
_UUID_CLEAR = ~(0xF000 << 64) & ~(0xC000 << 48)
_UUID_SET = (0x4000 << 64) | (0x8000 << 48)


def mint_uuid4() -> int:
    """A random UUIDv4 as a u128, what the Iggy server gives a message sent with id 0. The
    randomness comes from os.urandom in blocks (one system call per 1,024 ids, not per id);
    ``list.pop`` is atomic, so threads never share a value."""
    try:
        value = _RANDOM_POOL.pop()
    except IndexError:
        block = os.urandom(16 * 1024)
        _RANDOM_POOL.extend(int.from_bytes(block[i : i + 16], "big") for i in range(16, len(block), 16))
        value = int.from_bytes(block[:16], "big")
    return (value & _UUID_CLEAR) | _UUID_SET


def _frame(msg_id: int, offset_delta: int, ts_delta: int, payload: bytes | memoryview,
           headers: bytes | memoryview) -> bytes:
    tail = V_FRAME.pack(0, msg_id & _MASK64, msg_id >> 64, offset_delta, ts_delta, len(headers),
                        len(payload), 0)[8:]
    h = xxhash.xxh3_64(tail)
    h.update(payload)
    h.update(headers)
    return _U64.pack(h.intdigest()) + tail + bytes(payload) + bytes(headers)


@functools.lru_cache(maxsize=256)  # one per message size in use; building one costs microseconds
def _frame_dtype(stride: int) -> np.dtype[Any]:
    """The 48-byte frame header as a numpy record of ``stride`` bytes (payload and headers skipped)."""
    return np.dtype({"names": ["ck", "lo", "hi", "od", "hl", "pl", "rsv"],
                     "formats": ["<u8", "<u8", "<u8", "<u4", "<u4", "<u4", "<u8"],
                     "offsets": [0, 8, 16, 24, 32, 36, 40], "itemsize": stride})


def _uniform_frames(payload: bytes, start: int, end: int, count: int) -> tuple[int, bytes]:
    """(common frame size, the frames' checksum fields) when every frame of a V send has the same
    size and passes every check, else (0, b"") and the caller walks the frames one by one to find
    and report the problem. The checks run column-wise in numpy instead of a Python loop per frame;
    only the XXH3 calls remain per frame."""
    if count == 0 or end - start < V_FRAME_SIZE:
        return 0, b""
    _ck, _lo, _hi, _od, _td, hl, pl, _r = V_FRAME.unpack_from(payload, start)
    stride = V_FRAME_SIZE + hl + pl
    if stride * count != end - start or pl == 0 or pl > MAX_PAYLOAD or hl > MAX_USER_HEADERS:
        return 0, b""
    a = np.frombuffer(payload, _frame_dtype(stride), count, offset=start)
    if not ((a["hl"] == hl).all() and (a["pl"] == pl).all() and not a["rsv"].any()
            and (a["od"] == np.arange(count)).all() and ((a["lo"] | a["hi"]) != 0).all()):
        return 0, b""
    mv = memoryview(payload)
    computed = np.fromiter((_xxh3(mv[p + 8 : p + stride]) for p in range(start, end, stride)),
                           np.uint64, count)
    if not (computed == a["ck"]).all():
        return 0, b""
    return stride, a["ck"].tobytes()


def vsr_send_frames(payload: bytes, pos: int, count: int, *, mint: Mint = mint_uuid4
                    ) -> tuple[bytes, int, int]:
    """(frames to store, batch origin timestamp, common frame size or 0) of the one batch at
    ``payload[pos:]``, which must hold exactly ``count`` frames and end the payload (iggy.md C.9).
    Frames with id 0 get a minted id (and a new checksum); everything else is stored as sent."""
    end = len(payload)
    if end - pos < V_BATCH_SIZE:
        raise IggyError(Status.INVALID_COMMAND, "batch header truncated")
    pid, base_offset, base_ts, origin, length, checksum, n = V_BATCH.unpack_from(payload, pos)
    if any(payload[pos + V_BATCH.size : pos + V_BATCH_SIZE]):
        raise IggyError(Status.INVALID_RESERVED_FIELD, "batch header reserved bytes are not zero")
    if length != end - pos:
        raise IggyError(Status.INVALID_MESSAGES_SIZE, f"batch length {length} does not fill the request")
    if n != count:
        raise IggyError(Status.INVALID_MESSAGES_COUNT, f"batch holds {n} messages, metadata says {count}")
    mv = memoryview(payload)
    start = at = pos + V_BATCH_SIZE
    stride, checksums = _uniform_frames(payload, start, end, count)
    if stride:
        h = xxhash.xxh3_64(_V_BATCH_FIELDS.pack(pid, base_offset, base_ts, origin, length, count))
        h.update(checksums)
        if h.intdigest() != checksum:
            raise IggyError(Status.INVALID_BATCH_CHECKSUM, "batch checksum")
        return payload[start:end], origin, stride
    unpack = V_FRAME.unpack_from
    sums: list[memoryview] = []
    fix: list[tuple[int, int, int]] = []  # (index, start, end) of frames needing a new id
    for i in range(count):
        if end - at < V_FRAME_SIZE:
            raise IggyError(Status.INVALID_MESSAGES_SIZE, f"frame {i} header beyond the batch")
        ck, lo, hi, od, _td, hl, pl, reserved = unpack(payload, at)
        frame_end = at + V_FRAME_SIZE + pl + hl
        if reserved:
            raise IggyError(Status.INVALID_RESERVED_FIELD, f"frame {i} reserved field {reserved}")
        if frame_end > end:
            raise IggyError(Status.INVALID_MESSAGES_SIZE, f"frame {i} beyond the batch")
        if pl > MAX_PAYLOAD:
            raise IggyError(Status.TOO_BIG_MESSAGE_PAYLOAD, f"payload of {pl} bytes")
        if hl > MAX_USER_HEADERS:
            raise IggyError(Status.TOO_BIG_USER_HEADERS, f"user headers of {hl} bytes")
        if pl == 0:
            raise IggyError(Status.EMPTY_MESSAGE_PAYLOAD, f"frame {i} has no payload")
        if ck != _xxh3(mv[at + 8 : frame_end]):
            raise IggyError(Status.INVALID_MESSAGE_CHECKSUM, f"frame {i} checksum")
        if od != i:
            raise IggyError(Status.INVALID_FORMAT, f"frame {i} has offset delta {od}")
        if not (lo or hi):
            fix.append((i, at, frame_end))
        sums.append(mv[at : at + 8])
        at = frame_end
    if at != end:
        raise IggyError(Status.INVALID_MESSAGES_SIZE, f"{end - at} bytes after the last frame")
    h = xxhash.xxh3_64(_V_BATCH_FIELDS.pack(pid, base_offset, base_ts, origin, length, count))
    h.update(b"".join(sums))
    if h.intdigest() != checksum:
        raise IggyError(Status.INVALID_BATCH_CHECKSUM, "batch checksum")
    if not fix:
        return payload[start:end], origin, 0
    out = bytearray(mv[start:end])
    for _i, f_start, f_end in fix:
        _ck, _lo, _hi, od, td, hl, pl, _r = unpack(payload, f_start)
        body = f_start + V_FRAME_SIZE
        new = _frame(mint(), od, td, mv[body : body + pl], mv[body + pl : f_end])
        out[f_start - start : f_end - start] = new
    return bytes(out), origin, 0


def frames_from_messages(messages: Sequence[Message], *, now_us: int, mint: Mint = mint_uuid4
                         ) -> tuple[bytes, int, int]:
    """(frames, batch origin timestamp, common frame size or 0) for messages decoded from a D or
    L send. A message without
    an origin timestamp (D has none) gets ``now_us``; a spread of origin times wider than a u32 of
    microseconds (71 minutes) is clamped, which only a client with a broken clock produces."""
    origins = [m.origin_timestamp or now_us for m in messages]
    base = min(origins)
    parts = []
    for i, (m, origin) in enumerate(zip(messages, origins, strict=True)):
        if not m.payload:
            raise IggyError(Status.EMPTY_MESSAGE_PAYLOAD, f"message {i} has no payload")
        headers = enc_user_headers(m.headers) if m.headers else b""
        parts.append(_frame(m.id or mint(), i, min(origin - base, U32_MAX), m.payload, headers))
    sizes = {len(p) for p in parts}
    return b"".join(parts), base, sizes.pop() if len(sizes) == 1 else 0


def _tiled(positions: Sequence[int], expected: range) -> bool:
    """Whether ``positions`` are ``expected`` (a range from ``frame_positions`` compares at once)."""
    if isinstance(positions, range):
        return positions == expected
    return list(positions) == list(expected)


_FEW = 8  # frames whose checksums are gathered with slices: numpy's fixed cost is more up to here


def vsr_record(partition_id: int, data: bytes | memoryview, positions: Sequence[int], i0: int, i1: int,
               *, base_offset: int, append_us: int, origin_base: int) -> bytes:
    """Frames ``i0..i1-1`` of a stored batch as one V batch record (C.9): a fresh 256-byte header
    whose base offset is the stored batch's, so each frame's own offset delta still gives its
    offset; the batch checksum chains the header fields and the frames' checksums."""
    mv = memoryview(data)
    first, last = positions[i0], positions[i1]
    length = V_BATCH_SIZE + last - first
    count = i1 - i0
    h = xxhash.xxh3_64(_V_BATCH_FIELDS.pack(partition_id, base_offset, append_us, origin_base, length,
                                            count))
    stride = (last - first) // count
    # every frame must be ``stride`` long, not just the first one and the average (60, 50, 70 bytes
    # would pass those two checks and read checksums from inside the frames)
    if (count > _FEW and stride * count == last - first and stride >= V_FRAME_SIZE
            and _tiled(positions[i0 : i1 + 1], range(first, last + 1, stride))):
        h.update(np.frombuffer(data, _frame_dtype(stride), count, offset=first)["ck"].tobytes())
    else:
        h.update(b"".join([mv[p : p + 8] for p in positions[i0:i1]]))
    return b"".join((V_BATCH.pack(partition_id, base_offset, append_us, origin_base, length, h.intdigest(),
                                  count), _V_BATCH_PAD, mv[first:last]))  # one copy of the frames


def legacy_messages(data: bytes | memoryview, positions: Sequence[int], i0: int, i1: int, *,
                    base_offset: int, append_us: int, origin_base: int) -> list[bytes]:
    """Frames ``i0..i1-1`` of a stored batch as L messages (B.5): a 64-byte header with the absolute
    offset, server and origin timestamps and a checksum over the rest, then payload and headers."""
    mv = memoryview(data)
    unpack = V_FRAME.unpack_from
    pack = _L_TAIL.pack
    out: list[bytes] = []
    for i in range(i0, i1):
        at = positions[i]
        _ck, lo, hi, od, td, hl, pl, _r = unpack(data, at)
        tail = pack(lo, hi, base_offset + od, append_us, origin_base + td, hl, pl, 0)
        body = mv[at + V_FRAME_SIZE : positions[i + 1]]
        h = xxhash.xxh3_64(tail)
        h.update(body)
        out.append(_U64.pack(h.intdigest()) + tail)
        out.append(bytes(body))
    return out


assert _L_TAIL.size + 8 == L_HEADER_SIZE


# -- L (apache-iggy 0.8) fast paths: whole batches of equal-size messages, column-wise -----------

_L_INDEX_DTYPE = np.dtype({"names": ["zero", "end", "ts"], "formats": ["<u4", "<u4", "<u8"],
                           "offsets": [0, 4, 8], "itemsize": 16})


@functools.lru_cache(maxsize=256)
def _l_dtype(stride: int) -> np.dtype[Any]:
    """A 64-byte L message header and its body (payload, user headers) as one numpy record."""
    return np.dtype({"names": ["ck", "lo", "hi", "off", "ts", "origin", "hl", "pl", "rsv", "body"],
                     "formats": ["<u8", "<u8", "<u8", "<u8", "<u8", "<u8", "<u4", "<u4", "<u8",
                                 f"V{stride - L_HEADER_SIZE}"],
                     "offsets": [0, 8, 16, 24, 32, 40, 48, 52, 56, 64], "itemsize": stride})


def _v_dtype(stride: int) -> np.dtype[Any]:
    """A 48-byte V frame header and its body as one numpy record."""
    return np.dtype({"names": ["ck", "lo", "hi", "od", "td", "hl", "pl", "rsv", "body"],
                     "formats": ["<u8", "<u8", "<u8", "<u4", "<u4", "<u4", "<u4", "<u8",
                                 f"V{stride - V_FRAME_SIZE}"],
                     "offsets": [0, 8, 16, 24, 28, 32, 36, 40, 48], "itemsize": stride})


def _checksums(buf: bytes, stride: int, count: int) -> np.ndarray[Any, np.dtype[np.uint64]]:
    mv = memoryview(buf)
    return np.fromiter((_xxh3(mv[p + 8 : p + stride]) for p in range(0, stride * count, stride)),
                       np.uint64, count)


def _mint_ids(lo: np.ndarray[Any, Any], hi: np.ndarray[Any, Any]) -> None:
    """Replace every zero id (lo and hi both 0) with a random UUIDv4, in place."""
    zero = (lo == 0) & (hi == 0)
    n = int(zero.sum())
    if not n:
        return
    rnd = np.frombuffer(os.urandom(16 * n), np.uint64).reshape(n, 2)
    hi[zero] = (rnd[:, 1] & ~np.uint64(0xF000)) | np.uint64(0x4000)  # version 4: u128 bits 76-79
    lo[zero] = (rnd[:, 0] & ~np.uint64(0xC << 60)) | np.uint64(0x8 << 60)  # RFC 4122 variant


def _header_layout(block: bytes | memoryview) -> list[int] | None:
    """The positions of every kind byte and length field in a user-header block (B.2), or None
    when the block does not decode. Two blocks of one size with the same bytes at these
    positions decode alike: the TLV walk reads nothing else."""
    try:
        decode_user_headers(bytes(block))
    except IggyError:
        return None
    out: list[int] = []
    p = 0
    while p < len(block):
        out.extend(range(p, p + 5))  # kind u8, length u32
        p += 5 + _U32.unpack_from(block, p + 1)[0]
    return out


def _v_columns(frames: np.ndarray[Any, Any], messages: np.ndarray[Any, Any], count: int, now_us: int) -> int:
    """Fill the id, offset-delta and timestamp-delta columns of V frame headers ``frames`` from
    the L message headers ``messages`` (ids 0 minted, origin timestamps 0 taken as ``now_us``);
    returns the batch's origin timestamp, from which the deltas count."""
    lo, hi = messages["lo"].copy(), messages["hi"].copy()
    _mint_ids(lo, hi)
    origins = messages["origin"].copy()
    origins[origins == 0] = now_us
    base = int(origins.min())
    frames["lo"], frames["hi"] = lo, hi
    frames["od"] = np.arange(count, dtype=np.uint32)
    frames["td"] = np.minimum(origins - np.uint64(base), np.uint64(U32_MAX))
    return base


def legacy_send_frames(payload: bytes, pos: int, count: int, *, now_us: int
                       ) -> tuple[bytes, int, int] | None:
    """(frames to store, batch origin timestamp, common frame size or 0) for an L send (B.5) of
    ``count`` messages with checksum 0 (what apache-iggy 0.8 and bayou's SDK send), converted
    column-wise in numpy: messages of one size and one user-header layout as fixed-size rows,
    any other sizes through index arithmetic (each message's 64-byte header gathered, its body
    copied as one slice), with only the XXH3 of each frame (and, for messages of different
    header layouts, a walk of each header block) left per message. None when the send is
    anything else (a checksum, a field out of range, a block that does not decode), for
    ``decode_legacy_send``, which reports every error with the 0.8 server's code."""
    area = pos + 16 * count
    if count == 0 or area >= len(payload):
        return None
    if count < _FEW:
        return _few_legacy(payload, pos, count, now_us=now_us)
    uniform = _uniform_legacy(payload, pos, count, now_us=now_us)
    return uniform if uniform is not None else _varied_legacy(payload, pos, count, now_us=now_us)


_FEW = 8  # sends of fewer messages are converted one message at a time: numpy's set-up costs more


def _few_legacy(payload: bytes, pos: int, count: int, *, now_us: int) -> tuple[bytes, int, int] | None:
    """``legacy_send_frames`` for a send of a few messages (one, most often), a message at a
    time: the same checks as the column-wise paths, the same frames."""
    area = pos + 16 * count
    area_len = len(payload) - area
    mv = memoryview(payload)
    found: list[tuple[int, int, int, int, int]] = []
    start = 0
    for i in range(count):
        zero, end, stamp = L_INDEX.unpack_from(payload, pos + 16 * i)
        size = end - start
        if zero or stamp or size <= L_HEADER_SIZE or end > area_len:
            return None
        at = area + start
        checksum, lo, hi, _offset, _ts, origin, hl, pl, reserved = L_HEADER.unpack_from(payload, at)
        if (checksum or reserved or L_HEADER_SIZE + pl + hl != size or not 1 <= pl <= MAX_PAYLOAD
                or hl > MAX_USER_HEADERS):
            return None
        body = at + L_HEADER_SIZE
        if hl and not _blocks_decode(payload, [body + pl], [hl]):
            return None
        found.append((lo | hi << 64, origin or now_us, body, pl, hl))
        start = end
    if start != area_len:
        return None
    base = min(f[1] for f in found)
    frames = [_frame(msg_id or mint_uuid4(), i, min(origin - base, U32_MAX), mv[body:body + pl],
                     mv[body + pl:body + pl + hl])
              for i, (msg_id, origin, body, pl, hl) in enumerate(found)]
    size = len(frames[0])
    return b"".join(frames), base, size if all(len(f) == size for f in frames) else 0


def _uniform_legacy(payload: bytes, pos: int, count: int, *, now_us: int
                    ) -> tuple[bytes, int, int] | None:
    """``legacy_send_frames`` for messages that all have the same size, payload and user-header
    sizes. User headers are checked column-wise: the first message's block must decode, and every
    other block must have the same kind bytes and length fields (a keyed SDK send: one header,
    keys of one length)."""
    area = pos + 16 * count
    if count == 0 or area > len(payload) or (len(payload) - area) % count:
        return None
    stride = (len(payload) - area) // count
    if stride <= L_HEADER_SIZE:
        return None
    index = np.frombuffer(payload, _L_INDEX_DTYPE, count, offset=pos)
    if (index["zero"].any() or index["ts"].any()
            or not (index["end"] == np.arange(1, count + 1, dtype=np.uint64) * stride).all()):
        return None
    msgs = np.frombuffer(payload, _l_dtype(stride), count, offset=area)
    hl = int(msgs["hl"][0])
    pl = stride - L_HEADER_SIZE - hl
    if (msgs["ck"].any() or msgs["rsv"].any() or not (msgs["hl"] == hl).all()
            or not (msgs["pl"] == pl).all() or not 1 <= pl <= MAX_PAYLOAD or hl > MAX_USER_HEADERS):
        return None
    if hl:
        first = area + L_HEADER_SIZE + pl
        layout = _header_layout(memoryview(payload)[first:first + hl])
        if layout is None:
            return None
        rows = np.frombuffer(payload, np.uint8, count * stride, offset=area).reshape(count, stride)
        fields = rows[:, L_HEADER_SIZE + pl + np.array(layout, dtype=np.intp)]
        if not (fields == fields[0]).all():
            return None
    vstride = V_FRAME_SIZE + pl + hl
    out = np.zeros(count, _v_dtype(vstride))
    base = _v_columns(out, msgs, count, now_us)
    out["hl"] = hl
    out["pl"] = pl
    out["body"] = msgs["body"]
    frames = out.tobytes()
    out["ck"] = _checksums(frames, vstride, count)
    return out.tobytes(), base, vstride


_L_HEAD_DTYPE = np.dtype({"names": ["ck", "lo", "hi", "off", "ts", "origin", "hl", "pl", "rsv"],
                          "formats": ["<u8", "<u8", "<u8", "<u8", "<u8", "<u8", "<u4", "<u4", "<u8"],
                          "offsets": [0, 8, 16, 24, 32, 40, 48, 52, 56], "itemsize": L_HEADER_SIZE})
_V_HEAD_DTYPE = np.dtype({"names": ["ck", "lo", "hi", "od", "td", "hl", "pl", "rsv"],
                          "formats": ["<u8", "<u8", "<u8", "<u4", "<u4", "<u4", "<u4", "<u8"],
                          "offsets": [0, 8, 16, 24, 28, 32, 36, 40], "itemsize": V_FRAME_SIZE})
_L_HEAD_SPAN = np.arange(L_HEADER_SIZE, dtype=np.int64)
_V_HEAD_SPAN = np.arange(V_FRAME_SIZE, dtype=np.int64)
_CK_SPAN = np.arange(8, dtype=np.int64)


def _blocks_decode(payload: bytes, starts: list[int], sizes: list[int]) -> bool:
    """Whether every user-header block ``payload[start:start + size]`` decodes as
    ``decode_user_headers`` reads it (pairs of kind u8 non-zero, length u32 1..MAX_FIELD, bytes),
    without building the headers."""
    for q, size in zip(starts, sizes, strict=True):
        end = q + size
        while q < end:
            for _half in (0, 1):  # the key, then its value
                if end - q < 5 or payload[q] == 0:
                    return False
                length = payload[q + 1] | payload[q + 2] << 8 | payload[q + 3] << 16 | payload[q + 4] << 24
                if not 1 <= length <= MAX_FIELD or length > end - q - 5:
                    return False
                q += 5 + length
    return True


def _varied_legacy(payload: bytes, pos: int, count: int, *, now_us: int
                   ) -> tuple[bytes, int, int] | None:
    """``legacy_send_frames`` for messages of any sizes: positions from the index table, each
    message's header gathered into one array, the bodies (payload and user headers, the same
    bytes in both layouts) copied to their frames a slice each."""
    area = pos + 16 * count
    index = np.frombuffer(payload, _L_INDEX_DTYPE, count, offset=pos)
    if index["zero"].any() or index["ts"].any():
        return None
    ends = index["end"].astype(np.int64)
    starts = np.empty(count, np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1]
    sizes = ends - starts
    area_len = len(payload) - area
    if int(ends[-1]) != area_len or (sizes <= L_HEADER_SIZE).any():
        return None
    raw = np.frombuffer(payload, np.uint8)
    h = raw[(area + starts)[:, None] + _L_HEAD_SPAN].view(_L_HEAD_DTYPE).reshape(count)
    hl = h["hl"].astype(np.int64)
    pl = h["pl"].astype(np.int64)
    if (h["ck"].any() or h["rsv"].any() or not (L_HEADER_SIZE + pl + hl == sizes).all()
            or (pl < 1).any() or (pl > MAX_PAYLOAD).any() or (hl > MAX_USER_HEADERS).any()):
        return None
    with_headers = np.flatnonzero(hl)
    if len(with_headers) and not _blocks_decode(
            payload, (area + starts + L_HEADER_SIZE + pl)[with_headers].tolist(), hl[with_headers].tolist()):
        return None
    out_sizes = sizes - (L_HEADER_SIZE - V_FRAME_SIZE)
    out_starts = np.cumsum(out_sizes) - out_sizes
    total = int(out_sizes.sum())
    buf = bytearray(total)
    src = memoryview(payload)
    for a, o, n in zip((area + starts + L_HEADER_SIZE).tolist(), (out_starts + V_FRAME_SIZE).tolist(),
                       (sizes - L_HEADER_SIZE).tolist(), strict=True):
        buf[o:o + n] = src[a:a + n]  # the body: payload and user headers, as they came
    out = np.frombuffer(buf, np.uint8)
    heads_out = out_starts[:, None] + _V_HEAD_SPAN
    v = np.zeros(count, _V_HEAD_DTYPE)
    base = _v_columns(v, h, count, now_us)
    v["hl"], v["pl"] = hl, pl
    out[heads_out] = v.view(np.uint8).reshape(count, V_FRAME_SIZE)
    mv = memoryview(buf)
    checksums = np.fromiter((_xxh3(mv[a + 8 : a + n]) for a, n in zip(out_starts.tolist(), out_sizes.tolist(),
                                                                       strict=True)), np.uint64, count)
    out[out_starts[:, None] + _CK_SPAN] = checksums.view(np.uint8).reshape(count, 8)
    first = int(out_sizes[0])
    return bytes(buf), base, first if (out_sizes == first).all() else 0


def legacy_messages_uniform(data: bytes | memoryview, first: int, stride: int, i0: int, i1: int, *,
                            base_offset: int, append_us: int, origin_base: int) -> bytes:
    """Stored frames ``i0..i1-1`` (all ``stride`` bytes, the first at ``first``) as L messages,
    built column-wise: the same bytes ``legacy_messages`` produces."""
    count = i1 - i0
    frames = np.frombuffer(data, _v_dtype(stride), count, offset=first + i0 * stride)
    lstride = stride - V_FRAME_SIZE + L_HEADER_SIZE
    out = np.zeros(count, _l_dtype(lstride))
    out["lo"], out["hi"] = frames["lo"], frames["hi"]
    out["off"] = frames["od"].astype(np.uint64) + np.uint64(base_offset)
    out["ts"] = append_us
    out["origin"] = frames["td"].astype(np.uint64) + np.uint64(origin_base)
    out["hl"], out["pl"] = frames["hl"], frames["pl"]
    out["body"] = frames["body"]
    out["ck"] = _checksums(out.tobytes(), lstride, count)
    return out.tobytes()


def id_run(frames: bytes | memoryview, count: int, stride: int) -> tuple[int, int] | None:
    """(producer, first sequence) when the ``count`` stored frames of ``stride`` bytes carry the ids
    ``producer << 64 | first + i`` (one producer's consecutive sequences: an idempotent SDK send),
    found column-wise; None otherwise (mixed sizes, other ids)."""
    if not stride or count < 1:
        return None
    cols = np.frombuffer(frames, _v_dtype(stride), count)
    lo, hi = cols["lo"], cols["hi"]
    first, producer = int(lo[0]), int(hi[0])
    if first + count - 1 > _MASK64 or not (hi == hi[0]).all():
        return None
    if not (lo == np.arange(first, first + count, dtype=np.uint64)).all():
        return None
    return producer, first


def select_frames(frames: bytes | memoryview, positions: Sequence[int], keep: Sequence[bool]
                  ) -> tuple[bytes, int]:
    """The frames ``keep`` marks, of stored frames starting at ``positions`` (plus the end), as a
    batch of their own: offset deltas renumbered 0.. in order and checksums recomputed (they cover
    the delta); ids, timestamp deltas, payloads and headers unchanged. Returns (frames, common frame
    size or 0). Used when de-duplication drops some messages of a send."""
    mv = memoryview(frames)
    out: list[bytes] = []
    for i, k in enumerate(keep):
        if not k:
            continue
        frame = bytearray(mv[positions[i] : positions[i + 1]])
        _U32.pack_into(frame, 24, len(out))
        _U64.pack_into(frame, 0, _xxh3(memoryview(frame)[8:]))
        out.append(bytes(frame))
    sizes = {len(f) for f in out}
    return b"".join(out), sizes.pop() if len(sizes) == 1 else 0
