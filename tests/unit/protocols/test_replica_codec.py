"""The replication protocol codec (protocols/replica/codec.py): round trip, exact bytes, every
truncated prefix, trailing data, and random bytes (a message, "need more" or the protocol error)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bayou.protocols.replica.codec import (
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

REPLY = encode(FetchReply(FetchError.NONE, 1, 1, 1))
MESSAGES = [
    Fetch("orders", 2, 3, 7, 1234, 6, 8 << 20, 500),
    Fetch("é-topic", 0, 1, 0, 0, -1, 1, 0),
    FetchReply(FetchError.NONE, 7, 1200, 0, data=b"\x00" * 70),
    FetchReply(FetchError.NONE, 7, 1200, 3, 900, 5),
    FetchReply(FetchError.FENCED, 8, 0, 0),
    Produce("orders", 3, -1, 1, b"\x01" * 61),
    Produce("é", 0, 0, 0, b""),
    Produce("orders", 1, -1, 2, b"\x02" * 70),  # a transaction marker
    ProduceReply(ProduceError.NONE, 10, 19, 20, 0),
    ProduceReply(ProduceError.REJECTED, message="the batch is corrupt: é"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip_prefixes_and_trailing_data(msg: Fetch | FetchReply | Produce | ProduceReply) -> None:
    data = encode(msg)
    assert decode(data) == (msg, len(data))
    assert decode(data + b"\x00\x00\x00\x07\x01") == (msg, len(data))
    for cut in range(len(data)):
        assert decode(data[:cut]) is None


def test_exact_bytes() -> None:
    assert encode(Fetch("t", 1, 2, 3, 4, 5, 6, 7)) == (
        b"\x00\x00\x00\x24\x01" b"\x00\x01t" b"\x00\x00\x00\x01" b"\x00\x00\x00\x02" b"\x00\x00\x00\x03"
        b"\x00\x00\x00\x00\x00\x00\x00\x04" b"\x00\x00\x00\x05" b"\x00\x00\x00\x06" b"\x00\x00\x00\x07")
    assert encode(FetchReply(FetchError.NOT_LEADER, 2, 3, 4)) == (
        b"\x00\x00\x00\x22\x02" b"\x01" b"\x00\x00\x00\x02" b"\x00\x00\x00\x00\x00\x00\x00\x03"
        b"\x00\x00\x00\x00\x00\x00\x00\x04" b"\xff\xff\xff\xff\xff\xff\xff\xff" b"\xff\xff\xff\xff")
    assert encode(Produce("t", 1, -1, 1, b"B")) == (
        b"\x00\x00\x00\x0b\x03" b"\x00\x01t" b"\x00\x00\x00\x01" b"\xff" b"\x01" b"B")
    assert encode(ProduceReply(ProduceError.NOT_LEADER, 1, 2, 3, 4, "x")) == (
        b"\x00\x00\x00\x25\x04" b"\x01" b"\x00\x00\x00\x00\x00\x00\x00\x01"
        b"\x00\x00\x00\x00\x00\x00\x00\x02" b"\x00\x00\x00\x00\x00\x00\x00\x03"
        b"\x00\x00\x00\x00\x00\x00\x00\x04" b"\x00\x01x")


@pytest.mark.parametrize("data", [
    b"\x00\x00\x00\x00\x01",  # length 0
    b"\x7f\xff\xff\xff\x01",  # over the frame limit
    b"\x00\x00\x00\x01\x09",  # unknown kind
    b"\x00\x00\x00\x03\x01\x00\x05",  # FETCH too short
    b"\x00\x00\x00\x02\x02\x00",  # FETCH_REPLY too short
    REPLY[:5] + b"\x09" + REPLY[6:],  # unknown error code
    b"\x00\x00\x00\x09\x03\x00\x01t\x00\x00\x00\x01\x05\x00",  # PRODUCE acks 5
    b"\x00\x00\x00\x09\x03\x00\x01t\x00\x00\x00\x01\x01\x04",  # PRODUCE unknown flag
    b"\x00\x00\x00\x05\x03\x00\x01t\x00",  # PRODUCE too short
    b"\x00\x00\x00\x02\x04\x00",  # PRODUCE_REPLY too short
    b"\x00\x00\x00\x26\x04" + b"\x00" + b"\xff" * 32 + b"\x00\x03ab",  # message length 3, 2 bytes
])
def test_bad_frames_are_the_protocol_error(data: bytes) -> None:
    with pytest.raises(ReplicaProtocolError):
        decode(data)


@given(st.binary(max_size=80))
def test_random_bytes_give_a_message_need_more_or_the_error(data: bytes) -> None:
    try:
        out = decode(data)
    except ReplicaProtocolError:
        return
    assert out is None or out[1] <= len(data)
