"""Iggy message layouts (iggy.md A.5, B.5, C.9): SEND_MESSAGES payloads and POLL_MESSAGES replies
in each dialect, their checksums, the 0.8 server's send checks, and typed user headers."""

from __future__ import annotations

import struct
import zlib

import pytest
import xxhash

from bayou.protocols.iggy import batches
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import IggyError
from bayou.protocols.iggy.wire import decode_user_headers, enc_seed_headers, enc_user_headers

S, T = m.Identifier("s1"), m.Identifier("t1")
H = (m.UserHeader.of("k", m.HeaderKind.STRING, "v"),)
TWO = m.SendMessages(S, T, m.Partitioning.partition(0), (
    m.Message(b"hello", 0, (), 1_000), m.Message(b"world", 5, H, 1_013)))
ONE = m.SendMessages(S, T, m.Partitioning.partition(0), (m.Message(b"hello", 0, (), 1_000),))


def _err(fn: object, payload: bytes) -> Status:
    with pytest.raises(IggyError) as err:
        fn(payload)  # type: ignore[operator]
    return err.value.status


def _set(payload: bytes, at: int, raw: bytes) -> bytes:
    out = bytearray(payload)
    out[at : at + len(raw)] = raw
    return bytes(out)


# -- L send -------------------------------------------------------------------------------------


def _legacy_offsets(payload: bytes, count: int) -> tuple[int, int]:
    """(index table start, message area start)."""
    index = 4 + struct.unpack_from("<I", payload)[0]
    return index, index + 16 * count


def test_legacy_send_layout() -> None:
    payload = batches.encode_legacy_send(TWO)
    index, area = _legacy_offsets(payload, 2)
    first = 64 + 5
    second = 64 + 5 + len(enc_user_headers(H))
    assert struct.unpack_from("<IIQIIQ", payload, index) == (0, first, 0, 0, first + second, 0)
    assert payload[area : area + 8] == bytes(8)  # the client leaves the checksum to the server
    assert payload[area + 64 : area + 69] == b"hello"
    assert batches.decode_legacy_send(payload) == TWO


def test_legacy_send_accepts_a_correct_checksum_and_rejects_a_wrong_one() -> None:
    payload = batches.encode_legacy_send(ONE)
    _, area = _legacy_offsets(payload, 1)
    good = xxhash.xxh3_64_intdigest(payload[area + 8 :])
    assert batches.decode_legacy_send(_set(payload, area, struct.pack("<Q", good))) == ONE
    bad = _set(payload, area, struct.pack("<Q", good ^ 1))
    assert _err(batches.decode_legacy_send, bad) == Status.INVALID_MESSAGE_CHECKSUM


def test_legacy_send_checks_of_the_08_server() -> None:
    payload = batches.encode_legacy_send(TWO)
    index, area = _legacy_offsets(payload, 2)
    dec = batches.decode_legacy_send
    assert _err(dec, _set(payload, index, b"\x01")) == Status.NON_ZERO_OFFSET
    assert _err(dec, _set(payload, index + 8, b"\x01")) == Status.NON_ZERO_TIMESTAMP
    assert _err(dec, _set(payload, index + 16 + 4, struct.pack("<I", 10))) == Status.INVALID_MESSAGES_SIZE
    assert _err(dec, _set(payload, index + 4, struct.pack("<I", 10))) == Status.TOO_SMALL_MESSAGE
    assert _err(dec, _set(payload, area + 56, b"\x01")) == Status.INVALID_RESERVED_FIELD
    assert _err(dec, _set(payload, area + 52, struct.pack("<I", 6))) == Status.INVALID_MESSAGES_SIZE
    assert _err(dec, payload + b"\x00") == Status.INVALID_MESSAGES_SIZE
    assert _err(dec, payload[:-1]) == Status.INVALID_MESSAGES_SIZE
    assert _err(dec, payload[: area - 1]) == Status.INVALID_COMMAND
    no_messages = _set(payload, index - 4, bytes(4))
    assert _err(dec, no_messages) == Status.INVALID_MESSAGES_COUNT
    assert _err(dec, _set(payload, 0, struct.pack("<I", 17))) == Status.INVALID_COMMAND  # metadata length


