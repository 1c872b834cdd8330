"""bayou.records.iggy: Iggy message frames stored as sent (batch payload format 2).

Frames are built here by hand from the layout in the module docstring, so these tests do not lean
on the Iggy codec that also produces them."""

from __future__ import annotations

import struct

import pytest
import xxhash

from bayou.errors import CorruptRecord
from bayou.records.batch import assemble_batch, decode_header, decode_records
from bayou.records.iggy import (
    FORMAT_IGGY,
    FRAME,
    FRAME_SIZE,
    MAX_STRIDE,
    ORIGIN_TIMESTAMP,
    append_time_us,
    decode_frames,
    frame_positions,
    frame_stride,
    header_name,
    split_append_time,
    user_headers_to_record,
)


def tlv(kind: int, raw: bytes) -> bytes:
    return bytes((kind,)) + struct.pack("<I", len(raw)) + raw


def frame(payload: bytes, *, msg_id: int = 0, delta: int = 0, ts_delta: int = 0, headers: bytes = b""
          ) -> bytes:
    lo, hi = msg_id & (2**64 - 1), msg_id >> 64
    tail = FRAME.pack(0, lo, hi, delta, ts_delta, len(headers), len(payload), 0)[8:]
    body = tail + payload + headers
    return struct.pack("<Q", xxhash.xxh3_64_intdigest(body)) + body


def frames(*payloads: bytes) -> bytes:
    return b"".join(frame(p, delta=i) for i, p in enumerate(payloads))


# -- frame_positions ----------------------------------------------------------------------------


def test_positions_tile_the_range() -> None:
    data = b"junk" + frames(b"a", b"bbbb", b"") + b"tail"
    end = len(data) - 4
    assert frame_positions(data, 4, end, 3) == [4, 4 + 49, 4 + 49 + 52, end]
    assert frame_positions(b"", 0, 0, 0) == [0]


def test_positions_with_a_recorded_stride() -> None:
    data = frames(b"ab", b"cd", b"ef")
    trusted = frame_positions(data, 0, len(data), 3, stride=50)
    assert isinstance(trusted, range) and list(trusted) == [0, 50, 100, 150]  # nothing built per frame
    # a stride that does not tile the range is not trusted: the frames are walked
    mixed = frames(b"a", b"bbb")
    assert frame_positions(mixed, 0, len(mixed), 2, stride=49) == [0, 49, 100]
    # a stride shorter than a frame header is ignored too
    assert frame_positions(b"", 0, 0, 0, stride=1) == [0]


@pytest.mark.parametrize(("data", "count", "message"), [
    (frames(b"a")[:FRAME_SIZE - 1], 1, "truncated Iggy frame header"),
    (frames(b"a", b"b")[:-1], 2, "past the end"),
    (frames(b"a") + b"x", 1, "do not fill"),
    (frames(b"a", b"b"), 1, "do not fill"),
    (frames(b"a"), 2, "truncated Iggy frame header"),
    (b"x", 0, "do not fill"),
])
def test_positions_that_do_not_tile_raise(data: bytes, count: int, message: str) -> None:
    with pytest.raises(CorruptRecord, match=message):
        frame_positions(data, 0, len(data), count)


def test_a_frame_length_field_past_the_end_raises() -> None:
    data = bytearray(frames(b"abc"))
    struct.pack_into("<I", data, 36, 1000)  # payload_length
    with pytest.raises(CorruptRecord):
        frame_positions(data, 0, len(data), 1)


# -- append time --------------------------------------------------------------------------------


