"""Per-frame decompression, detected by magic bytes (cursus.md section 12; bayou decision 4).

The real broker applies one configured codec to every inbound frame. bayou instead looks at the
first bytes of each frame, so compressed batches and plain text commands share a connection with
no configuration. No text command or batch starts with these magics (a text command starts with a
letter, an envelope with a small u16, a batch with ``BA 7C``). Replies are never compressed.

Every codec is bounded: nothing here produces more than ``limit`` bytes, and a frame that would is
refused before the output is allocated (a compression bomb gets an error reply, not an
out-of-memory).
"""

from __future__ import annotations

import struct

import cramjam

from bayou.errors import CorruptRecord, UnsupportedCompression
from bayou.protocols.cursus.framing import MAX_FRAME, CursusError
from bayou.protocols.cursus.replies import Quoted, error
from bayou.records.compression import Compression, compress, decompress

GZIP_MAGIC = b"\x1f\x8b"
XERIAL_MAGIC = b"\x82SNAPPY\x00"
LZ4_MAGIC = b"\x04\x22\x4d\x18"

XERIAL_HEADER = struct.Struct(">8sII")  # magic, version, compatible version
XERIAL_VERSION = 1
XERIAL_BLOCK = 32 * 1024  # the block size xerial's SnappyOutputStream uses
_U32 = struct.Struct(">I")


def _failed(reason: str) -> CursusError:
    return CursusError(error("decode_failed", ("reason", Quoted(reason))))


def _unsnappy_xerial(body: bytes, limit: int) -> bytes:
    """Two passes: check every block's length and declared size, then inflate into one buffer of
    exactly the announced total (snappy refuses a block whose real size differs from its preamble)."""
    if len(body) < XERIAL_HEADER.size:
        raise _failed("truncated snappy header")
    view = memoryview(body)
    blocks: list[tuple[int, int, int]] = []  # start, end, decompressed size
    total = 0
    pos = XERIAL_HEADER.size
    n = len(body)
    while pos < n:
        if n - pos < 4:
            raise _failed("truncated snappy block length")
        (blen,) = _U32.unpack_from(body, pos)
        pos += 4
        if blen > n - pos:
            raise _failed("snappy block past the end of the frame")
        try:
            size = int(cramjam.snappy.decompress_raw_len(view[pos : pos + blen]))
        except cramjam.DecompressionError as exc:
            raise _failed(f"snappy: {exc}") from None
        total += size
        if total > limit:
            raise _failed("decompressed size exceeds limit")
        blocks.append((pos, pos + blen, size))
        pos += blen
    out = bytearray(total)
    at = 0
    for start, end, size in blocks:
        try:
            got = int(cramjam.snappy.decompress_raw_into(view[start:end], memoryview(out)[at : at + size]))
        except cramjam.DecompressionError as exc:
            raise _failed(f"snappy: {exc}") from None
        if got != size:
            raise _failed("snappy block size mismatch")
        at += size
    return bytes(out)


def maybe_decompress(body: bytes, limit: int = MAX_FRAME) -> bytes:
    """The body itself, or its decompressed content when it starts with a codec's magic."""
    if body.startswith(GZIP_MAGIC):
        codec = Compression.GZIP
    elif body.startswith(LZ4_MAGIC):
        codec = Compression.LZ4
    elif body.startswith(XERIAL_MAGIC):
        return _unsnappy_xerial(body, limit)
    else:
        return body
    try:
        return decompress(codec, body, limit)
    except (CorruptRecord, UnsupportedCompression) as exc:
        raise _failed(exc.message) from None
    except (RuntimeError, ValueError, OverflowError) as exc:  # lz4 reports some frame errors as these
        raise _failed(f"{codec.name.lower()}: {exc}") from None


def compress_gzip(data: bytes) -> bytes:
    return compress(Compression.GZIP, data)


def compress_lz4(data: bytes) -> bytes:
    return compress(Compression.LZ4, data)


def compress_snappy_xerial(data: bytes, block_size: int = XERIAL_BLOCK) -> bytes:
    """xerial framing: magic, version 1, compatible 1, then u32-length-prefixed raw snappy blocks."""
    out = bytearray(XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_VERSION))
    view = memoryview(data)
    for at in range(0, len(data), block_size):
        block = compress(Compression.SNAPPY, bytes(view[at : at + block_size]))
        out += _U32.pack(len(block))
        out += block
    return bytes(out)