def test_legacy_send_size_limits() -> None:
    many = tuple(m.UserHeader(f"{i:0>250}".encode(), b"v" * 250) for i in range(201))
    big_headers = m.SendMessages(S, T, m.Partitioning.balanced(), (m.Message(b"x", 0, many),))
    assert _err(batches.decode_legacy_send, batches.encode_legacy_send(big_headers)) == (
        Status.TOO_BIG_USER_HEADERS)
    huge = m.SendMessages(S, T, m.Partitioning.balanced(), (m.Message(bytes(batches.MAX_PAYLOAD + 1)),))
    assert _err(batches.decode_legacy_send, batches.encode_legacy_send(huge)) == (
        Status.TOO_BIG_MESSAGE_PAYLOAD)


# -- V send -------------------------------------------------------------------------------------


def _batch_at(payload: bytes) -> int:
    return 4 + struct.unpack_from("<I", payload)[0]


def test_vsr_send_layout_and_checksums() -> None:
    payload = batches.encode_vsr_send(TWO)
    at = _batch_at(payload)
    pid, bo, bt, origin, length, checksum, count = struct.unpack_from("<QQQQQQI", payload, at)
    assert (pid, bo, bt, origin, length, count) == (0, 0, 0, 1_000, len(payload) - at, 2)
    assert payload[at + 52 : at + 256] == bytes(204)
    frame = at + 256
    ck, _lo, _hi, od, td, hl, pl, rsv = struct.unpack_from("<QQQIIIIQ", payload, frame)
    assert (od, td, hl, pl, rsv) == (0, 0, 0, 5, 0)
    assert ck == xxhash.xxh3_64_intdigest(payload[frame + 8 : frame + 48 + 5])
    second = frame + 48 + 5
    assert struct.unpack_from("<IIII", payload, second + 24) == (1, 13, len(enc_user_headers(H)), 5)
    h = xxhash.xxh3_64(struct.pack("<QQQQQI", 0, 0, 0, 1_000, length, 2))
    h.update(payload[frame : frame + 8])
    h.update(payload[second : second + 8])
    assert checksum == h.intdigest()
    assert batches.decode_vsr_send(payload) == TWO


def test_vsr_send_errors() -> None:
    payload = batches.encode_vsr_send(TWO)
    at = _batch_at(payload)
    frame = at + 256
    dec = batches.decode_vsr_send
    assert _err(dec, _set(payload, frame + 48, b"H")) == Status.INVALID_MESSAGE_CHECKSUM
    assert _err(dec, _set(payload, at + 40, b"\x00\x00")) == Status.INVALID_BATCH_CHECKSUM
    assert _err(dec, _set(payload, at + 8, b"\x01")) == Status.INVALID_BATCH_CHECKSUM  # a stamped field
    assert _err(dec, _set(payload, at + 100, b"\x01")) == Status.INVALID_RESERVED_FIELD
    assert _err(dec, _set(payload, frame + 40, b"\x01")) == Status.INVALID_RESERVED_FIELD
    assert _err(dec, _set(payload, at - 4, struct.pack("<I", 3))) == Status.INVALID_MESSAGES_COUNT
    assert _err(dec, payload + b"\x00") == Status.INVALID_MESSAGES_SIZE
    assert _err(dec, payload[:-1]) == Status.INVALID_MESSAGES_SIZE
    assert _err(dec, payload[: at + 100]) == Status.INVALID_COMMAND
    shifted = batches._vsr_batch(ONE.messages, 0, 0, 0, [1])
    assert _err(dec, payload[:at] .replace(b"\x02\x00\x00\x00", b"\x01\x00\x00\x00") + shifted) == (
        Status.INVALID_FORMAT)


def test_vsr_send_batch_spans_at_most_u32_microseconds() -> None:
    wide = m.SendMessages(S, T, m.Partitioning.partition(0),
                          (m.Message(b"a", 1, (), 0), m.Message(b"b", 2, (), 1 << 32)))
    with pytest.raises(ValueError):
        batches.encode_vsr_send(wide)


# -- D send -------------------------------------------------------------------------------------


def test_seed_send_layout() -> None:
    req = m.SendMessages(S, T, m.Partitioning.partition(1), (m.Message(b"ab", 9, H),))
    headers = struct.pack("<I", 1) + b"k" + b"\x02" + struct.pack("<I", 1) + b"v"
    expected = (b"\x02\x02s1\x02\x02t1\x02\x04\x01\x00\x00\x00" + (9).to_bytes(16, "little")
                + struct.pack("<I", len(headers)) + headers + struct.pack("<I", 2) + b"ab")
    assert batches.encode_seed_send(req) == expected
    assert batches.decode_seed_send(expected) == req
    assert _err(batches.decode_seed_send, expected[:14]) == Status.INVALID_MESSAGES_COUNT
    assert _err(batches.decode_seed_send, expected[:-1]) == Status.INVALID_COMMAND


