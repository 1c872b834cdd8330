"""bayou.records.tank: TANK bundles as a stored payload (tank.md §3), with the bytes of §3.5."""

from __future__ import annotations

import cramjam
import pytest

from bayou.errors import CorruptRecord
from bayou.records import Record
from bayou.records.batch import ATTR_SPARSE, assemble_batch, decode_records
from bayou.records.tank import (
    FORMAT_TANK,
    check_bundle,
    decode_bundle,
    parse_bundle_header,
    read_varint,
    write_varint,
)

THREE = bytes.fromhex("0c000eb13701a2010000036f6e6502" "0374776f02057468726565")
SPARSE = bytes.fromhex("50c80000000000000008" "00323d3801a201000004733230300202047332303302020473323036"
                       "020473323039")
TS3 = int.from_bytes(bytes.fromhex("0eb13701a2010000"), "little")


def test_varints() -> None:
    for value, enc in ((5, "05"), (127, "7f"), (128, "8001"), (312, "b802"), (16384, "808001")):
        assert write_varint(value) == bytes.fromhex(enc)
        assert read_varint(bytes.fromhex(enc), 0, len(enc) // 2) == (value, len(enc) // 2)
    assert read_varint(b"\xff\xff\xff\xff\x7f", 0, 5) == (0xFFFF_FFFF, 5)
    with pytest.raises(CorruptRecord):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0, 6)
    with pytest.raises(CorruptRecord):
        read_varint(b"\x80", 0, 1)


def test_the_worked_examples() -> None:
    h = parse_bundle_header(THREE)
    assert (h.codec, h.count, h.sparse, h.size) == (0, 3, False, 1)
    msgs = decode_bundle(THREE, 2)
    assert [(m.seq, m.timestamp, m.key, m.value) for m in msgs] == [
        (2, TS3, None, b"one"), (3, TS3, None, b"two"), (4, TS3, None, b"three")]
    h = parse_bundle_header(SPARSE)
    assert (h.count, h.sparse, h.first_seq, h.last_seq, h.span) == (4, True, 200, 209, 10)
    assert [(m.seq, m.value) for m in decode_bundle(SPARSE, 0)] == [
        (200, b"s200"), (203, b"s203"), (206, b"s206"), (209, b"s209")]


def test_snappy_keys_and_varint_count() -> None:
    msgs = b"".join(b"\x01" + (0).to_bytes(8, "little") + b"\x02k%d" % (i % 10) + b"\x03v%02d" % i
                    for i in range(16))
    bundle = b"\x01" + write_varint(16) + bytes(cramjam.snappy.compress_raw(msgs))
    out = decode_bundle(bundle, 35)
    assert [m.seq for m in out] == list(range(35, 51))
    assert out[11].key == b"k1" and out[11].value == b"v11"


@pytest.mark.parametrize(("bundle", "why"), [
    (b"", "empty"), (b"\x02\x00", "codec 2"), (b"\x84\x00", "bit 7"), (b"\x00\x00", "count 0"),
    (b"\x44" + b"\x00" * 7, "truncated sparse"), (b"\x48" + (0).to_bytes(8, "little") + b"\x00", "seq 0"),
])
def test_bad_headers(bundle: bytes, why: str) -> None:
    with pytest.raises(CorruptRecord):
        parse_bundle_header(bundle)


def test_truncated_message_sets_and_bad_snappy() -> None:
    for cut in range(2, len(THREE)):
        with pytest.raises(CorruptRecord):
            decode_bundle(THREE[:cut], 1)
    with pytest.raises(CorruptRecord):
        decode_bundle(b"\x05\x10garbage-not-snappy", 1)


def test_stored_batches_read_as_records() -> None:
    section = write_varint(len(SPARSE)) + SPARSE
    batch = assemble_batch(section, record_count=4, base_offset=199, last_offset_delta=9,
                           attributes=(FORMAT_TANK << 8) | ATTR_SPARSE, base_timestamp=5, max_timestamp=5)
    assert [(r.offset, r.value) for r in decode_records(batch)] == [
        (199, b"s200"), (202, b"s203"), (205, b"s206"), (208, b"s209")]
    plain = assemble_batch(write_varint(len(THREE)) + THREE, record_count=3, base_offset=1,
                           attributes=FORMAT_TANK << 8, base_timestamp=5, max_timestamp=5)
    assert decode_records(plain) == [Record(b"one", None, TS3, (), None, 1),
                                     Record(b"two", None, TS3, (), None, 2),
                                     Record(b"three", None, TS3, (), None, 3)]


def _uniform(n: int, size: int = 100) -> bytes:
    msgs = b"".join((b"\x00" + (1234).to_bytes(8, "little") if i == 0 else b"\x02") + write_varint(size)
                    + bytes([i % 251]) * size for i in range(n))
    return b"\x00" + write_varint(n) + msgs


def test_check_bundle_accepts_what_decodes() -> None:
    for bundle in (THREE, SPARSE, _uniform(1000), _uniform(3, 1), _uniform(20, 300)):
        h = check_bundle(bundle)
        assert h.count == len(decode_bundle(bundle, 1))
    snappy = b"\x01" + write_varint(1000) + bytes(cramjam.snappy.compress_raw(_uniform(1000)[3:]))
    assert check_bundle(snappy).count == 1000


@pytest.mark.parametrize("n", [3, 50, 1000])
def test_check_bundle_rejects_every_single_byte_damage_to_message_headers(n: int) -> None:
    bundle = _uniform(n)
    size = 1 + len(write_varint(100)) + 100
    first = len(bundle) - size * (n - 1)
    for k in (1, n // 2, n - 1):
        at = first + size * (k - 1)
        for offset, value in ((0, 0x00), (0, 0x03), (0, 0x80), (1, 99), (1, 101)):
            bad = bytearray(bundle)
            bad[at + offset] = value
            with pytest.raises(CorruptRecord):
                check_bundle(bytes(bad))
    for cut in (1, 50, len(bundle) - 4):
        with pytest.raises(CorruptRecord):
            check_bundle(bundle[:-cut])
    with pytest.raises(CorruptRecord):
        check_bundle(bundle + b"\x00")


def test_check_bundle_rejects_snappy_garbage_and_bombs() -> None:
    with pytest.raises(CorruptRecord):
        check_bundle(b"\x05" + b"\x10not snappy at all")
    with pytest.raises(CorruptRecord):
        check_bundle(b"\x05" + write_varint(0xFFFF_FFFF) + b"\x00")
    with pytest.raises(CorruptRecord):  # decompresses, but to fewer messages than counted
        check_bundle(b"\x09" + bytes(cramjam.snappy.compress_raw(_uniform(1)[2:])))
