"""Compression codecs for the records section of a batch.

The codec ids are Kafka's (attributes bits 0-2), so a batch's compression is self-describing.
Decompression is always bounded: a batch that inflates past the caller's limit is a CorruptRecord,
not an out-of-memory.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from bayou.errors import CorruptRecord, UnsupportedCompression


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str) -> Compression:
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise UnsupportedCompression(f"unknown compression codec {name!r}") from None


DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024


def compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec is Compression.LZ4:
        return bytes(lz4.frame.compress(data))
    if codec is Compression.ZSTD:
        return bytes(zstandard.ZstdCompressor(level=3).compress(data))
    raise UnsupportedCompression(f"unsupported codec {codec}")


def _gunzip_bounded(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(47)  # auto-detect gzip or zlib header
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as exc:
        raise CorruptRecord(f"gzip: {exc}") from None
    if len(out) > limit:
        raise CorruptRecord("decompressed size exceeds limit")
    if not d.eof:
        raise CorruptRecord("truncated gzip stream")
    return out


# snappy-java's stream framing (kafka-python, aiokafka and the Java client send it; librdkafka sends
# one raw block): this magic, two i32 versions, then blocks of i32 length + raw snappy. Kafka's
# brokers read both, so bayou does too, and stores the batch as it came.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16
_BLOCK_LEN = struct.Struct(">i")


def _snappy_block(data: bytes | memoryview, limit: int) -> bytes:
    try:
        n = int(cramjam.snappy.decompress_raw_len(data))
        if n > limit:
            raise CorruptRecord("decompressed size exceeds limit")
        return bytes(cramjam.snappy.decompress_raw(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecord(f"snappy: {exc}") from None


def _unxerial(data: bytes, limit: int) -> bytes:
    if len(data) < _XERIAL_HEADER:
        raise CorruptRecord("truncated xerial snappy header")
    out = bytearray()
    view = memoryview(data)
    pos = _XERIAL_HEADER
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecord("truncated xerial snappy block length")
        (size,) = _BLOCK_LEN.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecord("xerial snappy block past the end")
        out += _snappy_block(view[pos:pos + size], limit - len(out))
        pos += size
    return bytes(out)


def decompress(codec: int, data: bytes, limit: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Inflate ``data``; never produce more than ``limit`` bytes."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return _gunzip_bounded(data, limit)
    if codec == Compression.SNAPPY:
        if data[:len(XERIAL_MAGIC)] == XERIAL_MAGIC:
            return _unxerial(data, limit)
        return _snappy_block(data, limit)
    if codec == Compression.LZ4:
        try:
            dec = lz4.frame.LZ4FrameDecompressor()
            out = bytes(dec.decompress(data, max_length=limit + 1))
        except RuntimeError as exc:
            raise CorruptRecord(f"lz4: {exc}") from None
        if len(out) <= limit and not dec.eof:
            raise CorruptRecord("truncated lz4 frame")
    elif codec == Compression.ZSTD:
        try:
            with zstandard.ZstdDecompressor().stream_reader(data) as reader:
                out = reader.read(limit + 1)
        except zstandard.ZstdError as exc:
            raise CorruptRecord(f"zstd: {exc}") from None
    else:
        raise UnsupportedCompression(f"unsupported codec id {codec}")
    if len(out) > limit:
        raise CorruptRecord("decompressed size exceeds limit")
    return out