# -- poll replies -------------------------------------------------------------------------------

POLLED = m.PolledMessages(0, 9, (
    m.PolledMessage(7, 500, 100, 11, b"a"),
    m.PolledMessage(8, 500, 150, 12, b"bb", H),
    m.PolledMessage(9, 600, 160, 13, b"ccc")))


def test_legacy_poll_round_trip_and_checks() -> None:
    payload = batches.encode_legacy_polled(POLLED)
    assert payload[:16] == struct.pack("<IQI", 0, 9, 3)
    assert struct.unpack_from("<QQ", payload, 16 + 24) == (7, 500)
    assert batches.decode_legacy_polled(payload) == POLLED
    assert _err(batches.decode_legacy_polled, _set(payload, 16 + 64, b"z")) == Status.INVALID_MESSAGE_CHECKSUM
    assert _err(batches.decode_legacy_polled, _set(payload, 16 + 56, b"\x01")) == (
        Status.INVALID_RESERVED_FIELD)
    assert _err(batches.decode_legacy_polled, payload[:-1]) == Status.INVALID_COMMAND
    assert _err(batches.decode_legacy_polled, payload + b"\x00") == Status.INVALID_COMMAND


def test_empty_poll_is_the_16_byte_prefix_in_every_dialect() -> None:
    empty = m.PolledMessages(m.RESYNC_PARTITION, 0, ())
    for encode in (batches.encode_legacy_polled, batches.encode_vsr_polled, batches.encode_seed_polled):
        assert encode(empty) == struct.pack("<IQI", 0xFFFF_FFFF, 0, 0)


def _records(payload: bytes) -> list[tuple[int, int, int, int]]:
    """(base_offset, base_timestamp, origin, count) of each batch record in a V poll reply."""
    out, pos = [], 16
    while pos < len(payload):
        _, bo, bt, origin, length, _, count = struct.unpack_from("<QQQQQQI", payload, pos)
        out.append((bo, bt, origin, count))
        pos += length
    return out


def test_vsr_poll_groups_messages_by_server_timestamp() -> None:
    payload = batches.encode_vsr_polled(POLLED)
    assert _records(payload) == [(7, 500, 100, 2), (9, 600, 160, 1)]
    assert batches.decode_vsr_polled(payload) == POLLED


def test_vsr_poll_record_boundaries() -> None:
    gap = m.PolledMessages(1, 20, (m.PolledMessage(3, 5, 10, 1, b"a"), m.PolledMessage(8, 5, 12, 2, b"b")))
    assert _records(batches.encode_vsr_polled(gap)) == [(3, 5, 10, 2)]
    assert batches.decode_vsr_polled(batches.encode_vsr_polled(gap)) == gap
    wide = m.PolledMessages(1, 20, (m.PolledMessage(3, 5, 1 << 33, 1, b"a"),
                                    m.PolledMessage(4, 5, 0, 2, b"b")))
    assert _records(batches.encode_vsr_polled(wide)) == [(3, 5, 1 << 33, 1), (4, 5, 0, 1)]
    backwards = m.PolledMessages(1, 20, (m.PolledMessage(4, 5, 0, 1, b"a"),
                                         m.PolledMessage(3, 5, 0, 2, b"b")))
    assert len(_records(batches.encode_vsr_polled(backwards))) == 2
    assert batches.decode_vsr_polled(batches.encode_vsr_polled(wide)) == wide


def test_vsr_poll_checks() -> None:
    payload = batches.encode_vsr_polled(POLLED)
    assert _err(batches.decode_vsr_polled, _set(payload, 16 + 40, b"\x00")) == Status.INVALID_BATCH_CHECKSUM
    assert _err(batches.decode_vsr_polled, _set(payload, 16 + 256 + 48, b"z")) == (
        Status.INVALID_MESSAGE_CHECKSUM)
    assert _err(batches.decode_vsr_polled, _set(payload, 12, b"\x04")) == Status.INVALID_MESSAGES_COUNT
    assert _err(batches.decode_vsr_polled, payload[:-1]) == Status.INVALID_MESSAGES_SIZE


