"""The Cursus binary batch header and message walk (cursus.md 5)."""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path

import pytest

from bayou.protocols.cursus.batch import (
    MAGIC,
    MAX_MESSAGES,
    BatchHead,
    decode_head,
    decode_messages,
    encode_batch,
    encode_messages,
    is_batch,
    message_starts,
)
from bayou.protocols.cursus.framing import CursusError
from bayou.records.cursus import CursusMessage

VECTORS = Path(__file__).parents[2] / "conformance" / "vectors" / "cursus"
EPOCH = 1700000000
HELLO = CursusMessage(b"hello", seq_num=1, producer_id=b"py-test", epoch=EPOCH)


def _body(name: str) -> bytes:
    return bytes.fromhex(json.loads((VECTORS / f"{name}.json").read_text())["request_hex"])[4:]


def _bad(exc: CursusError) -> None:
    assert exc.reply is not None and not exc.close
    assert exc.reply.startswith(b'ERROR: batch_decode_failed reason="') and exc.reply.endswith(b'"')


def test_constants() -> None:
    assert MAGIC == 0xBA7C and MAX_MESSAGES == 100_000


def test_worked_example_exact_bytes() -> None:
    """cursus.md 5.2: vector 03 is exactly what encode_batch writes for the same fields."""
    body = _body("03_batch_acks1_unkeyed")
    assert encode_batch("orders", 0, encode_messages([HELLO]), 1, 1, 1) == body


def test_empty_batch_is_37_bytes() -> None:
    expected = bytes.fromhex(
        "BA7C 0006 6576656E7473 00000000 01 31 00 0000000000000000 0000000000000000 00000000")
    assert encode_batch("events", 0, b"", 0, 0, 0) == expected
    assert len(expected) == 37


@pytest.mark.parametrize(("name", "head"), [
    ("03_batch_acks1_unkeyed", BatchHead("orders", 0, "1", False, 1, 1, 1, 37)),
    ("04_batch_acks_all_keyed", BatchHead("users", 3, "-1", False, 1, 1, 1, 37)),
    ("05_batch_acks0", BatchHead("fire", 0, "0", False, 1, 1, 1, 35)),
    ("06_batch_idempotent", BatchHead("idem", 0, "1", True, 1, 3, 3, 35)),
])
def test_vector_heads(name: str, head: BatchHead) -> None:
    body = _body(name)
    assert is_batch(body)
    assert decode_head(body) == head
    starts = message_starts(body, head)
    assert len(starts) == head.count + 1 and starts[0] == head.messages_at and starts[-1] == len(body)


def test_vector_messages() -> None:
    body = _body("04_batch_acks_all_keyed")
    (m,) = decode_messages(body, decode_head(body))
    assert m == CursusMessage(b"payload-alice", 0, 1, b"py-test", b"alice", EPOCH)
    body = _body("06_batch_idempotent")
    msgs = decode_messages(body, decode_head(body))
    assert [(m.payload, m.seq_num) for m in msgs] == [(b"m0", 1), (b"m1", 2), (b"m2", 3)]


MESSAGES = [
    CursusMessage(b"", 0, 0),
    CursusMessage(b"v" * 300, 7, 2, b"p", b"k", -5, b"Deposited", 1, 9, b'{"a":1}'),
    CursusMessage("ünïcödé".encode(), (1 << 64) - 1, (1 << 64) - 1, b"x" * 0xFFFF, b"", -(1 << 63),
                  b"e" * 0xFFFF, (1 << 32) - 1, (1 << 64) - 1, b"m" * 0xFFFF),
]


@pytest.mark.parametrize("acks", ["0", "1", "-1", "all"])
@pytest.mark.parametrize("partition", [0, 5, -1, (1 << 31) - 1])
def test_round_trip(acks: str, partition: int) -> None:
    body = encode_batch("tópic", partition, encode_messages(MESSAGES), len(MESSAGES), 0, 2, acks,
                        idempotent=True)
    head = decode_head(body)
    assert (head.topic, head.partition, head.acks, head.idempotent) == ("tópic", partition, acks, True)
    assert (head.seq_start, head.seq_end, head.count) == (0, 2, 3)
    assert decode_messages(body, head) == MESSAGES
    starts = message_starts(body, head)
    pieces = [body[a:b] for a, b in itertools.pairwise(starts)]
    assert pieces == [encode_messages([m]) for m in MESSAGES]


