"""bayou's compressed L send (protocols/iggy/compressed.py): round trip per codec, what is not an
envelope, every bad envelope's error, truncations, and the inflation bound."""

from __future__ import annotations

import contextlib
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.client.wire import send_frame, send_metadata
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import L_HEADER, L_INDEX, decode_legacy_send, read_send_metadata
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.compressed import HEADER, envelope, expand
from bayou.protocols.iggy.framing import IggyError
from bayou.records.compression import Compression, compress

STREAM, TOPIC = m.Identifier("default"), m.Identifier("t")
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
_TLV = struct.Struct("<BI")


def payload_of(frame: bytes) -> bytes:
    return frame[8:]  # legacy request: u32 length, u32 command, payload


def plain(values: list[bytes], **kw: object) -> bytes:
    return payload_of(send_frame(STREAM, TOPIC, 3, values, **kw))  # type: ignore[arg-type]


def compressed(values: list[bytes], codec: Compression, **kw: object) -> bytes:
    return payload_of(send_frame(STREAM, TOPIC, 3, values, compression=codec, **kw))  # type: ignore[arg-type]


def expand_payload(payload: bytes, max_size: int = 64 << 20) -> bytes | None:
    _s, _t, _p, count, pos = read_send_metadata(payload)
    return expand(payload, pos, count, max_size=max_size)


def one_message(data: bytes, headers: list[tuple[int, bytes, int, bytes]]) -> bytes:
    """An L send of one message with ``data`` as payload and the given headers."""
    hdr = b"".join(_TLV.pack(kk, len(k)) + k + _TLV.pack(vk, len(v)) + v for kk, k, vk, v in headers)
    msg = L_HEADER.pack(0, 0, 0, 0, 0, 0, len(hdr), len(data), 0) + data + hdr
    return send_metadata(STREAM, TOPIC, 3, 1) + L_INDEX.pack(0, len(msg), 0) + msg


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_round_trip_gives_the_plain_send_back(codec: Compression) -> None:
    values = [b"value-%d" % i * 3 for i in range(200)]
    keys = [b"k%d" % (i % 5) if i % 3 else None for i in range(200)]
    headers = [[("h", b"%d" % i)] if i % 4 == 0 else [] for i in range(200)]
    ids = [(7 << 64) | i for i in range(1, 201)]
    for kw in ({}, {"keys": keys, "headers": headers, "message_ids": ids}):
        env = compressed(values, codec, **kw)
        assert len(env) < len(plain(values, **kw))  # repetitive data: it shrinks
        assert expand_payload(env) == plain(values, **kw)
        req = decode_legacy_send(expand_payload(env) or b"")
        assert [msg.payload for msg in req.messages] == values


def test_ordinary_sends_are_not_envelopes() -> None:
    assert expand_payload(plain([b"a", b"b"])) is None  # two messages
    assert expand_payload(plain([b"a"])) is None  # one message, no headers
    assert expand_payload(plain([b"a"], headers=[[("h", b"v")]])) is None  # other headers
    # the header name with another value kind, or as a non-string key, is just a header
    assert expand_payload(one_message(b"x", [(2, HEADER, 2, b"zstd")])) is None
    assert expand_payload(one_message(b"x", [(1, HEADER, 1, b"zstd")])) is None


@pytest.mark.parametrize(("data", "name", "status"), [
    (compress(Compression.ZSTD, b"\x01\x00\x00\x00"), b"brotli", Status.INVALID_FORMAT),  # unknown codec
    (compress(Compression.ZSTD, b"\x01\x00\x00\x00"), b"none", Status.INVALID_FORMAT),
    (b"not zstd at all", b"zstd", Status.INVALID_FORMAT),  # does not inflate
    (b"\x1f\x8b garbage", b"gzip", Status.INVALID_FORMAT),
    (compress(Compression.LZ4, b"\x01\x00\x00\x00")[:-3], b"lz4", Status.INVALID_FORMAT),  # truncated
    (compress(Compression.SNAPPY, b"ab"), b"snappy", Status.INVALID_FORMAT),  # no count
    (compress(Compression.GZIP, b"\x00\x00\x00\x00"), b"gzip", Status.INVALID_MESSAGES_COUNT),
])
def test_bad_envelopes_get_the_protocol_error(data: bytes, name: bytes, status: Status) -> None:
    with pytest.raises(IggyError) as info:
        expand_payload(one_message(data, [(2, HEADER, 1, name)]))
    assert info.value.status == status


def test_inflation_is_bounded() -> None:
    bomb = zlib.compress(b"\x01\x00\x00\x00" + bytes(10 << 20))  # 10 MiB of zeros in ~10 KiB
    payload = one_message(bomb, [(2, HEADER, 1, b"gzip")])
    with pytest.raises(IggyError) as info:
        expand_payload(payload, max_size=1 << 20)
    assert info.value.status == Status.INVALID_FORMAT
    assert expand_payload(payload, max_size=16 << 20) is not None


def test_envelope_needs_a_codec() -> None:
    with pytest.raises(ValueError):
        envelope(1, b"", Compression.NONE)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(CODECS))
def test_mutated_envelopes_give_a_send_none_or_the_protocol_error(noise: bytes, codec: Compression) -> None:
    env = compressed([b"abc" * 10] * 5, codec)
    _s, _t, _p, count, pos = read_send_metadata(env)
    for cut in range(pos, len(env) + 1, 7):  # truncated prefixes
        with contextlib.suppress(IggyError):
            expand(env[:cut], pos, count)
    mutated = bytearray(env)
    for i, b in enumerate(noise[: len(env) - pos]):
        mutated[pos + (i * 13) % (len(env) - pos)] ^= b
    try:
        out = expand(bytes(mutated), pos, count)
    except IggyError:
        return
    assert out is None or isinstance(out, bytes)