@pytest.mark.parametrize("us", [0, 1, 999, 1000, 1_795_317_064_559_776, 2**62 + 123])
def test_append_time_split_and_join(us: int) -> None:
    ms, seq = split_append_time(us)
    assert (ms, seq) == (us // 1000, us % 1000)
    assert append_time_us(ms, seq) == us
    assert frame_stride(seq) == 0


@pytest.mark.parametrize("stride", [48, 49, 1000, MAX_STRIDE])
def test_append_time_carries_a_stride(stride: int) -> None:
    us = 1_795_317_064_559_776
    ms, seq = split_append_time(us, stride)
    assert 0 <= seq < 2**31  # fits the i32 header field
    assert append_time_us(ms, seq) == us
    assert frame_stride(seq) == stride


@pytest.mark.parametrize("stride", [0, -5, MAX_STRIDE + 1])
def test_a_stride_that_cannot_be_recorded_is_left_out(stride: int) -> None:
    ms, seq = split_append_time(1_234_567, stride)
    assert (ms, seq) == (1234, 567) and frame_stride(seq) == 0


def test_append_time_of_headers_written_by_others() -> None:
    """base_sequence -1 (no producer) or a sub-millisecond part out of range adds nothing."""
    assert append_time_us(5, -1) == 5000
    assert frame_stride(-1) == 0
    assert append_time_us(5, 1000) == 5000
    assert append_time_us(5, 1023 | 77 << 10) == 5000


# -- decode_frames ------------------------------------------------------------------------------


def test_decode_frames_gives_records() -> None:
    headers = (tlv(2, b"trace") + tlv(2, b"abc") + tlv(3, b"\x00\x01") + tlv(9, b"\x07")
               + tlv(2, b"\xff") + tlv(1, b"r"))
    data = (frame(b"first", msg_id=2**100 + 5, delta=0, ts_delta=0, headers=headers)
            + frame(b"second", msg_id=0, delta=1, ts_delta=250))
    records = decode_frames(data, 0, len(data), 2, base_offset=40, append_ms=1_700_000_000_123,
                            origin_base_us=1_700_000_000_000_001)
    a, b = records
    assert (a.value, a.key, a.timestamp, a.offset, a.message_id) == (
        b"first", None, 1_700_000_000_123, 40, 2**100 + 5)
    assert (b.value, b.offset, b.message_id) == (b"second", 41, None)  # id 0: none chosen yet
    assert a.headers == (
        (ORIGIN_TIMESTAMP, struct.pack("<Q", 1_700_000_000_000_001)),
        ("iggy.h.trace", b"\x02abc"),
        ("iggy.hk.3.0001", b"\x09\x07"),  # a key of kind 3 (not a string): kind and hex in the name
        ("iggy.hk.2.ff", b"\x01r"),  # a string key that is not UTF-8
    )
    assert b.headers == ((ORIGIN_TIMESTAMP, struct.pack("<Q", 1_700_000_000_000_251)),)


def test_decode_frames_inside_a_stored_batch() -> None:
    """A FORMAT_IGGY batch decodes through the shared batch reader like any other."""
    section = frames(b"x", b"yy", b"zzz")
    ms, seq = split_append_time(1_700_000_000_000_500)
    batch = assemble_batch(section, record_count=3, base_offset=7, attributes=FORMAT_IGGY << 8,
                           base_timestamp=ms, max_timestamp=ms, producer_id=1_690_000_000_000_000,
                           base_sequence=seq)
    h = decode_header(batch)
    assert h.payload_format == FORMAT_IGGY and append_time_us(h.base_timestamp, h.base_sequence) == (
        1_700_000_000_000_500)
    records = decode_records(batch)
    assert [(r.offset, r.value, r.timestamp) for r in records] == [
        (7, b"x", ms), (8, b"yy", ms), (9, b"zzz", ms)]
    assert records[2].headers[0] == (ORIGIN_TIMESTAMP, struct.pack("<Q", 1_690_000_000_000_000))


def test_decode_frames_of_a_range_that_does_not_tile() -> None:
    data = frames(b"a", b"b")
    with pytest.raises(CorruptRecord):
        decode_frames(data, 0, len(data) - 1, 2, base_offset=0, append_ms=0, origin_base_us=0)


@pytest.mark.parametrize("block", [
    b"\x02\x05\x00",  # key length cut short
    tlv(2, b"k")[:-1],  # key bytes missing
    tlv(2, b"k"),  # key without a value
    tlv(2, b"k") + b"\x02\x04\x00\x00\x00v",  # value shorter than its length
])
def test_truncated_user_headers_raise(block: bytes) -> None:
    with pytest.raises(CorruptRecord):
        user_headers_to_record(block, 0, len(block))


def test_header_names() -> None:
    assert header_name(2, "clé".encode()) == "iggy.h.clé"
    assert header_name(2, b"\xc3") == "iggy.hk.2.c3"
    assert header_name(6, b"\x01\x00\x00\x00") == "iggy.hk.6.01000000"
