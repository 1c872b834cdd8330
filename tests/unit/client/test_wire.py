"""The SDK's column-wise codecs against bayou's own Iggy codec (the server's decoder and encoder):
a send the SDK builds decodes to the same messages, and a poll reply the server encodes becomes the
same rows, on both the uniform (numpy) path and the per-message path."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.client.wire import (
    KAFKA_HEADERS_TYPE,
    KAFKA_SCHEMA,
    KEY_HEADER,
    LOG_APPEND_TIME,
    FrameBuffer,
    UniformSend,
    _batch,
    _empty_headers,
    _general_body,
    _uniform_body,
    _uniform_run,
    _walk_run,
    batches_to_arrow,
    decode_headers,
    encode_headers,
    polled_to_arrow,
    prepare_send,
    send_frame,
)
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import (
    V_BATCH_SIZE,
    decode_legacy_send,
    encode_legacy_polled,
    encode_vsr_polled,
)
from bayou.protocols.iggy.codes import Command
from bayou.protocols.iggy.framing import Dialect
from bayou.records.iggy import decode_envelope

STREAM, TOPIC = m.Identifier("default"), m.Identifier("t")


def _payload(frame: bytes) -> bytes:
    length = int.from_bytes(frame[:4], "little")
    code = int.from_bytes(frame[4:8], "little")
    assert code == Command.SEND_MESSAGES and length == len(frame) - 4
    return frame[8:]


def test_uniform_send_decodes_like_the_server_reads_it() -> None:
    values = [bytes([i]) * 100 for i in range(50)]
    ids = [(7 << 64) | (i + 1) for i in range(50)]
    req = decode_legacy_send(_payload(send_frame(STREAM, TOPIC, 3, values, message_ids=ids)))
    assert req.partitioning == m.Partitioning.partition(3)
    assert [msg.payload for msg in req.messages] == values
    assert [msg.id for msg in req.messages] == ids
    assert all(msg.headers == () for msg in req.messages)


@given(n=st.integers(1, 40), size=st.integers(1, 60), key_size=st.integers(1, 255),
       seed=st.binary(min_size=1, max_size=8), ids=st.booleans())
def test_keys_of_one_length_take_the_column_wise_path_and_write_what_the_loop_writes(
        n: int, size: int, key_size: int, seed: bytes, ids: bool) -> None:
    values = [(seed + bytes([i % 256])) * size for i in range(n)]
    values = [v[:size] for v in values]
    keys: list[bytes | None] = [(bytes([i % 256]) + seed) * key_size for i in range(n)]
    keys = [k[:key_size] for k in keys if k is not None]
    message_ids = [(3 << 64) | (i + 1) for i in range(n)] if ids else None
    fast = _uniform_body(values, message_ids, 17, keys)
    assert fast is not None
    assert bytes(fast) == _general_body(values, keys, None, message_ids, 17)
    req = decode_legacy_send(_payload(send_frame(STREAM, TOPIC, 0, values, keys, message_ids=message_ids)))
    assert [(msg.payload, [(h.name, h.value) for h in msg.headers]) for msg in req.messages] == [
        (v, [(KEY_HEADER, k)]) for v, k in zip(values, keys, strict=True)]


sends = st.lists(st.tuples(st.integers(1, 30), st.integers(1, 40), st.sampled_from([0, 1, 9]),
                           st.sampled_from(["none", "range", "list"]), st.integers(0, 2)),
                 min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(sends=sends, garbage=st.integers(0, 255), first=st.integers(0, 3000))
def test_frames_written_into_a_reused_buffer_are_the_encoded_frames(
        sends: list[tuple[int, int, int, str, int]], garbage: int, first: int) -> None:
    """A connection writes its frames into one buffer that outlives them: whatever an earlier,
    larger send left there, the bytes sent are those of ``send_frame``, frame after frame."""
    out = FrameBuffer()
    out.take(first)[:] = garbage  # what an earlier send left
    frames: list[bytes | UniformSend] = []
    expected = []
    for n, size, key_size, ids, part in sends:
        values = [bytes([(i * 7 + size) % 256]) * size for i in range(n)]
        keys = [bytes([i % 256]) * key_size for i in range(n)] if key_size else None
        message_ids = {"none": None, "range": range((5 << 64) | 1, ((5 << 64) | 1) + n),
                       "list": [(i << 64) | (i * 3 + 1) for i in range(n)]}[ids]
        frame = prepare_send(STREAM, TOPIC, part, values, keys, message_ids=message_ids, origin_us=part)
        assert isinstance(frame, UniformSend)  # same-size values: the column-wise path
        frames.append(frame)
        expected.append(send_frame(STREAM, TOPIC, part, values, keys, message_ids=message_ids,
                                   origin_us=part))
        assert bytes(frame) == expected[-1]
        req = decode_legacy_send(_payload(expected[-1]))
        assert [msg.payload for msg in req.messages] == values
        assert [msg.id for msg in req.messages] == (list(message_ids) if message_ids else [0] * n)
    assert bytes(out.frames(frames)) == b"".join(expected)
    assert bytes(out.frames([expected[0], *frames[1:]])) == b"".join(expected)  # bytes among them
    assert bytes(out.frames(frames[:1])) == expected[0]  # a shorter frame after longer ones


def test_a_frame_buffer_keeps_its_memory_but_not_a_huge_one() -> None:
    out = FrameBuffer()
    a = out.take(1000)
    assert out.take(500).__array_interface__["data"][0] == a.__array_interface__["data"][0]
    huge = out.take(FrameBuffer.KEEP + 1)
    assert len(huge) == FrameBuffer.KEEP + 1
    assert out.take(1000).__array_interface__["data"][0] == a.__array_interface__["data"][0]
    out.take(FrameBuffer.KEEP * 3 // 4)
    big = out.take(FrameBuffer.KEEP * 7 // 8)  # doubling would pass KEEP: grown to KEEP, and kept
    assert out.take(FrameBuffer.KEEP).__array_interface__["data"][0] == big.__array_interface__["data"][0]
    assert len(out._buf) == FrameBuffer.KEEP  # never more kept


def test_message_ids_are_read_when_the_send_is_prepared() -> None:
    """The async client writes a frame once it has the connection: a caller reusing its list of
    ids meanwhile must not change what is sent."""
    ids = [(1 << 64) | 10, (1 << 64) | 11]
    frame = prepare_send(STREAM, TOPIC, 0, [b"a", b"b"], message_ids=ids)
    expected = send_frame(STREAM, TOPIC, 0, [b"a", b"b"], message_ids=list(ids))
    ids[0] = 99
    assert bytes(frame) == expected
    once = prepare_send(STREAM, TOPIC, 0, [b"a"], message_ids=iter([5]))
    assert bytes(once) == bytes(once)  # written again (a retry): the same frame


def test_sends_the_column_wise_path_cannot_carry_are_bytes() -> None:
    assert isinstance(prepare_send(STREAM, TOPIC, 0, [b"a", b"bb"]), bytes)  # sizes differ
    assert isinstance(prepare_send(STREAM, TOPIC, 0, [b"a", b""]), bytes)  # an empty value: envelope
    assert isinstance(prepare_send(STREAM, TOPIC, 0, [b"a"], headers=[[("h", b"v")]]), bytes)


def test_keys_of_other_lengths_or_missing_leave_the_column_wise_path() -> None:
    values = [b"v1", b"v2"]
    assert _uniform_body(values, None, 0, [b"k", b"kk"]) is None
    assert _uniform_body(values, None, 0, [b"k", None]) is None
    assert _uniform_body(values, None, 0, [None, b"k"]) is None
    assert _uniform_body(values, None, 0, [b"", b""]) is None  # an empty key: the envelope
    assert _uniform_body(values, None, 0, [b"x" * 256] * 2) is None  # past Iggy's 255 bytes


def test_keyed_send_carries_the_key_as_a_header() -> None:
    values = [b"a", b"bb", b""]
    keys = [b"k1", None, b"k3"]
    headers = [[("h", b"v")], [], []]
    req = decode_legacy_send(_payload(send_frame(STREAM, TOPIC, 0, values, keys, headers)))
    assert [msg.payload for msg in req.messages[:2]] == values[:2]
    first = req.messages[0].headers
    assert [(h.name, h.value) for h in first] == [(KEY_HEADER, b"k1"), ("h", b"v")]
    assert req.messages[1].headers == ()
    # an empty value is not an Iggy message: the record travels as bayou's envelope
    assert [(h.name, h.value) for h in req.messages[2].headers] == [("bayou.record", b"\x01")]
    assert decode_envelope(req.messages[2].payload) == (b"k3", b"", ())


def test_header_fields_over_255_bytes_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_headers(b"k" * 256, None)
    with pytest.raises(ValueError):
        encode_headers(None, [("", b"v")])


def _polled(messages: list[m.PolledMessage]) -> bytes:
    return encode_legacy_polled(m.PolledMessages(0, 99, tuple(messages)))


def _msg(offset: int, payload: bytes, headers: tuple[m.UserHeader, ...] = ()) -> m.PolledMessage:
    return m.PolledMessage(offset, 1_700_000_000_000_000 + offset, 5, 0, payload, headers)


@pytest.mark.parametrize("uniform", [True, False])
def test_poll_reply_to_arrow(uniform: bool) -> None:
    msgs = [_msg(10 + i, b"x" * (8 if uniform else i)) for i in range(20)]
    batch, current = polled_to_arrow(_polled(msgs), "t", 2)
    assert current == 99
    assert batch.schema == KAFKA_SCHEMA
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == list(range(10, 30))
    assert [r["value"] for r in rows] == [msg.payload for msg in msgs]
    assert {r["topic"] for r in rows} == {"t"} and {r["partition"] for r in rows} == {2}
    assert rows[0]["timestamp"].timestamp() == pytest.approx(1_700_000_000.000010)
    assert all(r["key"] is None and r["headers"] == [] for r in rows)


def test_poll_reply_keys_and_headers() -> None:
    key = m.UserHeader.of(KEY_HEADER, m.HeaderKind.RAW, b"user-1")
    other = m.UserHeader.of("trace", m.HeaderKind.RAW, b"abc")
    batch, _ = polled_to_arrow(_polled([_msg(0, b"v", (key, other)), _msg(1, b"w")]), "t", 0)
    rows = batch.to_pylist()
    assert rows[0]["key"] == b"user-1" and rows[0]["headers"] == [{"key": "trace", "value": b"abc"}]
    assert rows[1]["key"] is None and rows[1]["headers"] == []


def test_end_offset_cuts_rows_and_empty_reply() -> None:
    batch, _ = polled_to_arrow(_polled([_msg(i, b"v") for i in range(10)]), "t", 0, end_offset=4)
    assert batch.column("offset").to_pylist() == [0, 1, 2, 3]
    empty, _ = polled_to_arrow(_polled([]), "t", 0)
    assert empty.num_rows == 0 and empty.schema == KAFKA_SCHEMA


_NAMES = st.text(min_size=1, max_size=10).filter(lambda s: s != KEY_HEADER)
_HEADERS = st.lists(st.tuples(_NAMES, st.binary(min_size=1, max_size=20)), max_size=2)
_KEYS = st.one_of(st.none(), st.binary(min_size=1, max_size=20))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), _KEYS, _HEADERS), min_size=1, max_size=30))
def test_send_then_poll_round_trip(rows: list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]]) -> None:
    """What the SDK sends, served back by the server's encoder, reads as the same rows."""
    values = [r[0] for r in rows]
    keys = [r[1] for r in rows]
    headers = [r[2] for r in rows]
    req = decode_legacy_send(_payload(send_frame(STREAM, TOPIC, 0, values, keys, headers)))
    polled = [_msg(i, msg.payload, msg.headers) for i, msg in enumerate(req.messages)]
    batch, _ = polled_to_arrow(_polled(polled), "t", 0)
    out = batch.to_pylist()
    assert [r["value"] for r in out] == values
    assert [r["key"] for r in out] == keys
    assert [[(h["key"], h["value"]) for h in r["headers"]] for r in out] == headers
    block = encode_headers(keys[0], headers[0])
    key, hdrs = decode_headers(block, 0, len(block))
    assert key == keys[0] and hdrs == headers[0]


