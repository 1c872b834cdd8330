"""The column-wise (numpy) L paths of bayou.protocols.iggy.stored give exactly what the per-message
paths give: ``legacy_send_frames`` == ``frames_from_messages(decode_legacy_send(...))`` and
``legacy_messages_uniform`` == ``legacy_messages``; anything they do not handle falls back."""

from __future__ import annotations

import xxhash

from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import (
    L_INDEX,
    POLL_PREFIX,
    V_FRAME,
    decode_legacy_polled,
    decode_legacy_send,
    encode_legacy_send,
    read_send_metadata,
)
from bayou.protocols.iggy.stored import (
    frames_from_messages,
    legacy_messages,
    legacy_messages_uniform,
    legacy_send_frames,
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


def test_other_sends_fall_back() -> None:
    mixed = (m.Message(b"a", 1, (), T0), m.Message(b"bb", 2, (), T0))
    body, pos, count = send_body(mixed)
    assert legacy_send_frames(body, pos, count, now_us=NOW) is None  # sizes differ
    hdr = (m.Message(b"a", 1, (m.UserHeader.of("k", m.HeaderKind.STRING, "v"),), T0),)
    body, pos, count = send_body(hdr)
    assert legacy_send_frames(body, pos, count, now_us=NOW) is None  # user headers
    body, pos, count = send_body((m.Message(b"a", 1, (), T0), m.Message(b"b", 2, (), T0)))
    bad = bytearray(body)
    L_INDEX.pack_into(bad, pos, 1, 65, 0)  # non-zero index offset field: the slow path reports it
    assert legacy_send_frames(bytes(bad), pos, count, now_us=NOW) is None


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
