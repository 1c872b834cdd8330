"""Reply bodies in the version-H forms (cursus.md 3, 4, 6.1): ``OK k=v ...``, ``ERROR: <code> k=v ...``
and the broker's JSON.

Value formatting follows what H prints with Go's ``fmt``: booleans ``true``/``false``, integer lists
as ``%v`` (``[0 1]``, ``[]``), and a text value Go-quoted (``strconv.Quote``) when it would not
survive whitespace tokenising: it contains whitespace, a double quote or a non-printable character.
Empty values stay bare (``read_acl=``). Two wrappers override the rule: ``Quoted`` for the fields H
always prints with ``%q`` (``reason``, ``expected``, ``command``, ``entry``, ...), and ``Raw`` for
values written verbatim (``snapshot=<json>``, whose JSON contains quotes but is never quoted).

JSON follows Go's ``encoding/json``: compact, keys in the order given, ``<``, ``>``, ``&``, U+2028
and U+2029 escaped, invalid UTF-8 (surrogate-escaped bytes here) written as ``\\ufffd``.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass


class ErrorCode(enum.StrEnum):
    """Every ``ERROR: <code>`` H sends that bayou's Cursus front end uses (cursus.md 2.4, 4, 6, 7)."""

    DECODE_FAILED = "decode_failed"
    MALFORMED_INPUT = "malformed_input"
    BATCH_DECODE_FAILED = "batch_decode_failed"
    UNKNOWN_COMMAND = "unknown_command"
    MISSING_TOPIC = "missing_topic"
    MISSING_GROUP = "missing_group"
    MISSING_MEMBER = "missing_member"
    MISSING_GENERATION = "missing_generation"
    MISSING_PARTITION = "missing_partition"
    MISSING_OFFSET = "missing_offset"
    MISSING_MESSAGE = "missing_message"
    MISSING_PRODUCER_ID = "missing_producer_id"
    MISSING_KEY = "missing_key"
    MISSING_VERSION = "missing_version"
    MISSING_COORDINATOR_KEY = "missing_coordinator_key"
    INVALID_PARTITIONS = "invalid_partitions"
    INVALID_REPLICATION_FACTOR = "invalid_replication_factor"
    INVALID_TOPIC_NAME = "invalid_topic_name"
    INVALID_TOPIC_POLICY = "invalid_topic_policy"
    CREATE_TOPIC_FAILED = "create_topic_failed"
    DELETE_TOPIC_FAILED = "delete_topic_failed"
    TOPIC_NOT_FOUND = "topic_not_found"
    PARTITION_NOT_FOUND = "partition_not_found"
    INTERNAL_TOPIC_WRITE_FORBIDDEN = "internal_topic_write_forbidden"
    INVALID_ACKS = "invalid_acks"
    INVALID_IS_IDEMPOTENT = "invalid_is_idempotent"
    INVALID_SEQ_NUM = "invalid_seq_num"
    INVALID_EPOCH = "invalid_epoch"
    INVALID_PARTITION = "invalid_partition"
    INVALID_OFFSET = "invalid_offset"
    INVALID_GENERATION = "invalid_generation"
    BROKER_ERROR = "broker_error"
    GROUP_NOT_FOUND = "group_not_found"
    MEMBER_NOT_FOUND = "member_not_found"
    UNAUTHORIZED = "unauthorized"  # bayou: the connection's principal may not (broker/authz.py)
    GEN_MISMATCH = "GEN_MISMATCH"
    NOT_OWNER = "NOT_OWNER"
    TOPIC_NOT_ASSIGNED_TO_GROUP = "topic_not_assigned_to_group"
    REGISTER_GROUP_FAILED = "register_group_failed"
    OFFSET_REGRESSION = "offset_regression"
    INVALID_BATCH_COMMIT_ENTRY = "invalid_batch_commit_entry"
    DUPLICATE_PARTITION = "duplicate_partition"
    INVALID_CONSUME_SYNTAX = "invalid_consume_syntax"
    INVALID_STREAM_SYNTAX = "invalid_stream_syntax"
    INVALID_ISOLATION = "invalid_isolation"
    COMMAND_FAILED = "command_failed"
    OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
    VERSION_CONFLICT = "version_conflict"
    INVALID_VERSION = "invalid_version"
    INVALID_SCHEMA_VERSION = "invalid_schema_version"
    EVENT_SOURCING_NOT_ENABLED = "event_sourcing_not_enabled"
    SNAPSHOT_VERSION_EXCEEDS_STREAM = "snapshot_version_exceeds_stream"
    NOT_LEADER = "NOT_LEADER"
    NOT_COORDINATOR = "NOT_COORDINATOR"
    STORAGE_ERROR = "storage_error"  # bayou: the partition's stored data is damaged (quarantined)