# -- bayou's POLL_BATCHES: the V layout ------------------------------------------------------------


def _both(messages: list[m.PolledMessage], **kw: int) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """The same messages served as POLL_MESSAGES (L) and as POLL_BATCHES (V), read by the SDK."""
    polled = m.PolledMessages(0, 99, tuple(messages))
    legacy, lc = polled_to_arrow(encode_legacy_polled(polled), "t", 3, **kw)  # type: ignore[arg-type]
    batches, vc = batches_to_arrow(encode_vsr_polled(polled), "t", 3, **kw)  # type: ignore[arg-type]
    assert lc == vc == 99
    return legacy, batches


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), _KEYS, _HEADERS, st.integers(0, 2)), max_size=30),
       st.one_of(st.none(), st.integers(0, 40)))
def test_a_batches_reply_reads_as_the_same_legacy_reply(
        rows: list[tuple[bytes, bytes | None, list[tuple[str, bytes]], int]], end: int | None) -> None:
    """Any records (envelopes, keys, headers; runs of one server timestamp, so several per batch
    record) read the same from either layout, with or without an end offset."""
    req = decode_legacy_send(_payload(send_frame(STREAM, TOPIC, 0, [r[0] for r in rows], [r[1] for r in rows],
                                                 [r[2] for r in rows]))) if rows else None
    msgs = [m.PolledMessage(5 + i, 1_000 + rows[i][3], 7, i + 1, msg.payload, msg.headers)
            for i, msg in enumerate(req.messages if req else ())]
    legacy, batches = _both(msgs, **({} if end is None else {"end_offset": end}))
    assert batches.schema == KAFKA_SCHEMA
    assert batches.equals(legacy)


