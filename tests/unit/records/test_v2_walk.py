"""The records walk a Kafka produce checks with (records/v2.py ``walk_v2``) accepts what
``decode_v2`` decodes and refuses what it refuses (but a header name that is not UTF-8, which only
the decode reads), without building records; ``has_message_ids`` reads lengths and attributes."""

from __future__ import annotations

import pytest

from bayou.errors import CorruptRecord
from bayou.records.batch import HEADER_SIZE, decode_header, encode_batch
from bayou.records.model import Record
from bayou.records.v2 import decode_v2, has_message_ids, walk_v2


def section(records: list[Record]) -> tuple[bytes, object]:
    batch = encode_batch(records)
    return batch[HEADER_SIZE:], decode_header(batch)


RECORDS = [Record(value=b"v" * n, key=None if n % 3 == 0 else b"k" * n, timestamp=1000 + n,
                  headers=tuple((f"h{i}", b"x" * i) for i in range(n % 4)),
                  message_id=7 if n == 5 else None) for n in range(0, 70, 5)]


def test_the_walk_agrees_with_the_decode() -> None:
    plain = [r for r in RECORDS if r.message_id is None]
    data, h = section(plain)
    assert walk_v2(data, len(plain)) is False and not has_message_ids(data, len(plain))
    data, h = section(RECORDS)
    assert walk_v2(data, len(RECORDS)) is True and has_message_ids(data, len(RECORDS))
    assert len(decode_v2(data, h)) == len(RECORDS)  # type: ignore[arg-type]


def test_every_damage_the_decode_refuses_the_walk_refuses() -> None:
    data, h = section(RECORDS[:6])
    for pos in range(len(data)):
        for flip in (0x01, 0x40, 0x80):
            damaged = bytearray(data)
            damaged[pos] ^= flip
            try:
                decode_v2(bytes(damaged), h)  # type: ignore[arg-type]
            except CorruptRecord as exc:
                if "UTF-8" in exc.message:
                    continue
                with pytest.raises(CorruptRecord):
                    walk_v2(bytes(damaged), 6)
    for cut in range(len(data)):
        with pytest.raises(CorruptRecord):
            walk_v2(data[:cut], 6)


def test_a_null_value_and_a_null_header_value_are_kafka_records_read_as_empty() -> None:
    # length 6 | attrs 0 | ts 0 | offset 0 | key -1 | value -1 (a tombstone) | 0 headers
    tombstone = bytes([12, 0, 0, 0, 1, 1, 0])
    assert walk_v2(tombstone, 1) is False
    _data, h = section([Record(value=b"", timestamp=1)])
    (rec,) = decode_v2(tombstone, h)  # type: ignore[arg-type]
    assert rec.value == b"" and rec.key is None
    # length 10 | attrs 0 | ts 0 | offset 0 | key -1 | value 1 byte "v" | 1 header "h" = null
    null_header = bytes([20, 0, 0, 0, 1, 2, ord("v"), 2, 2, ord("h"), 1])
    assert walk_v2(null_header, 1) is False
    (rec,) = decode_v2(null_header, h)  # type: ignore[arg-type]
    assert rec.value == b"v" and rec.headers == (("h", b""),)
    # below -1 is no length at all: both refuse it
    bad = bytes([12, 0, 0, 0, 1, 3, 0])  # value length -2
    with pytest.raises(CorruptRecord, match="value length"):
        walk_v2(bad, 1)
    with pytest.raises(CorruptRecord):
        decode_v2(bad, h)  # type: ignore[arg-type]


def test_has_message_ids_reads_lengths_of_every_size_and_refuses_a_torn_section() -> None:
    recs = [Record(value=b"v" * n, timestamp=1) for n in (1, 100, 10_000, 70_000)]
    data, _h = section([*recs, Record(value=b"x", timestamp=1, message_id=9)])
    assert has_message_ids(data, 5)  # found past one- to three-byte lengths
    data, _h = section(recs)
    assert not has_message_ids(data, 4)
    for cut in (1, 2, 200, len(data) - 1):
        with pytest.raises(CorruptRecord):
            has_message_ids(data[:cut], 4)
    with pytest.raises(CorruptRecord):
        has_message_ids(b"\x01" + data[1:], 4)  # a length of -1
