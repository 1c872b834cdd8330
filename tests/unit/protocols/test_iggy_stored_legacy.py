"""The column-wise (numpy) L paths of bayou.protocols.iggy.stored give exactly what the per-message
paths give: ``legacy_send_frames`` == ``frames_from_messages(decode_legacy_send(...))`` and
``legacy_messages_uniform`` == ``legacy_messages``; anything they do not handle falls back."""

from __future__ import annotations

import xxhash
from hypothesis import given
from hypothesis import strategies as st

from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import (
    L_INDEX,
    POLL_PREFIX,
    V_FRAME,
    decode_legacy_polled,
    decode_legacy_send,
    decode_vsr_polled,
    encode_legacy_send,
    read_send_metadata,
)
from bayou.protocols.iggy.framing import IggyError
from bayou.protocols.iggy.stored import (
    frames_from_messages,
    legacy_messages,
    legacy_messages_uniform,
    legacy_send_frames,
    vsr_record,
)
from bayou.records.iggy import frame_positions

S, T = m.Identifier("s"), m.Identifier("t")
T0 = 1_795_316_918_019_709
NOW = T0 + 1_000_000


def send_body(messages: tuple[m.Message, ...]) -> tuple[bytes, int, int]:
    body = encode_legacy_send(m.SendMessages(S, T, m.Partitioning.partition(0), messages))
    _s, _t, _p, count, pos = read_send_metadata(body)
    return body, pos, count


def test_uniform_send_matches_the_per_message_path() -> None:
    msgs = tuple(m.Message(b"x%03d" % i, 1000 + i, (), T0 + 7 * i) for i in range(50))
    body, pos, count = send_body(msgs)
    fast = legacy_send_frames(body, pos, count, now_us=NOW)
    assert fast is not None
    slow = frames_from_messages(decode_legacy_send(body).messages, now_us=NOW)
    assert fast == slow


def test_zero_ids_are_minted_as_uuid4_with_valid_checksums() -> None:
    msgs = tuple(m.Message(b"abc", 0, (), 0) for _ in range(20))
    body, pos, count = send_body(msgs)
    fast = legacy_send_frames(body, pos, count, now_us=NOW)
    assert fast is not None
    frames, origin, stride = fast
    assert origin == NOW and stride == 48 + 3
    ids = set()
    for p in range(0, len(frames), stride):
        ck, lo, hi, od, td, hl, pl, rsv = V_FRAME.unpack_from(frames, p)
        assert ck == xxhash.xxh3_64_intdigest(frames[p + 8 : p + stride])
        assert (od, td, hl, pl, rsv) == (p // stride, 0, 0, 3, 0)
        value = lo | hi << 64
        assert (value >> 76) & 0xF == 4 and (value >> 62) & 0x3 == 2
        ids.add(value)
    assert len(ids) == 20


def test_sends_it_does_not_take_fall_back() -> None:
    # a header block that does not decode (kind 0 in the second message): the slow path reports it
    hdr = (m.Message(b"a", 1, (m.UserHeader.of("k", m.HeaderKind.STRING, "v"),), T0),) * 2
    body, pos, count = send_body(hdr)
    bad = bytearray(body)
    bad[len(bad) - 6] = 0  # the last message's value kind byte (kind, u32 length, "v")
    assert bad[len(bad) - 5:] == b"\x01\0\0\0v"
    assert legacy_send_frames(bytes(bad), pos, count, now_us=NOW) is None
    body, pos, count = send_body((m.Message(b"a", 1, (), T0), m.Message(b"b", 2, (), T0)))
    bad = bytearray(body)
    L_INDEX.pack_into(bad, pos, 1, 65, 0)  # non-zero index offset field: the slow path reports it
    assert legacy_send_frames(bytes(bad), pos, count, now_us=NOW) is None


def _slow(body: bytes) -> tuple[bytes, int, int] | None:
    try:
        return frames_from_messages(decode_legacy_send(body).messages, now_us=NOW)
    except IggyError:
        return None


header = st.builds(m.UserHeader, st.binary(min_size=1, max_size=12), st.binary(min_size=1, max_size=12),
                   st.integers(1, 15), st.integers(1, 15))
message = st.tuples(st.binary(min_size=1, max_size=150), st.lists(header, max_size=3),
                    st.integers(0, 10**6))


@given(messages=st.lists(message, min_size=1, max_size=25))
def test_sends_of_any_sizes_and_headers_match_the_per_message_path(
        messages: list[tuple[bytes, list[m.UserHeader], int]]) -> None:
    msgs = tuple(m.Message(payload, 1000 + i, tuple(hs), T0 + origin)
                 for i, (payload, hs, origin) in enumerate(messages))
    body, pos, count = send_body(msgs)
    fast = legacy_send_frames(body, pos, count, now_us=NOW)
    assert fast is not None
    assert fast == _slow(body)


@given(messages=st.lists(message, min_size=1, max_size=8), data=st.data())
def test_a_damaged_send_is_taken_only_as_the_per_message_path_takes_it(
        messages: list[tuple[bytes, list[m.UserHeader], int]], data: st.DataObject) -> None:
    msgs = tuple(m.Message(payload, 1000 + i, tuple(hs), T0 + origin)
                 for i, (payload, hs, origin) in enumerate(messages))
    body, pos, count = send_body(msgs)
    bad = bytearray(body)
    at = data.draw(st.integers(pos, len(bad) - 1))
    bad[at] ^= data.draw(st.integers(1, 255))
    fast = legacy_send_frames(bytes(bad), pos, count, now_us=NOW)
    slow = _slow(bytes(bad))
    if slow is None:  # the per-message path refuses it: the fast path must leave it to it
        assert fast is None
    else:
        assert fast is None or fast == slow


@given(keys=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=30),
       key_size=st.integers(1, 40), extra=st.booleans())