@pytest.mark.parametrize("key_size", [0, 1, 9, 255])
def test_uniform_batch_records_are_read_column_wise(key_size: int) -> None:
    key = (m.UserHeader.of(KEY_HEADER, m.HeaderKind.RAW, b"k" * key_size),) if key_size else ()
    msgs = [m.PolledMessage(100 + i, 2_000, 7, i + 1, bytes([i]) * 30, key) for i in range(40)]
    legacy, batches = _both(msgs)
    assert batches.equals(legacy)
    payload = encode_vsr_polled(m.PolledMessages(0, 99, tuple(msgs)))
    body, end = 16 + V_BATCH_SIZE, len(payload)
    run = _uniform_run(payload, body, end, 40, 100, 2_000)
    assert run is not None  # the column-wise path takes it
    walked = _walk_run(payload, body, end, 40, 100, 2_000)
    assert run.values.equals(walked.values) and run.keys.equals(walked.keys)
    assert list(run.offsets) == list(walked.offsets) == list(range(100, 140))


@pytest.mark.parametrize("headers", [
    (m.UserHeader.of("trace", m.HeaderKind.RAW, b"abcdefghi"),),  # one header, not a key, of a key's size
    (m.UserHeader.of(KEY_HEADER, m.HeaderKind.STRING, "k"),),  # a key field of another kind
])
def test_uniform_records_with_other_headers_are_walked(headers: tuple[m.UserHeader, ...]) -> None:
    msgs = [m.PolledMessage(i, 2_000, 7, i + 1, b"v" * 10, headers) for i in range(5)]
    legacy, batches = _both(msgs)
    assert batches.equals(legacy)
    payload = encode_vsr_polled(m.PolledMessages(0, 99, tuple(msgs)))
    assert _uniform_run(payload, 16 + V_BATCH_SIZE, len(payload), 5, 0, 2_000) is None


