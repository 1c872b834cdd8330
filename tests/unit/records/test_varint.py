"""Zig-zag (signed) and plain (unsigned) base-128 varints."""

from __future__ import annotations

import pytest

from bayou.errors import CorruptRecord
from bayou.records.varint import decode_uvarint, decode_varint, encode_uvarint, encode_varint

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

SIGNED = [0, 1, -1, 2, -2, 63, -64, 64, -65, 127, 128, 300, -300, 1 << 31, -(1 << 31), (1 << 32) - 1,
          1 << 56, -(1 << 56), INT64_MAX - 1, INT64_MAX, INT64_MIN + 1, INT64_MIN]
UNSIGNED = [0, 1, 127, 128, 255, 300, 16383, 16384, (1 << 32) - 1, 1 << 35, (1 << 63) - 1, 1 << 63,
            (1 << 64) - 1]


def enc(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out)
    return bytes(out)


def uenc(value: int) -> bytes:
    out = bytearray()
    encode_uvarint(value, out)
    return bytes(out)


@pytest.mark.parametrize("value", SIGNED)
def test_signed_round_trip(value: int) -> None:
    data = enc(value)
    assert decode_varint(data, 0) == (value, len(data))
    assert len(data) <= 10


@pytest.mark.parametrize("value", UNSIGNED)
def test_unsigned_round_trip(value: int) -> None:
    data = uenc(value)
    assert decode_uvarint(data, 0) == (value, len(data))
    assert len(data) <= 10


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f"),
     (64, b"\x80\x01"), (150, b"\xac\x02"), (INT64_MAX, b"\xfe" + b"\xff" * 8 + b"\x01"),
     (INT64_MIN, b"\xff" * 9 + b"\x01")],
)
def test_signed_exact_bytes(value: int, expected: bytes) -> None:
    assert enc(value) == expected


@pytest.mark.parametrize(("value", "expected"),
                         [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02")])
def test_unsigned_exact_bytes(value: int, expected: bytes) -> None:
    assert uenc(value) == expected


def test_encode_appends_to_existing_buffer() -> None:
    out = bytearray(b"ab")
    encode_varint(-3, out)
    encode_uvarint(300, out)
    assert bytes(out) == b"ab\x05\xac\x02"


def test_decode_at_position_in_a_stream() -> None:
    buf = b"\xff" + enc(-7) + enc(INT64_MAX) + uenc(5)
    v1, p = decode_varint(buf, 1)
    v2, p = decode_varint(buf, p)
    v3, p = decode_uvarint(buf, p)
    assert (v1, v2, v3, p) == (-7, INT64_MAX, 5, len(buf))


def test_decode_accepts_memoryview_and_bytearray() -> None:
    data = enc(-12345)
    assert decode_varint(memoryview(data), 0)[0] == -12345
    assert decode_varint(bytearray(data), 0)[0] == -12345
    assert decode_uvarint(memoryview(uenc(99)), 0)[0] == 99


def test_negative_uvarint_is_rejected() -> None:
    with pytest.raises(ValueError):
        encode_uvarint(-1, bytearray())


@pytest.mark.parametrize("value", SIGNED)
def test_signed_truncated_prefixes(value: int) -> None:
    data = enc(value)
    for n in range(len(data)):
        with pytest.raises(CorruptRecord):
            decode_varint(data[:n], 0)


@pytest.mark.parametrize("value", UNSIGNED)
def test_unsigned_truncated_prefixes(value: int) -> None:
    data = uenc(value)
    for n in range(len(data)):
        with pytest.raises(CorruptRecord):
            decode_uvarint(data[:n], 0)


def test_decode_past_the_end_is_corrupt() -> None:
    with pytest.raises(CorruptRecord):
        decode_varint(b"\x02", 1)
    with pytest.raises(CorruptRecord):
        decode_uvarint(b"\x02", 5)


@pytest.mark.parametrize("n", [11, 12, 20, 1000])
def test_over_long_signed_is_corrupt(n: int) -> None:
    # n continuation bytes: never terminates within 10 bytes, whatever follows
    with pytest.raises(CorruptRecord):
        decode_varint(b"\x80" * n + b"\x00", 0)
    with pytest.raises(CorruptRecord):
        decode_varint(b"\xff" * n, 0)


@pytest.mark.parametrize("n", [11, 12, 20, 1000])
def test_over_long_unsigned_is_corrupt(n: int) -> None:
    with pytest.raises(CorruptRecord):
        decode_uvarint(b"\x80" * n + b"\x00", 0)
    with pytest.raises(CorruptRecord):
        decode_uvarint(b"\xff" * n, 0)


def test_ten_continuation_bytes_are_corrupt_even_if_terminated_later() -> None:
    assert decode_varint(b"\x80" * 9 + b"\x00", 0) == (0, 10)  # ten bytes: padded zero is allowed
    with pytest.raises(CorruptRecord):
        decode_varint(b"\x80" * 10 + b"\x00", 0)
    with pytest.raises(CorruptRecord):
        decode_uvarint(b"\x80" * 10 + b"\x00", 0)


def test_uvarint_max_bytes_is_honoured() -> None:
    data = uenc(1 << 40)  # 6 bytes
    assert decode_uvarint(data, 0, max_bytes=6)[0] == 1 << 40
    with pytest.raises(CorruptRecord):
        decode_uvarint(data, 0, max_bytes=5)
    with pytest.raises(CorruptRecord):
        decode_uvarint(b"\x80\x80\x00", 0, max_bytes=2)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 1 << 70])
def test_encode_outside_int64_is_rejected(value: int) -> None:
    with pytest.raises(ValueError):
        enc(value)


def test_tenth_byte_beyond_64_bits_is_corrupt() -> None:
    with pytest.raises(CorruptRecord):
        decode_varint(b"\xff" * 9 + b"\x7f", 0)
