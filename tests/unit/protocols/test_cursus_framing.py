"""Cursus frames and per-frame decompression, without sockets (cursus.md 1 and 12)."""

from __future__ import annotations

import json
import struct
import tracemalloc
import zlib
from pathlib import Path

import cramjam
import lz4.frame
import pytest

from bayou.protocols.cursus.compression import (
    XERIAL_MAGIC,
    compress_gzip,
    compress_lz4,
    compress_snappy_xerial,
    maybe_decompress,
)
from bayou.protocols.cursus.framing import KEEPALIVE, MAX_FRAME, CursusError, FrameReader, encode_frame

VECTORS = Path(__file__).parents[2] / "conformance" / "vectors" / "cursus"
BODIES = [b"", b"LIST", b"\x00\x00HELP", b"\xba\x7c" + bytes(range(256)) * 3, b"x" * 70_000]


def _vector_frames() -> list[bytes]:
    return [bytes.fromhex(json.loads(p.read_text())["request_hex"]) for p in sorted(VECTORS.glob("*.json"))]


def _feed_all(reader: FrameReader, data: bytes, step: int) -> list[bytes]:
    out: list[bytes] = []
    for i in range(0, len(data), step):
        out += reader.feed(data[i : i + step])
    return out


# -- framing ----------------------------------------------------------------------------------


def test_constants() -> None:
    assert MAX_FRAME == 64 * 1024 * 1024
    assert KEEPALIVE == b"\x00\x00\x00\x00" == encode_frame(b"")


def test_encode_frame_exact_bytes() -> None:
    assert encode_frame(b"LIST") == b"\x00\x00\x00\x04LIST"
    assert encode_frame(b"x" * 300)[:4] == b"\x00\x00\x01\x2c"


@pytest.mark.parametrize("step", [1, 3, 4, 5, 97, 1 << 20])
def test_round_trip_any_chunking(step: int) -> None:
    stream = b"".join(encode_frame(b) for b in BODIES)
    r = FrameReader()
    assert _feed_all(r, stream, step) == BODIES
    assert r.buffered == 0


def test_vectors_whole_byte_by_byte_and_concatenated() -> None:
    frames = _vector_frames()
    assert len(frames) == 25
    for frame in frames:
        body = frame[4:]
        assert FrameReader().feed(frame) == [body]
        r = FrameReader()
        got: list[bytes] = []
        for i in range(len(frame)):
            got += r.feed(frame[i : i + 1])
            if i < len(frame) - 1:
                assert got == []  # every proper prefix is "need more"
        assert got == [body]
    stream = b"".join(frames)
    assert FrameReader().feed(stream) == [f[4:] for f in frames]
    assert _feed_all(FrameReader(), stream, 1) == [f[4:] for f in frames]


def test_trailing_partial_frame_is_kept() -> None:
    r = FrameReader()
    first, second = encode_frame(b"HELP"), encode_frame(b"LIST")
    assert r.feed(first + second[:6]) == [b"HELP"]
    assert r.buffered == 6
    assert r.feed(second[6:] + second[:2]) == [b"LIST"]
    assert r.buffered == 2
    assert r.feed(second[2:]) == [b"LIST"]
    assert r.buffered == 0


def test_keepalive_is_an_empty_frame() -> None:
    assert FrameReader().feed(KEEPALIVE * 2) == [b"", b""]


def test_max_frame_is_accepted() -> None:
    r = FrameReader(max_frame=16)
    assert r.feed(encode_frame(b"a" * 16)) == [b"a" * 16]


def test_oversized_length_closes_without_reply() -> None:
    r = FrameReader(max_frame=16)
    with pytest.raises(CursusError) as ei:
        r.feed(struct.pack(">I", 17))
    assert ei.value.reply is None and ei.value.close
    assert r.overflowed and r.buffered == 0


def test_frames_before_the_oversized_one_come_first() -> None:
    r = FrameReader(max_frame=16)
    data = encode_frame(b"HELP") + struct.pack(">I", 1 << 31) + b"junk" * 100
    assert r.feed(data) == [b"HELP"]
    assert r.overflowed and r.buffered == 0
    with pytest.raises(CursusError):
        r.feed(b"")


def test_oversized_length_byte_by_byte() -> None:
    r = FrameReader()
    header = struct.pack(">I", MAX_FRAME + 1)
    assert r.feed(header[:3]) == []
    with pytest.raises(CursusError):
        r.feed(header[3:])


def test_never_buffers_more_than_one_frame() -> None:
    r = FrameReader(max_frame=1000)
    frame = encode_frame(b"z" * 1000)
    for i in range(0, 2 * len(frame), 100):
        r.feed((frame * 2)[i : i + 100])
        assert r.buffered <= 4 + 1000


# -- compression ------------------------------------------------------------------------------

PAYLOAD = b"\xba\x7c\x00\x06events" + b"compress me " * 5000


@pytest.mark.parametrize("compress", [compress_gzip, compress_lz4, compress_snappy_xerial])
def test_compression_round_trip(compress: object) -> None:
    assert callable(compress)
    packed = compress(PAYLOAD)
    assert packed != PAYLOAD
    assert maybe_decompress(packed) == PAYLOAD
    assert maybe_decompress(compress(b"")) == b""