@dataclass(frozen=True, slots=True)
class Quoted:
    """A value always written Go-quoted (``%q``), even when it has no space."""

    text: str


@dataclass(frozen=True, slots=True)
class Raw:
    """A value written exactly as given, never quoted."""

    text: str


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
            "\\": "\\\\", '"': '\\"'}


def go_quote(text: str) -> str:
    """Go ``strconv.Quote``. Surrogate-escaped bytes (undecodable input) come out as ``\\xNN``."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for ch in text:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
            continue
        o = ord(ch)
        if o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\ufffd")
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


def _needs_quote(text: str) -> bool:
    return not text.isprintable() or " " in text or '"' in text


def format_value(value: object) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Quoted):
        return go_quote(value.text)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(format_value(v) for v in value) + "]"
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "surrogateescape")
    text = value if isinstance(value, str) else str(value)
    return go_quote(text) if text and _needs_quote(text) else text


def _pairs(pairs: Sequence[tuple[str, object]]) -> str:
    return "".join(f" {k}={format_value(v)}" for k, v in pairs)


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def ok(*pairs: tuple[str, object]) -> bytes:
    """``OK`` or ``OK k=v k=v``."""
    return _encode("OK" + _pairs(pairs))


def error(code: str, *pairs: tuple[str, object]) -> bytes:
    """``ERROR: <code>`` or ``ERROR: <code> k=v ...``."""
    return _encode(f"ERROR: {code}" + _pairs(pairs))


_GO_JSON = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                          "\u2028": "\\u2028", "\u2029": "\\u2029"})
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_body(obj: object, pretty: bool = False) -> bytes:
    """Go ``json.Marshal`` (or ``json.MarshalIndent(v, "", "  ")`` when ``pretty``: DESCRIBE)."""
    if pretty:
        text = json.dumps(obj, ensure_ascii=False, indent=2)
    else:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    # <, >, &, U+2028 and U+2029 can only occur inside JSON strings, so replacing them is safe.
    text = text.translate(_GO_JSON)
    if _SURROGATE.search(text):
        text = _SURROGATE.sub(lambda _m: "\\ufffd", text)
    return text.encode("utf-8")


_ACK = (b'{"status":"OK","last_offset":%d,"producer_epoch":%d,"producer_id":%s,"seq_start":%d,'
        b'"seq_end":%d}')
_QUOTED_IDS: dict[str | bytes, bytes] = {}  # producer id -> its JSON string (a connection sends one)
_MAX_QUOTED_IDS = 1024
_MAX_QUOTED_ID = 256  # longer ids are quoted each time: what is remembered stays under about 2 MB


def _quoted_id(producer_id: str | bytes) -> bytes:
    quoted = _QUOTED_IDS.get(producer_id)
    if quoted is None:
        quoted = json_body(producer_id.decode("utf-8", "surrogateescape") if isinstance(producer_id, bytes)
                           else producer_id)
        if len(producer_id) > _MAX_QUOTED_ID:
            return quoted
        if len(_QUOTED_IDS) >= _MAX_QUOTED_IDS:
            _QUOTED_IDS.clear()
        _QUOTED_IDS[producer_id] = quoted
    return quoted


def json_ack(last_offset: int, producer_epoch: int, producer_id: str | bytes, seq_start: int,
             seq_end: int, error: str | None = None) -> bytes:
    """The produce acknowledgement (cursus.md 6.1), keys in the broker's order; ``error`` only when
    non-empty, and then ``status`` is ``ERROR``. The usual one (no error) is formatted directly,
    the producer id's JSON string remembered: ``json_body`` of the same object, at a tenth of the
    cost (one per produce request)."""
    if not error:
        return _ACK % (last_offset, producer_epoch, _quoted_id(producer_id), seq_start, seq_end)
    if isinstance(producer_id, bytes):
        producer_id = producer_id.decode("utf-8", "surrogateescape")
    return json_body({
        "status": "ERROR",
        "last_offset": last_offset,
        "producer_epoch": producer_epoch,
        "producer_id": producer_id,
        "seq_start": seq_start,
        "seq_end": seq_end,
        "error": error,
    })
