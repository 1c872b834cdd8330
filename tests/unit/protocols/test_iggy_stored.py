"""bayou.protocols.iggy.stored: between Iggy wire messages and the frames bayou stores.

The producer side is the codec's own client encoder (``encode_vsr_send``, what apache-iggy 0.9
writes); the consumer side is the codec's client decoders (``decode_vsr_polled``,
``decode_legacy_polled``), which verify every checksum they meet."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable

import pytest
import xxhash

from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import (
    POLL_PREFIX,
    V_BATCH_SIZE,
    V_FRAME,
    V_FRAME_SIZE,
    decode_legacy_polled,
    decode_vsr_polled,
    encode_vsr_send,
    read_send_metadata,
)
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import IggyError
from bayou.protocols.iggy.stored import (
    frames_from_messages,
    legacy_messages,
    mint_uuid4,
    vsr_record,
    vsr_send_frames,
)
from bayou.protocols.iggy.wire import enc_user_headers
from bayou.records.iggy import frame_positions

S, T = m.Identifier("s"), m.Identifier("t")
HDR = m.UserHeader.of("k", m.HeaderKind.STRING, "v")
T0 = 1_795_316_918_019_709
UNIFORM = tuple(m.Message(b"p%02d" % i, 100 + i, (), T0 + 3 * i) for i in range(5))
MIXED = (m.Message(b"hello", 7, (), T0), m.Message(b"world", 42, (HDR,), T0 + 13),
         m.Message(b"m3", 9, (), T0 + 426), m.Message(b"late" * 30, 10, (), T0 + 11093))


def body_of(messages: tuple[m.Message, ...]) -> tuple[bytearray, int, int]:
    """(SEND body, batch start, count) as apache-iggy 0.9 writes it."""
    body = encode_vsr_send(m.SendMessages(S, T, m.Partitioning.partition(0), messages))
    _s, _t, _p, count, pos = read_send_metadata(body)
    return bytearray(body), pos, count


def checked_frames(data: bytes) -> list[tuple[int, int, int, bytes, bytes]]:
    """(id, offset_delta, timestamp_delta, payload, headers) per frame, each checksum verified."""
    out = []
    positions = frame_positions(data, 0, len(data), _count(data))
    for a, b in itertools.pairwise(positions):
        ck, lo, hi, od, td, _hl, pl, rsv = V_FRAME.unpack_from(data, a)
        assert rsv == 0 and ck == xxhash.xxh3_64_intdigest(data[a + 8 : b])
        body = a + V_FRAME_SIZE
        out.append((lo | hi << 64, od, td, data[body : body + pl], data[body + pl : b]))
    return out


def _count(data: bytes) -> int:
    n = pos = 0
    while pos < len(data):
        hl, pl = struct.unpack_from("<II", data, pos + 32)
        pos += V_FRAME_SIZE + hl + pl
        n += 1
    return n


def counter(start: int = 1000) -> Callable[[], int]:
    it = itertools.count(start)
    return lambda: next(it)


# -- vsr_send_frames ----------------------------------------------------------------------------


@pytest.mark.parametrize("messages", [UNIFORM, MIXED, UNIFORM[:1]], ids=["uniform", "mixed", "one"])
def test_accepts_what_the_client_writes(messages: tuple[m.Message, ...]) -> None:
    body, pos, count = body_of(messages)
    frames, origin, stride = vsr_send_frames(bytes(body), pos, count)
    assert frames == bytes(body[pos + V_BATCH_SIZE :])  # stored as sent
    assert origin == min(x.origin_timestamp for x in messages)
    sizes = {V_FRAME_SIZE + len(x.payload) + len(enc_user_headers(x.headers)) for x in messages}
    assert stride == (sizes.pop() if len(sizes) == 1 else 0)
    assert [(i, od, origin + td, p) for i, od, td, p, _h in checked_frames(frames)] == [
        (x.id, n, x.origin_timestamp, x.payload) for n, x in enumerate(messages)]


@pytest.mark.parametrize("messages", [UNIFORM, MIXED], ids=["uniform", "mixed"])
def test_mints_ids_for_id_0_with_valid_checksums(messages: tuple[m.Message, ...]) -> None:
    zeroed = tuple(m.Message(x.payload, 0 if i % 2 == 0 else x.id, x.headers, x.origin_timestamp)
                   for i, x in enumerate(messages))
    body, pos, count = body_of(zeroed)
    frames, _origin, _stride = vsr_send_frames(bytes(body), pos, count, mint=counter())
    got = checked_frames(frames)
    assert [g[0] for g in got] == [1000 + i // 2 if i % 2 == 0 else x.id for i, x in enumerate(zeroed)]
    assert [(g[1], g[3], g[4]) for g in got] == [
        (i, x.payload, enc_user_headers(x.headers)) for i, x in enumerate(zeroed)]


def test_minted_ids_are_uuid4() -> None:
    for _ in range(20):
        u = mint_uuid4()
        assert 0 < u < 2**128
        assert (u >> 76) & 0xF == 4  # version
        assert (u >> 62) & 0x3 == 2  # variant


def _frame_at(i: int) -> Callable[[bytearray, int], int]:
    def start(b: bytearray, pos: int) -> int:
        at = pos + V_BATCH_SIZE
        for _ in range(i):
            hl, pl = struct.unpack_from("<II", b, at + 32)
            at += V_FRAME_SIZE + hl + pl
        return at
    return start


def _reseal(b: bytearray, at: int) -> None:
    """Recompute one frame's checksum after a deliberate change (so the change itself is judged)."""
    hl, pl = struct.unpack_from("<II", b, at + 32)
    struct.pack_into("<Q", b, at, xxhash.xxh3_64_intdigest(bytes(b[at + 8 : at + V_FRAME_SIZE + hl + pl])))


