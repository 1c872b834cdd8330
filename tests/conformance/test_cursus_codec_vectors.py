"""Every Cursus vector (tests/conformance/vectors/cursus, copied from shared/vectors/cursus) against
the codec alone: each request decodes to the expected kind and fields, and each expected reply is
reproduced byte for byte by the reply encoders (batch replies from the decoded messages)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bayou.protocols.cursus.batch import (
    BatchHead,
    decode_head,
    decode_messages,
    encode_batch,
    encode_messages,
)
from bayou.protocols.cursus.commands import Command, classify
from bayou.protocols.cursus.compression import maybe_decompress
from bayou.protocols.cursus.framing import CursusError, FrameReader, encode_frame
from bayou.protocols.cursus.replies import Raw, error, json_ack, json_body, ok
from bayou.records.cursus import CursusMessage

VECTORS = Path(__file__).parent / "vectors" / "cursus"
EPOCH = 1700000000
POLICY = (("cleanup_policy", "delete"), ("partitioner", "hash_key"), ("auth_policy", "open"),
          ("read_acl", ""), ("write_acl", ""), ("retention_hours", 0), ("retention_bytes", 0))


def _load() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(VECTORS.glob("*.json"))}


ALL = _load()


def _msg(payload: bytes, offset: int, seq: int) -> CursusMessage:
    return CursusMessage(payload, offset, seq, b"py-test", b"", EPOCH)


def _batch_frame(c: Command, msgs: list[CursusMessage]) -> bytes:
    seqs = (msgs[0].seq_num, msgs[-1].seq_num) if msgs else (0, 0)
    body = encode_batch(c.args["topic"], int(c.args["partition"]), encode_messages(msgs), len(msgs), *seqs)
    return encode_frame(body)


def _read_stream(c: Command) -> bytes:
    first = json_body({"status": "OK", "topic": c.args["topic"], "key": c.args["key"], "partition": 0,
                       "count": 0, "snapshot": {"version": 2, "payload": '{"balance":10}'}})
    return encode_frame(first) + encode_frame(encode_batch(c.args["topic"], 0, b"", 0, 0, 0))


Reply = Callable[[Any], bytes]

# name -> (expected args of the text command, or the BatchHead; expected message=; reply builder)
EXPECT: dict[str, tuple[dict[str, str] | BatchHead, str | None, Reply]] = {
    "01_create_topic_admin_envelope": (
        {"topic": "orders", "partitions": "2"}, None,
        lambda c: ok(("topic", c.args["topic"]), ("partitions", int(c.args["partitions"])), *POLICY)),
    "02_metadata": (
        {"topic": "orders"}, None,
        lambda c: ok(("topic", "orders"), ("partitions", 2), ("leaders", "localhost:9000,localhost:9000"),
                     ("epochs", "0,0"), *POLICY)),
    "03_batch_acks1_unkeyed": (
        BatchHead("orders", 0, "1", False, 1, 1, 1, 37), None, lambda h: json_ack(0, EPOCH, "py-test", 1, 1)),
    "04_batch_acks_all_keyed": (
        BatchHead("users", 3, "-1", False, 1, 1, 1, 37), None, lambda h: json_ack(0, EPOCH, "py-test", 1, 1)),
    "05_batch_acks0": (BatchHead("fire", 0, "0", False, 1, 1, 1, 35), None, lambda h: ok()),
    "06_batch_idempotent": (
        BatchHead("idem", 0, "1", True, 1, 3, 3, 35), None, lambda h: json_ack(2, EPOCH, "py-test", 1, 3)),
    "07_batch_gzip": (
        BatchHead("zipped", 0, "1", False, 1, 1, 1, 37), None, lambda h: json_ack(0, EPOCH, "py-test", 1, 1)),
    "08_find_coordinator": (
        {"group": "g1"}, None,
        lambda c: ok(("coordinator_id", "standalone"), ("coordinator_type", "group"), ("host", "localhost"),
                     ("port", 9000))),
    "09_join_group": (
        {"topic": "events", "group": "g1", "member": "consumer-test"}, None,
        lambda c: ok(("generation", 1), ("member", c.args["member"] + "-0042"), ("assignments", [0, 1]))),
    "10_fetch_offset": (
        {"topic": "events", "partition": "0", "group": "g1"}, None, lambda c: ok(("offset", 0))),
    "11_consume_poll": (
        {"topic": "events", "partition": "0", "offset": "0", "member": "consumer-test-0042", "group": "g1",
         "generation": "1"}, None,
        lambda c: _batch_frame(c, [_msg(b"e0", 0, 1), _msg(b"e2", 1, 2)])),
    "12_consume_poll_empty": (
        {"topic": "events", "partition": "0", "offset": "2", "member": "consumer-test-0042", "group": "g1",
         "generation": "1"}, None,
        lambda c: _batch_frame(c, [])),
    "13_heartbeat": (
        {"topic": "events", "group": "g1", "member": "consumer-test-0042", "generation": "1"}, None,
        lambda c: ok(("member", c.args["member"]), ("generation", 1))),
    "14_batch_commit": (
        {"topic": "events", "group": "g1", "member": "consumer-test-0042", "generation": "1"}, None,
        lambda c: ok(("batched", len(c.tail.split(","))))),
    "15_leave_group_without_generation": (
        {"topic": "events", "group": "g1", "member": "consumer-test-0042"}, None,
        lambda c: error("missing_generation", ("command", c.name))),
    "16_commit_offset": (
        {"topic": "live", "partition": "0", "group": "g2", "offset": "1", "generation": "1",
         "member": "consumer-stream-0042"}, None, lambda c: ok()),
    "17_stream": (
        {"topic": "live", "partition": "0", "group": "g2", "member": "consumer-stream-0042",
         "generation": "1"}, None, lambda c: _batch_frame(c, [_msg(b"s0", 0, 1), _msg(b"s1", 1, 2)])),
    "18_sync_group": (
        {"topic": "solo", "group": "g3", "member": "consumer-b-0043", "generation": "2"}, None,
        lambda c: ok(("generation", 2), ("member", c.args["member"]), ("assignments", []))),
    "19_heartbeat_generation_mismatch": (
        {"topic": "solo", "group": "g3", "member": "consumer-a-0042", "generation": "1"}, None,
        lambda c: error("GEN_MISMATCH", ("current", 2), ("requested", int(c.args["generation"])),
                        ("group", c.args["group"]), ("member", c.args["member"]))),
    "20_create_event_sourcing_topic": (
        {"topic": "accounts", "partitions": "2", "event_sourcing": "true"}, None,
        lambda c: ok(("topic", "accounts"), ("partitions", 2), *POLICY)),
    "21_append_stream": (
        {"topic": "accounts", "key": "acct-1", "version": "2", "event_type": "Deposited",
         "schema_version": "1", "producerId": "es-producer", "metadata": '{"src":"atm"}'}, '{"amount":10}',
        lambda c: ok(("version", 2), ("offset", 1), ("partition", 0))),
    "22_stream_version": ({"topic": "accounts", "key": "acct-1"}, None, lambda c: ok(("version", 2))),
    "23_save_snapshot": (
        {"topic": "accounts", "key": "acct-1", "version": "2"}, '{"balance":10}',
        lambda c: ok(("version", 2), ("partition", 0))),
    "24_read_snapshot": (
        {"topic": "accounts", "key": "acct-1"}, None,
        lambda c: ok(("snapshot", Raw(json_body({"version": 2, "payload": '{"balance":10}'}).decode())))),
    "25_read_stream": ({"topic": "accounts", "key": "acct-1", "from_version": "1"}, None, _read_stream),
}

BATCH_REPLIES = ["11_consume_poll", "12_consume_poll_empty", "17_stream", "25_read_stream"]


def test_every_vector_is_covered() -> None:
    assert len(ALL) == 25
    assert set(ALL) == set(EXPECT)
    assert (VECTORS / "README.md").exists()


def _body(v: dict[str, Any]) -> bytes:
    (body,) = FrameReader().feed(bytes.fromhex(v["request_hex"]))
    return body


@pytest.mark.parametrize("name", sorted(ALL))
def test_request_decodes(name: str) -> None:
    v = ALL[name]
    expected, message, _reply = EXPECT[name]
    item = classify(maybe_decompress(_body(v)))
    if isinstance(expected, BatchHead):
        assert "request_text" not in v
        assert item == expected
        return
    assert isinstance(item, Command)
    text: str = v["request_text"]
    assert item.name == text.split()[0]
    assert item.text == text
    assert dict(item.args) == expected
    assert item.message == message
    assert item.well_formed()
    envelope = v["request_envelope_topic"].encode()
    assert _body(v) == len(envelope).to_bytes(2, "big") + envelope + text.encode()


@pytest.mark.parametrize("name", sorted(ALL))
def test_expected_reply_is_reproduced(name: str) -> None:
    v = ALL[name]
    _expected, _message, build = EXPECT[name]
    reply = build(classify(maybe_decompress(_body(v))))
    if "expected_response_text" in v:
        assert reply == v["expected_response_text"].encode()
    else:
        assert reply == bytes.fromhex(v["expected_response_hex"])
    if "expected_response_pattern" in v:
        assert re.fullmatch(v["expected_response_pattern"], reply.decode())


@pytest.mark.parametrize("name", BATCH_REPLIES)
def test_batch_replies_rebuild_from_their_decoded_messages(name: str) -> None:
    frames = FrameReader().feed(bytes.fromhex(ALL[name]["expected_response_hex"]))
    batch = frames[-1]
    head = decode_head(batch)
    msgs = decode_messages(batch, head)
    assert (head.acks, head.idempotent) == ("1", False)
    rebuilt = encode_batch(head.topic, head.partition, encode_messages(msgs), len(msgs), head.seq_start,
                           head.seq_end)
    assert rebuilt == batch


def test_read_stream_frames() -> None:
    v = ALL["25_read_stream"]
    frames = FrameReader().feed(bytes.fromhex(v["expected_response_hex"]))
    assert [f.hex() if i else f.decode() for i, f in enumerate(frames)] == [
        v["expected_response_frames"][0]["text"], v["expected_response_frames"][1]["hex"][8:]]


def test_gzip_vector_without_decompression() -> None:
    """07 against a broker that does not decompress (H with compression_type none)."""
    v = ALL["07_batch_gzip"]
    with pytest.raises(CursusError) as ei:
        classify(_body(v))
    assert ei.value.reply == v["expected_response_text_if_broker_compression_none"].encode()
    assert not ei.value.close


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_truncated_body_is_a_result_or_the_protocol_error(name: str) -> None:
    body = _body(ALL[name])
    batch = isinstance(EXPECT[name][0], BatchHead)
    for cut in range(len(body)):
        try:
            plain = maybe_decompress(body[:cut])
            item = classify(plain)
            if isinstance(item, BatchHead):
                decode_messages(plain, item)
        except CursusError as exc:
            assert exc.reply is None or exc.reply.startswith(b"ERROR: ")
        else:
            assert not batch, f"prefix {cut} of a batch decoded"
            assert isinstance(item, Command)
