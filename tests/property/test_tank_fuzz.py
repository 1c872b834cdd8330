"""Fuzz rule for the TANK codec: random or mutated bytes give messages or TankError, never any
other exception, never a hang. Seeds are the captured vectors; whatever decodes must also survive
an encode/decode round trip unchanged. Bundles and chunks follow the same rule with BundleError."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bayou.protocols.tank import codec
from bayou.protocols.tank import messages as m
from bayou.protocols.tank.bundles import (
    TankMessage,
    decode_bundle,
    decode_bundle_header,
    decode_chunk,
    encode_bundle,
    encode_chunk_record,
    iter_chunk,
)
from bayou.protocols.tank.codes import MsgId, TankError
from bayou.protocols.tank.framing import Frame, FrameReader

VECTORS = Path(__file__).parents[1] / "conformance" / "vectors" / "tank"
_ALL = [json.loads(p.read_text()) for p in sorted(VECTORS.glob("*.json"))]
REQUEST_STREAMS = [bytes.fromhex(v["request_hex"]) for v in _ALL if v["request_hex"]]
RESPONSE_STREAMS = [bytes.fromhex(v["response_hex"]) for v in _ALL]
REQUEST_FRAMES = [f for s in REQUEST_STREAMS for f in FrameReader().feed(s)]
RESPONSE_FRAMES = [f for s in RESPONSE_STREAMS for f in FrameReader().feed(s)]


def _requests_of_vectors() -> list[m.Produce]:
    out: list[m.Produce] = []
    for f in REQUEST_FRAMES:
        if f.msg_id in (MsgId.PRODUCE, MsgId.PRODUCE_WITH_SEQNUM):
            req = codec.decode_request(f.msg_id, f.payload)
            assert isinstance(req, m.Produce)
            out.append(req)
    return out


PRODUCE_REQUESTS = _requests_of_vectors()
BUNDLES = [e.bundle for r in PRODUCE_REQUESTS for _, e in r.entries()]
CHUNKS = [p.chunk for f in RESPONSE_FRAMES if f.msg_id in (MsgId.CONSUME, MsgId.CONSUME_PEER)
          for t in codec.decode_response(f.msg_id, f.payload).topics  # type: ignore[union-attr]
          if isinstance(t, m.ConsumeTopicResult) for p in t.partitions if p.chunk]
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def serve(data: bytes) -> int:
    """The server's path over one connection's bytes; returns how many requests decoded."""
    reader = FrameReader(max_payload=1 << 20)
    try:
        frames = reader.feed(data)
    except TankError as exc:
        assert exc.close
        return 0
    decoded = 0
    for frame in frames:
        try:
            req = codec.decode_request(frame.msg_id, frame.payload)
        except TankError as exc:
            assert exc.close
            break  # the broker closes the connection here
        decoded += 1
        assert codec.decode_request(*codec.encode_request(req)) == req
        if isinstance(req, m.Produce):
            for _, entry in req.entries():
                _bundle(entry.bundle, entry.base_seq)
    return decoded


def _bundle(bundle: bytes, base_seq: int) -> None:
    try:
        header = decode_bundle_header(bundle)
    except TankError as exc:
        assert not exc.close  # a BundleError: answered with produce error 10
        return
    assert header.count >= 1 and header.header_size <= len(bundle)
    try:
        msgs = decode_bundle(bundle, base_seq, max_uncompressed=1 << 20)
    except TankError:
        return
    assert len(msgs) == header.count
    assert msgs[0].seq == header.seqs(base_seq)[0]


def client(frame: Frame, request: m.Request | None) -> None:
    try:
        resp = codec.decode_response(frame.msg_id, frame.payload, request=request)
    except TankError:
        return
    msg_id, payload = codec.encode_response(resp)
    assert codec.decode_response(msg_id, payload, request=request) == resp
    if isinstance(resp, m.ConsumeResponse | m.ConsumePeerResponse):
        for t in resp.topics:
            if isinstance(t, m.ConsumeTopicResult):
                for p in t.partitions:
                    with contextlib.suppress(TankError):
                        decode_chunk(p.chunk, p.base_seq, sparse_first=p.flags == 0xFE,
                                     max_uncompressed=1 << 20)


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x04, 0x40, 0x7F, 0x80, 0xFE, 0xFF]))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


@FAST
@given(mutated(REQUEST_STREAMS))
@example(bytes.fromhex("0300000000" "04020000000100"))
@example(bytes.fromhex("01ffffffff"))
@example(bytes.fromhex("0110000000" "0200" "01000000" "00" "00" "00000000" "01" "0174" "01" "0000" "05" "00"))
def test_mutated_request_streams(data: bytes) -> None:
    serve(data)


@FAST
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    serve(data)


@FAST
@given(st.sampled_from([*range(0x0E), 0xFF]), st.binary(max_size=160))
def test_random_payloads(msg_id: int, payload: bytes) -> None:
    serve(bytes([msg_id]) + len(payload).to_bytes(4, "little") + payload)


@FAST
@given(st.sampled_from(REQUEST_FRAMES), st.data())
def test_mutated_request_payloads(frame: Frame, data: st.DataObject) -> None:
    payload = data.draw(mutated([frame.payload]))
    serve(bytes([frame.msg_id]) + len(payload).to_bytes(4, "little") + payload)


@FAST
@given(st.sampled_from(RESPONSE_FRAMES), st.data(), st.sampled_from(PRODUCE_REQUESTS))
def test_mutated_responses(frame: Frame, data: st.DataObject, produce: m.Produce) -> None:
    payload = data.draw(mutated([frame.payload]))
    msg_id = data.draw(st.sampled_from([frame.msg_id, frame.msg_id, *range(0x0E)]))
    client(Frame(msg_id, payload), produce)


@FAST
@given(mutated(BUNDLES), st.integers(0, 2**64 - 1))
@example(b"\x00\x00", 0)
@example(b"\x80", 0)
@example(b"\x05\xff\xff\xff\xff\x0f", 0)
def test_mutated_bundles(bundle: bytes, base_seq: int) -> None:
    _bundle(bundle, base_seq)


@FAST
@given(mutated(CHUNKS), st.integers(0, 2**64 - 1), st.booleans())
def test_mutated_chunks(chunk: bytes, base_seq: int, sparse_first: bool) -> None:
    try:
        bundles = list(iter_chunk(chunk, base_seq, sparse_first=sparse_first))
    except TankError as exc:
        assert not exc.close
        return
    pos = 0
    for b in bundles:
        assert b.offset == pos and b.end <= len(chunk)
        assert chunk[b.offset : b.end] == encode_chunk_record(b.bundle)
        pos = b.end


messages = st.lists(st.builds(
    TankMessage,
    seq=st.just(0),
    timestamp=st.sampled_from([0, 1, 1795316756750, 2**64 - 1]),
    key=st.none() | st.binary(max_size=255),
    value=st.binary(max_size=300),
), min_size=1, max_size=40)


@FAST
@given(messages, st.none() | st.booleans(), st.integers(0, 2**40), st.booleans(),
       st.lists(st.integers(1, 2**33), min_size=40, max_size=40))
def test_bundle_round_trip(msgs: list[TankMessage], compress: bool | None, base: int, sparse: bool,
                           gaps: list[int]) -> None:
    if sparse:
        seqs = [base + 1]
        for g in gaps[: len(msgs) - 1]:
            seqs.append(seqs[-1] + (1 if g % 3 else 1 + g % 2**26))  # the whole span fits a u32 varint
        msgs = [TankMessage(s, x.timestamp, x.key, x.value) for s, x in zip(seqs, msgs, strict=True)]
    else:
        msgs = [TankMessage(base + i, x.timestamp, x.key, x.value) for i, x in enumerate(msgs)]
    bundle = encode_bundle(msgs, compress=compress, sparse=sparse)
    header = decode_bundle_header(bundle)
    assert header.count == len(msgs) and header.sparse == sparse
    assert header.seqs(base) == (msgs[0].seq, msgs[-1].seq)
    assert decode_bundle(bundle, base) == msgs
    chunk = encode_chunk_record(bundle) * 2
    got = list(iter_chunk(chunk, base, sparse_first=sparse))
    assert len(got) == 2 and got[0].bundle == bundle