def test_seed_poll_layout_and_crc() -> None:
    one = m.PolledMessages(1, 3, (m.PolledMessage(3, 77, 77, 5, b"xyz", H),))
    payload = batches.encode_seed_polled(one)
    headers = enc_seed_headers(H)
    assert payload == (struct.pack("<IQI", 1, 3, 1) + struct.pack("<QBQ", 3, 1, 77)
                       + (5).to_bytes(16, "little")
                       + struct.pack("<I", zlib.crc32(b"xyz")) + struct.pack("<I", len(headers)) + headers
                       + struct.pack("<I", 3) + b"xyz")
    assert batches.decode_seed_polled(payload) == one
    assert _err(batches.decode_seed_polled, payload[:-1] + b"Z") == Status.INVALID_MESSAGE_CHECKSUM


# -- user headers -------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "value"), [
    (m.HeaderKind.RAW, b"\x00\xff"), (m.HeaderKind.STRING, "héllo"), (m.HeaderKind.BOOL, True),
    (m.HeaderKind.BOOL, False), (m.HeaderKind.INT8, -128), (m.HeaderKind.INT16, -2),
    (m.HeaderKind.INT32, 1 << 30),
    (m.HeaderKind.INT64, -(1 << 63)), (m.HeaderKind.INT128, -(1 << 127)), (m.HeaderKind.UINT8, 255),
    (m.HeaderKind.UINT16, 65535), (m.HeaderKind.UINT32, 1 << 31), (m.HeaderKind.UINT64, (1 << 64) - 1),
    (m.HeaderKind.UINT128, (1 << 128) - 1), (m.HeaderKind.FLOAT32, 1.5), (m.HeaderKind.FLOAT64, -0.1),
])
def test_every_header_kind_round_trips(kind: m.HeaderKind, value: m.HeaderValue) -> None:
    h = m.UserHeader.of("key", kind, value)
    assert h.name == "key" and h.value_kind == kind
    (back,) = decode_user_headers(enc_user_headers((h,)))
    assert back == h and back.typed_value == value


def test_header_value_errors() -> None:
    for kind, raw, status in [(0, b"x", Status.INVALID_HEADER_KIND), (16, b"x", Status.INVALID_HEADER_KIND),
                              (3, b"\x02", Status.INVALID_HEADER_VALUE),
                              (3, b"", Status.INVALID_HEADER_VALUE),
                              (6, b"\x00" * 3, Status.INVALID_HEADER_VALUE),
                              (8, b"\x00" * 8, Status.INVALID_HEADER_VALUE),
                              (2, b"\xff", Status.INVALID_HEADER_VALUE)]:
        with pytest.raises(IggyError) as err:
            m.decode_header_value(kind, raw)
        assert err.value.status == status
    for kind, value in [(m.HeaderKind.RAW, "s"), (m.HeaderKind.STRING, b"b"), (m.HeaderKind.BOOL, 1),
                        (m.HeaderKind.INT32, "1")]:
        with pytest.raises(ValueError):
            m.encode_header_value(kind, value)


def test_header_block_structure() -> None:
    def tlv(kind: int, raw: bytes) -> bytes:
        return bytes([kind]) + struct.pack("<I", len(raw)) + raw
    forward = tlv(2, b"k") + tlv(200, b"future")
    (h,) = decode_user_headers(forward)
    assert h.value_kind == 200  # unknown kinds travel on (Iggy: forwardable)
    with pytest.raises(IggyError):
        _ = h.typed_value
    for bad, status in [(tlv(0, b"k") + tlv(2, b"v"), Status.INVALID_HEADER_KIND),
                        (tlv(2, b"") + tlv(2, b"v"), Status.INVALID_FORMAT),
                        (tlv(2, b"k" * 256) + tlv(2, b"v"), Status.INVALID_FORMAT),
                        (tlv(2, b"k"), Status.INVALID_FORMAT),
                        (tlv(2, b"k") + tlv(2, b"v")[:-1], Status.INVALID_FORMAT)]:
        with pytest.raises(IggyError) as err:
            decode_user_headers(bad)
        assert err.value.status == status
    with pytest.raises(ValueError):
        enc_user_headers((m.UserHeader(b"", b"v"),))
    non_string = m.UserHeader((7).to_bytes(4, "little"), b"v", m.HeaderKind.INT32, m.HeaderKind.RAW)
    assert non_string.name is None
    assert decode_user_headers(enc_user_headers((non_string,))) == (non_string,)
