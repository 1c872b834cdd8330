"""bayou's record envelope: any Kafka record (key of any length or null, empty or null value,
headers with any name and an empty, null or long value) round-trips exactly through the SDK's send
encoding, the broker's stored Iggy frames (what V1, Cursus and TANK read) and a poll reply."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.client.wire import polled_to_arrow, send_frame
from bayou.errors import CorruptRecord
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import decode_legacy_send, encode_legacy_polled
from bayou.protocols.iggy.stored import frames_from_messages
from bayou.records.iggy import decode_envelope, decode_frames, encode_envelope, fits_iggy

STREAM, TOPIC = m.Identifier("default"), m.Identifier("t")

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=300), maybe_bytes), max_size=4)
records = st.lists(st.tuples(maybe_bytes, maybe_bytes, headers), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(maybe_bytes, maybe_bytes, headers)
def test_envelope_round_trip(key: bytes | None, value: bytes | None,
                             hs: list[tuple[str, bytes | None]]) -> None:
    assert decode_envelope(encode_envelope(key, value, hs)) == (key, value, tuple(hs))


def test_fits_iggy() -> None:
    assert fits_iggy(b"k", b"v", [("h", b"v")]) and fits_iggy(None, b"v") and fits_iggy(b"k" * 255, b"v")
    for key, value, hs in ((b"", b"v", []), (b"k" * 256, b"v", []), (b"k", b"", []), (b"k", None, []),
                           (None, b"v", [("h", b"")]), (None, b"v", [("h", None)]),
                           (None, b"v", [("h", b"x" * 256)]), (None, b"v", [("", b"v")]),
                           (None, b"v", [("é" * 128, b"v")])):
        assert not fits_iggy(key, value, hs), (key, value, hs)


@pytest.mark.parametrize("bad", [b"", b"\x02", b"\x02k\x05", b"\x01\x01\x05", b"\x01\x01\x00junk",
                                 b"\x01\x01\x01\x04\xff\xfe\x01\x00"])
def test_broken_envelope_is_corrupt_record(bad: bytes) -> None:
    with pytest.raises(CorruptRecord):
        decode_envelope(bad)


def _send_messages(recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]
                   ) -> tuple[m.Message, ...]:
    frame = send_frame(STREAM, TOPIC, 0, [v for _k, v, _h in recs], [k for k, _v, _h in recs],
                       [h for _k, _v, h in recs])
    return decode_legacy_send(frame[8:]).messages  # the broker's own decoder, with Iggy's checks


@settings(max_examples=100, deadline=None)
@given(records)
def test_sdk_send_to_stored_frames_and_back(
        recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> None:
    msgs = _send_messages(recs)
    assert all(msg.payload for msg in msgs)  # Iggy's rule holds: no empty payload on the wire
    # what the broker stores, read as records by V1, Cursus and TANK: null shows as empty there
    frames, origin, _stride = frames_from_messages(msgs, now_us=1_000)
    stored = decode_frames(frames, 0, len(frames), len(msgs), base_offset=0, append_ms=1,
                           origin_base_us=origin)
    assert [(r.key, r.value, r.headers[1:]) for r in stored] == [
        (k, v or b"", tuple(("iggy.h." + n, b"\x01" + (hv or b"")) for n, hv in h)) for k, v, h in recs]
    # what a poll serves back to the SDK (the stored message as sent): exact
    polled = encode_legacy_polled(m.PolledMessages(0, len(msgs) - 1, tuple(
        m.PolledMessage(i, 1, 1, 0, msg.payload, msg.headers) for i, msg in enumerate(msgs))))
    batch, _current = polled_to_arrow(polled, "t", 0)
    assert batch.column("key").to_pylist() == [k for k, _v, _h in recs]
    assert batch.column("value").to_pylist() == [v for _k, v, _h in recs]
    assert [[(h["key"], h["value"]) for h in row] for row in batch.column("headers").to_pylist()] == [
        h for _k, _v, h in recs]