def test_a_damaged_batches_reply_is_refused() -> None:
    msgs = [m.PolledMessage(i, 2_000, 7, i + 1, b"v" * 10) for i in range(5)]
    good = encode_vsr_polled(m.PolledMessages(0, 99, tuple(msgs)))
    count_off = good[:12] + (6).to_bytes(4, "little") + good[16:]  # the prefix says 6
    for bad in (good[:-1], good[: 16 + 100], count_off):
        with pytest.raises(ValueError, match="POLL_BATCHES reply"):
            batches_to_arrow(bad, "t", 0)
    empty, current = batches_to_arrow(good[:12] + bytes(4), "t", 0)
    assert empty.num_rows == 0 and current == 99


def test_schema_matches_sparks_kafka_rows() -> None:
    assert KAFKA_SCHEMA.names == ["key", "value", "topic", "partition", "offset", "timestamp",
                                  "timestampType", "headers"]
    assert KAFKA_SCHEMA.field("headers").type == pa.list_(pa.struct([("key", pa.string()),
                                                                      ("value", pa.binary())]))
    assert Dialect.LEGACY  # the SDK's framing


def test_a_range_of_ids_is_sent_like_the_same_ids_one_by_one() -> None:
    values = [b"v%03d" % i for i in range(50)]
    base = (0xABCDEF << 64) | 17
    as_range = send_frame(m.Identifier("s"), m.Identifier("t"), 0, values, message_ids=range(base, base + 50))
    as_list = send_frame(m.Identifier("s"), m.Identifier("t"), 0, values,
                         message_ids=[base + i for i in range(50)])
    assert as_range == as_list
    # a range crossing into another producer's ids is encoded id by id, still exactly
    top = (1 << 64) - 3
    s, t = m.Identifier("s"), m.Identifier("t")
    assert send_frame(s, t, 0, values[:5], message_ids=range(top, top + 5)) \
        == send_frame(s, t, 0, values[:5], message_ids=list(range(top, top + 5)))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.binary(max_size=8), max_size=12), topic=st.text(max_size=12),
       partition=st.integers(0, 2**31 - 1), base=st.integers(0, 2**40), stamp=st.integers(0, 2**52))