def test_empty_acks_reads_as_one() -> None:
    assert decode_head(encode_batch("t", 0, b"", 0, 0, 0, acks="")).acks == "1"


def test_trailing_bytes_after_last_record_are_ignored() -> None:
    body = _body("03_batch_acks1_unkeyed") + b"\x00trailing"
    head = decode_head(body)
    assert message_starts(body, head)[-1] == len(body) - 9
    assert decode_messages(body, head)[0].payload == b"hello"


@pytest.mark.parametrize("name", ["03_batch_acks1_unkeyed", "04_batch_acks_all_keyed", "05_batch_acks0",
                                  "06_batch_idempotent"])
def test_every_truncated_prefix_is_the_protocol_error(name: str) -> None:
    body = _body(name)
    for cut in range(len(body)):
        prefix = body[:cut]
        with pytest.raises(CursusError) as ei:
            message_starts(prefix, decode_head(prefix))
        _bad(ei.value)


@pytest.mark.parametrize(("body", "ok"), [
    (b"", False),
    (b"\xba\x7c\x00\x01a", False),  # 5 bytes: too short
    (b"\xba\x7c\x00\x01ab", True),
    (b"\xba\x7c\x00\x00abcd", False),  # empty topic
    (b"\xba\x7c\x00\x07abcd", False),  # 7 + 2 > 8
    (b"\xba\x7c\x00\x06abcd", True),  # 6 + 2 <= 8, even though the header is truncated
    (b"\xba\x7d\x00\x01ab", False),
    (b"\x00\x00\xba\x7c\x00\x01", False),
])
def test_is_batch(body: bytes, ok: bool) -> None:
    assert is_batch(body) is ok


def _header(topic: bytes = b"t", acks: bytes = b"1", count: int = 0) -> bytes:
    return (struct.pack(">HH", MAGIC, len(topic)) + topic + struct.pack(">iB", 0, len(acks)) + acks
            + struct.pack(">BQQi", 0, 0, 0, count))


@pytest.mark.parametrize(("body", "reason"), [
    (_header(count=-1), b"invalid message count -1"),
    (_header(count=MAX_MESSAGES + 1) + bytes(48 * (MAX_MESSAGES + 1)), b"invalid message count 100001"),
    (_header(count=2) + bytes(95), b"message count 2 is larger than the frame"),
    (_header(topic=b"\xff\xfe"), b"topic is not valid UTF-8"),
    (_header(acks=b"\xff"), b"acks is not valid UTF-8"),
    (_header()[:-1], b"truncated batch header"),
    (b"\xba\x7c\x00\x00" + _header()[4:], b"empty topic"),
    (b"\xba\x7d" + _header()[2:], b"invalid batch magic"),
])
def test_header_errors_exact(body: bytes, reason: bytes) -> None:
    with pytest.raises(CursusError) as ei:
        decode_head(body)
    assert ei.value.reply == b'ERROR: batch_decode_failed reason="' + reason + b'"'
    assert not ei.value.close


def test_max_messages_is_accepted() -> None:
    msg = encode_messages([CursusMessage(b"")])
    body = _header(count=MAX_MESSAGES) + msg * MAX_MESSAGES
    head = decode_head(body)
    assert len(message_starts(body, head)) == MAX_MESSAGES + 1


def test_record_running_past_the_frame() -> None:
    body = bytearray(_body("03_batch_acks1_unkeyed"))
    struct.pack_into(">I", body, 37 + 8 + 8 + 2 + 7 + 2 + 8, 1 << 30)  # payload length
    with pytest.raises(CursusError) as ei:
        message_starts(bytes(body), decode_head(bytes(body)))
    assert ei.value.reply == b'ERROR: batch_decode_failed reason="payload past the end of the frame"'


def test_encode_batch_rejects_unencodable_fields() -> None:
    with pytest.raises(ValueError):
        encode_batch("", 0, b"", 0, 0, 0)
    with pytest.raises(ValueError):
        encode_batch("t" * 65536, 0, b"", 0, 0, 0)
    with pytest.raises(ValueError):
        encode_batch("t", 0, b"", 0, 0, 0, acks="a" * 256)
