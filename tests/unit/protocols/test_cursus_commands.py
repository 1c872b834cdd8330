"""Classifying Cursus frame bodies and parsing text commands (cursus.md 2 and 3)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.protocols.cursus.batch import BatchHead, encode_batch
from bayou.protocols.cursus.commands import (
    KEYWORDS,
    NO_ARGS,
    Command,
    Keyword,
    classify,
    parse_bool,
    parse_int,
    split_args,
)
from bayou.protocols.cursus.compression import compress_gzip
from bayou.protocols.cursus.framing import CursusError

TOO_SHORT = b'ERROR: decode_failed reason="data too short"'
BAD_TOPIC_LEN = b'ERROR: decode_failed reason="invalid topic length"'
MALFORMED = b"ERROR: malformed_input reason=missing_topic_or_payload"
BAD_UTF8 = b'ERROR: decode_failed reason="invalid utf-8"'


def _cmd(body: bytes) -> Command:
    c = classify(body)
    assert isinstance(c, Command)
    return c


def _err(body: bytes) -> CursusError:
    with pytest.raises(CursusError) as ei:
        classify(body)
    return ei.value


def test_keywords() -> None:
    assert len(KEYWORDS) == 47  # H's 45 plus SUBSCRIBE and COMMIT
    assert {"CREATE", "SEND_OFFSETS_TO_TXN", "INTERNAL_BATCH", "METADATA", "NEGOTIATE"} <= KEYWORDS
    assert "EXIT" not in KEYWORDS
    # the design documents' SUBSCRIBE and COMMIT are accepted as bayou extensions (issue 3)
    assert "SUBSCRIBE" in KEYWORDS and "COMMIT" in KEYWORDS
    assert max(map(len, KEYWORDS)) == 19
    assert {k.value for k in Keyword} == KEYWORDS
    assert NO_ARGS <= KEYWORDS


@pytest.mark.parametrize("envelope", [b"", b"\x00\x00", b"\x00\x05admin", b"\x00\x06events"])
def test_raw_and_enveloped_are_identical(envelope: bytes) -> None:
    """Checklist 6: ``00 00`` + command and ``00 05 admin`` + command run like the raw command."""
    c = _cmd(envelope + b"CREATE topic=orders partitions=2")
    assert c == Command("CREATE", "CREATE topic=orders partitions=2", {"topic": "orders", "partitions": "2"},
                        None, "partitions=2", exact=False, spaced=True)
    assert c.well_formed()


def test_keyword_case_insensitive_keys_case_sensitive() -> None:
    c = _cmd(b"\x00\x00join_Group topic=t Group=G group=g member=m")
    assert c.name == "JOIN_GROUP"
    assert c.text == "join_Group topic=t Group=G group=g member=m"
    assert dict(c.args) == {"topic": "t", "Group": "G", "group": "g", "member": "m"}


def test_argument_rules() -> None:
    """Checklist 8: tokens without '=' ignored, split at the first '=', last repeated key wins."""
    c = _cmd(b"PUBLISH topic=a positional topic=b k=v=w =x empty= \tacks=1\r\n")
    assert dict(c.args) == {"topic": "b", "k": "v=w", "": "x", "empty": "", "acks": "1"}
    assert c.message is None


def test_message_takes_the_rest_of_the_line() -> None:
    c = _cmd(b"\x00\x00APPEND_STREAM topic=accounts key=k version=2 metadata={\"s\":1}"
             b" message=  a b message=c d  ")
    assert c.message == "a b message=c d"
    assert dict(c.args) == {"topic": "accounts", "key": "k", "version": "2", "metadata": '{"s":1}'}
    assert _cmd(b"PUBLISH topic=t message=").message == ""
    assert _cmd(b"PUBLISH topic=t xmessage=hi").message == "hi"  # a substring match, as in H


_GO_FIELDS = re.compile("[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab=1 \t\n\x0b\x0c\r\x1c\x1f\x85\xa0\u2003\u3000\u00e9")))
def test_split_args_splits_on_gos_spaces_only(text: str) -> None:
    """The ASCII fast path (str.split) and the general one agree with Go's strings.Fields: \\x1c-\\x1f
    are spaces to Python's str.split but not to Go."""
    args: dict[str, str] = {}
    for token in _GO_FIELDS.split(text):
        key, sep, value = token.partition("=")
        if sep:
            args[key] = value
    assert split_args(text) == (args, None)


def test_split_args() -> None:
    assert split_args("a=1 b c=3 message=x y") == ({"a": "1", "c": "3"}, "x y")
    assert split_args("") == ({}, None)
    assert split_args("a=1\u00a0b=2\u2003c=3") == ({"a": "1", "b": "2", "c": "3"}, None)  # Go's space set


