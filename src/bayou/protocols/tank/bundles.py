"""Bundles, messages and chunks (tank.md 3).

A bundle is what a producer sends and what the broker appends to the log byte for byte; a chunk
is a run of ``varint length + bundle`` records, which is also the format of a segment file.

The broker side needs only ``decode_bundle_header``: it reads the flags, the count and a sparse
bundle's first/last seq, never the message set (tank.md 4.2, 12.3), and refuses what TANK 4.0
would store blindly or assert on (count 0, flag bit 7, codecs other than 0/1). Every refusal is a
``BundleError``, which the server answers with produce error 10 (checklist item 7).

Clients and converters use ``decode_bundle`` / ``iter_chunk`` / ``decode_chunk``; producers use
``encode_bundle``, which writes exactly what the 4.0 client library writes (``client_api_produce``),
Snappy rule included.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import cramjam

from bayou.errors import CorruptRecord
from bayou.protocols.tank.codes import BundleError, TankError
from bayou.protocols.tank.wire import (
    U64,
    U64_MAX,
    Buffer,
    decode_varint,
    enc_bytes8,
    encode_varint,
)
from bayou.records import tank as stored

FLAG_CODEC = 0x03
FLAG_COUNT_SHIFT = 2
FLAG_COUNT = 0x0F
FLAG_SPARSE = 0x40
FLAG_EXTRA = 0x80  # "extra flags byte follows": reserved, implemented by neither 4.0 side

MSG_HAVE_KEY = 0x01
MSG_USE_LAST_TS = 0x02
MSG_SEQ_PREV_PLUS_ONE = 0x04

COMPRESS_OVER_COUNT = 512
COMPRESS_OVER_BYTES = 1024
MIN_MESSAGE_SIZE = 2  # flags byte + content length varint
DEFAULT_MAX_UNCOMPRESSED = 64 * 1024 * 1024


class Codec(enum.IntEnum):
    NONE = 0
    SNAPPY = 1  # the raw block format: varint uncompressed length + Snappy data (tank.md 3.3)


TankMessage = stored.TankMessage


@dataclass(frozen=True, slots=True)
class BundleHeader:
    """What the broker reads of a bundle (tank.md 3.1). ``first_seq``/``last_seq`` are set only
    for a SPARSE bundle; ``header_size`` is where the message set starts."""

    codec: int
    count: int
    sparse: bool
    first_seq: int | None
    last_seq: int | None
    header_size: int

    def seqs(self, base_seq: int) -> tuple[int, int]:
        """(first, last) seq of the bundle's messages: the header's for a sparse bundle, otherwise
        ``base_seq .. base_seq + count - 1`` (tank.md 3.4)."""
        if self.first_seq is not None and self.last_seq is not None:
            return self.first_seq, self.last_seq
        return base_seq, base_seq + self.count - 1


def decode_bundle_header(bundle: Buffer, pos: int = 0, end: int | None = None) -> BundleHeader:
    """Parse the header of ``bundle[pos:end]`` without decoding its message set.

    Raises ``BundleError`` for an empty or truncated header, flag bit 7, a codec other than 0/1,
    count 0, a sparse range past 2^64-1, or a message set too short for its count (every message
    takes at least 2 bytes; for Snappy the uncompressed length is read from the block's preamble).
    The parsing itself is the storage layer's (``bayou.records.tank``), which the broker uses too.
    """
    try:
        h = stored.parse_bundle_header(memoryview(bundle)[pos:end])
    except CorruptRecord as exc:
        raise BundleError(f"bundle header: {exc}") from None
    return BundleHeader(h.codec, h.count, h.sparse, h.first_seq if h.sparse else None,
                        h.last_seq if h.sparse else None, h.size)


def decode_bundle(bundle: Buffer, base_seq: int, *,
                  max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> list[TankMessage]:
    """Every message of one bundle with its seq (tank.md 3.2, 3.4).

    ``base_seq`` is the first seq of a non-sparse bundle (a sparse one carries its own). The
    message set must hold exactly ``count`` messages and nothing else; anything malformed, a
    Snappy block that does not decode or would inflate past ``max_uncompressed``, or a seq past
    2^64-1 raises ``BundleError``. A first message that reuses the previous timestamp gets 0, as
    in TANK's client. Unknown message flag bits are ignored, as in TANK's client. The decoder is
    the storage layer's (``bayou.records.tank``).
    """
    try:
        return stored.decode_bundle(bundle, base_seq, max_decompressed=max_uncompressed)
    except CorruptRecord as exc:
        raise BundleError(f"message set: {exc}") from None


def client_would_compress(messages: Sequence[TankMessage]) -> bool:
    """The 4.0 client rule (tank.md 3.3, ``choose_compression_codec``): more than 512 messages, or
    a running total of key + content bytes over 1024."""
    if len(messages) > COMPRESS_OVER_COUNT:
        return True
    total = 0
    for m in messages:
        total += len(m.value) + (len(m.key) if m.key is not None else 0)
        if total > COMPRESS_OVER_BYTES:
            return True
    return False


def encode_bundle(messages: Sequence[TankMessage], *, compress: bool | None = None,
                  sparse: bool = False) -> bytes:
    """One bundle, byte for byte what the 4.0 client library builds.

    ``compress`` None applies the client's rule (``client_would_compress``). Non-sparse bundles
    ignore ``seq``; a sparse bundle (what ``produce -S`` sends) states the messages' seqs, which
    must increase strictly. A message whose timestamp equals the previous one's reuses it
    (UseLastSpecifiedTS). One deliberate difference: the client treats an empty key as no key,
    while here only ``key is None`` means no key, so that decoding gives back what was encoded.
    """
    count = len(messages)
    if count == 0:
        raise ValueError("a bundle holds at least one message")
    if compress is None:
        compress = client_would_compress(messages)
    codec = Codec.SNAPPY if compress else Codec.NONE
    flags = int(codec) | (FLAG_SPARSE if sparse else 0)
    head = bytearray()
    if count < 16:
        head.append(flags | (count << FLAG_COUNT_SHIFT))
    else:
        head.append(flags)
        head += encode_varint(count)
    if sparse:
        first, last_seq = messages[0].seq, messages[-1].seq
        for a, b in itertools.pairwise(messages):
            if b.seq <= a.seq:
                raise ValueError(f"sparse seqs must increase: {a.seq} then {b.seq}")
        head += U64.pack(first)
        if count != 1:
            head += encode_varint(last_seq - first - 1)
    body = bytearray()
    last = count - 1
    for i, m in enumerate(messages):
        mflags = MSG_HAVE_KEY if m.key is not None else 0
        reuse_ts = i > 0 and m.timestamp == messages[i - 1].timestamp
        if reuse_ts:
            mflags |= MSG_USE_LAST_TS
        delta = 0
        if sparse and 0 < i < last:
            delta = m.seq - messages[i - 1].seq - 1
            if delta == 0:
                mflags |= MSG_SEQ_PREV_PLUS_ONE
        body.append(mflags)
        if delta:
            body += encode_varint(delta)
        if not reuse_ts:
            body += U64.pack(m.timestamp)
        if m.key is not None:
            body += enc_bytes8(m.key)
        body += encode_varint(len(m.value))
        body += m.value
    if codec == Codec.SNAPPY:
        return bytes(head) + bytes(cramjam.snappy.compress_raw(bytes(body)))
    return bytes(head + body)


# -- chunks (tank.md 3.6) -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChunkBundle:
    """One whole bundle of a chunk: ``chunk[offset:end]`` is its record (varint length + bundle)."""

    offset: int
    end: int
    header: BundleHeader
    first_seq: int
    last_seq: int
    bundle: bytes


def encode_chunk_record(bundle: bytes) -> bytes:
    """``varint(len) + bundle``: a chunk record, and exactly what a segment file holds."""
    return encode_varint(len(bundle)) + bundle


def _record_length(chunk: Buffer, pos: int, n: int) -> tuple[int, int] | None:
    """(bundle length, bundle start) of the record at ``pos``; None when the chunk ends inside
    the varint."""
    for i in range(5):
        if pos + i >= n:
            return None
        if chunk[pos + i] < 0x80:
            break
    return decode_varint(chunk, pos, n)


def iter_chunk(chunk: Buffer, base_seq: int, *, sparse_first: bool) -> Iterator[ChunkBundle]:
    """The whole bundles of one partition's chunk, with their seqs (tank.md 3.4, 3.6).

    ``base_seq`` is the header's base seq; ``sparse_first`` says the entry was flagged 0xfe, so
    there is no base and the first bundle must be sparse. Each bundle after the first continues at
    the previous one's last seq + 1, unless it is sparse. A truncated last record (cut varint or
    cut bundle) ends the iteration quietly, as a client must allow; compare the last ``end`` with
    ``len(chunk)`` to see it. A malformed whole bundle raises ``BundleError``.
    """
    n = len(chunk)
    pos = 0
    next_seq = base_seq
    while pos < n:
        try:
            found = _record_length(chunk, pos, n)
        except TankError as exc:
            raise BundleError(f"chunk record length at {pos}: {exc.message}") from None
        if found is None:
            return
        length, start = found
        end = start + length
        if end > n:
            return
        header = decode_bundle_header(chunk, start, end)
        if header.sparse:
            first, last = header.seqs(0)
        elif pos == 0 and sparse_first:
            raise BundleError("chunk flagged sparse (0xfe) but its first bundle is not")
        else:
            first, last = next_seq, next_seq + header.count - 1
        if last > U64_MAX:
            raise BundleError("chunk seq past 2^64-1")
        yield ChunkBundle(pos, end, header, first, last, bytes(chunk[start:end]))
        next_seq = last + 1
        pos = end


def decode_chunk(chunk: Buffer, base_seq: int, *, sparse_first: bool,
                 max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> list[TankMessage]:
    """Every message of every whole bundle in a chunk, in order."""
    out: list[TankMessage] = []
    for b in iter_chunk(chunk, base_seq, sparse_first=sparse_first):
        out += decode_bundle(b.bundle, b.first_seq, max_uncompressed=max_uncompressed)
    return out
