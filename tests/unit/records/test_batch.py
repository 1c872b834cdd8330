"""Record batches: round trip, CRC placement, truncation, corruption and decompression bombs."""

from __future__ import annotations

import struct

import pytest

from bayou.errors import CorruptRecord, UnsupportedCompression
from bayou.records import (
    HEADER_SIZE,
    Compression,
    Record,
    batch_crc,
    decode_header,
    decode_records,
    encode_batch,
    iter_batches,
    set_base_offset,
    verify_batch,
)
from bayou.records.batch import assemble_batch, set_leader_epoch
from bayou.records.compression import compress

ALL_CODECS = list(Compression)


def sample_records() -> list[Record]:
    return [
        Record(b"v0", key=b"k0", timestamp=1_700_000_000_000),
        Record(b"", key=None, timestamp=1_700_000_000_005),
        Record(b"v2" * 300, key=b"", timestamp=1_699_999_999_990,  # earlier than the base: negative delta
               headers=(("trace", b"abc"), ("empty", b""), ("ünï", b"\x00\xff"))),
        Record(b"v3", key=b"k3", timestamp=1_700_000_000_001, message_id=0),
        Record(b"v4", key=None, timestamp=1_700_000_000_002, message_id=(1 << 128) - 1,
               headers=(("h", b"x"),)),
        Record(b"\x00" * 17, key=b"\xff" * 3, timestamp=1_700_000_000_003, message_id=0x0123456789ABCDEF),
    ]


def strip_offsets(records: list[Record]) -> list[tuple[object, ...]]:
    return [(r.value, r.key, r.timestamp, r.headers, r.message_id) for r in records]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_round_trip_every_codec(codec: Compression) -> None:
    recs = sample_records()
    data = encode_batch(recs, base_offset=100, compression=codec, producer_id=7, producer_epoch=2,
                        base_sequence=40, leader_epoch=3)
    h = verify_batch(data)
    assert h.size == len(data)
    assert h.base_offset == 100
    assert h.record_count == len(recs)
    assert h.last_offset_delta == len(recs) - 1
    assert h.last_offset == 100 + len(recs) - 1
    assert h.next_offset == 100 + len(recs)
    assert h.compression == codec
    assert h.base_timestamp == recs[0].timestamp
    assert h.max_timestamp == max(r.timestamp for r in recs)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.leader_epoch) == (7, 2, 40, 3)
    assert h.payload_format == 0
    out = decode_records(data)
    assert strip_offsets(out) == strip_offsets(recs)
    assert [r.offset for r in out] == list(range(100, 100 + len(recs)))
    assert out[1].key is None and out[2].key == b""


def test_record_offset_field_is_ignored_when_encoding() -> None:
    data = encode_batch([Record(b"a", offset=55), Record(b"b", offset=3)], base_offset=10)
    assert [r.offset for r in decode_records(data)] == [10, 11]


def test_payload_format_and_defaults() -> None:
    data = encode_batch([Record(b"x")], payload_format=3)
    h = decode_header(data)
    assert h.payload_format == 3
    assert h.compression == Compression.NONE
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.leader_epoch) == (-1, -1, -1, -1)


def test_empty_batch_is_rejected() -> None:
    with pytest.raises(ValueError):
        encode_batch([])


def test_header_layout_offsets() -> None:
    data = encode_batch([Record(b"x", timestamp=5)], base_offset=0x0102030405060708)
    assert HEADER_SIZE == 61
    assert struct.unpack_from(">q", data, 0)[0] == 0x0102030405060708
    assert struct.unpack_from(">i", data, 8)[0] == len(data) - 12
    assert data[16] == 2  # magic
    assert struct.unpack_from(">I", data, 17)[0] == batch_crc(data, 0, len(data))


def test_set_base_offset_and_leader_epoch_keep_the_crc() -> None:
    data = encode_batch(sample_records(), compression=Compression.ZSTD)
    crc = decode_header(data).crc
    buf = bytearray(data)
    set_base_offset(buf, 9_000_000_000)
    set_leader_epoch(buf, 17)
    h = verify_batch(buf)
    assert h.crc == crc
    assert h.base_offset == 9_000_000_000
    assert h.leader_epoch == 17
    assert decode_records(buf)[0].offset == 9_000_000_000
    # only the first 16 bytes changed
    assert buf[16:] == data[16:]


def test_set_base_offset_at_position_in_larger_buffer() -> None:
    a = encode_batch([Record(b"a")])
    b = encode_batch([Record(b"b"), Record(b"c")])
    buf = bytearray(a + b)
    set_base_offset(buf, 1, pos=len(a))
    assert verify_batch(buf, len(a)).base_offset == 1
    assert [r.offset for r in decode_records(buf, len(a))] == [1, 2]


def test_verify_batch_catches_every_flipped_byte_under_the_crc() -> None:
    data = encode_batch(sample_records(), compression=Compression.GZIP)
    # bytes 21.. are covered by the CRC; the CRC field itself (17..20) must also fail.
    for i in range(17, len(data)):
        buf = bytearray(data)
        buf[i] ^= 0x01
        with pytest.raises(CorruptRecord):
            verify_batch(buf)


def test_verify_batch_ignores_base_offset_and_leader_epoch() -> None:
    data = bytearray(encode_batch([Record(b"x")]))
    for i in range(0, 8):
        data[i] ^= 0xFF
    for i in range(12, 16):
        data[i] ^= 0xFF
    verify_batch(data)