def _c_reserved_batch(b: bytearray, pos: int) -> None:
    b[pos + 255] = 1


def _c_length(b: bytearray, pos: int) -> None:
    struct.pack_into("<Q", b, pos + 32, len(b) - pos - 1)


def _c_count(b: bytearray, pos: int) -> None:
    struct.pack_into("<I", b, pos + 48, 99)


def _c_frame_reserved(b: bytearray, pos: int) -> None:
    struct.pack_into("<Q", b, _frame_at(1)(b, pos) + 40, 7)


def _c_frame_checksum(b: bytearray, pos: int) -> None:
    b[_frame_at(2)(b, pos)] ^= 1


def _c_payload(b: bytearray, pos: int) -> None:
    b[_frame_at(1)(b, pos) + V_FRAME_SIZE] ^= 1


def _c_offset_delta(b: bytearray, pos: int) -> None:
    at = _frame_at(1)(b, pos)
    struct.pack_into("<I", b, at + 24, 5)
    _reseal(b, at)


def _c_frame_past_batch(b: bytearray, pos: int) -> None:
    struct.pack_into("<I", b, _frame_at(0)(b, pos) + 36, 10**6)


def _c_batch_checksum(b: bytearray, pos: int) -> None:
    b[pos + 40] ^= 1


def _c_batch_field(b: bytearray, pos: int) -> None:
    struct.pack_into("<Q", b, pos, 3)  # partition id changed after the batch checksum


CORRUPTIONS: dict[str, tuple[Callable[[bytearray, int], None], Status]] = {
    "batch reserved byte": (_c_reserved_batch, Status.INVALID_RESERVED_FIELD),
    "batch length": (_c_length, Status.INVALID_MESSAGES_SIZE),
    "batch count": (_c_count, Status.INVALID_MESSAGES_COUNT),
    "frame reserved field": (_c_frame_reserved, Status.INVALID_RESERVED_FIELD),
    "frame checksum": (_c_frame_checksum, Status.INVALID_MESSAGE_CHECKSUM),
    "payload after checksum": (_c_payload, Status.INVALID_MESSAGE_CHECKSUM),
    "offset delta": (_c_offset_delta, Status.INVALID_FORMAT),
    "frame past the batch": (_c_frame_past_batch, Status.INVALID_MESSAGES_SIZE),
    "batch checksum": (_c_batch_checksum, Status.INVALID_BATCH_CHECKSUM),
    "batch field": (_c_batch_field, Status.INVALID_BATCH_CHECKSUM),
}


@pytest.mark.parametrize("messages", [UNIFORM, MIXED], ids=["uniform", "mixed"])
@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_rejects_each_corruption(messages: tuple[m.Message, ...], case: str) -> None:
    corrupt, status = CORRUPTIONS[case]
    body, pos, count = body_of(messages)
    corrupt(body, pos)
    with pytest.raises(IggyError) as err:
        vsr_send_frames(bytes(body), pos, count)
    assert err.value.status == status


def test_rejects_an_empty_payload_and_a_short_batch() -> None:
    body, pos, count = body_of((m.Message(b"x", 1), m.Message(b"", 2)))
    with pytest.raises(IggyError) as err:
        vsr_send_frames(bytes(body), pos, count)
    assert err.value.status == Status.EMPTY_MESSAGE_PAYLOAD
    body, pos, count = body_of(UNIFORM)
    for cut in (pos + 10, pos + V_BATCH_SIZE - 1):
        with pytest.raises(IggyError) as err:
            vsr_send_frames(bytes(body[:cut]), pos, count)
        assert err.value.status == Status.INVALID_COMMAND
    with pytest.raises(IggyError) as err:
        vsr_send_frames(bytes(body) + b"\x00", pos, count)
    assert err.value.status == Status.INVALID_MESSAGES_SIZE
    with pytest.raises(IggyError) as err:
        vsr_send_frames(bytes(body), pos, count + 1)  # metadata and batch disagree
    assert err.value.status == Status.INVALID_MESSAGES_COUNT


