"""Text commands decoded into typed requests (cursus.md 3, 4, 6, 7), sans-IO.

``decode(cmd)`` turns a well-formed ``Command`` into one frozen request: the seeds' positional forms
and the ``key=value`` forms meet here, defaults are filled in and numbers parsed, so a handler reads
fields instead of text. A failure raises ``ErrorReply`` carrying H's reply, in H's order.

H checks some arguments only after it has looked the topic up: a bad ``partition=`` on PUBLISH to a
missing topic is ``topic_not_found``, not ``invalid_partition``. Those requests carry the first such
failure in ``invalid`` (None when every argument parsed), and the handler raises it once the topic
checks pass; the other fields then hold their defaults.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from bayou.protocols.cursus.commands import Command, Keyword, parse_int
from bayou.protocols.cursus.replies import ErrorCode, Quoted, error, json_body

DEFAULT_PARTITIONS = 4
DEFAULT_GROUP = "default-group"
DEFAULT_BATCH = 8192
MAX_WAIT_MS = 60_000
_U32_LIMIT = 1 << 32


class ErrorReply(Exception):
    """A request answered with an error: ``reply`` is H's answer (the connection stays open).
    The decoder raises it for a command that cannot be served as written; the server for one the
    broker refuses (a missing topic, a bad partition)."""

    def __init__(self, reply: bytes | list[bytes]) -> None:
        first = reply[0] if isinstance(reply, list) else reply
        super().__init__(first.decode("utf-8", "replace"))
        self.reply = reply


class AckLevel(enum.Enum):
    """``acks=`` (and a batch's acks field): what the producer waits for. The server chooses what
    ``ALL`` means: a standalone Cursus broker treats it like ``LEADER`` (vector 04)."""

    NONE = "0"
    LEADER = "1"
    ALL = "all"


_ACKS = {"0": AckLevel.NONE, "1": AckLevel.LEADER, "": AckLevel.LEADER, "-1": AckLevel.ALL,
         "all": AckLevel.ALL}


def parse_acks(text: str) -> AckLevel | None:
    return _ACKS.get(text.lower())


def positional(cmd: Command) -> list[str]:
    """The words after the keyword when the command uses the seeds' positional form."""
    if cmd.args:
        return []
    return cmd.text.split()[1:]


def json_error(reply: bytes) -> bytes:
    """An ``ERROR: <code> k=v`` reply in READ_STREAM's JSON form: ``{"status":"ERROR","error":...}``."""
    return json_body({"status": "ERROR", "error": reply.decode(errors="replace").removeprefix("ERROR: ")})


def _fail(code: str, *pairs: tuple[str, object]) -> ErrorReply:
    return ErrorReply(error(code, *pairs))


def _need(cmd: Command, key: str) -> str:
    v = cmd.args.get(key)
    if v is None or v == "":
        raise _fail(f"missing_{key}", ("command", cmd.name))
    return v


def _reply(exc: ErrorReply) -> bytes:
    """The single reply of a text command's failure (READ_STREAM's JSON list aside)."""
    assert isinstance(exc.reply, bytes)
    return exc.reply


# -- topics ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateTopic:
    topic: str  # not yet checked against the topic name rules (H checks it before the options)
    partitions: int = DEFAULT_PARTITIONS
    config: Mapping[str, str] = field(default_factory=dict, hash=False)  # bayou topic config keys
    invalid: bytes | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    topic: str


@dataclass(frozen=True, slots=True)
class ListTopics:
    pass


@dataclass(frozen=True, slots=True)
class Help:
    pass


@dataclass(frozen=True, slots=True)
class Metadata:
    topic: str


@dataclass(frozen=True, slots=True)
class FindCoordinator:
    kind: str  # ``group`` or ``transaction``
    key: str  # the group name or the transactional id


@dataclass(frozen=True, slots=True)
class Describe:
    topic: str


@dataclass(frozen=True, slots=True)
class ListOffsets:
    topic: str
    partition: int | None = None  # None: every partition
    invalid: bytes | None = None


def _create(cmd: Command) -> CreateTopic:
    pos = positional(cmd)
    args = dict(cmd.args)
    if pos:  # seeds: CREATE <topic> [<partitions>]
        args["topic"] = pos[0]
        if len(pos) > 1:
            args["partitions"] = pos[1]
    topic = args.get("topic")
    if not topic:
        raise _fail(ErrorCode.MISSING_TOPIC, ("expected", "CREATE topic=<name> [partitions=<N>]"))
    try:
        n, config = _create_options(args)
    except ErrorReply as exc:
        return CreateTopic(topic, invalid=_reply(exc))
    return CreateTopic(topic, n, MappingProxyType(config))


def _create_options(args: Mapping[str, str]) -> tuple[int, dict[str, str]]:
    """CREATE's partition count and topic config, checked in H's order."""
    n = DEFAULT_PARTITIONS
    if "partitions" in args:
        v = parse_int(args["partitions"])
        if v is None or v <= 0:
            raise _fail(ErrorCode.INVALID_PARTITIONS, ("reason", "must be a positive integer"))
        n = v
    if "replication_factor" in args:
        v = parse_int(args["replication_factor"])
        if v is None or v <= 0:
            raise _fail(ErrorCode.INVALID_REPLICATION_FACTOR, ("reason", "must be a positive integer"))
    config: dict[str, str] = {}
    for flag, key in (("idempotent", "idempotent"), ("event_sourcing", "event.sourcing")):
        if args.get(flag, "").lower() == "true":
            config[key] = "true"
    cleanup = args.get("cleanup_policy", "delete")
    if cleanup != "delete":
        raise _fail(ErrorCode.INVALID_TOPIC_POLICY, ("reason", f"cleanup_policy {cleanup} is not supported"))
    partitioner = args.get("partitioner", "hash_key")
    if partitioner not in ("hash_key", "round_robin"):
        raise _fail(ErrorCode.INVALID_TOPIC_POLICY, ("reason", f"unknown partitioner {partitioner}"))
    if partitioner != "hash_key":
        config["cursus.partitioner"] = partitioner
    if args.get("auth_policy", "open") != "open":
        raise _fail(ErrorCode.INVALID_TOPIC_POLICY, ("reason", "only auth_policy=open is supported"))
    for key, target, scale in (("retention_hours", "retention.ms", 3_600_000),
                               ("retention_bytes", "retention.bytes", 1)):
        if key in args:
            v = parse_int(args[key])
            if v is None or v < 0:
                raise _fail(ErrorCode.INVALID_TOPIC_POLICY,
                            ("reason", f"{key} must be a non-negative integer"))
            if v > 0:
                config[target] = str(v * scale)
    return n, config


def _delete(cmd: Command) -> DeleteTopic:
    pos = positional(cmd)
    topic = cmd.args.get("topic") or (pos[0] if pos else None)
    if not topic:
        raise _fail(ErrorCode.MISSING_TOPIC, ("expected", "DELETE topic=<name>"))
    return DeleteTopic(topic)


def _find_coordinator(cmd: Command) -> FindCoordinator:
    if cmd.args.get("group"):
        return FindCoordinator("group", cmd.args["group"])
    if cmd.args.get("transactional_id"):
        return FindCoordinator("transaction", cmd.args["transactional_id"])
    raise _fail(ErrorCode.MISSING_COORDINATOR_KEY, ("command", "FIND_COORDINATOR"))


def _describe(cmd: Command) -> Describe:
    topic = cmd.args.get("topic") or next(iter(positional(cmd)), None)
    if not topic:
        raise _fail(ErrorCode.MISSING_TOPIC, ("expected", "DESCRIBE topic=<name>"))
    return Describe(topic)


def _list_offsets(cmd: Command) -> ListOffsets:
    topic = _need(cmd, "topic")
    if "partition" not in cmd.args:
        return ListOffsets(topic)
    p = parse_int(cmd.args["partition"])
    if p is None:
        return ListOffsets(topic, invalid=error(ErrorCode.INVALID_PARTITION))
    return ListOffsets(topic, p)


# -- producing ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Publish:
    topic: str
    message: str
    producer_id: str
    acks: AckLevel = AckLevel.LEADER
    seq_num: int = 0
    epoch: int = 0
    key: str = ""
    partition: int | None = None  # None: by key (hash_key partitioner) or round robin
    invalid: bytes | None = None


def _publish(cmd: Command) -> Publish:
    args = dict(cmd.args)
    message = cmd.message
    pos = positional(cmd)
    if pos and message is None:  # seed 002: PUBLISH <topic> <message>
        args["topic"] = pos[0]
        message = cmd.text.split(None, 2)[2] if len(pos) > 1 else None
        args.setdefault("producerId", "bayou-text")
    topic = args.get("topic")
    if not topic:
        raise _fail(ErrorCode.MISSING_TOPIC, ("command", "PUBLISH"))
    if not message:
        raise _fail(ErrorCode.MISSING_MESSAGE, ("command", "PUBLISH"))
    producer = args.get("producerId")
    if not producer:
        raise _fail(ErrorCode.MISSING_PRODUCER_ID, ("command", "PUBLISH"))
    if "isIdempotent" in args and args["isIdempotent"].lower() not in ("true", "false"):
        raise _fail(ErrorCode.INVALID_IS_IDEMPOTENT, ("value", args["isIdempotent"]))
    acks = parse_acks(args.get("acks", "1"))
    if acks is None:
        raise _fail(ErrorCode.INVALID_ACKS, ("value", args.get("acks", "")))
    seq = parse_int(args.get("seqNum", "0"))
    if seq is None or seq < 0:
        raise _fail(ErrorCode.INVALID_SEQ_NUM, ("reason", f"invalid seqNum {args.get('seqNum')}"))
    epoch = parse_int(args.get("epoch", "0"))
    if epoch is None:
        raise _fail(ErrorCode.INVALID_EPOCH, ("reason", f"invalid epoch {args.get('epoch')}"))
    request = Publish(topic, message, producer, acks, seq, epoch, args.get("key", ""))
    if "partition" not in args:
        return request
    p = parse_int(args["partition"])
    if p is None:
        return replace(request, invalid=error(ErrorCode.INVALID_PARTITION,
                                              ("reason", f"invalid partition {args['partition']}")))
    return replace(request, partition=p)


# -- groups ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroup:
    topic: str
    group: str
    member: str  # the client's name; a new member gets a suffix, a rejoin sends its id
    generation: int | None = None  # given: resume that generation
    invalid: bytes | None = None


@dataclass(frozen=True, slots=True)
class SyncGroup:
    topic: str
    group: str
    member: str
    generation: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    topic: str
    group: str
    member: str
    generation: int


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    topic: str
    group: str
    member: str
    generation: int | None  # None: leave unconditionally (cursus.md decision 2)


@dataclass(frozen=True, slots=True)
class FetchOffset:
    topic: str
    group: str
    partition: int


@dataclass(frozen=True, slots=True)
class CommitOffset:
    """COMMIT_OFFSET, and COMMIT (the design documents' name)."""

    topic: str
    group: str
    partition: int
    offset: int
    member: str | None = None  # with a generation: checked against the group's assignment
    generation: int | None = None


@dataclass(frozen=True, slots=True)
class BatchCommit:
    topic: str
    group: str
    member: str
    generation: int
    offsets: Mapping[int, int] = field(hash=False)  # partition -> offset, in the order given


@dataclass(frozen=True, slots=True)
class RegisterGroup:
    topic: str
    group: str


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Seed 000/002: ``SUBSCRIBE <topic> [<group>]``, kept as a bayou extension."""

    topic: str
    group: str


@dataclass(frozen=True, slots=True)
class GroupStatus:
    group: str


@dataclass(frozen=True, slots=True)
class ListGroups:
    pass


def _generation(args: Mapping[str, str], command: str, required: bool) -> int | None:
    if "generation" not in args:
        if required:
            raise _fail(ErrorCode.MISSING_GENERATION, ("command", command))
        return None
    g = parse_int(args["generation"])
    if g is None:
        raise _fail(ErrorCode.INVALID_GENERATION, ("command", command))
    return g


def _group_args(cmd: Command, *names: str) -> tuple[str, str, str, dict[str, str]]:
    """(topic, group, member, all arguments); the seeds' positional forms fill ``names``."""
    args = dict(cmd.args)
    args.update((k, v) for k, v in zip(names, positional(cmd), strict=False))
    for key in ("topic", "group", "member"):
        if not args.get(key):
            raise _fail(f"missing_{key}", ("command", cmd.name))
    return args["topic"], args["group"], args["member"], args


def _join(cmd: Command) -> JoinGroup:
    topic, group, member, args = _group_args(cmd, "topic", "group", "member")
    try:
        return JoinGroup(topic, group, member, _generation(args, cmd.name, required=False))
    except ErrorReply as exc:
        return JoinGroup(topic, group, member, invalid=_reply(exc))


def _generation_required(cmd: Command, args: Mapping[str, str]) -> int:
    g = _generation(args, cmd.name, required=True)
    assert g is not None
    return g


def _sync(cmd: Command) -> SyncGroup:
    topic, group, member, args = _group_args(cmd, "topic", "group", "member", "generation")
    return SyncGroup(topic, group, member, _generation_required(cmd, args))


def _heartbeat(cmd: Command) -> Heartbeat:
    topic, group, member, args = _group_args(cmd, "topic", "group", "consumer", "member", "generation")
    return Heartbeat(topic, group, member, _generation_required(cmd, args))


def _leave(cmd: Command) -> LeaveGroup:
    topic, group, member, args = _group_args(cmd, "topic", "group", "member")
    return LeaveGroup(topic, group, member, _generation(args, cmd.name, required=False))


def _fetch_offset(cmd: Command) -> FetchOffset:
    topic = _need(cmd, "topic")
    if "partition" not in cmd.args or cmd.args["partition"] == "":
        raise _fail(ErrorCode.MISSING_PARTITION, ("command", cmd.name))
    p = parse_int(cmd.args["partition"])
    if p is None:
        raise _fail(ErrorCode.INVALID_PARTITION)
    return FetchOffset(topic, _need(cmd, "group"), p)


def _commit_offset(cmd: Command) -> CommitOffset:
    args = dict(cmd.args)
    pos = positional(cmd)
    if pos:  # design doc: COMMIT <topic> <group> <partition> <offset>
        args.update(zip(("topic", "group", "partition", "offset"), pos, strict=False))
    for key in ("topic", "partition", "group", "offset"):
        if not args.get(key):
            raise _fail(f"missing_{key}", ("command", "COMMIT_OFFSET"))
    p = parse_int(args["partition"])
    if p is None or p < 0:
        raise _fail(ErrorCode.INVALID_PARTITION)
    off = parse_int(args["offset"])
    if off is None or off < 0:
        raise _fail(ErrorCode.INVALID_OFFSET)
    member = args.get("member")
    gen = _generation(args, "COMMIT_OFFSET", required=False)
    if member and gen is None:
        raise _fail(ErrorCode.MISSING_GENERATION, ("command", "COMMIT_OFFSET"))
    if gen is not None and not member:
        raise _fail(ErrorCode.MISSING_MEMBER, ("command", "COMMIT_OFFSET"))
    return CommitOffset(args["topic"], args["group"], p, off, member, gen)


def _batch_commit(cmd: Command) -> BatchCommit:
    topic, group, member, args = _group_args(cmd, "topic", "group", "member", "generation")
    gen = _generation_required(cmd, args)
    entries: dict[int, int] = {}
    for entry in cmd.tail.split(","):
        text = entry[1:] if entry[:1] in ("P", "p") else entry
        ps, sep, os_ = text.partition(":")
        if not sep:
            raise _fail(ErrorCode.INVALID_BATCH_COMMIT_ENTRY, ("entry", Quoted(entry)))
        p, off = parse_int(ps), parse_int(os_)
        if p is None or p < 0:
            raise _fail(ErrorCode.INVALID_PARTITION, ("entry", Quoted(entry)))
        if off is None or off < 0:
            raise _fail(ErrorCode.INVALID_OFFSET, ("entry", Quoted(entry)))
        if p in entries:
            raise _fail(ErrorCode.DUPLICATE_PARTITION, ("partition", p), ("group", group), ("topic", topic))
        entries[p] = off
    return BatchCommit(topic, group, member, gen, MappingProxyType(entries))


def _register_group(cmd: Command) -> RegisterGroup:
    topic = _need(cmd, "topic")
    return RegisterGroup(topic, _need(cmd, "group"))


def _subscribe(cmd: Command) -> Subscribe:
    pos = positional(cmd)
    topic = cmd.args.get("topic") or (pos[0] if pos else "")
    group = cmd.args.get("group") or (pos[1] if len(pos) > 1 else DEFAULT_GROUP)
    if not topic:
        raise _fail(ErrorCode.MISSING_TOPIC, ("command", "SUBSCRIBE"))
    return Subscribe(topic, group)


# -- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Consume:
    topic: str
    partition: int
    offset: int  # where the client is; a committed offset ahead of it wins
    group: str = DEFAULT_GROUP
    batch: int = DEFAULT_BATCH
    wait_ms: int = 0


@dataclass(frozen=True, slots=True)
class Stream:
    topic: str
    partition: int
    group: str
    offset: int | None = None  # None: the committed offset, else by ``auto_offset_reset``
    auto_offset_reset: str | None = None
    batch: int = DEFAULT_BATCH
    member: bool = False  # a group member commits itself: no auto-commit


def _consume(cmd: Command) -> Consume:
    args = dict(cmd.args)
    pos = positional(cmd)
    if pos:  # design doc: CONSUME <topic> <partition> <offset>
        if len(pos) != 3:
            raise _fail(ErrorCode.INVALID_CONSUME_SYNTAX)
        args.update(zip(("topic", "partition", "offset"), pos, strict=True))
        args.setdefault("member", "-")
    if not all(args.get(k) for k in ("topic", "partition", "offset", "member")):
        raise _fail(ErrorCode.INVALID_CONSUME_SYNTAX)
    p = parse_int(args["partition"])
    offset = parse_int(args["offset"])
    if p is None:
        raise _fail(ErrorCode.COMMAND_FAILED, ("reason", f"invalid partition value: {args['partition']}"))
    if offset is None or offset < 0:
        raise _fail(ErrorCode.COMMAND_FAILED, ("reason", f"invalid offset value: {args['offset']}"))
    group = args.get("group") or DEFAULT_GROUP
    if group == "-":
        group = DEFAULT_GROUP
    limit = parse_int(args.get("batch", "")) or DEFAULT_BATCH
    limit = DEFAULT_BATCH if limit <= 0 else limit
    wait_ms = max(0, min(parse_int(args.get("wait_ms", "0")) or 0, MAX_WAIT_MS))
    return Consume(args["topic"], p, offset, group, limit, wait_ms)


def _stream(cmd: Command) -> Stream:
    args = dict(cmd.args)
    pos = positional(cmd)
    if pos:  # design doc: STREAM <topic> <partition> <offset>
        if len(pos) != 3:
            raise _fail(ErrorCode.INVALID_STREAM_SYNTAX)
        args.update(zip(("topic", "partition", "offset"), pos, strict=True))
        args.setdefault("group", DEFAULT_GROUP)
    if not all(args.get(k) for k in ("topic", "partition", "group")):
        raise _fail(ErrorCode.INVALID_STREAM_SYNTAX)
    p = parse_int(args["partition"])
    if p is None:
        raise _fail(ErrorCode.COMMAND_FAILED, ("reason", f"invalid partition value: {args['partition']}"))
    return Stream(args["topic"], p, args["group"],
                  offset=parse_int(args["offset"]) if args.get("offset") else None,
                  auto_offset_reset=args.get("autoOffsetReset"),
                  batch=parse_int(args.get("batch", "")) or DEFAULT_BATCH,
                  member=bool(args.get("member")))


# -- event sourcing ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendStream:
    topic: str
    key: bytes
    version: int = 0  # the version the stream must be at after this event
    message: str = ""
    event_type: str = ""
    schema_version: int = 1
    metadata: str = ""
    producer_id: str = ""
    invalid: bytes | None = None


@dataclass(frozen=True, slots=True)
class StreamVersion:
    topic: str
    key: bytes


@dataclass(frozen=True, slots=True)
class SaveSnapshot:
    topic: str
    key: bytes
    version: int = 0
    message: str = ""
    invalid: bytes | None = None


@dataclass(frozen=True, slots=True)
class ReadSnapshot:
    topic: str
    key: bytes


@dataclass(frozen=True, slots=True)
class ReadStream:
    """Answered as a JSON frame and a batch; its errors too are JSON (``json_error``)."""

    topic: str
    key: bytes
    from_version: int = 1
    invalid: bytes | None = None  # already in the JSON form


def _es_key(cmd: Command) -> tuple[str, bytes]:
    topic = cmd.args.get("topic")
    if not topic:
        raise _fail(ErrorCode.MISSING_TOPIC)
    key = cmd.args.get("key")
    if not key:
        raise _fail(ErrorCode.MISSING_KEY)
    return topic, key.encode()


def _version(cmd: Command, name: str = "version", required: bool = True) -> int | None:
    if name not in cmd.args:
        if required:
            raise _fail(f"missing_{name}")
        return None
    v = parse_int(cmd.args[name])
    if v is None or v < 0:
        raise _fail(f"invalid_{name}")
    return v


def _append_stream(cmd: Command) -> AppendStream:
    topic, key = _es_key(cmd)
    try:
        version = _version(cmd)
        assert version is not None
        if not cmd.message:
            raise _fail(ErrorCode.MISSING_MESSAGE)
        schema = parse_int(cmd.args.get("schema_version", "1"))
        if schema is None or not 0 <= schema < _U32_LIMIT:
            raise _fail(ErrorCode.INVALID_SCHEMA_VERSION)
    except ErrorReply as exc:
        return AppendStream(topic, key, invalid=_reply(exc))
    return AppendStream(topic, key, version, cmd.message, cmd.args.get("event_type", ""), schema,
                        cmd.args.get("metadata", ""), cmd.args.get("producerId", ""))


def _save_snapshot(cmd: Command) -> SaveSnapshot:
    topic, key = _es_key(cmd)
    try:
        version = _version(cmd)
        assert version is not None
        if cmd.message is None:
            raise _fail(ErrorCode.MISSING_MESSAGE)
    except ErrorReply as exc:
        return SaveSnapshot(topic, key, invalid=_reply(exc))
    return SaveSnapshot(topic, key, version, cmd.message)


def _read_stream(cmd: Command) -> ReadStream:
    try:
        topic, key = _es_key(cmd)
    except ErrorReply as exc:
        raise ErrorReply([json_error(_reply(exc))]) from None
    try:
        from_version = _version(cmd, "from_version", required=False) or 1
    except ErrorReply as exc:
        return ReadStream(topic, key, invalid=json_error(_reply(exc)))
    return ReadStream(topic, key, from_version)


def _stream_version(cmd: Command) -> StreamVersion:
    return StreamVersion(*_es_key(cmd))


def _read_snapshot(cmd: Command) -> ReadSnapshot:
    return ReadSnapshot(*_es_key(cmd))


Request = (CreateTopic | DeleteTopic | ListTopics | Help | Metadata | FindCoordinator | Describe
           | ListOffsets | Publish | JoinGroup | SyncGroup | Heartbeat | LeaveGroup | FetchOffset
           | CommitOffset | BatchCommit | RegisterGroup | Subscribe | GroupStatus | ListGroups | Consume
           | Stream | AppendStream | StreamVersion | SaveSnapshot | ReadSnapshot | ReadStream)

DECODERS: Mapping[str, Callable[[Command], Request]] = MappingProxyType({
    Keyword.CREATE: _create,
    Keyword.DELETE: _delete,
    Keyword.LIST: lambda _cmd: ListTopics(),
    Keyword.HELP: lambda _cmd: Help(),
    Keyword.METADATA: lambda cmd: Metadata(_need(cmd, "topic")),
    Keyword.FIND_COORDINATOR: _find_coordinator,
    Keyword.DESCRIBE: _describe,
    Keyword.LIST_OFFSETS: _list_offsets,
    Keyword.PUBLISH: _publish,
    Keyword.JOIN_GROUP: _join,
    Keyword.SYNC_GROUP: _sync,
    Keyword.HEARTBEAT: _heartbeat,
    Keyword.LEAVE_GROUP: _leave,
    Keyword.FETCH_OFFSET: _fetch_offset,
    Keyword.COMMIT_OFFSET: _commit_offset,
    Keyword.COMMIT: _commit_offset,
    Keyword.BATCH_COMMIT: _batch_commit,
    Keyword.CONSUME: _consume,
    Keyword.STREAM: _stream,
    Keyword.SUBSCRIBE: _subscribe,
    Keyword.REGISTER_GROUP: _register_group,
    Keyword.GROUP_STATUS: lambda cmd: GroupStatus(_need(cmd, "group")),
    Keyword.LIST_GROUPS: lambda _cmd: ListGroups(),
    Keyword.APPEND_STREAM: _append_stream,
    Keyword.STREAM_VERSION: _stream_version,
    Keyword.SAVE_SNAPSHOT: _save_snapshot,
    Keyword.READ_SNAPSHOT: _read_snapshot,
    Keyword.READ_STREAM: _read_stream,
})
"""The keywords bayou serves; every other one (and a malformed shape) is ``unknown_command``."""


def served(cmd: Command) -> bool:
    """Whether ``cmd`` names a command bayou serves, in the shape H's handlers match."""
    return cmd.name in DECODERS and cmd.well_formed()


def unknown(cmd: Command) -> bytes:
    return error(ErrorCode.UNKNOWN_COMMAND, ("command", Quoted(cmd.text)))


def decode(cmd: Command) -> Request:
    """The typed request for a served command (see ``served``); raises ``ErrorReply``."""
    return DECODERS[cmd.name](cmd)
