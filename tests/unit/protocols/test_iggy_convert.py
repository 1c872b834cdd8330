"""Iggy messages to and from bayou records: ids, timestamps and typed user headers survive."""

from __future__ import annotations

import struct

from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.convert import (
    ORIGIN_TIMESTAMP,
    header_from_record,
    message_to_record,
    record_to_polled,
    send_to_records,
)
from bayou.records.model import Record

HEADERS = (
    m.UserHeader.of("trace", m.HeaderKind.STRING, "abc"),
    m.UserHeader.of("retries", m.HeaderKind.UINT8, 3),
    m.UserHeader.of("ok", m.HeaderKind.BOOL, True),
    m.UserHeader((42).to_bytes(4, "little"), b"\x01", m.HeaderKind.INT32, m.HeaderKind.RAW),
)
MSG = m.Message(b"payload", (1 << 100) + 7, HEADERS, 1_700_000_000_123_456)


def test_message_to_record() -> None:
    r = message_to_record(MSG)
    assert (r.value, r.key, r.message_id, r.timestamp) == (b"payload", None, MSG.id, 1_700_000_000_123)
    assert r.headers == (
        (ORIGIN_TIMESTAMP, struct.pack("<Q", 1_700_000_000_123_456)),
        ("iggy.h.trace", b"\x02abc"),
        ("iggy.h.retries", b"\x09\x03"),
        ("iggy.h.ok", b"\x03\x01"),
        ("iggy.hk.6.2a000000", b"\x01\x01"),
    )


def test_round_trip_through_a_record() -> None:
    r = message_to_record(MSG)
    polled = record_to_polled(Record(r.value, r.key, r.timestamp, r.headers, r.message_id, 41),
                              timestamp=1_700_000_000_200_000)
    assert polled == m.PolledMessage(41, 1_700_000_000_200_000, MSG.origin_timestamp, MSG.id, b"payload",
                                     HEADERS)
    assert record_to_polled(r, timestamp=5, offset=9).offset == 9


def test_id_zero_lets_the_server_choose() -> None:
    r = message_to_record(m.Message(b"x"))
    assert r.message_id is None
    assert record_to_polled(r, timestamp=1).id == 0


def test_messages_key_becomes_the_record_key() -> None:
    send = m.SendMessages(m.Identifier("s"), m.Identifier("t"), m.Partitioning.messages_key(b"user-1"),
                          (m.Message(b"a"), m.Message(b"b")))
    assert [r.key for r in send_to_records(send)] == [b"user-1", b"user-1"]
    by_partition = m.SendMessages(m.Identifier("s"), m.Identifier("t"), m.Partitioning.partition(1),
                                  (m.Message(b"a"),))
    assert [r.key for r in send_to_records(by_partition)] == [None]


def test_records_from_other_protocols() -> None:
    foreign = Record(b"v", b"k", 1_000, (("content-type", b"json"), ("empty", b""), ("x" * 300, b"1"),
                                         ("iggy.h.broken", b""), ("iggy.hk.z.00", b"\x01v"),
                                         ("iggy.other", b"v")))
    polled = record_to_polled(foreign, timestamp=7)
    assert polled.origin_timestamp == 1_000_000  # ms -> us when no exact origin was stored
    assert polled.headers == (m.UserHeader(b"bayou.key", b"k", m.HeaderKind.STRING, m.HeaderKind.RAW),  # key
                              m.UserHeader(b"content-type", b"json", m.HeaderKind.STRING, m.HeaderKind.RAW))


def test_records_iggy_cannot_carry_are_enveloped() -> None:
    """A header of another protocol Iggy cannot carry (empty value, name over 255 bytes) or a key
    over 255 bytes: to bayou's SDK the whole record travels as bayou's envelope, exactly, not with
    parts dropped (a plain Iggy client gets the value with what fits: test above)."""
    from bayou.records.iggy import decode_envelope

    for key, headers in ((b"k", (("empty", b""),)), (b"k", (("x" * 300, b"1"),)), (b"k" * 256, ())):
        rec = Record(b"v", key, 1_000, (("ok", b"1"), *headers, ("iggy.other", b"v")))
        polled = record_to_polled(rec, timestamp=7, envelope=True)
        assert polled.headers == (m.UserHeader(b"bayou.record", b"\x01", m.HeaderKind.STRING,
                                               m.HeaderKind.RAW),)
        assert decode_envelope(polled.payload) == (key, b"v", (("ok", b"1"), *headers))
        back = message_to_record(m.Message(polled.payload, 0, polled.headers, origin_timestamp=5_000))
        assert (back.key, back.value, back.headers[1:]) == (key, b"v", (("ok", b"1"), *headers))


def test_header_from_record_limits() -> None:
    assert header_from_record("iggy.h.k", b"\x02") is None  # a value of 0 bytes cannot travel
    assert header_from_record("iggy.h.k", b"\x00v") is None  # kind 0 is invalid
    assert header_from_record("iggy.h." + "k" * 256, b"\x02v") is None
    assert header_from_record("iggy.h.k", b"\x02v") == m.UserHeader(b"k", b"v", 2, 2)