# -- frames_from_messages -----------------------------------------------------------------------


def test_frames_from_messages() -> None:
    msgs = (m.Message(b"a", 0, (HDR,), T0 + 50), m.Message(b"bb", 77, (), T0), m.Message(b"c", 0, (), 0))
    frames, origin, stride = frames_from_messages(msgs, now_us=T0 + 99, mint=counter(5))
    assert (origin, stride) == (T0, 0)
    assert checked_frames(frames) == [
        (5, 0, 50, b"a", enc_user_headers((HDR,))), (77, 1, 0, b"bb", b""), (6, 2, 99, b"c", b"")]


def test_frames_from_messages_of_one_size_report_it() -> None:
    frames, _origin, stride = frames_from_messages(UNIFORM, now_us=0)
    assert stride == V_FRAME_SIZE + 3 and len(frames) == 5 * stride


def test_frames_from_messages_clamps_a_wild_origin_spread() -> None:
    msgs = (m.Message(b"a", 1, (), T0), m.Message(b"b", 2, (), T0 + 2**40))
    frames, _origin, _stride = frames_from_messages(msgs, now_us=0)
    assert [g[2] for g in checked_frames(frames)] == [0, 2**32 - 1]


def test_frames_from_messages_refuses_an_empty_payload() -> None:
    with pytest.raises(IggyError) as err:
        frames_from_messages((m.Message(b"a"), m.Message(b"")), now_us=1)
    assert err.value.status == Status.EMPTY_MESSAGE_PAYLOAD


# -- serving stored frames ----------------------------------------------------------------------

APPEND = 1_795_316_918_019_873


def as_tuple(x: m.PolledMessage) -> tuple[int, int, int, int, bytes, m.Headers]:
    return x.offset, x.timestamp, x.origin_timestamp, x.id, x.payload, x.headers


def served(messages: tuple[m.Message, ...], i0: int, i1: int) -> list[tuple[int, m.Message]]:
    return [(i, messages[i]) for i in range(i0, i1)]

SIZES = {
    "uniform": UNIFORM,
    "mixed": MIXED,
    # first frame as long as the average one: a stride guess from the ends alone would be wrong
    "average first": (m.Message(b"x" * 12, 1), m.Message(b"y" * 2, 2), m.Message(b"z" * 22, 3)),
}


def stored(messages: tuple[m.Message, ...]) -> tuple[bytes, list[int], int]:
    body, pos, count = body_of(messages)
    frames, origin, _stride = vsr_send_frames(bytes(body), pos, count)
    data = b"\xee" * 61 + frames + b"\xee" * 5  # frames sit inside a larger fetch buffer
    return data, frame_positions(data, 61, 61 + len(frames), count), origin


@pytest.mark.parametrize("name", sorted(SIZES))
@pytest.mark.parametrize(("i0", "i1"), [(0, 3), (1, 3), (1, 2), (0, 1), (2, 3)])
def test_vsr_record_decodes_to_the_right_offsets(name: str, i0: int, i1: int) -> None:
    messages = SIZES[name]
    data, positions, origin = stored(messages)
    record = vsr_record(3, data, positions, i0, i1, base_offset=500, append_us=APPEND, origin_base=origin)
    polled = decode_vsr_polled(POLL_PREFIX.pack(3, 999, i1 - i0) + record)  # checksums verified
    assert [as_tuple(x) for x in polled.messages] == [
        (500 + i, APPEND, x.origin_timestamp, x.id, x.payload, x.headers)
        for i, x in served(messages, i0, i1)]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_vsr_record_of_the_whole_batch_is_what_the_producer_sent(name: str) -> None:
    messages = SIZES[name]
    body, pos, _count = body_of(messages)
    data, positions, origin = stored(messages)
    record = vsr_record(0, data, positions, 0, len(messages), base_offset=0, append_us=0, origin_base=origin)
    assert record == bytes(body[pos:])  # same header fields, so the very same bytes


@pytest.mark.parametrize("name", sorted(SIZES))
@pytest.mark.parametrize(("i0", "i1"), [(0, 3), (1, 2), (2, 3)])
def test_legacy_messages_decode_to_the_right_offsets(name: str, i0: int, i1: int) -> None:
    messages = SIZES[name]
    data, positions, origin = stored(messages)
    parts = legacy_messages(data, positions, i0, i1, base_offset=500, append_us=APPEND, origin_base=origin)
    polled = decode_legacy_polled(POLL_PREFIX.pack(0, 502, i1 - i0) + b"".join(parts))  # checksums verified
    assert polled.current_offset == 502
    assert [as_tuple(x) for x in polled.messages] == [
        (500 + i, APPEND, x.origin_timestamp, x.id, x.payload, x.headers)
        for i, x in served(messages, i0, i1)]
