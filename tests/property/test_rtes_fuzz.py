"""Fuzz rule for the V1 codec: any bytes give a request or the protocol error, never anything else."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bayou.protocols.rtes.codec import LineReader, LineTooLong, RtesError, decode_request

COMMANDS = [b"PRODUCE", b"CONSUME", b"JOIN", b"SYNC", b"HEARTBEAT", b"LEAVE", b"COMMIT", b"OFFSET",
            b"REPLICA_FETCH", b"SET_PARTITION_ROLE", b"PING", b"ADMIN_CREATE_TOPIC", b"BROKER_FETCH",
            b"ADMIN_SET_PARTITION_LEADER", b"ADMIN_REGISTER_BROKER"]

tokens = st.one_of(st.binary(max_size=12), st.sampled_from([b"0", b"-1", b"1", b"k:v", b"acks=all",
                                                              b"assignor=range", b"\xff", b"1,2"]))


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    cmd = draw(st.sampled_from(COMMANDS))
    args = b" ".join(draw(st.lists(tokens, max_size=7)))
    return b"V1|" + draw(st.binary(max_size=4)) + b"|" + cmd + b"|" + args


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=200), lines()))
@example(b"V1|1|COMMIT|g t c 1 1 -0")
@example(b"V1|\x00|PRODUCE|\xff:\xfe")
def test_decode_never_raises_anything_else(line: bytes) -> None:
    try:
        cid, _req = decode_request(line)
    except RtesError as exc:
        assert exc.cid is not None
        assert exc.code in {"BAD_REQUEST", "UNKNOWN_COMMAND"}
    else:
        assert cid


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(min_value=1, max_value=40), max_size=20))
def test_reader_split_points_do_not_matter(data: bytes, cuts: list[int]) -> None:
    whole = LineReader(max_line=64)
    try:
        expected = whole.feed(data)
        whole_error = whole.overflowed
    except LineTooLong:
        expected, whole_error = [], True
    r = LineReader(max_line=64)
    got: list[bytes] = []
    pos = 0
    err = False
    for c in [*cuts, len(data)]:
        try:
            got += r.feed(data[pos : pos + c])
        except LineTooLong:
            err = True
            break
        pos += c
        if r.overflowed:
            err = True
            break
    assert err == whole_error
    if not err:
        assert got == expected
    else:
        assert got == expected[: len(got)]
