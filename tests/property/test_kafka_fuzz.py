"""Fuzz rule for the Kafka codec: any bytes fed to the frame reader, the header decoder or the body
decoder give frames, a request, or KafkaError, never another exception, never a hang, never a
process abort (kio's native reader reserves room for a declared array before reading it; the guard
must refuse any count the bytes cannot hold first). Seeds are the captured vectors. Every served
request and response schema round-trips through the codec for values Hypothesis draws from kio's
own types, which also checks the guard's layout against kio's on every schema."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from bayou.protocols.kafka import codec
from bayou.protocols.kafka.codes import SUPPORTED, ApiKey
from bayou.protocols.kafka.framing import FrameReader, KafkaError, RequestHeader, encode_header

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

VECTORS = Path(__file__).parents[1] / "conformance" / "vectors" / "kafka"
SEEDS = [bytes.fromhex(f["request_hex"]) for p in sorted(VECTORS.glob("*.json"))
         for f in json.loads(p.read_text())["frames"]]
SERVED = [(key, version) for key, r in SUPPORTED.items() for version in range(r.min, r.max + 1)]
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=3, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _head(key: int, version: int, flexible: bool) -> bytes:
    return encode_header(RequestHeader(key, version, 1, "fuzz", flexible, 0))


# Frames kio's native reader alone would abort the process on: declared counts far beyond the bytes.
HUGE = [
    _head(3, 0, False) + b"\x7f\xff\xff\xff",  # Metadata v0: 2**31 - 1 topics
    _head(3, 9, True) + b"\xff\xff\xff\xff\x0f",  # Metadata v9: compact array of 2**32 - 2
    _head(9, 1, False) + b"\x00\x01g" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x7f\xff\xff\xff",
    _head(0, 9, True) + b"\x00\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff\x0f",  # Produce v9 topics
    _head(8, 8, True) + b"\x02g\x00\x00\x00\x01\x01\x01\x01\xff\xff\xff\xff\x0f",  # commit v8
]
# ApiVersions v3 response (what a client reads): supported_features, tag 0, declares 2**32 - 2.
HUGE_TAG = (b"\x00\x00\x00\x07" + b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00"
            + b"\x01\x00\x05\xff\xff\xff\xff\x0f")


def _decodes_or_refuses(frame: bytes) -> codec.Request | None:
    try:
        req = codec.decode_request(frame)
    except KafkaError:
        return None
    again = codec.encode_request(req.header, req.body)
    assert codec.decode_request(again[4:]).body == req.body
    return req


@pytest.mark.parametrize("frame", HUGE)
def test_declared_counts_beyond_the_bytes_are_refused(frame: bytes) -> None:
    with pytest.raises(KafkaError) as info:
        codec.decode_request(frame)
    assert info.value.close


def test_a_tagged_fields_counts_are_checked_too() -> None:
    with pytest.raises(KafkaError):
        codec.decode_response(HUGE_TAG, ApiKey.API_VERSIONS, 3)
    ok = HUGE_TAG[:-8] + b"\x00"  # the same response without the tag
    assert codec.decode_response(ok, ApiKey.API_VERSIONS, 3)[0] == 7


@FAST
@given(st.binary(max_size=200))
@example(struct.pack(">i", 0x56000000) + b"junk")
@example(struct.pack(">i", 10) + b"\x00" * 10)
@example(struct.pack(">i", 10) + b"\x00" * 10 + struct.pack(">i", 5))
def test_frame_reader_any_bytes(data: bytes) -> None:
    reader = FrameReader(max_size=1 << 20)
    try:
        frames = reader.feed(data)
    except KafkaError as exc:
        assert exc.close
        return
    if reader.failed is not None:  # a bad size after whole frames: they come first, then the error
        assert frames and isinstance(reader.failed, KafkaError)
        with pytest.raises(KafkaError):
            reader.feed(b"")
        return
    assert sum(len(f) + 4 for f in frames) + reader.buffered == len(data)


@FAST
@given(st.binary(max_size=300))
def test_decode_request_any_bytes(frame: bytes) -> None:
    _decodes_or_refuses(frame)


@FAST
@given(st.sampled_from(SERVED), st.booleans(), st.binary(max_size=120))
def test_decode_request_served_header_any_body(kv: tuple[ApiKey, int], flexible: bool,
                                               body: bytes) -> None:
    key, version = kv
    _decodes_or_refuses(_head(int(key), version, flexible) + body)


@FAST
@given(st.sampled_from(SEEDS), st.data())
def test_mutated_vectors(seed: bytes, data: st.DataObject) -> None:
    frame = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "count"]))
        at = data.draw(st.integers(0, max(len(frame) - 1, 0)))
        if op == "flip" and frame:
            frame[at] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del frame[at:at + data.draw(st.integers(1, 8))]
        elif op == "insert":
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "count" and len(frame) >= at + 4:  # a length or count made huge
            frame[at:at + 4] = data.draw(st.sampled_from([b"\x7f\xff\xff\xff", b"\xff\xff\xff\x0f"]))
    _decodes_or_refuses(bytes(frame))


@pytest.mark.parametrize(("key", "version"), SERVED, ids=[f"{k.name}-v{v}" for k, v in SERVED])
@FEW
@given(data=st.data())
def test_every_served_request_round_trips(key: ApiKey, version: int, data: st.DataObject) -> None:
    schema = codec.request_schema(int(key), version)
    body: Any = data.draw(st.from_type(schema))
    header = RequestHeader(int(key), version, data.draw(st.integers(-(1 << 31), (1 << 31) - 1)),
                           data.draw(st.none() | st.text(max_size=20)), bool(schema.__flexible__), 0)
    frame = codec.encode_request(header, body)
    req = codec.decode_request(frame[4:])
    assert codec.kio_body(req.header, req.body) == body and req.trailing == 0
    assert (req.header.api_key, req.header.api_version, req.header.client_id) == (
        int(key), version, header.client_id)


@pytest.mark.parametrize(("key", "version"), SERVED, ids=[f"{k.name}-v{v}" for k, v in SERVED])
@FEW
@given(data=st.data())
def test_every_served_response_round_trips(key: ApiKey, version: int, data: st.DataObject) -> None:
    body: Any = data.draw(st.from_type(codec.response_schema(int(key), version)))
    header = RequestHeader(int(key), version, 42, "c", codec.request_is_flexible(int(key), version), 0)
    frame = codec.encode_response(header, body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert codec.decode_response(frame[4:], int(key), version) == (42, body)
