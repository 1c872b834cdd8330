"""Framing, envelope parsing, argument decoding and reply encoding for the V1 protocol.

Reader contract: ``LineReader.feed`` returns complete lines, keeps partial ones, and raises
``LineTooLong`` when 65,536 bytes arrive without a line feed. ``decode_request`` turns one line into
a request message or raises ``RtesError`` carrying the exact reply. Nothing here touches a socket.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from bayou.protocols.rtes import messages as m
from bayou.records.hashing import fnv1a_32 as fnv1a_32  # re-exported for the V1 API

MAX_LINE = 65_535  # bytes before the LF, CR included
ENCODING = "utf-8"
ERRORS = "surrogateescape"

# Go's unicode.IsSpace set (not Python's str.split set, which also splits on U+001C..U+001F).
_GO_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_FIELDS = re.compile(f"[{_GO_SPACE}]+")
_TRIM = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    map(chr, range(0x2000, 0x200B)))
_ATOI = re.compile(r"[+-]?[0-9]+\Z")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class Code(enum.StrEnum):
    BAD_REQUEST = "BAD_REQUEST"
    UNKNOWN_COMMAND = "UNKNOWN_COMMAND"
    REPLICATION_TIMEOUT = "REPLICATION_TIMEOUT"
    NOT_LEADER = "NOT_LEADER"
    GENERATION_MISMATCH = "GENERATION_MISMATCH"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    STORAGE_ERROR = "STORAGE_ERROR"  # bayou: stored data is damaged (an additive code, rtes.md 7.1)
    UNAUTHORIZED = "UNAUTHORIZED"  # bayou: the connection's principal may not (an additive code)


class RtesError(Exception):
    """The one protocol error: carries the reply's correlation id, code and message."""

    def __init__(self, code: Code, message: str, cid: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.cid = cid


class LineTooLong(Exception):
    pass


class LineReader:
    """Splits a byte stream into request lines (LF-terminated, one trailing CR dropped)."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._scan_from = 0
        self.overflowed = False

    @property
    def pending(self) -> int:
        """Bytes held of a line not yet complete."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """Complete lines in arrival order. Raises LineTooLong once a line exceeds the cap; lines
        completed before the over-long one are returned first (the next call raises)."""
        if self.overflowed:
            raise LineTooLong()
        self._buf += data
        lines: list[bytes] = []
        start = 0
        buf = self._buf
        while True:
            nl = buf.find(b"\n", max(start, self._scan_from))
            if nl < 0 or nl - start > self.max_line:
                break
            end = nl - 1 if nl > start and buf[nl - 1] == 0x0D else nl
            lines.append(bytes(buf[start:end]))
            start = nl + 1
            self._scan_from = start
        if start:
            del buf[:start]
        if len(buf) > self.max_line:
            self.overflowed = True
            buf.clear()
            if not lines:
                raise LineTooLong()
        self._scan_from = len(buf)
        return lines

    def eof(self) -> bytes | None:
        """The final unterminated line after the peer half-closed, if any."""
        if not self._buf:
            return None
        line = bytes(self._buf)
        self._buf.clear()
        if line.endswith(b"\r"):
            line = line[:-1]
        return line


@dataclass(frozen=True, slots=True)
class ParsedLine:
    cid: str
    command: str
    args: list[str]


def _go_upper(text: str) -> str:
    """Go ``strings.ToUpper``: rune by rune, so Python's multi-character mappings (U+FB06 -> "ST",
    U+00DF -> "SS") do not apply."""
    if text.isascii():
        return text.upper()
    return "".join(u if len(u := ch.upper()) == 1 else ch for ch in text)


def parse_envelope(line: bytes) -> ParsedLine:
    """Apply the envelope rules in order: format, version, correlation id, command."""
    text = line.decode(ENCODING, ERRORS).strip(_TRIM)
    parts = text.split("|", 3)
    if len(parts) < 4:
        raise RtesError(Code.BAD_REQUEST, "expected format V1|<correlation_id>|<command>|<args>", "0")
    version, cid, command, args = parts
    if version.strip(_TRIM) != "V1":
        raise RtesError(Code.BAD_REQUEST, "unsupported version", "0")
    cid = cid.strip(_TRIM)
    if not cid:
        raise RtesError(Code.BAD_REQUEST, "correlation id required", "0")
    command = _go_upper(command.strip(_TRIM))
    if not command:
        raise RtesError(Code.BAD_REQUEST, "command required", "0")
    args = args.strip(_TRIM)
    return ParsedLine(cid, command, _FIELDS.split(args) if args else [])


def _int64(token: str) -> int | None:
    """Go ``strconv.Atoi``: optional sign, ASCII digits (any number of leading zeros), 64-bit
    range; None when it fails. Only the significant digits reach int(), which raises ValueError
    past 4300 digits."""
    if not _ATOI.match(token):
        return None
    digits = token.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 19:
        return None
    v = -int(digits) if token[0] == "-" else int(digits)
    return v if _INT64_MIN <= v <= _INT64_MAX else None


def atoi(token: str, field: str) -> int:
    v = _int64(token)
    if v is None:
        raise RtesError(Code.BAD_REQUEST, f"invalid {field}")
    return v


def _usage(name: str, text: str) -> RtesError:
    return RtesError(Code.BAD_REQUEST, f"{name} requires: {text}")


def _bad(message: str) -> RtesError:
    return RtesError(Code.BAD_REQUEST, message)


def _raw(token: str) -> bytes:
    return token.encode(ENCODING, ERRORS)


# -- per-command argument decoders -------------------------------------------------------------


def _produce(a: list[str]) -> m.Produce:
    if len(a) not in (2, 3):
        raise _usage("PRODUCE", "<topic> <key>:<value> [acks=0|1|all]")
    if ":" not in a[1]:
        raise _bad("message must be key:value")
    key, value = a[1].split(":", 1)
    acks = "1"
    if len(a) == 3:
        k, sep, v = a[2].partition("=")
        if not sep or k.lower() != "acks" or v.lower() not in ("0", "1", "all"):
            raise _bad("invalid ack mode; expected acks=0|1|all")
        acks = v.lower()
    if "," in value:
        raise _bad("value must not contain ','")
    return m.Produce(a[0], _raw(key), _raw(value), acks)


def _consume(a: list[str]) -> m.Consume:
    if len(a) != 3:
        raise _usage("CONSUME", "<topic> <partition> <offset>")
    p = atoi(a[1], "partition")
    off = atoi(a[2], "offset")
    if off < 0:
        raise _bad("invalid offset")
    return m.Consume(a[0], p, off)


def _join(a: list[str]) -> m.Join:
    if len(a) not in (3, 4):
        raise _usage("JOIN", "<group> <topic> <consumer_id> [assignor=round_robin|range]")
    assignor = None
    if len(a) == 4:
        k, sep, v = a[3].partition("=")
        if not sep or k.lower() != "assignor" or v.lower() not in ("round_robin", "range"):
            raise _bad("invalid assignor; expected assignor=round_robin|range")
        assignor = v.lower()
    return m.Join(a[0], a[1], a[2], assignor)


def _member_cmd(name: str, cls: type[m.Sync] | type[m.Heartbeat] | type[m.Leave]
                ) -> Callable[[list[str]], m.Sync | m.Heartbeat | m.Leave]:
    def decode(a: list[str]) -> m.Sync | m.Heartbeat | m.Leave:
        if len(a) != 4:
            raise _usage(name, "<group> <topic> <consumer_id> <generation>")
        return cls(a[0], a[1], a[2], atoi(a[3], "generation"))
    return decode


def _commit(a: list[str]) -> m.Commit:
    if len(a) != 6:
        raise _usage("COMMIT", "<group> <topic> <consumer_id> <generation> <partition> <offset>")
    gen = atoi(a[3], "generation")
    p = atoi(a[4], "partition")
    off = atoi(a[5], "offset")
    if off < 0:
        raise _bad("invalid offset")
    return m.Commit(a[0], a[1], a[2], gen, p, off)


def _offset(a: list[str]) -> m.Offset:
    if len(a) != 3:
        raise _usage("OFFSET", "<group> <topic> <partition>")
    return m.Offset(a[0], a[1], atoi(a[2], "partition"))


def _replica_fetch(a: list[str]) -> m.ReplicaFetch:
    if len(a) != 4:
        raise _usage("REPLICA_FETCH", "<topic> <partition> <replica_id> <offset>")
    return m.ReplicaFetch(a[0], atoi(a[1], "partition"), atoi(a[2], "replica_id"), atoi(a[3], "offset"))


def _set_role(a: list[str]) -> m.SetPartitionRole:
    if len(a) != 3:
        raise _usage("SET_PARTITION_ROLE", "<topic> <partition> <leader|follower>")
    p = atoi(a[1], "partition")
    role = a[2].lower()
    if role not in ("leader", "follower"):
        raise _bad("invalid role")
    return m.SetPartitionRole(a[0], p, role)


def _ping(a: list[str]) -> m.Ping:
    return m.Ping()


def _admin_create_topic(a: list[str]) -> m.AdminCreateTopic:
    if len(a) < 3:
        raise _usage("ADMIN_CREATE_TOPIC", "<topic> <partitions> <replication_factor>")
    n = atoi(a[1], "partitions")
    rf = atoi(a[2], "replication_factor")
    if n <= 0:
        raise _bad("partitions must be > 0")
    if rf <= 0 and rf != m.DEFAULT_REPLICATION_FACTOR:
        raise _bad("replication factor must be > 0")
    config = []
    for token in a[3:]:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise _bad(f"invalid config {token}; expected key=value")
        config.append((key, value))
    return m.AdminCreateTopic(a[0], n, rf, tuple(config))


def _topic_only(name: str, cls: type[m.AdminDescribeTopic] | type[m.AdminDeleteTopic]
                ) -> Callable[[list[str]], m.AdminDescribeTopic | m.AdminDeleteTopic]:
    def decode(a: list[str]) -> m.AdminDescribeTopic | m.AdminDeleteTopic:
        if len(a) != 1:
            raise _usage(name, "<topic>")
        return cls(a[0])
    return decode


def _admin_register_broker(a: list[str]) -> m.AdminRegisterBroker:
    if len(a) not in (3, 4):
        raise _usage("ADMIN_REGISTER_BROKER", "<broker_id> <host> <port> [epoch]")
    bid = atoi(a[0], "broker_id")
    port = atoi(a[2], "port")
    epoch = atoi(a[3], "epoch") if len(a) == 4 else 0
    if bid < 0:
        raise _bad("broker id must be >= 0")
    if port <= 0:
        raise _bad("broker port must be > 0")
    return m.AdminRegisterBroker(bid, a[1], port, epoch)


def _admin_broker_heartbeat(a: list[str]) -> m.AdminBrokerHeartbeat:
    if len(a) != 1:
        raise _usage("ADMIN_BROKER_HEARTBEAT", "<broker_id>")
    bid = atoi(a[0], "broker_id")
    if bid < 0:
        raise _bad("invalid broker heartbeat command")
    return m.AdminBrokerHeartbeat(bid)


def _int_list(text: str) -> tuple[int, ...]:
    out = []
    for item in text.split(","):
        item = item.strip(_TRIM)
        if not item:
            continue
        v = _int64(item)
        if v is None:
            raise _bad("invalid integer list")
        out.append(v)
    return tuple(out)


def _admin_set_partition_leader(a: list[str]) -> m.AdminSetPartitionLeader:
    if len(a) != 4:
        raise _usage("ADMIN_SET_PARTITION_LEADER", "<topic> <partition> <leader_id> <isr_csv>")
    p = atoi(a[1], "partition")
    leader = atoi(a[2], "leader_id")
    isr = _int_list(a[3])
    if p < 0:
        raise _bad("partition must be >= 0")
    if leader < -1:
        raise _bad("leader id must be >= -1")
    return m.AdminSetPartitionLeader(a[0], p, leader, isr)


def _admin_get_metadata(a: list[str]) -> m.AdminGetMetadata:
    if a:
        raise _bad("ADMIN_GET_METADATA requires no args")
    return m.AdminGetMetadata()


def _admin_reconcile(a: list[str]) -> m.AdminReconcileBrokerHealth:
    if len(a) != 1:
        raise _usage("ADMIN_RECONCILE_BROKER_HEALTH", "<timeout_ms>")
    t = atoi(a[0], "timeout_ms")
    if t <= 0:
        raise _bad("timeout must be > 0")
    return m.AdminReconcileBrokerHealth(t)


def _admin_fence(name: str, fenced: bool) -> Callable[[list[str]], m.AdminFenceBroker]:
    def decode(a: list[str]) -> m.AdminFenceBroker:
        if len(a) != 1:
            raise _usage(name, "<broker_id>")
        bid = atoi(a[0], "broker_id")
        if bid < 0:
            raise _bad("broker id must be >= 0")
        return m.AdminFenceBroker(bid, fenced)
    return decode


def _admin_elect(a: list[str]) -> m.AdminElectTopicLeaders:
    if len(a) != 1:
        raise _usage("ADMIN_ELECT_TOPIC_LEADERS", "<topic>")
    return m.AdminElectTopicLeaders(a[0])


def _broker_fetch(a: list[str]) -> m.BrokerFetch:
    if len(a) not in (4, 5):
        raise _usage("BROKER_FETCH", "<topic> <partition> <follower_id> <offset> [max_messages]")
    p = atoi(a[1], "partition")
    follower = atoi(a[2], "follower_id")
    off = atoi(a[3], "offset")
    mx = atoi(a[4], "max_messages") if len(a) == 5 else 100
    if off < 0:
        raise _bad("invalid offset")
    if mx <= 0:
        raise _bad("max_messages must be > 0")
    return m.BrokerFetch(a[0], p, follower, off, mx)


def _broker_replica_ack(a: list[str]) -> m.BrokerReplicaAck:
    if len(a) != 4:
        raise _usage("BROKER_REPLICA_ACK", "<topic> <partition> <follower_id> <acked_offset>")
    return m.BrokerReplicaAck(a[0], atoi(a[1], "partition"), atoi(a[2], "follower_id"),
                              atoi(a[3], "acked_offset"))


class Command(enum.StrEnum):
    PRODUCE = "PRODUCE"
    CONSUME = "CONSUME"
    JOIN = "JOIN"
    SYNC = "SYNC"
    HEARTBEAT = "HEARTBEAT"
    LEAVE = "LEAVE"
    COMMIT = "COMMIT"
    OFFSET = "OFFSET"
    REPLICA_FETCH = "REPLICA_FETCH"
    SET_PARTITION_ROLE = "SET_PARTITION_ROLE"
    PING = "PING"
    ADMIN_CREATE_TOPIC = "ADMIN_CREATE_TOPIC"
    ADMIN_REGISTER_BROKER = "ADMIN_REGISTER_BROKER"
    ADMIN_BROKER_HEARTBEAT = "ADMIN_BROKER_HEARTBEAT"
    ADMIN_SET_PARTITION_LEADER = "ADMIN_SET_PARTITION_LEADER"
    ADMIN_GET_METADATA = "ADMIN_GET_METADATA"
    ADMIN_RECONCILE_BROKER_HEALTH = "ADMIN_RECONCILE_BROKER_HEALTH"
    ADMIN_FENCE_BROKER = "ADMIN_FENCE_BROKER"
    ADMIN_UNFENCE_BROKER = "ADMIN_UNFENCE_BROKER"
    ADMIN_ELECT_TOPIC_LEADERS = "ADMIN_ELECT_TOPIC_LEADERS"
    BROKER_FETCH = "BROKER_FETCH"
    BROKER_REPLICA_ACK = "BROKER_REPLICA_ACK"
    ADMIN_DESCRIBE_TOPIC = "ADMIN_DESCRIBE_TOPIC"
    ADMIN_DELETE_TOPIC = "ADMIN_DELETE_TOPIC"


DECODERS: dict[Command, Callable[[list[str]], m.Request]] = {
    Command.PRODUCE: _produce,
    Command.CONSUME: _consume,
    Command.JOIN: _join,
    Command.SYNC: _member_cmd("SYNC", m.Sync),
    Command.HEARTBEAT: _member_cmd("HEARTBEAT", m.Heartbeat),
    Command.LEAVE: _member_cmd("LEAVE", m.Leave),
    Command.COMMIT: _commit,
    Command.OFFSET: _offset,
    Command.REPLICA_FETCH: _replica_fetch,
    Command.SET_PARTITION_ROLE: _set_role,
    Command.PING: _ping,
    Command.ADMIN_CREATE_TOPIC: _admin_create_topic,
    Command.ADMIN_REGISTER_BROKER: _admin_register_broker,
    Command.ADMIN_BROKER_HEARTBEAT: _admin_broker_heartbeat,
    Command.ADMIN_SET_PARTITION_LEADER: _admin_set_partition_leader,
    Command.ADMIN_GET_METADATA: _admin_get_metadata,
    Command.ADMIN_RECONCILE_BROKER_HEALTH: _admin_reconcile,
    Command.ADMIN_FENCE_BROKER: _admin_fence("ADMIN_FENCE_BROKER", True),
    Command.ADMIN_UNFENCE_BROKER: _admin_fence("ADMIN_UNFENCE_BROKER", False),
    Command.ADMIN_ELECT_TOPIC_LEADERS: _admin_elect,
    Command.BROKER_FETCH: _broker_fetch,
    Command.BROKER_REPLICA_ACK: _broker_replica_ack,
    Command.ADMIN_DESCRIBE_TOPIC: _topic_only("ADMIN_DESCRIBE_TOPIC", m.AdminDescribeTopic),
    Command.ADMIN_DELETE_TOPIC: _topic_only("ADMIN_DELETE_TOPIC", m.AdminDeleteTopic),
}


def decode_request(line: bytes) -> tuple[str, m.Request]:
    """One request line -> (correlation id, request). Raises RtesError with the reply's cid set."""
    env = parse_envelope(line)
    try:
        command = Command(env.command)
    except ValueError:
        raise RtesError(Code.UNKNOWN_COMMAND, "unsupported command", env.cid) from None
    try:
        return env.cid, DECODERS[command](env.args)
    except RtesError as exc:
        exc.cid = env.cid
        raise