def test_magics() -> None:
    assert compress_gzip(b"x")[:2] == b"\x1f\x8b"
    assert compress_lz4(b"x")[:4] == b"\x04\x22\x4d\x18"
    xerial = compress_snappy_xerial(b"x" * 100_000)
    assert xerial[:16] == XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
    (blen,) = struct.unpack_from(">I", xerial, 16)
    assert bytes(cramjam.snappy.decompress_raw(xerial[20 : 20 + blen])) == b"x" * 32768


@pytest.mark.parametrize("body", [b"", b"\x1f", b"LIST", b"\x00\x00HELP", b"\xba\x7c\x00\x01a",
                                  b"\x82SNAPPY"])
def test_uncompressed_bodies_pass_through(body: bytes) -> None:
    assert maybe_decompress(body) is body


def test_vector_07_gzip_batch() -> None:
    v = json.loads((VECTORS / "07_batch_gzip.json").read_text())
    body = bytes.fromhex(v["request_hex"])[4:]
    assert maybe_decompress(body) == bytes.fromhex(v["request_body_decompressed_hex"])


def _decode_failed(exc: CursusError) -> None:
    assert exc.reply is not None and not exc.close
    assert exc.reply.startswith(b'ERROR: decode_failed reason="')
    assert exc.reply.endswith(b'"')


@pytest.mark.parametrize("compress", [compress_gzip, compress_lz4, compress_snappy_xerial])
def test_every_truncated_compressed_body_is_the_protocol_error(compress: object) -> None:
    assert callable(compress)
    packed = compress(b"hello cursus " * 40)
    magic = 8 if packed.startswith(XERIAL_MAGIC) else 2 if packed[0] == 0x1F else 4
    for cut in range(magic, len(packed)):
        try:
            out = maybe_decompress(packed[:cut])
        except CursusError as exc:
            _decode_failed(exc)
        else:  # a xerial body cut exactly at a block boundary is a shorter valid stream
            assert packed.startswith(XERIAL_MAGIC) and (b"hello cursus " * 40).startswith(out)


@pytest.mark.parametrize("body", [
    b"\x1f\x8bnot gzip at all",
    b"\x04\x22\x4d\x18garbage-garbage-garbage",
    XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x00\x05\xff\xff",
    XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x00\x03\xff\xff\xff\xff\xff\xff",
    XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x00\x00",
    XERIAL_MAGIC + b"\x00\x00\x00\x01",
])
def test_corrupt_compressed_bodies(body: bytes) -> None:
    with pytest.raises(CursusError) as ei:
        maybe_decompress(body)
    _decode_failed(ei.value)


def test_snappy_block_that_lies_about_its_size() -> None:
    block = bytes(cramjam.snappy.compress_raw(bytes(1 << 16)))
    lie = b"\x0a" + block[3:]  # preamble says 10 bytes; the block expands much further
    body = XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + struct.pack(">I", len(lie)) + lie
    with pytest.raises(CursusError) as ei:
        maybe_decompress(body)
    _decode_failed(ei.value)


def test_exact_limit() -> None:
    data = b"a" * 1000
    for compress in (compress_gzip, compress_lz4, compress_snappy_xerial):
        assert maybe_decompress(compress(data), limit=1000) == data
        with pytest.raises(CursusError):
            maybe_decompress(compress(data), limit=999)


# -- compression bombs: 100 MiB of zeros against a 16 MiB limit -------------------------------

BOMB_SIZE = 100 << 20
LIMIT = 16 << 20
_ZEROS = bytes(1 << 20)


def _gzip_bomb() -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join([c.compress(_ZEROS) for _ in range(BOMB_SIZE >> 20)] + [c.flush()])


def _lz4_bomb() -> bytes:
    c = lz4.frame.LZ4FrameCompressor()
    parts = [c.begin(source_size=BOMB_SIZE)]  # the header even announces the full size
    parts += [c.compress(_ZEROS) for _ in range(BOMB_SIZE >> 20)]
    return b"".join([*parts, c.flush()])


def _snappy_bomb() -> bytes:
    block = bytes(cramjam.snappy.compress_raw(bytes(32768)))
    one = struct.pack(">I", len(block)) + block
    return XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + one * (BOMB_SIZE // 32768)


def _snappy_one_huge_block() -> bytes:
    preamble = bytearray()
    n = BOMB_SIZE
    while n >= 0x80:
        preamble.append((n & 0x7F) | 0x80)
        n >>= 7
    preamble.append(n)
    block = bytes(preamble) + b"\x00" * 32  # never inflated: the preamble alone is refused
    return XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + struct.pack(">I", len(block)) + block


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", [_gzip_bomb, _lz4_bomb, _snappy_bomb, _snappy_one_huge_block])
def test_compression_bomb_is_refused_without_allocating_it(make: object) -> None:
    assert callable(make)
    bomb = make()
    assert len(bomb) < 5 << 20
    tracemalloc.start()
    try:
        with pytest.raises(CursusError) as ei:
            maybe_decompress(bomb, limit=LIMIT)
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _decode_failed(ei.value)
    assert b"exceeds limit" in (ei.value.reply or b"")
    assert peak < 3 * LIMIT  # bounded by the limit, never by the 100 MiB the bomb expands to
