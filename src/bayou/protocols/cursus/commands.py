"""Classifying a frame body (cursus.md 2.2) and parsing text commands (cursus.md 3).

``classify`` returns a ``BatchHead`` or a ``Command``, or raises ``CursusError`` carrying H's reply
for the failure (cursus.md 2.4). It does not decompress: the server calls
``compression.maybe_decompress`` on the body first.

Keyword shape: a ``Command`` is produced whenever the first word is a known keyword, whatever
follows it. H's handlers then match the keyword followed by a single space, or the keyword alone for
the commands without arguments; anything else is ``ERROR: unknown_command command="<text>"``.
``Command.exact`` and ``Command.spaced`` record the two shapes and ``Command.well_formed()`` applies
the rule, so the server does not re-parse the text.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from bayou.protocols.cursus.batch import BatchHead, decode_head, is_batch
from bayou.protocols.cursus.framing import CursusError
from bayou.protocols.cursus.replies import ErrorCode, Quoted, error


class Keyword(enum.StrEnum):
    """H's keyword list (cursus.md 2.2), broker-internal ones included: they are recognised as
    commands (and then answered as unknown/unsupported by the server), never as envelopes."""

    AUTH = "AUTH"
    CREATE = "CREATE"
    DELETE = "DELETE"
    LIST = "LIST"
    LIST_CLUSTER = "LIST_CLUSTER"
    CLUSTER_STATUS = "CLUSTER_STATUS"
    ELECT_LEADER = "ELECT_LEADER"
    PUBLISH = "PUBLISH"
    CONSUME = "CONSUME"
    STREAM = "STREAM"
    HELP = "HELP"
    HEARTBEAT = "HEARTBEAT"
    JOIN_GROUP = "JOIN_GROUP"
    LEAVE_GROUP = "LEAVE_GROUP"
    COMMIT_OFFSET = "COMMIT_OFFSET"
    BATCH_COMMIT = "BATCH_COMMIT"
    REGISTER_GROUP = "REGISTER_GROUP"
    GROUP_STATUS = "GROUP_STATUS"
    FETCH_OFFSET = "FETCH_OFFSET"
    LIST_GROUPS = "LIST_GROUPS"
    LIST_OFFSETS = "LIST_OFFSETS"
    SYNC_GROUP = "SYNC_GROUP"
    DESCRIBE = "DESCRIBE"
    INIT_PRODUCER_ID = "INIT_PRODUCER_ID"
    BEGIN_TXN = "BEGIN_TXN"
    TXN_PUBLISH = "TXN_PUBLISH"
    SEND_OFFSETS_TO_TXN = "SEND_OFFSETS_TO_TXN"
    END_TXN = "END_TXN"
    TXN_STATUS = "TXN_STATUS"
    APPEND_STREAM = "APPEND_STREAM"
    READ_STREAM = "READ_STREAM"
    SAVE_SNAPSHOT = "SAVE_SNAPSHOT"
    READ_SNAPSHOT = "READ_SNAPSHOT"
    STREAM_VERSION = "STREAM_VERSION"
    FIND_COORDINATOR = "FIND_COORDINATOR"
    METADATA = "METADATA"
    PROTOCOL_INFO = "PROTOCOL_INFO"
    NEGOTIATE = "NEGOTIATE"
    REPLICATE_MESSAGE = "REPLICATE_MESSAGE"
    REPLICATE_SNAPSHOT = "REPLICATE_SNAPSHOT"
    LIST_SNAPSHOTS = "LIST_SNAPSHOTS"
    FETCH_SNAPSHOT = "FETCH_SNAPSHOT"
    CATCHUP_SNAPSHOTS = "CATCHUP_SNAPSHOTS"
    RAFT_APPLY = "RAFT_APPLY"
    INTERNAL_BATCH = "INTERNAL_BATCH"
    # bayou extensions: the design documents' commands that no Cursus broker version implemented.
    SUBSCRIBE = "SUBSCRIBE"
    COMMIT = "COMMIT"


KEYWORDS: frozenset[str] = frozenset(k.value for k in Keyword)
MAX_KEYWORD = 19  # len("SEND_OFFSETS_TO_TXN"): a longer first word is never a keyword

# Commands H matches only exactly (cursus.md 3). LIST_OFFSETS is both: exact, or with arguments.
NO_ARGS: frozenset[str] = frozenset({"LIST", "HELP", "LIST_GROUPS", "PROTOCOL_INFO", "LIST_CLUSTER",
                                     "CLUSTER_STATUS"})
OPTIONAL_ARGS: frozenset[str] = frozenset({"LIST_OFFSETS"})

_RAW_STRIP = b" \t\r\n"
_ENVELOPE_STRIP = b"\x00 \t\r\n"
_FIRST_WORD = re.compile(rb"[^ \t\r\n\x0b\x0c]{1,20}")

# Go's unicode.IsSpace set: what strings.Fields splits on and strings.TrimSpace trims.
_GO_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_FIELDS = re.compile(f"[{_GO_SPACE}]+")
_TRIM = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    map(chr, range(0x2000, 0x200B)))
_MESSAGE = "message="


@dataclass(frozen=True, slots=True)
class Command:
    name: str  # the keyword, upper-cased
    text: str  # the whole command, stripped
    args: Mapping[str, str] = field(hash=False)  # key=value tokens before ``message=``
    message: str | None  # everything after the first ``message=``, trimmed
    tail: str  # the text after the last space (BATCH_COMMIT's offset list)
    exact: bool  # the text is the keyword alone
    spaced: bool  # the keyword is followed by a space (H's handlers match ``"<KEYWORD> "``)

    def well_formed(self) -> bool:
        """H's handler match: exact for argument-less commands, keyword + space for the rest."""
        if self.name in NO_ARGS:
            return self.exact
        if self.name in OPTIONAL_ARGS:
            return self.exact or self.spaced
        return self.spaced


