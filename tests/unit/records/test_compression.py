"""Compression codecs: round trip, codec names, bounded decompression, garbage input."""

from __future__ import annotations

import os
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from bayou.errors import CorruptRecord, UnsupportedCompression
from bayou.records.compression import DEFAULT_MAX_DECOMPRESSED, Compression, compress, decompress

CODECS = [c for c in Compression if c is not Compression.NONE]
LIMIT = 64 * 1024


def ids(c: Compression) -> str:
    return c.name


def test_codec_ids_are_kafkas() -> None:
    assert [int(c) for c in Compression] == [0, 1, 2, 3, 4]
    assert [c.name for c in Compression] == ["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD"]


@pytest.mark.parametrize(("text", "codec"), [("gzip", Compression.GZIP), (" ZSTD ", Compression.ZSTD),
                                             ("Snappy", Compression.SNAPPY), ("lz4", Compression.LZ4),
                                             ("none", Compression.NONE)])
def test_parse(text: str, codec: Compression) -> None:
    assert Compression.parse(text) is codec


@pytest.mark.parametrize("text", ["", "brotli", "gzip2", "1"])
def test_parse_unknown(text: str) -> None:
    with pytest.raises(UnsupportedCompression):
        Compression.parse(text)


@pytest.mark.parametrize("codec", list(Compression), ids=ids)
@pytest.mark.parametrize("data", [b"", b"x", b"hello world " * 1000, os.urandom(5000)],
                         ids=["empty", "one", "repetitive", "random"])
def test_round_trip(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_none_is_identity() -> None:
    assert compress(Compression.NONE, b"abc") == b"abc"
    assert decompress(Compression.NONE, b"abc", limit=1) == b"abc"  # nothing to inflate, nothing to bound


@pytest.mark.parametrize("codec", CODECS, ids=ids)
def test_exactly_at_limit_is_fine(codec: Compression) -> None:
    data = b"\x00" * LIMIT
    assert decompress(codec, compress(codec, data), LIMIT) == data


@pytest.mark.parametrize("codec", CODECS, ids=ids)
def test_one_byte_over_limit_is_corrupt(codec: Compression) -> None:
    with pytest.raises(CorruptRecord):
        decompress(codec, compress(codec, b"\x00" * (LIMIT + 1)), LIMIT)


@pytest.mark.parametrize("codec", CODECS, ids=ids)
def test_bomb_is_corrupt(codec: Compression) -> None:
    bomb = compress(codec, b"\x00" * (32 * 1024 * 1024))
    assert len(bomb) < 2 * 1024 * 1024
    with pytest.raises(CorruptRecord):
        decompress(codec, bomb, LIMIT)


def test_gzip_bomb_via_zlib_header_is_corrupt() -> None:
    # the gzip decoder auto-detects zlib framing too; the bound applies to both
    bomb = zlib.compress(b"\x00" * (8 * 1024 * 1024), 9)
    assert decompress(Compression.GZIP, zlib.compress(b"abc")) == b"abc"
    with pytest.raises(CorruptRecord):
        decompress(Compression.GZIP, bomb, LIMIT)


def test_zstd_bomb_without_content_size_is_corrupt() -> None:
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    chunks = cctx.compressobj()
    bomb = chunks.compress(b"\x00" * (8 * 1024 * 1024)) + chunks.flush()
    with pytest.raises(CorruptRecord):
        decompress(Compression.ZSTD, bomb, LIMIT)


def test_lz4_bomb_without_content_size_is_corrupt() -> None:
    bomb = lz4.frame.compress(b"\x00" * (8 * 1024 * 1024), store_size=False)
    with pytest.raises(CorruptRecord):
        decompress(Compression.LZ4, bomb, LIMIT)


def test_snappy_length_preamble_is_checked_before_inflating() -> None:
    # A raw snappy stream starts with its uncompressed length; one claiming 2 GiB is refused outright.
    claims_huge = b"\x80\x80\x80\x80\x08" + b"\x00"
    with pytest.raises(CorruptRecord):
        decompress(Compression.SNAPPY, claims_huge, LIMIT)
    real = bytes(cramjam.snappy.compress_raw(b"\x00" * (LIMIT + 10)))
    with pytest.raises(CorruptRecord):
        decompress(Compression.SNAPPY, real, LIMIT)


def test_default_limit() -> None:
    assert DEFAULT_MAX_DECOMPRESSED == 64 * 1024 * 1024


@pytest.mark.parametrize("codec", CODECS, ids=ids)
@pytest.mark.parametrize("garbage", [b"\xff", b"\x00" * 3, b"definitely not compressed data" * 4,
                                     bytes(range(256))], ids=["ff", "zeros", "text", "range"])
def test_garbage_is_corrupt(codec: Compression, garbage: bytes) -> None:
    try:
        out = decompress(codec, garbage, LIMIT)
    except CorruptRecord:
        return
    # Some decoders legitimately accept short inputs (e.g. snappy "\x00" is an empty stream);
    # whatever they accept stays within the bound.
    assert len(out) <= LIMIT


@pytest.mark.parametrize("codec", CODECS, ids=ids)
def test_every_flipped_byte_is_corrupt_or_bounded(codec: Compression) -> None:
    good = compress(codec, os.urandom(200) + b"abc" * 200)
    for i in range(len(good)):
        buf = bytearray(good)
        buf[i] ^= 0x5A
        try:
            out = decompress(codec, bytes(buf), 4096)
        except CorruptRecord:
            continue
        assert len(out) <= 4096


@pytest.mark.parametrize("codec", CODECS, ids=ids)
def test_every_truncation_is_corrupt_or_short(codec: Compression) -> None:
    # Streaming decoders may hand back a prefix of the data for a cut stream; the batch parser then
    # fails on the missing records. They must never raise anything but CorruptRecord.
    data = os.urandom(100) + b"xyz" * 300
    good = compress(codec, data)
    for n in range(len(good)):
        try:
            out = decompress(codec, good[:n], 4096)
        except CorruptRecord:
            continue
        assert len(out) < len(data) or out == data


@pytest.mark.parametrize("codec", [5, 6, 7, 255])
def test_unknown_codec_id(codec: int) -> None:
    with pytest.raises(UnsupportedCompression):
        decompress(codec, b"abc")


def test_gzip_stream_without_its_trailer_is_corrupt() -> None:
    good = compress(Compression.GZIP, b"hello world " * 100)
    with pytest.raises(CorruptRecord):
        decompress(Compression.GZIP, good[:-8])


def test_truncated_lz4_frame_is_corrupt() -> None:
    good = compress(Compression.LZ4, bytes(range(256)) * 100)
    with pytest.raises(CorruptRecord):
        decompress(Compression.LZ4, good[: len(good) // 2])