def test_batch_commit_tail() -> None:
    c = _cmd(b"\x00\x00BATCH_COMMIT topic=events group=g1 member=m generation=1 P0:2,P1:1")
    assert c.tail == "P0:2,P1:1"
    assert "P0:2,P1:1" not in c.args.values()


@pytest.mark.parametrize(("body", "name", "exact", "spaced", "ok"), [
    (b"LIST", "LIST", True, False, True),
    (b"list", "LIST", True, False, True),
    (b" \tLIST\r\n", "LIST", True, False, True),
    (b"\x00\x00LIST\x00\x00", "LIST", True, False, True),
    (b"LIST topic=x", "LIST", False, True, False),
    (b"HELP", "HELP", True, False, True),
    (b"CREATE", "CREATE", True, False, False),
    (b"CREATE topic=x", "CREATE", False, True, True),
    (b"CREATE\ttopic=x", "CREATE", False, False, False),
    (b"CREATE  topic=x", "CREATE", False, True, True),
    (b"LIST_OFFSETS", "LIST_OFFSETS", True, False, True),
    (b"LIST_OFFSETS topic=x", "LIST_OFFSETS", False, True, True),
    (b"SEND_OFFSETS_TO_TXN x=1", "SEND_OFFSETS_TO_TXN", False, True, True),
])
def test_command_shape(body: bytes, name: str, exact: bool, spaced: bool, ok: bool) -> None:
    c = _cmd(body)
    assert (c.name, c.exact, c.spaced, c.well_formed()) == (name, exact, spaced, ok)


def test_batch_is_classified_first() -> None:
    body = encode_batch("LIST", 0, b"", 0, 0, 0)
    assert classify(body) == BatchHead("LIST", 0, "1", False, 0, 0, 0, 35)


def test_truncated_batch_header_is_a_batch_error() -> None:
    err = _err(b"\xba\x7c\x00\x02ab\x00")
    assert err.reply is not None and err.reply.startswith(b"ERROR: batch_decode_failed ")


@pytest.mark.parametrize(("body", "reply", "close"), [
    (b"", TOO_SHORT, False),
    (b"L", TOO_SHORT, False),
    (b"\x00", TOO_SHORT, False),
    (b"EXIT", BAD_TOPIC_LEN, False),
    (b"COMMITX orders g 0 1", BAD_TOPIC_LEN, False),
    (b"CREATEX topic=a", BAD_TOPIC_LEN, False),
    (b"SEND_OFFSETS_TO_TXNX a=1", BAD_TOPIC_LEN, False),  # a 20-letter first word is never a keyword
    (b"LIST\x00", BAD_TOPIC_LEN, False),
    (compress_gzip(b"LIST"), BAD_TOPIC_LEN, False),  # not decompressed here (cursus.md 2.4)
    (b"\x00\x00", MALFORMED, True),
    (b"\x00\x00UNSUBSCRIBE orders", MALFORMED, True),
    (b"\x00\x05adminEXIT", MALFORMED, True),
    (b"\x00\x01", BAD_TOPIC_LEN, False),
    (b"\x00\x00\xff\xfe", MALFORMED, True),
    (b"LIST \xff", BAD_UTF8, False),
    (b"\x00\x00CREATE topic=\xc3", BAD_UTF8, False),
])
def test_classification_failures(body: bytes, reply: bytes, close: bool) -> None:
    err = _err(body)
    assert (err.reply, err.close) == (reply, close)


def test_long_raw_non_keyword_reads_as_an_envelope() -> None:
    """cursus.md 2.3: raw text of 16,705+ bytes fits its own 'topic length', so it is malformed."""
    body = b"AA" + b"x" * 0x4141
    assert _err(body).reply == MALFORMED
    assert _err(body[:-1]).reply == BAD_TOPIC_LEN


def test_command_is_immutable() -> None:
    c = _cmd(b"LIST")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.name = "HELP"  # type: ignore[misc]
    with pytest.raises(TypeError):
        c.args["x"] = "y"  # type: ignore[index]


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("-1", -1), ("+5", 5), ("007", 7), ("9223372036854775807", (1 << 63) - 1),
    ("-9223372036854775808", -(1 << 63)), ("9223372036854775808", None), ("", None), ("-", None),
    ("1a", None), (" 1", None), ("1 ", None), ("\uff11", None), ("1_0", None), ("0x10", None),
    ("0" * 5000 + "1", 1), ("9" * 5000, None), ("9" * 18, 10**18 - 1),
    ("\u0661\u0662", None), ("\u00b2", None),
])
def test_parse_int(text: str, value: int | None) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize(("text", "value"), [("true", True), ("TRUE", True), ("True", True), ("1", False),
                                             ("yes", False), ("", False), (None, False)])
def test_parse_bool(text: str | None, value: bool) -> None:
    assert parse_bool(text) is value