def _keyword(text: bytes) -> str | None:
    m = _FIRST_WORD.match(text)
    if m is None or len(m.group()) > MAX_KEYWORD:
        return None
    try:
        word = m.group().decode("ascii").upper()
    except UnicodeDecodeError:
        return None
    return word if word in KEYWORDS else None


def split_args(text: str) -> tuple[dict[str, str], str | None]:
    """cursus.md 3: ``key=value`` tokens (split at the first ``=``, tokens without one ignored,
    the last repeated key wins) from the text before the first ``message=``, and the message."""
    cut = text.find(_MESSAGE)
    message = None
    if cut >= 0:
        message = text[cut + len(_MESSAGE) :].strip(_TRIM)
        text = text[:cut]
    args: dict[str, str] = {}
    # printable ASCII has one space character, so str.split is Go's strings.Fields there
    for token in text.split() if text.isascii() and text.isprintable() else _FIELDS.split(text):
        key, sep, value = token.partition("=")
        if sep:
            args[key] = value
    return args, message


def _command(name: str, raw: bytes) -> Command:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CursusError(error(ErrorCode.DECODE_FAILED, ("reason", Quoted("invalid utf-8")))) from None
    args, message = split_args(text)
    after = text[len(name) : len(name) + 1]
    return Command(
        name=name,
        text=text,
        args=MappingProxyType(args),
        message=message,
        tail=text[text.rfind(" ") + 1 :],
        exact=len(text) == len(name),
        spaced=after == " ",
    )


def only_appends(body: bytes) -> bool:
    """Whether the frame is a produce (a batch, or a raw PUBLISH) and nothing else: what a
    pipelining connection may serve before the frames ahead of it are answered
    (server/frames.py). A compressed frame is not judged (answered in order)."""
    return is_batch(body) or _keyword(body.strip(_RAW_STRIP)) == "PUBLISH"


def classify(body: bytes) -> BatchHead | Command:
    """cursus.md 2.2: batch first, then a raw command, then the u16 topic envelope."""
    if is_batch(body):
        return decode_head(body)
    raw = body.strip(_RAW_STRIP)
    name = _keyword(raw)
    if name is not None:
        return _command(name, raw)
    if len(body) < 2:
        raise CursusError(error(ErrorCode.DECODE_FAILED, ("reason", Quoted("data too short"))))
    tlen = (body[0] << 8) | body[1]
    if 2 + tlen > len(body):
        raise CursusError(error(ErrorCode.DECODE_FAILED, ("reason", Quoted("invalid topic length"))))
    raw = body[2 + tlen :].strip(_ENVELOPE_STRIP)
    name = _keyword(raw)
    if name is None:
        raise CursusError(error(ErrorCode.MALFORMED_INPUT, ("reason", "missing_topic_or_payload")),
                          close=True)
    return _command(name, raw)


_ATOI = re.compile(r"[+-]?[0-9]+\Z")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def parse_int(value: str) -> int | None:
    """Go ``strconv.Atoi`` on 64 bits: optional sign, ASCII digits; None when it fails. Only the
    significant digits reach int(), so a long run of zeros is fine and int() never sees >19 digits."""
    if len(value) < 19 and value.isdigit() and value.isascii():  # the usual case: a few digits
        return int(value)
    if not _ATOI.match(value):
        return None
    digits = value.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 19:
        return None
    v = -int(digits) if value[0] == "-" else int(digits)
    return v if _INT64_MIN <= v <= _INT64_MAX else None


def parse_bool(value: str | None) -> bool:
    """CREATE's boolean options: true only for the literal ``true``, any case."""
    return value is not None and value.lower() == "true"
