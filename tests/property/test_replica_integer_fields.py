"""Every integer field of every replication frame (FETCH, FETCH_REPLY, PRODUCE, PRODUCE_REPLY), at
any value its wire width holds, written at its place in an otherwise valid frame: the codec gives
the message or ReplicaProtocolError, never another exception, and whatever it gives is an offset
a partition can hold (issue 13 item 10). The replication listener runs only in cluster mode, so
this is the codec's property; tests/cluster drive the listener itself."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayou.protocols.replica.codec import (
    LOG_END_MAX,
    Fetch,
    FetchError,
    FetchReply,
    Produce,
    ProduceError,
    ProduceReply,
    ReplicaProtocolError,
    decode,
    encode,
)
from bayou.records.batch import MAX_OFFSET
from conftest import edges

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TEMPLATES = [
    encode(Fetch("t", 1, 2, 3, 4, 5, 6, 7)),
    encode(FetchReply(FetchError.NONE, 1, 10, 2, -1, -1, b"data")),
    encode(Produce("t", 1, -1, 1, b"batch")),
    encode(ProduceReply(ProduceError.NONE, 1, 2, 3, 0, "ok")),
    encode(ProduceReply(ProduceError.REJECTED, message="no")),
]
# (frame, byte position, struct format) of every integer field of the templates
FIELDS = [
    (0, 5 + 3 + 0, ">I"), (0, 5 + 3 + 4, ">i"), (0, 5 + 3 + 8, ">i"), (0, 5 + 3 + 12, ">q"),
    (0, 5 + 3 + 20, ">i"), (0, 5 + 3 + 24, ">I"), (0, 5 + 3 + 28, ">I"),
    (1, 5, ">B"), (1, 6, ">i"), (1, 10, ">q"), (1, 18, ">q"), (1, 26, ">q"), (1, 34, ">i"),
    (2, 5 + 3, ">I"), (2, 5 + 3 + 4, ">b"), (2, 5 + 3 + 5, ">B"),
    (3, 5, ">B"), (3, 6, ">q"), (3, 14, ">q"), (3, 22, ">q"), (3, 30, ">q"), (3, 38, ">H"),
    (4, 5, ">B"), (4, 6, ">q"), (4, 14, ">q"), (4, 22, ">q"), (4, 30, ">q"), (4, 38, ">H"),
]


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    frame, at, fmt = draw(st.sampled_from(FIELDS))
    size = struct.calcsize(fmt)
    bits, signed = size * 8, fmt[-1].islower()
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    value = draw(st.sampled_from(edges(bits, signed=signed)) | st.integers(low, high))
    buf = bytearray(TEMPLATES[frame])
    struct.pack_into(fmt, buf, at, value)
    return bytes(buf)


def offsets_of(msg: object) -> list[int]:
    if isinstance(msg, Fetch):
        return [msg.fetch_offset]
    if isinstance(msg, FetchReply):
        return [msg.high_watermark, msg.log_start_offset, max(msg.diverging_end_offset, 0)]
    if isinstance(msg, ProduceReply):
        return [max(v, 0) for v in (msg.base_offset, msg.last_offset, msg.high_watermark,
                                    msg.log_start_offset)]
    return []


def test_templates_decode() -> None:
    for t in TEMPLATES:
        got = decode(t)
        assert got is not None and got[1] == len(t)


@SETTINGS
@given(frame=frames())
def test_any_integer_in_any_field(frame: bytes) -> None:
    try:
        got = decode(frame)
    except ReplicaProtocolError:
        return
    if got is None:
        return  # a length field now asks for more bytes
    msg, used = got
    assert 0 < used <= len(frame)
    assert all(0 <= v <= LOG_END_MAX == MAX_OFFSET + 1 for v in offsets_of(msg)), msg
    if isinstance(msg, Fetch | Produce):
        assert 0 <= msg.partition <= 0x7FFF_FFFF
    assert encode(msg) == frame[:used]  # what decodes encodes back to the same bytes