def test_the_record_batch_columns_built_from_buffers_are_what_pa_array_builds(
        values: list[bytes], topic: str, partition: int, base: int, stamp: int) -> None:
    """The columns of a poll's record batch are built from numpy buffers (``pa.array`` of a few
    rows costs several times more; of an untyped list, a failed import of dateutil on every call):
    the same batch, valid, as the plain constructors give."""
    n = len(values)
    offsets = np.arange(n, dtype=np.int64) * 2 + base
    stamps = np.full(n, stamp, dtype=np.int64)
    vals, keys = pa.array(values, type=pa.binary()), pa.nulls(n, pa.binary())
    got = _batch(vals, keys, offsets[::1], stamps, _empty_headers(n), topic, partition)
    got.validate(full=True)
    want = pa.RecordBatch.from_arrays([
        keys, vals, pa.array([topic] * n, type=pa.string()), pa.array([partition] * n, type=pa.int32()),
        pa.array(offsets.tolist(), type=pa.int64()),
        pa.array(stamps.tolist(), type=pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([LOG_APPEND_TIME] * n, type=pa.int32()), pa.array([[]] * n, type=KAFKA_HEADERS_TYPE),
    ], schema=KAFKA_SCHEMA)
    assert got.equals(want)
    assert got.to_pylist() == want.to_pylist()