def test_bad_magic_is_corrupt() -> None:
    buf = bytearray(encode_batch([Record(b"x")]))
    buf[16] = 1
    with pytest.raises(CorruptRecord):
        decode_header(buf)
    with pytest.raises(CorruptRecord):
        decode_records(buf)


def test_bad_length_or_counts_are_corrupt() -> None:
    base = encode_batch([Record(b"x")])
    for field_pos, value in ((8, 10), (23, -1), (57, -1)):
        buf = bytearray(base)
        struct.pack_into(">i", buf, field_pos, value)
        with pytest.raises(CorruptRecord):
            decode_header(buf)


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_every_truncated_prefix_is_corrupt(codec: Compression) -> None:
    data = encode_batch(sample_records(), compression=codec)
    for n in range(len(data)):
        prefix = data[:n]
        with pytest.raises(CorruptRecord):
            decode_records(prefix)
        with pytest.raises(CorruptRecord):
            verify_batch(prefix)
        with pytest.raises(CorruptRecord):
            decode_records(memoryview(prefix))
        # iter_batches stops quietly at a trailing partial batch (or raises CorruptRecord for a
        # malformed header, which a prefix of a valid batch never has)
        assert list(iter_batches(prefix)) == []


def test_trailing_data_after_a_batch_is_not_read() -> None:
    data = encode_batch(sample_records())
    assert strip_offsets(decode_records(data + b"\x00garbage")) == strip_offsets(sample_records())
    verify_batch(data + b"\xff" * 100)


def test_iter_batches_walks_concatenated_batches_and_stops_at_partial() -> None:
    a = bytearray(encode_batch([Record(b"a")] * 2))
    b = bytearray(encode_batch([Record(b"b")] * 3, compression=Compression.LZ4))
    set_base_offset(b, 2)
    c = encode_batch([Record(b"c")])
    buf = bytes(a + b + c)
    found = list(iter_batches(buf))
    assert [(p, h.base_offset, h.record_count) for p, h in found] == [
        (0, 0, 2), (len(a), 2, 3), (len(a) + len(b), 0, 1)]
    partial = buf[: len(a) + len(b) + 30]
    assert [p for p, _ in iter_batches(partial)] == [0, len(a)]
    assert [p for p, _ in iter_batches(buf, len(a), len(a) + len(b))] == [len(a)]


def _raw_batch(payload: bytes, count: int, codec: int = Compression.NONE) -> bytes:
    return assemble_batch(payload, record_count=count, base_offset=0, attributes=int(codec),
                          base_timestamp=0, max_timestamp=0)


def test_record_count_larger_than_payload_is_corrupt() -> None:
    good = encode_batch([Record(b"x")])
    payload = good[HEADER_SIZE:]
    with pytest.raises(CorruptRecord):
        decode_records(_raw_batch(payload, 2))


def test_trailing_bytes_after_last_record_are_corrupt() -> None:
    good = encode_batch([Record(b"x")])
    with pytest.raises(CorruptRecord):
        decode_records(_raw_batch(good[HEADER_SIZE:] + b"\x00", 1))


def test_non_utf8_header_name_is_corrupt() -> None:
    good = encode_batch([Record(b"x", headers=(("ab", b"v"),))])
    payload = bytearray(good[HEADER_SIZE:])
    i = payload.index(b"ab")
    payload[i] = 0xFF
    with pytest.raises(CorruptRecord):
        decode_records(_raw_batch(bytes(payload), 1))


def test_unknown_codec_id_is_unsupported_compression() -> None:
    # Ids 5-7 are not corruption but a codec this build does not know; the error says so.
    good = encode_batch([Record(b"x")])
    with pytest.raises(UnsupportedCompression):
        decode_records(_raw_batch(good[HEADER_SIZE:], 1, codec=5))


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c is not Compression.NONE], ids=lambda c: c.name)
def test_decompression_bomb_in_a_batch_is_corrupt(codec: Compression) -> None:
    recs = [Record(b"\x00" * (256 * 1024)) for _ in range(8)]  # ~2 MiB that compresses to little
    data = encode_batch(recs, compression=codec)
    assert len(data) < 1024 * 1024
    assert len(decode_records(data)) == 8  # the default limit (64 MiB) lets it through
    with pytest.raises(CorruptRecord):
        decode_records(data, max_decompressed=1024 * 1024)


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c is not Compression.NONE], ids=lambda c: c.name)
def test_garbage_compressed_payload_is_corrupt(codec: Compression) -> None:
    with pytest.raises(CorruptRecord):
        decode_records(_raw_batch(b"\x07not compressed at all, really" * 3, 1, codec))


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c is not Compression.NONE], ids=lambda c: c.name)
def test_compressed_garbage_records_section_is_corrupt(codec: Compression) -> None:
    # Valid compression around an invalid records section.
    with pytest.raises(CorruptRecord):
        decode_records(_raw_batch(compress(codec, b"\x02\x00" * 50), 3, codec))


def test_key_length_below_minus_one_is_corrupt() -> None:
    good = encode_batch([Record(b"x", key=None)])
    payload = bytearray(good[HEADER_SIZE:])
    # record: length, attributes 0, timestamp delta 0, offset delta 0, key length -1 (zig-zag 0x01)
    assert payload[1:5] == b"\x00\x00\x00\x01"
    payload[4] = 0x03  # -2
    with pytest.raises(CorruptRecord):
        decode_records(_raw_batch(bytes(payload), 1))
