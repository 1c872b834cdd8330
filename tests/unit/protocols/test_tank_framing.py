"""TANK frames and primitive encodings, without sockets (tank.md 1 and 2)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from bayou.protocols.tank.codes import TankError
from bayou.protocols.tank.framing import (
    HEADER_SIZE,
    MAX_PAYLOAD,
    PING_FRAME,
    Frame,
    FrameReader,
    encode_frame,
    frame_header,
)
from bayou.protocols.tank.wire import (
    Reader,
    decode_str8,
    decode_varint,
    encode_str8,
    encode_varint,
    varint_size,
)

VECTORS = Path(__file__).parents[2] / "conformance" / "vectors" / "tank"
FRAMES = [Frame(3, b""), Frame(1, b"x" * 50), Frame(2, bytes(range(256)) * 3),
          Frame(0xC, b"\x01\x00\x00\x00\x00"), Frame(0xFF, b"y" * 70_000)]


def _stream(frames: list[Frame]) -> bytes:
    return b"".join(encode_frame(f.msg_id, f.payload) for f in frames)


def _feed_all(reader: FrameReader, data: bytes, step: int) -> list[Frame]:
    out: list[Frame] = []
    for i in range(0, len(data), step):
        out += reader.feed(data[i : i + step])
    return out


# -- framing ----------------------------------------------------------------------------------


def test_constants() -> None:
    assert MAX_PAYLOAD == 256 * 1024 * 1024
    assert HEADER_SIZE == 5
    assert PING_FRAME == b"\x03\x00\x00\x00\x00" == encode_frame(3) == frame_header(3, 0)


def test_encode_frame_exact_bytes() -> None:
    assert encode_frame(0x0A, b"\x01\x00\x00\x00") == bytes.fromhex("0a0400000001000000")
    assert encode_frame(1, b"x" * 300)[:5] == b"\x01\x2c\x01\x00\x00"
    assert frame_header(2, 0x01020304) == b"\x02\x04\x03\x02\x01"


@pytest.mark.parametrize("step", [1, 2, 4, 5, 6, 97, 1 << 20])
def test_any_chunking(step: int) -> None:
    reader = FrameReader()
    assert _feed_all(reader, _stream(FRAMES), step) == FRAMES
    assert reader.buffered == 0


def test_every_proper_prefix_needs_more() -> None:
    for frame in FRAMES[:4]:
        data = encode_frame(frame.msg_id, frame.payload)
        for cut in range(len(data)):
            reader = FrameReader()
            assert reader.feed(data[:cut]) == []
            assert reader.buffered == cut
            assert reader.feed(data[cut:]) == [frame]
            assert reader.buffered == 0


def test_trailing_partial_frame_is_kept() -> None:
    reader = FrameReader()
    data = _stream(FRAMES[:2]) + encode_frame(2, b"abc")[:6]
    assert reader.feed(data) == FRAMES[:2]
    assert reader.buffered == 6
    assert reader.feed(b"bc") == [Frame(2, b"abc")]
    assert reader.buffered == 0


def test_vectors_whole_and_byte_by_byte() -> None:
    for path in sorted(VECTORS.glob("*.json")):
        v = json.loads(path.read_text())
        for key in ("request_hex", "response_hex"):
            data = bytes.fromhex(v[key])
            whole = FrameReader().feed(data)
            assert _stream(whole) == data
            assert _feed_all(FrameReader(), data, 1) == whole


def test_cap_is_inclusive() -> None:
    reader = FrameReader(max_payload=10)
    assert reader.feed(frame_header(1, 10) + b"0123456789") == [Frame(1, b"0123456789")]


def test_oversized_payload_closes_before_buffering() -> None:
    with pytest.raises(TankError) as err:
        FrameReader().feed(frame_header(1, MAX_PAYLOAD + 1))
    assert err.value.close
    reader = FrameReader(max_payload=10)
    with pytest.raises(TankError):
        reader.feed(frame_header(7, 11) + b"x")
    assert reader.buffered == 0


def test_frames_before_an_oversized_header_come_first() -> None:
    reader = FrameReader(max_payload=10)
    good = encode_frame(1, b"ok")
    assert reader.feed(good + frame_header(1, 11)) == [Frame(1, b"ok")]
    with pytest.raises(TankError) as err:
        reader.feed(b"")
    assert err.value.close
    with pytest.raises(TankError):
        reader.feed(good)


def test_reader_accepts_memoryview_and_bytearray() -> None:
    data = _stream(FRAMES[:3])
    assert FrameReader().feed(memoryview(data)) == FRAMES[:3]
    assert FrameReader().feed(bytearray(data)) == FRAMES[:3]
    reader = FrameReader()
    assert reader.feed(memoryview(data)[:7]) == [FRAMES[0]]
    assert reader.feed(memoryview(data)[7:]) == FRAMES[1:3]


def test_reader_keeps_unknown_ids() -> None:
    assert FrameReader().feed(encode_frame(0x42, b"?")) == [Frame(0x42, b"?")]


# -- varints (tank.md 2) ------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "hex_text"), [
    (0, "00"), (5, "05"), (127, "7f"), (128, "8001"), (312, "b802"), (16383, "ff7f"), (16384, "808001"),
    ((1 << 21) - 1, "ffff7f"), (1 << 21, "80808001"), ((1 << 28) - 1, "ffffff7f"), (1 << 28, "8080808001"),
    (0xFFFF_FFFF, "ffffffff0f"),
])
def test_varint_examples(value: int, hex_text: str) -> None:
    raw = bytes.fromhex(hex_text)
    assert encode_varint(value) == raw
    assert varint_size(value) == len(raw)
    assert decode_varint(raw) == (value, len(raw))
    assert decode_varint(b"\xaa" + raw + b"\xbb", 1) == (value, 1 + len(raw))


def test_varint_bits_above_32_are_ignored() -> None:
    assert decode_varint(bytes.fromhex("ffffffff7f")) == (0xFFFF_FFFF, 5)
    assert decode_varint(bytes.fromhex("8080808070")) == (0, 5)
    assert decode_varint(bytes.fromhex("8080808010")) == (0, 5)
    assert decode_varint(bytes.fromhex("8080808011")) == (1 << 28, 5)


def test_varint_non_minimal_forms_decode() -> None:
    assert decode_varint(bytes.fromhex("8000")) == (0, 2)
    assert decode_varint(bytes.fromhex("ff80808000")) == (127, 5)


@pytest.mark.parametrize("hex_text", [
    "", "80", "ff", "8080", "ffffffff", "ffffffffff", "ffffffffff01", "8080808080"])
def test_varint_errors_close(hex_text: str) -> None:
    with pytest.raises(TankError) as err:
        decode_varint(bytes.fromhex(hex_text))
    assert err.value.close


def test_varint_respects_end() -> None:
    with pytest.raises(TankError):
        decode_varint(bytes.fromhex("8001"), 0, 1)


@pytest.mark.parametrize("value", [-1, 1 << 32])
def test_varint_out_of_range_is_a_caller_bug(value: int) -> None:
    with pytest.raises(ValueError):
        encode_varint(value)


# -- str8 and the payload reader ----------------------------------------------------------------


def test_str8() -> None:
    assert encode_str8("") == b"\x00"
    assert encode_str8("c++") == b"\x03c++"
    assert decode_str8(b"\x03c++!") == ("c++", 4)
    assert decode_str8(memoryview(b"?\x01a"), 1) == ("a", 3)
    assert encode_str8("x" * 255)[0] == 255
    with pytest.raises(ValueError):
        encode_str8("x" * 256)
    for bad in (b"", b"\x03ab", b"\xff"):
        with pytest.raises(TankError):
            decode_str8(bad)


def test_str8_round_trips_any_bytes() -> None:
    raw = bytes(range(256))[:255]
    text, end = decode_str8(bytes([255]) + raw)
    assert end == 256
    assert encode_str8(text) == bytes([255]) + raw
    assert decode_str8(encode_str8("é"))[0] == "é"


def test_reader_primitives() -> None:
    data = struct.pack("<BHIQ", 1, 2, 3, 4) + b"\x03abc" + b"\x80\x01" + b"rest"
    r = Reader(data)
    assert (r.u8(), r.u16(), r.u32(), r.u64()) == (1, 2, 3, 4)
    assert r.peek_u16() == 0x6103
    assert r.str8() == "abc"
    assert r.varint() == 128
    assert r.remaining == 4
    with pytest.raises(TankError) as err:
        r.done()
    assert err.value.close
    assert r.take(4) == b"rest"
    r.done()
    assert r.peek_u16() is None
    for read in (r.u8, r.u16, r.u32, r.u64, r.varint, r.str8):
        with pytest.raises(TankError):
            read()
