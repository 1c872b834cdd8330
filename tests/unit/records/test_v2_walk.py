"""The records walk a Kafka produce checks with (records/v2.py ``walk_v2``) accepts what
``decode_v2`` decodes and refuses what it refuses (but a header name that is not UTF-8, which only
the decode reads), without building records; ``has_message_ids`` reads lengths and attributes.
The run-by-run walk a large section takes first (records/v2columns.py) settles a producer's batch
and agrees with the record-by-record walk on anything, damaged or not."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.errors import CorruptRecord
from bayou.records.batch import HEADER_SIZE, decode_header, encode_batch
from bayou.records.model import Record
from bayou.records.v2 import decode_v2, has_message_ids, walk_records, walk_v2
from bayou.records.v2columns import COLUMN_WISE_FROM, walk_columns


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


# -- the run-by-run walk (records/v2columns.py) ---------------------------------------------------

record_kinds = st.tuples(
    st.sampled_from([0, 1, 7, 100, 300]),  # the value's size
    st.sampled_from([None, b"k", b"key-12"]),
    st.sampled_from([(), (("h", b"v"),), (("trace", b"t" * 70), ("n", b""))]),
    st.sampled_from([0, 1, 63, 64, 8191, 8192, 1 << 20, 1 << 40]),  # the first timestamp delta
    st.booleans())  # one record of the run carries a message id (when ids are drawn)
runs_of_records = st.lists(st.tuples(st.integers(1, 150), record_kinds), min_size=1, max_size=6)


def _section_of(runs: list[tuple[int, tuple[int, bytes | None, tuple, int, bool]]],
                ids: bool) -> tuple[bytes, int]:
    """A section of runs of like records (timestamps a few ms apart within a run, so a delta's
    varint may widen inside one), at least ``COLUMN_WISE_FROM`` records in all."""
    recs: list[Record] = []
    while len(recs) < COLUMN_WISE_FROM:
        for length, (size, key, hs, delta, with_id) in runs:
            recs += [Record(value=b"v" * size, key=key, headers=hs, timestamp=1_000 + delta + i // 9,
                            message_id=len(recs) + 1 if ids and with_id and i == length // 2 else None)
                     for i in range(length)]
    return bytes(encode_batch(recs)[HEADER_SIZE:]), len(recs)


def _outcome(walk: Callable[[bytes, int], bool], data: bytes, count: int) -> object:
    try:
        return walk(data, count)
    except CorruptRecord:
        return CorruptRecord


@settings(max_examples=300, deadline=None)
@given(runs_of_records, st.booleans(), st.data())
def test_the_run_by_run_walk_agrees_with_the_record_by_record_one(
        runs: list[tuple[int, tuple[int, bytes | None, tuple, int, bool]]], ids: bool,
        data: st.DataObject) -> None:
    section_bytes, count = _section_of(runs, ids)
    assert _outcome(walk_v2, section_bytes, count) == _outcome(walk_records, section_bytes, count)
    assert has_message_ids(section_bytes, count) == (walk_records(section_bytes, count) is True)
    assert walk_columns(section_bytes, count) in (False, None)
    damaged = bytearray(section_bytes)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(damaged) - 1))
        damaged[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(damaged)))
    for candidate in (bytes(damaged), bytes(damaged[:cut]), bytes(damaged) + b"\0"):
        for n in (count, count - 1, count + 1):
            assert _outcome(walk_v2, candidate, n) == _outcome(walk_records, candidate, n)


def test_a_producers_batch_is_settled_run_by_run() -> None:
    """The fast path is taken (not left to the record-by-record walk) for what producers send:
    one value size, with or without a key and headers, offset deltas past 64 and 8,192 and
    timestamps a few ms apart."""
    for key, hs in ((None, ()), (b"user-1", ()), (b"k", (("trace", b"abc"),))):
        recs = [Record(value=b"x" * 100, key=key, headers=hs, timestamp=1_000 + i // 50)
                for i in range(9_000)]
        data = bytes(encode_batch(recs)[HEADER_SIZE:])
        assert walk_columns(data, len(recs)) is False
        assert walk_records(data, len(recs)) is False
    # null keys, values and header values (length -1) are lengths like any other
    tombstone = bytes([12, 0, 0, 0, 1, 1, 0])
    null_header = bytes([20, 0, 0, 0, 1, 2, ord("v"), 2, 2, ord("h"), 1])
    for record in (tombstone, null_header):
        assert walk_columns(record * 100, 100) is False
        assert walk_columns(record * 100 + b"\0", 100) is None  # trailing bytes
    # a message id, a record of another size every few records, a short section: not settled here
    data, _h = section(RECORDS)
    assert walk_columns(data, len(RECORDS)) is None
    mixed = [Record(value=b"x" * (i % 5), timestamp=1) for i in range(200)]
    assert walk_columns(bytes(encode_batch(mixed)[HEADER_SIZE:]), 200) is None
