"""The framing kit (protocols/framing.py) behind every binary reader: a byte stream fed in any
chunks (bytes, bytearray or memoryview) yields the same frames, and the same protocol error at the
same point, as the stream fed whole; ``pending`` never promises less than the frame in progress
takes. One test body, run over each reader built on the kit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayou.protocols.cursus import framing as cursus
from bayou.protocols.framing import FrameReader
from bayou.protocols.iggy import framing as iggy
from bayou.protocols.iggy.codes import Command, Operation
from bayou.protocols.tank import framing as tank
from bayou.protocols.tank.codes import TankError

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CAP = 4096


@dataclass(frozen=True)
class Kind:
    """One reader: how to make it, how to encode a frame of it, what it gives back for that frame,
    and a header it must refuse."""

    make: Callable[[], FrameReader[Any]]
    encode: Callable[[int, bytes], bytes]
    expect: Callable[[int, bytes], Any]
    bad_header: bytes
    error: type[Exception]


def _vsr_header(code: int, body: bytes) -> iggy.RequestHeader:
    return iggy.RequestHeader(client=code * 7919, operation=Operation.NON_REPLICATED, request=code,
                              code=code, size=iggy.HEADER_SIZE + len(body))


_bad_vsr = bytearray(iggy.encode_vsr_request(_vsr_header(1, b"")))
_bad_vsr[60] = 9  # not a Request

KINDS = {
    "cursus": Kind(lambda: cursus.FrameReader(CAP), lambda _c, b: cursus.encode_frame(b), lambda _c, b: b,
                   b"\x00\x00\x20\x00", cursus.CursusError),
    "tank": Kind(lambda: tank.FrameReader(CAP), lambda c, b: tank.encode_frame(c % 256, b),
                 lambda c, b: tank.Frame(c % 256, b), tank.frame_header(2, CAP + 1), TankError),
    "iggy-legacy": Kind(lambda: iggy.LegacyFrameReader(CAP, CAP), iggy.encode_legacy_request,
                        iggy.LegacyFrame, b"\x03\x00\x00\x00\x01\x00\x00\x00", iggy.IggyError),
    "iggy-vsr": Kind(lambda: iggy.VsrFrameReader(iggy.HEADER_SIZE + CAP),
                     lambda c, b: iggy.encode_vsr_request(_vsr_header(c, b), b),
                     lambda c, b: iggy.VsrFrame(_vsr_header(c, b), b), bytes(_bad_vsr), iggy.IggyError),
}

frames_st = st.lists(st.tuples(st.integers(1, 1000), st.binary(max_size=300)), max_size=8)
cuts_st = st.lists(st.integers(0, 1 << 16), max_size=12)
shape_st = st.sampled_from([bytes, bytearray, memoryview])


def _drive(kind: Kind, chunks: list[Any]) -> tuple[list[Any], str | None]:
    """Feed ``chunks`` as a server does (a stalled reader is fed b"" before reading on): the frames
    and the error that ended the stream, if any."""
    reader = kind.make()
    out: list[Any] = []
    try:
        for chunk in chunks:
            out += reader.feed(chunk)
            assert reader.pending >= reader.buffered
            while reader.stalled:
                out += reader.feed(b"")
    except kind.error as exc:
        assert reader.failed is exc
        return out, repr(exc)
    return out, None


def _split(stream: bytes, cuts: list[int], shape: type) -> list[Any]:
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    return [shape(stream[a:b]) for a, b in pairwise(points)]


@pytest.mark.parametrize("name", sorted(KINDS))
@FAST
@given(frames=frames_st, cuts=cuts_st, shape=shape_st, bad=st.booleans(), tail=st.binary(max_size=20))
def test_any_chunking_gives_the_frames_of_the_whole_stream(name: str, frames: list[tuple[int, bytes]],
                                                           cuts: list[int], shape: type, bad: bool,
                                                           tail: bytes) -> None:
    kind = KINDS[name]
    stream = b"".join(kind.encode(c, b) for c, b in frames)
    if bad:
        stream += kind.bad_header + tail
    whole = _drive(kind, [stream])
    assert whole[0] == [kind.expect(c, b) for c, b in frames]
    assert (whole[1] is not None) == bad
    assert _drive(kind, _split(stream, cuts, shape)) == whole
    assert _drive(kind, [stream[i : i + 1] for i in range(len(stream))]) == whole


@pytest.mark.parametrize("name", sorted(KINDS))
@FAST
@given(frames=frames_st, cut=st.integers(0, 1 << 16))
def test_pending_is_the_declared_frame_once_its_header_is_in(name: str, frames: list[tuple[int, bytes]],
                                                             cut: int) -> None:
    kind = KINDS[name]
    encoded = [kind.encode(c, b) for c, b in frames] or [kind.encode(1, b"x")]
    last = encoded[-1]
    stream = b"".join(encoded)
    at = len(stream) - len(last) + cut % len(last)  # somewhere inside the last frame
    reader = kind.make()
    reader.feed(stream[:at])
    assert reader.buffered == cut % len(last)
    assert reader.pending in (reader.buffered, len(last))
    if reader.buffered >= (iggy.HEADER_SIZE if name == "iggy-vsr" else 8):
        assert reader.pending == len(last)


@pytest.mark.parametrize("reader", [iggy.LegacyFrameReader, iggy.VsrFrameReader])
def test_a_frame_over_the_login_cap_waits_behind_a_complete_one(reader: type[Any]) -> None:
    """The login cap is judged at a frame boundary: behind a complete frame (a pipelined login) the
    oversized one is deferred, and refused from its header alone once it is first in line."""
    if reader is iggy.VsrFrameReader:
        def encode(c: int, b: bytes) -> bytes:
            return iggy.encode_vsr_request(_vsr_header(c, b), b)
    else:
        encode = iggy.encode_legacy_request
    r = reader()
    r.login_cap = 100
    big = encode(Command.SEND_MESSAGES, b"y" * 101)
    login = encode(Command.LOGIN_USER, b"x" * 10)
    got = r.feed(login + big[:-1])
    assert len(got) == 1 and r.deferred and r.stalled
    r.login_cap = None  # the login succeeded
    assert r.feed(b"") == [] and not r.deferred
    assert len(r.feed(big[-1:])) == 1
    r.login_cap = 100
    with pytest.raises(iggy.IggyError) as refused:
        r.feed(big[:-1])
    assert refused.value.status == iggy.Status.UNAUTHENTICATED
    assert r.failed is refused.value and r.buffered == 0