# -- replies -----------------------------------------------------------------------------------


def encode_ok(cid: str, payload: str | bytes | None = None) -> bytes:
    head = b"V1|" + _raw(cid) + b"|OK"
    if payload is None:
        return head + b"\n"
    body = payload if isinstance(payload, bytes) else _raw(payload)
    return head + b"|" + body + b"\n"


def encode_error(cid: str, code: str, message: str) -> bytes:
    return b"V1|" + _raw(cid) + b"|ERR|" + code.encode() + b"|" + _raw(message) + b"\n"


def go_list(items: object) -> str:
    """Go's %v of a slice: ``[a b c]``, ``[]`` when empty."""
    return "[" + " ".join(str(i) for i in items) + "]"  # type: ignore[attr-defined]


def go_bool(v: bool) -> str:
    return "true" if v else "false"


# Bytes that would break the reply line or its ``offset:value,...`` list: percent-escaped. Values
# produced through V1 never contain them (its PRODUCE cannot carry them), so those are never altered.
_UNSAFE = {b: f"%{b:02X}".encode() for b in b"\t\n\x0b\x0c\r ,"}
_UNSAFE_TABLE = re.compile(rb"[\t\n\x0b\x0c\r ,]")
_UNSAFE_BYTES = tuple(bytes([b]) for b in _UNSAFE)