def test_keyed_sends_of_one_size_match_the_per_message_path(keys: list[bytes], key_size: int,
                                                             extra: bool) -> None:
    """Bayou's SDK sends a record's key as a user header: keys of one length keep every message
    the same size, and the column-wise path takes them (or falls back: never a different store)."""
    fixed = [(k * key_size)[:key_size] for k in keys]
    headers = [(m.UserHeader(b"bayou.key", k, m.HeaderKind.RAW, m.HeaderKind.RAW),)
               + ((m.UserHeader.of("trace", m.HeaderKind.STRING, "t-1"),) if extra else ())
               for k in fixed]
    msgs = tuple(m.Message(b"v%04d" % i, 1000 + i, h, T0 + i) for i, h in enumerate(headers))
    body, pos, count = send_body(msgs)
    fast = legacy_send_frames(body, pos, count, now_us=NOW)
    assert fast is not None
    assert fast == frames_from_messages(decode_legacy_send(body).messages, now_us=NOW)


def test_uniform_poll_matches_the_per_message_path() -> None:
    msgs = tuple(m.Message(b"y%03d" % i, 77 + i, (), T0 + 5 * i) for i in range(30))
    frames, origin, stride = frames_from_messages(msgs, now_us=NOW)
    positions = frame_positions(frames, 0, len(frames), 30, stride)
    for i0, i1 in ((0, 30), (3, 17), (29, 30)):
        fast = legacy_messages_uniform(frames, 0, stride, i0, i1, base_offset=500, append_us=NOW,
                                       origin_base=origin)
        slow = b"".join(legacy_messages(frames, positions, i0, i1, base_offset=500, append_us=NOW,
                                        origin_base=origin))
        assert fast == slow
        polled = decode_legacy_polled(POLL_PREFIX.pack(0, 529, i1 - i0) + fast)  # verifies checksums
        assert [p.offset for p in polled.messages] == list(range(500 + i0, 500 + i1))
        assert [p.origin_timestamp for p in polled.messages] == [T0 + 5 * i for i in range(i0, i1)]


def test_a_v_record_from_walked_or_ranged_positions_is_the_same() -> None:
    """``vsr_record`` takes ``frame_positions``' range (a recorded stride) or its walked list."""
    messages = [m.Message(b"p%03d" % i, i + 1) for i in range(20)]
    frames, _base, stride = frames_from_messages(messages, now_us=5)
    walked = frame_positions(frames, 0, len(frames), 20)
    ranged = frame_positions(frames, 0, len(frames), 20, stride)
    assert isinstance(ranged, range) and not isinstance(walked, range) and list(ranged) == walked
    for i0, i1 in ((0, 20), (3, 9), (19, 20)):
        assert vsr_record(1, frames, ranged, i0, i1, base_offset=7, append_us=9, origin_base=5) == \
            vsr_record(1, frames, walked, i0, i1, base_offset=7, append_us=9, origin_base=5)


def test_a_v_record_of_few_or_many_frames_carries_checksums_a_0_9_client_verifies() -> None:
    """The batch checksum chains the frames' checksums, gathered with slices for a few frames and
    with numpy for more: both give records whose checksums verify."""
    messages = [m.Message(b"q%03d" % i, i + 1) for i in range(20)]
    frames, origin, stride = frames_from_messages(messages, now_us=5)
    for positions in (frame_positions(frames, 0, len(frames), 20, stride),
                      frame_positions(frames, 0, len(frames), 20)):
        for i0, i1 in [(0, n) for n in range(1, 21)] + [(5, 14), (11, 20)]:
            record = vsr_record(2, frames, positions, i0, i1, base_offset=100, append_us=9,
                                origin_base=origin)
            polled = decode_vsr_polled(POLL_PREFIX.pack(2, 119, i1 - i0) + record)  # checksums verified
            assert [p.offset for p in polled.messages] == list(range(100 + i0, 100 + i1))
