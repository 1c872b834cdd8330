"""Fuzz rule for the Cursus codec: random or mutated bytes give a result or CursusError, never any
other exception, never a hang."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bayou.protocols.cursus.batch import (
    BatchHead,
    decode_head,
    decode_messages,
    encode_batch,
    encode_messages,
)
from bayou.protocols.cursus.batch import message_starts as batch_message_starts
from bayou.protocols.cursus.commands import _GO_SPACE, KEYWORDS, Command, classify
from bayou.protocols.cursus.compression import (
    compress_gzip,
    compress_lz4,
    compress_snappy_xerial,
    maybe_decompress,
)
from bayou.protocols.cursus.framing import CursusError, FrameReader, encode_frame
from bayou.protocols.cursus.requests import ErrorReply, decode, served
from bayou.records.cursus import CursusMessage

VECTORS = Path(__file__).parents[1] / "conformance" / "vectors" / "cursus"
SEEDS = [bytes.fromhex(json.loads(p.read_text())["request_hex"])[4:] for p in sorted(VECTORS.glob("*.json"))]
LIMIT = 1 << 20


def handle(body: bytes) -> BatchHead | Command | None:
    """The server's decode path: decompress, classify, walk the records or decode the command into
    its typed request (which gives the request or an error reply). None = protocol error."""
    try:
        plain = maybe_decompress(body, limit=LIMIT)
        item = classify(plain)
        if isinstance(item, BatchHead):
            starts = batch_message_starts(plain, item)
            assert len(starts) == item.count + 1 and starts[-1] <= len(plain)
            assert len(decode_messages(plain, item)) == item.count
        elif served(item):
            try:
                request = decode(item)
            except ErrorReply as exc:  # READ_STREAM answers its errors in JSON
                first = exc.reply[0] if isinstance(exc.reply, list) else exc.reply
                assert first.startswith((b"ERROR: ", b'{"status":"ERROR"'))
            else:
                invalid = getattr(request, "invalid", None)
                assert invalid is None or invalid.startswith((b"ERROR: ", b'{"status":"ERROR"'))
        return item
    except CursusError as exc:
        assert exc.reply is None or exc.reply.startswith(b"ERROR: ")
        return None


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, 0x20, 0x3D]))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


@st.composite
def commands(draw: st.DrawFn) -> bytes:
    kw = draw(st.sampled_from(sorted(KEYWORDS)))
    kw = "".join(c.lower() if draw(st.booleans()) else c for c in kw)
    tokens = draw(st.lists(st.one_of(
        st.text(max_size=10),
        st.sampled_from(["topic=t", "partition=-1", "message=", "message=a b", "=", "k=v=w", "P0:1,P1:2",
                         "group=g", "member=m", "generation=x", "offset=9", "key=k", "version=1", "acks=all",
                         "producerId=p", "partition=99999999999999999999", "P0:1,P0:2", "t", "0"]),
    ), max_size=6))
    sep = draw(st.sampled_from([" ", "\t", "  ", "\u00a0"]))
    text = (kw + sep + sep.join(tokens)).encode()
    envelope = draw(st.sampled_from([b"", b"\x00\x00", b"\x00\x05admin", b"\x00\x01\xff"]))
    return envelope + text


@st.composite
def compressed(draw: st.DrawFn) -> bytes:
    inner = draw(st.one_of(st.sampled_from(SEEDS), st.binary(max_size=300)))
    packed = bytearray(draw(st.sampled_from([compress_gzip, compress_lz4, compress_snappy_xerial]))(inner))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(packed) - 1))
        packed[at] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(packed)))
    return bytes(packed[: max(cut, len(packed) - draw(st.integers(0, 4)))])


@settings(max_examples=1500, deadline=None)
@given(st.one_of(st.binary(max_size=300), mutated(), commands(), compressed()))
@example(b"")
@example(b"\xba\x7c\x00\x01")
@example(b"\xba\x7c\x00\x01t\x00\x00\x00\x00\xff")
@example(b"\xba\x7c\x00\x01t\x00\x00\x00\x00\x00\x00" + b"\x00" * 16 + b"\x7f\xff\xff\xff")
@example(b"\xba\x7c\x00\x01t\x00\x00\x00\x00\x00\x00" + b"\x00" * 16 + b"\x00\x00\x00\x01" + b"\xff" * 48)
@example(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\xff\xff\xff\xff")
@example(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x06\xff\xff\xff\xff\xff\x7f")
@example(b"\x04\x22\x4d\x18\x64\x40\xa7\xff\xff\xff\xff")
@example(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
@example(b"\x00\x00LIST \xed\xa0\x80")
@example(b"\x00\x00" + "LİST".encode())
def test_decode_path_gives_a_result_or_the_protocol_error(body: bytes) -> None:
    item = handle(body)
    if isinstance(item, Command):
        assert item.name in KEYWORDS
        assert item.text == item.text.strip(" \t\r\n")
        assert (item.message is None) == ("message=" not in item.text)
        # tokens split on Go's whitespace set, which (unlike str.isspace) excludes U+001C..U+001F
        assert all(not re.search(f"[{_GO_SPACE}]", k) for k in item.args)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(min_value=1, max_value=50), max_size=20))
def test_reader_split_points_do_not_matter(data: bytes, cuts: list[int]) -> None:
    def run(chunks: list[bytes]) -> tuple[list[bytes], bool]:
        r = FrameReader(max_frame=64)
        got: list[bytes] = []
        for chunk in chunks:
            try:
                got += r.feed(chunk)
            except CursusError as exc:
                assert exc.reply is None and exc.close
                return got, True
            if r.overflowed:
                return got, True
            assert r.buffered <= 4 + 64
        return got, False

    whole = run([data])
    chunks, pos = [], 0
    for c in [*cuts, len(data)]:
        chunks.append(data[pos : pos + c])
        pos += c
    split = run(chunks)
    assert split == whole


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=8))
def test_frames_round_trip(bodies: list[bytes]) -> None:
    assert FrameReader().feed(b"".join(encode_frame(b) for b in bodies)) == bodies


_u64 = st.integers(0, (1 << 64) - 1)
_u32 = st.integers(0, (1 << 32) - 1)
_i64 = st.integers(-(1 << 63), (1 << 63) - 1)
_small = st.binary(max_size=40)
messages = st.builds(CursusMessage, st.binary(max_size=100), _u64, _u64, _small, _small, _i64, _small, _u32,
                     _u64, _small)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30), st.integers(-(1 << 31), (1 << 31) - 1),
       st.lists(messages, max_size=6), st.sampled_from(["0", "1", "-1", "all"]), st.booleans())
def test_batch_round_trip(topic: str, partition: int, msgs: list[CursusMessage], acks: str,
                          idem: bool) -> None:
    seqs = (msgs[0].seq_num, msgs[-1].seq_num) if msgs else (0, 0)
    body = encode_batch(topic, partition, encode_messages(msgs), len(msgs), *seqs, acks, idempotent=idem)
    head = decode_head(body)
    assert (head.topic, head.partition, head.acks, head.idempotent, head.count) == (
        topic, partition, acks, idem, len(msgs))
    assert (head.seq_start, head.seq_end) == seqs
    assert decode_messages(body, head) == msgs
    item = classify(body)
    assert item == head