def escape_value(value: bytes) -> bytes:
    # seven memchr scans find the common case (nothing to escape) ~50x faster than the regex:
    # a 4 MiB CONSUME reply took 180 ms of the event loop
    if not any(b in value for b in _UNSAFE_BYTES):
        return value
    return _UNSAFE_TABLE.sub(lambda mt: _UNSAFE[mt.group(0)[0]], value)


def encode_records(records: list[tuple[int, bytes]]) -> bytes:
    """``<offset>:<value>,...`` for CONSUME and BROKER_FETCH."""
    return b",".join(str(o).encode() + b":" + escape_value(v) for o, v in records)


# -- what a client may put in one field ---------------------------------------------------------

class UnsafeField(ValueError):
    """A text that cannot travel as one V1 field: sent, it would split into other fields, other
    arguments or another request line (a newline in a key ends the request and starts the next)."""


def _char_name(ch: str) -> str:
    names = {"\n": "a newline (LF)", "\r": "a carriage return (CR)", "\t": "a tab", " ": "a space",
             "|": "'|'", ":": "':'", ",": "','"}
    return names.get(ch, f"U+{ord(ch):04X}")


def check_field(what: str, text: str, forbidden: str = "", *, empty_ok: bool = False) -> None:
    """Raise UnsafeField, naming the character, unless ``text`` is one V1 token: no Go white
    space (the separator of arguments, LF and CR included), no '|' (the envelope's separator)
    and none of ``forbidden`` (':' in a PRODUCE key, ',' in a value). Empty only with
    ``empty_ok`` (a key or value inside ``key:value``; an empty argument would vanish)."""
    if not text and not empty_ok:
        raise UnsafeField(f"{what} is empty: a V1 field cannot be empty")
    for ch in text:
        if ch == "|" or ch in forbidden or _FIELDS.fullmatch(ch):
            raise UnsafeField(f"{what} must not contain {_char_name(ch)}: {text!r} cannot be sent "
                              "as one V1 field")

