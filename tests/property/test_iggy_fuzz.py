"""Fuzz rule for the Iggy codec: random or mutated bytes give messages or IggyError, never any
other exception, never a hang. Seeds are the captured vectors; a request that decodes must also
survive an encode/decode round trip unchanged."""

from __future__ import annotations

import contextlib
import json
import struct
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, Operation
from bayou.protocols.iggy.framing import (
    Dialect,
    IggyError,
    LegacyFrame,
    LegacyFrameReader,
    RequestHeader,
    VsrFrame,
    VsrFrameReader,
    detect_dialect,
    split_result_section,
    split_vsr_reply,
)

VECTORS = Path(__file__).parents[1] / "conformance" / "vectors" / "iggy"
_ALL = [json.loads(p.read_text()) for p in sorted(VECTORS.glob("*.json"))]
REQUESTS = [bytes.fromhex(v["request_hex"]) for v in _ALL]
REPLIES = [bytes.fromhex(v["response_hex_that_client_accepted"]) for v in _ALL]
FAST = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _round_trip(dialect: Dialect, frame: LegacyFrame | VsrFrame, request: m.Request) -> None:
    if isinstance(frame, VsrFrame):
        h = frame.header
        again = codec.encode_request_frame(request, dialect, client=h.client, request=h.request,
                                           session=h.session)
        (reframed,) = VsrFrameReader().feed(again)
        assert codec.decode_vsr_request(reframed) == request
    else:
        payload = codec.encode_request(request, dialect)
        assert codec.decode_request(dialect, frame.code, payload) == request


def serve(data: bytes) -> int:
    """The server's path over one connection's bytes; returns how many requests decoded."""
    try:
        dialect = detect_dialect(data)
    except IggyError as exc:
        assert exc.close
        return 0
    if dialect is None:
        return 0
    reader = VsrFrameReader() if dialect is Dialect.VSR else LegacyFrameReader()
    try:
        frames = reader.feed(data)
    except IggyError:
        return 0
    decoded = 0
    for frame in frames:
        dialects = [Dialect.VSR] if isinstance(frame, VsrFrame) else [Dialect.LEGACY, Dialect.SEED]
        for d in dialects:
            try:
                request = codec.decode_frame(d, frame)
            except IggyError:
                continue
            decoded += 1
            _round_trip(d, frame, request)
    return decoded


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x04, 0xFF, 0x7F, 0x80]))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


@FAST
@given(mutated(REQUESTS))
@example(bytes.fromhex("0400000001000000"))
@example(b"\x00\x00\x00\x00" + b"\xff" * 300)
@example(struct.pack("<II", 3, 1))
def test_mutated_requests(data: bytes) -> None:
    serve(data)


@FAST
@given(st.binary(max_size=600))
def test_random_bytes(data: bytes) -> None:
    serve(data)


@FAST
@given(st.sampled_from(sorted(Command)), st.binary(max_size=120),
       st.sampled_from([Dialect.LEGACY, Dialect.SEED]))
def test_random_legacy_payloads(code: Command, payload: bytes, dialect: Dialect) -> None:
    frame = LegacyFrame(code, payload)
    try:
        request = codec.decode_frame(dialect, frame)
    except IggyError:
        return
    _round_trip(dialect, frame, request)


@FAST
@given(st.sampled_from(sorted(Operation)), st.sampled_from(sorted(Command)), st.integers(0, 3),
       st.integers(0, 3), st.binary(max_size=120))
def test_random_vsr_bodies(operation: Operation, code: Command, request: int, session: int,
                           body: bytes) -> None:
    header = RequestHeader(client=9, operation=operation, request=request, session=session, code=code)
    frame = VsrFrame(header, body)
    try:
        decoded = codec.decode_vsr_request(frame)
    except IggyError:
        return
    _round_trip(Dialect.VSR, frame, decoded)


def _client_side(data: bytes, command: Command) -> None:
    """What a client does with reply bytes: every dialect's decoders, mutated input."""
    for dialect in Dialect:
        with contextlib.suppress(IggyError):
            codec.decode_reply(command, data, dialect)
    try:
        header, body = split_vsr_reply(data)
        _, payload = split_result_section(header.operation, body)
        codec.decode_reply(command, payload, Dialect.VSR)
    except IggyError:
        pass


@FAST
@given(mutated(REPLIES + [r[8:] for r in REPLIES] + [r[256:] for r in REPLIES]),
       st.sampled_from(sorted(codec.REPLY_DECODERS)))
def test_mutated_replies(data: bytes, command: Command) -> None:
    _client_side(data, command)


def test_create_topic_with_compression_zero_round_trips() -> None:
    """Found by the fuzzer: an L CREATE_TOPIC whose compression byte is 0 (not a valid algorithm,
    but what the decoder reads) must re-encode as 0, not as NONE (1)."""
    data = (b"#\x00\x00\x00.\x01\x00\x00\x01\x04\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\xa4\x93\xd6\x00"
            b"\x00\x00\x00\x80\x96\x98\x00\x00\x00\x00\x00\x01\x02t2")
    assert serve(data) == 1
