"""Cursus reply bodies in the version-H forms (cursus.md 3, 4, 6.1)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.protocols.cursus.replies import ErrorCode, Quoted, Raw, error, go_quote, json_ack, json_body, ok


def test_ok_forms() -> None:
    assert ok() == b"OK"
    assert ok(("offset", 0)) == b"OK offset=0"
    assert ok(("group", "g"), ("member", "m"), ("left", True)) == b"OK group=g member=m left=true"
    assert ok(("registered", False)) == b"OK registered=false"
    assert ok(("assignments", [0, 1])) == b"OK assignments=[0 1]"
    assert ok(("assignments", ())) == b"OK assignments=[]"
    assert ok(("read_acl", ""), ("write_acl", "")) == b"OK read_acl= write_acl="
    assert ok(("topics", "a,b,__consumer_offsets")) == b"OK topics=a,b,__consumer_offsets"


def test_error_forms() -> None:
    assert error("invalid_partition") == b"ERROR: invalid_partition"
    assert error(ErrorCode.TOPIC_NOT_FOUND, ("topic", "x")) == b"ERROR: topic_not_found topic=x"
    assert error("decode_failed", ("reason", Quoted("data too short"))) == \
        b'ERROR: decode_failed reason="data too short"'
    assert error("malformed_input", ("reason", "missing_topic_or_payload")) == \
        b"ERROR: malformed_input reason=missing_topic_or_payload"
    assert error("unknown_command", ("command", "LIST topic=x")) == \
        b'ERROR: unknown_command command="LIST topic=x"'
    assert error("missing_topic", ("expected", "CREATE topic=<name> [partitions=<N>]")) == \
        b'ERROR: missing_topic expected="CREATE topic=<name> [partitions=<N>]"'
    assert error("GEN_MISMATCH", ("current", 2), ("requested", 1), ("group", "g3"), ("member", "m")) == \
        b"ERROR: GEN_MISMATCH current=2 requested=1 group=g3 member=m"
    assert error("invalid_topic_name", ("topic", Quoted("a")), ("reason", "bad name")) == \
        b'ERROR: invalid_topic_name topic="a" reason="bad name"'
    reason = "cannot decrease partition count for topic 'orders': 2 -> 1"
    assert error("create_topic_failed", ("topic", "orders"), ("reason", reason)) == \
        ("ERROR: create_topic_failed topic=orders reason=\"" + reason + '"').encode()


def test_quoting_decisions() -> None:
    assert ok(("v", 'a"b')) == b'OK v="a\\"b"'
    assert ok(("v", "a\tb")) == b'OK v="a\\tb"'
    assert ok(("v", "a\\b")) == b"OK v=a\\b"  # a backslash alone does not break tokenising
    assert ok(("v", Quoted(""))) == b'OK v=""'
    assert ok(("snapshot", Raw('{"version":2,"payload":"{\\"balance\\":10}"}'))) == \
        b'OK snapshot={"version":2,"payload":"{\\"balance\\":10}"}'
    assert ok(("k", b"bytes")) == b"OK k=bytes"
    assert ok(("k", b"\xff")) == b'OK k="\\xff"'
    assert ok(("k", Raw("\udcff"))) == b"OK k=\xff"  # raw text keeps undecodable bytes as they came


@pytest.mark.parametrize(("text", "quoted"), [
    ("", '""'),
    ("plain", '"plain"'),
    ("a b", '"a b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    ("\x00\x1f\x7f", '"\\x00\\x1f\\x7f"'),
    ("\x80", '"\\u0080"'),
    ("\u00a0", '"\\u00a0"'),
    ("\u200b", '"\\u200b"'),
    ("é ü 日本", '"é ü 日本"'),
    ("\U0001f600", '"\U0001f600"'),
    ("\U0010ffff", '"\\U0010ffff"'),
    ("\udcff", '"\\xff"'),
    ("\ud800", '"\\ufffd"'),
    ("it's", "\"it's\""),
])
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


def test_json_ack_exact() -> None:
    assert json_ack(0, 1700000000, "py-test", 1, 1) == \
        b'{"status":"OK","last_offset":0,"producer_epoch":1700000000,"producer_id":"py-test","seq_start":1,"seq_end":1}'
    assert json_ack(2, 1700000000, b"py-test", 1, 3, error="") == \
        b'{"status":"OK","last_offset":2,"producer_epoch":1700000000,"producer_id":"py-test","seq_start":1,"seq_end":3}'
    assert json_ack(0, 0, "", 0, 0, error="empty batch messages") == (
        b'{"status":"ERROR","last_offset":0,"producer_epoch":0,"producer_id":"","seq_start":0,'
        b'"seq_end":0,"error":"empty batch messages"}')
    assert json_ack((1 << 64) - 1, -(1 << 63), "p", 0, (1 << 64) - 1).startswith(
        b'{"status":"OK","last_offset":18446744073709551615,"producer_epoch":-9223372036854775808,')


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.binary()),
       st.lists(st.integers(-(1 << 63), (1 << 64) - 1), min_size=4, max_size=4))
def test_json_ack_formats_what_json_body_would(producer_id: str | bytes, ints: list[int]) -> None:
    """The direct format of the usual ack (no error) is byte for byte json_body's, asked twice
    (the second answer comes from the remembered producer ids)."""
    last, epoch, first_seq, last_seq = ints
    text = producer_id.decode("utf-8", "surrogateescape") if isinstance(producer_id, bytes) else producer_id
    want = json_body({"status": "OK", "last_offset": last, "producer_epoch": epoch, "producer_id": text,
                      "seq_start": first_seq, "seq_end": last_seq})
    assert json_ack(last, epoch, producer_id, first_seq, last_seq) == want
    assert json_ack(last, epoch, producer_id, first_seq, last_seq, error="") == want
    assert json.loads(want)["producer_id"] == json.loads(json_body(text))


def test_json_ack_remembers_a_bounded_set_of_short_producer_ids() -> None:
    """A client cannot make the ack's memory of producer ids hold more than a bound: long ids are
    not kept, and the table is emptied when full."""
    from bayou.protocols.cursus import replies

    long_id = "p" * 100_000
    assert json_ack(1, 0, long_id, 1, 1) == json_body({"status": "OK", "last_offset": 1, "producer_epoch": 0,
                                                       "producer_id": long_id, "seq_start": 1, "seq_end": 1})
    assert long_id not in replies._QUOTED_IDS
    for i in range(3 * replies._MAX_QUOTED_IDS):
        json_ack(1, 0, f"producer-{i}", 1, 1)
        assert len(replies._QUOTED_IDS) <= replies._MAX_QUOTED_IDS


def test_json_body_escapes_like_go() -> None:
    assert json_body({"a": "<b>&\u2028\u2029"}) == b'{"a":"\\u003cb\\u003e\\u0026\\u2028\\u2029"}'
    assert json_body({"a": "\n\t\x01\"\\"}) == b'{"a":"\\n\\t\\u0001\\"\\\\"}'
    assert json_body({"a": "é"}) == '{"a":"é"}'.encode()
    assert json_body({"bad": b"\xff".decode("utf-8", "surrogateescape")}) == b'{"bad":"\\ufffd"}'
    assert json_body({"status": "OK", "n": None, "t": True, "l": []}) == \
        b'{"status":"OK","n":null,"t":true,"l":[]}'


def test_json_body_pretty_is_go_marshal_indent() -> None:
    obj = {"status": "OK", "topic": "orders",
           "partitions": [{"id": 0, "leader": "localhost:9000", "replicas": [], "isr": [1]}],
           "policy": {}}
    expected = """{
  "status": "OK",
  "topic": "orders",
  "partitions": [
    {
      "id": 0,
      "leader": "localhost:9000",
      "replicas": [],
      "isr": [
        1
      ]
    }
  ],
  "policy": {}
}"""
    assert json_body(obj, pretty=True) == expected.encode()
    assert json.loads(json_body(obj, pretty=True)) == obj


def test_error_codes_are_unique() -> None:
    values = [c.value for c in ErrorCode]
    assert len(values) == len(set(values))
    assert ErrorCode.GEN_MISMATCH == "GEN_MISMATCH" and f"{ErrorCode.DECODE_FAILED}" == "decode_failed"
