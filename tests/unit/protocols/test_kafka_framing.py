"""Kafka request framing, request headers and the V1-vs-Kafka first-byte rule."""

from __future__ import annotations

import struct

import pytest

from bayou.protocols.kafka.framing import (
    MAX_REQUEST_SIZE,
    MIN_REQUEST_SIZE,
    FrameReader,
    KafkaError,
    RequestHeader,
    Sniffed,
    decode_header,
    encode_header,
    read_fixed_header,
    read_tagged_fields,
    read_uvarint,
    sniff,
    split_frame,
    write_uvarint,
)


def _wire(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


HEADER_V1 = RequestHeader(3, 4, 77, "kcat", False, 0)
FRAME = encode_header(HEADER_V1) + b"\x00\x00\x00\x00\x01"  # Metadata v4: all topics, auto-create


def test_sniff_by_first_byte() -> None:
    assert sniff(b"") is None
    assert sniff(b"V") is Sniffed.V1
    assert sniff(b"V1|42|PING") is Sniffed.V1
    assert sniff(_wire(FRAME)) is Sniffed.KAFKA
    for first in range(256):  # a size the cap allows starts with 0x00..0x06; the rest is V1's
        assert sniff(bytes([first])) is (Sniffed.KAFKA if first <= 0x06 else Sniffed.V1)
    assert sniff(struct.pack(">i", MAX_REQUEST_SIZE)) is Sniffed.KAFKA
    assert sniff(b"hello") is Sniffed.V1  # V1 answers it: BAD_REQUEST expected format


def test_a_v1_first_byte_is_too_large_a_kafka_size() -> None:
    """The rule rests on this: 0x56 as a size's first byte declares more than 1.4 GB."""
    with pytest.raises(KafkaError):
        split_frame(b"V1|4")
    assert int.from_bytes(b"V\x00\x00\x00", "big") > MAX_REQUEST_SIZE


def test_split_frame() -> None:
    wire = _wire(FRAME)
    for n in range(len(wire)):
        assert split_frame(wire[:n]) is None
    found = split_frame(wire + b"\x00\x00")
    assert found is not None
    frame, end = found
    assert bytes(frame) == FRAME and end == len(wire)
    found = split_frame(b"xx" + wire, 2)
    assert found is not None and bytes(found[0]) == FRAME


@pytest.mark.parametrize("size", [-1, -(1 << 31), 0, MIN_REQUEST_SIZE - 1, MAX_REQUEST_SIZE + 1,
                                  (1 << 31) - 1])
def test_a_bad_size_is_refused_from_the_prefix_alone(size: int) -> None:
    with pytest.raises(KafkaError) as info:
        split_frame(struct.pack(">i", size))
    assert info.value.close


def test_the_cap_is_the_readers() -> None:
    wire = _wire(FRAME)
    with pytest.raises(KafkaError):
        FrameReader(max_size=len(FRAME) - 1).feed(wire)
    assert FrameReader(max_size=len(FRAME)).feed(wire) == [FRAME]


def test_frame_reader_whole_split_and_several() -> None:
    wire = _wire(FRAME)
    assert FrameReader().feed(wire * 3) == [FRAME] * 3
    reader = FrameReader()
    out: list[bytes] = []
    for i in range(len(wire) * 2):
        out += reader.feed((wire * 2)[i:i + 1])
    assert out == [FRAME, FRAME] and reader.buffered == 0
    reader = FrameReader()
    assert reader.feed(wire + wire[:5]) == [FRAME]
    assert reader.buffered == 5
    assert reader.feed(wire[5:]) == [FRAME]


def test_frame_reader_refuses_after_good_frames() -> None:
    """The shared kit's rule (protocols/framing.py): the frame before a bad size is served, then
    the next feed raises, and nothing of the bad header stays buffered."""
    reader = FrameReader()
    assert reader.feed(_wire(FRAME) + struct.pack(">i", -5)) == [FRAME]
    assert reader.failed is not None and reader.stalled and reader.buffered == 0
    with pytest.raises(KafkaError):
        reader.feed(b"")


def test_header_v1_and_v2_round_trip() -> None:
    assert decode_header(FRAME, flexible=False) == RequestHeader(3, 4, 77, "kcat", False, 14)
    tagged = RequestHeader(18, 3, -1, "rdkafka", True, 0, ((0, b"x"), (5, b"")))
    raw = encode_header(tagged)
    decoded = decode_header(raw + b"body", flexible=True)
    assert decoded == RequestHeader(18, 3, -1, "rdkafka", True, len(raw), ((0, b"x"), (5, b"")))
    null_id = encode_header(RequestHeader(0, 9, 1, None, True, 0))
    assert decode_header(null_id, flexible=True).client_id is None
    assert read_fixed_header(raw) == (18, 3, -1)


def test_client_id_stays_a_legacy_string_in_header_v2() -> None:
    raw = encode_header(RequestHeader(18, 3, 1, "abc", True, 0))
    assert raw[8:13] == b"\x00\x03abc" and raw[13:] == b"\x00"


@pytest.mark.parametrize("raw", [
    b"",
    b"\x00\x03\x00\x04\x00\x00\x00",  # short of the fixed part
    struct.pack(">hhih", 3, 4, 1, -2),  # client_id length -2
    struct.pack(">hhih", 3, 4, 1, 5) + b"abc",  # client_id overruns
    struct.pack(">hhih", 3, 4, 1, 2) + b"\xff\xfe",  # client_id not UTF-8
])
def test_bad_headers(raw: bytes) -> None:
    with pytest.raises(KafkaError):
        decode_header(raw, flexible=False)


@pytest.mark.parametrize("tags", [
    b"\x02\x05\x00\x03\x00",  # tag 5 then tag 3
    b"\x02\x05\x00\x05\x00",  # tag 5 twice
    b"\x01\x00\x05ab",  # a tag's size overruns
    b"\x01",  # a count with no tag
    b"\xff\xff\xff\xff\xff\x01",  # a varint longer than 5 bytes
    b"\xff\xff\xff\xff\x7f",  # a varint above 32 bits
])
def test_bad_tagged_fields(tags: bytes) -> None:
    head = struct.pack(">hhih", 18, 3, 1, -1)
    with pytest.raises(KafkaError):
        decode_header(head + tags, flexible=True)


def test_uvarint() -> None:
    for value in (0, 1, 127, 128, 300, 16383, 16384, (1 << 32) - 1):
        out = bytearray()
        write_uvarint(out, value)
        assert read_uvarint(out, 0) == (value, len(out))
    assert read_tagged_fields(b"\x00", 0) == ((), 1)
