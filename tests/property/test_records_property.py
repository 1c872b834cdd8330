"""Property tests for the record layer: round trips, and mutated bytes never escape as other errors."""

from __future__ import annotations

import contextlib
import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bayou.errors import CorruptRecord, UnsupportedCompression
from bayou.records import Compression, Record, decode_header, decode_records, encode_batch, iter_batches
from bayou.records.batch import set_base_offset, verify_batch
from bayou.records.varint import decode_uvarint, decode_varint, encode_uvarint, encode_varint

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
# Realistic millisecond timestamps (and Kafka's -1); deltas between them always fit a varint.
timestamps = st.integers(min_value=-(1 << 40), max_value=1 << 45)
header_names = st.text(max_size=12)
records = st.builds(
    Record,
    value=st.binary(max_size=200),
    key=st.none() | st.binary(max_size=40),
    timestamp=timestamps,
    headers=st.lists(st.tuples(header_names, st.binary(max_size=20)), max_size=4).map(tuple),
    message_id=st.none() | st.integers(min_value=0, max_value=(1 << 128) - 1),
)
record_lists = st.lists(records, min_size=1, max_size=12)
codecs = st.sampled_from(list(Compression))


def fields(recs: list[Record]) -> list[tuple[object, ...]]:
    return [(r.value, r.key, r.timestamp, r.headers, r.message_id) for r in recs]


@SETTINGS
@given(recs=record_lists, codec=codecs, base=st.integers(min_value=0, max_value=(1 << 62)))
def test_round_trip(recs: list[Record], codec: Compression, base: int) -> None:
    data = encode_batch(recs, compression=codec, base_offset=base)
    h = verify_batch(data)
    assert (h.record_count, h.compression, h.size) == (len(recs), codec, len(data))
    assert h.max_timestamp == max(r.timestamp for r in recs)
    out = decode_records(data)
    assert fields(out) == fields(recs)
    assert [r.offset for r in out] == list(range(base, base + len(recs)))
    buf = bytearray(data)
    set_base_offset(buf, base + 7)
    assert verify_batch(buf).crc == h.crc


@SETTINGS
@given(batches=st.lists(st.tuples(record_lists, codecs), min_size=1, max_size=4),
       cut=st.integers(min_value=0))
def test_concatenated_batches_and_any_cut(batches: list[tuple[list[Record], Compression]], cut: int) -> None:
    encoded = [encode_batch(recs, compression=c) for recs, c in batches]
    stream = b"".join(encoded)
    cut %= len(stream) + 1
    found = list(iter_batches(stream[:cut]))
    # exactly the batches that fit completely before the cut
    ends = [sum(len(e) for e in encoded[: i + 1]) for i in range(len(encoded))]
    assert len(found) == sum(1 for e in ends if e <= cut)
    for (p, _h), (recs, _c) in zip(found, batches, strict=False):
        assert fields(decode_records(stream, p)) == fields(recs)


MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
    st.tuples(st.just("set"), st.integers(min_value=0), st.integers(min_value=0, max_value=255)),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.integers(min_value=0, max_value=255)),
    st.tuples(st.just("delete"), st.integers(min_value=0), st.just(0)),
    st.tuples(st.just("truncate"), st.integers(min_value=0), st.just(0)),
)


def mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, where, val in mutations:
        if not buf:
            break
        i = where % len(buf)
        if kind == "flip":
            buf[i] ^= val
        elif kind == "set":
            buf[i] = val
        elif kind == "insert":
            buf.insert(i, val)
        elif kind == "delete":
            del buf[i]
        else:
            del buf[i:]
    return bytes(buf)


def _decode_or_corrupt(buf: bytes) -> list[Record] | None:
    """decode_records without a CRC check: the parser and the decompressors see the damage."""
    try:
        return decode_records(buf, max_decompressed=1 << 20)
    except CorruptRecord:
        return None
    except UnsupportedCompression:
        # Not corruption but an unknown codec id (5-7) in the attributes: the only other outcome.
        assert decode_header(buf).compression >= 5
        return None


@SETTINGS
@given(recs=record_lists, codec=codecs, mutations=st.lists(MUTATION, min_size=1, max_size=4))
@example(recs=[Record(b"x")], codec=Compression.NONE, mutations=[("set", 22, 5)])  # codec id 5
@example(recs=[Record(b"x")], codec=Compression.NONE, mutations=[("set", 16, 1)])  # magic
@example(recs=[Record(b"x")], codec=Compression.GZIP, mutations=[("truncate", 70, 0)])
@example(recs=[Record(b"x" * 50)] * 3, codec=Compression.NONE, mutations=[("set", 60, 100)])  # count
def test_mutated_batch_decodes_or_is_corrupt(recs: list[Record], codec: Compression,
                                             mutations: list[tuple[str, int, int]]) -> None:
    data = encode_batch(recs, compression=codec)
    bad = mutate(data, mutations)
    _decode_or_corrupt(bad)
    _decode_or_corrupt(bad + b"\x00" * 7)  # with trailing data
    try:
        h = verify_batch(bad)
    except CorruptRecord:
        return
    # The CRC held: only fields outside it (base offset, length prefix, epoch) can have changed,
    # and then the records are the original ones.
    out = decode_records(bad)
    assert fields(out) == fields(recs)
    assert h.size == len(data)


@SETTINGS
@given(raw=st.binary(max_size=300), count=st.integers(min_value=-2, max_value=50),
       attrs=st.integers(min_value=0, max_value=0xFFFF))
def test_random_payload_in_a_valid_header(raw: bytes, count: int, attrs: int) -> None:
    template = bytearray(encode_batch([Record(b"")]))
    buf = bytearray(template[:61]) + raw
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">h", buf, 21, attrs - 0x10000 if attrs >= 0x8000 else attrs)
    struct.pack_into(">i", buf, 57, count)
    struct.pack_into(">i", buf, 23, count - 1)
    _decode_or_corrupt(bytes(buf))


@SETTINGS
@given(data=st.binary(max_size=120))
def test_random_bytes_decode_or_are_corrupt(data: bytes) -> None:
    _decode_or_corrupt(data)
    with contextlib.suppress(CorruptRecord):
        verify_batch(data)
    with contextlib.suppress(CorruptRecord):
        list(iter_batches(data))


# -- varints ----------------------------------------------------------------------------------


@SETTINGS
@given(values=st.lists(INT64, max_size=20))
def test_varint_stream_round_trip(values: list[int]) -> None:
    buf = bytearray()
    for v in values:
        encode_varint(v, buf)
    pos = 0
    for v in values:
        got, pos = decode_varint(buf, pos)
        assert got == v
    assert pos == len(buf)


@SETTINGS
@given(values=st.lists(st.integers(min_value=0, max_value=(1 << 64) - 1), max_size=20))
def test_uvarint_stream_round_trip(values: list[int]) -> None:
    buf = bytearray()
    for v in values:
        encode_uvarint(v, buf)
    pos = 0
    for v in values:
        got, pos = decode_uvarint(buf, pos)
        assert got == v
    assert pos == len(buf)


@SETTINGS
@given(data=st.binary(max_size=16), pos=st.integers(min_value=0, max_value=20))
def test_varint_random_bytes(data: bytes, pos: int) -> None:
    for decode in (decode_varint, decode_uvarint):
        try:
            _value, end = decode(data, pos)
        except CorruptRecord:
            continue
        assert pos < end <= min(len(data), pos + 10)
