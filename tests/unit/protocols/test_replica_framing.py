"""The replication listener's frame reader (protocols/replica/framing.py): frames fed whole, one
byte at a time and with a partial frame behind; a length over the cap or below 1 is refused from
its header, after the frames before it."""

from __future__ import annotations

import pytest

from bayou.protocols.replica.codec import (
    Fetch,
    FetchError,
    FetchReply,
    Produce,
    ReplicaProtocolError,
    encode,
)
from bayou.protocols.replica.framing import FrameReader

MESSAGES = [
    Fetch("orders", 2, 3, 7, 1234, 6, 8 << 20, 500),
    Produce("orders", 3, -1, 1, b"\x01" * 61),
    FetchReply(FetchError.NONE, 7, 1200, 0, data=b"\x00" * 70),
]
STREAM = b"".join(encode(m) for m in MESSAGES)


def test_whole_stream() -> None:
    reader = FrameReader()
    assert reader.feed(STREAM) == MESSAGES
    assert reader.pending == 0


def test_one_byte_at_a_time() -> None:
    reader = FrameReader()
    got = [m for i in range(len(STREAM)) for m in reader.feed(STREAM[i : i + 1])]
    assert got == MESSAGES


def test_partial_frame_kept_and_pending_from_its_header() -> None:
    reader = FrameReader()
    second = encode(MESSAGES[1])
    assert reader.feed(encode(MESSAGES[0]) + second[:6]) == [MESSAGES[0]]
    assert reader.pending == len(second)
    assert reader.feed(second[6:]) == [MESSAGES[1]]


@pytest.mark.parametrize("header", [(100).to_bytes(4, "big") + b"\x01", (0).to_bytes(4, "big")])
def test_bad_length_refused_after_the_frames_before_it(header: bytes) -> None:
    reader = FrameReader(cap=64)
    first = encode(Fetch("t", 0, 1, 0, 0, -1, 1, 0))
    assert reader.feed(first + header) == [Fetch("t", 0, 1, 0, 0, -1, 1, 0)]
    assert reader.stalled
    with pytest.raises(ReplicaProtocolError):
        reader.feed(b"")


def test_unknown_kind_is_the_protocol_error() -> None:
    with pytest.raises(ReplicaProtocolError):
        FrameReader().feed(b"\x00\x00\x00\x01\x63")
