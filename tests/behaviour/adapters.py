"""One adapter per wire protocol: the behavioural suite's only protocol-specific code.

Every test in ``tests/behaviour`` talks to the broker through an ``Adapter``: produce, fetch from an
offset or a time, long poll, commit and read group offsets, create and delete topics, see where the
log starts, and send malformed requests. An adapter turns those calls into its protocol's requests
with bayou's own codecs and the raw test clients of ``tests/support``, and turns the replies into
the common ``Rec`` / ``Fetched`` shapes (offsets are bayou's 0-based offsets: TANK's seq - 1).

What a protocol cannot do is declared, not faked: ``features`` lists what it has, and a test that
needs a missing feature is skipped with the reason. Where protocols answer the same situation
differently by design (a fetch below the log start, an unknown topic, a malformed request) the
adapter declares its documented answer (``below_start``, ``past_end``, ``unknown_topic_read``,
``bad_inputs``) next to the protocol note section that says so, and the shared test checks the
broker gives exactly that. A fifth protocol gets the whole suite by adding one class here and
naming it in ``ADAPTERS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import itertools
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from kio.schema.errors import ErrorCode as KafkaCode

from bayou.protocols.cursus.batch import decode_head, decode_messages
from bayou.protocols.iggy import codec as iggy_codec
from bayou.protocols.iggy import messages as im
from bayou.protocols.iggy.codes import OPERATION_OF, Command, Operation, Status
from bayou.protocols.iggy.convert import KEY_HEADER
from bayou.protocols.kafka import codec as kafka_codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import SUPPORTED, ApiKey
from bayou.protocols.tank import codec as tank_codec
from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, decode_chunk, encode_bundle
from bayou.protocols.tank.codes import ConsumeFlag, ProduceError
from bayou.records.batch import Record, decode_records, encode_batch, iter_batches
from support.brokers import LineConn
from support.cursus import FrameConn, build_batch, envelope, message
from support.iggy import PROTOCOL, Closed, IggyStatusError, VsrConn, poll, send, vsr_login
from support.kafka import KafkaConn
from support.kafka import frame as kafka_frame
from support.tank import TankConn


class Feature(enum.Enum):
    """What a test may need from a protocol."""

    CREATE_TOPIC = "create a topic"
    DELETE_TOPIC = "delete a topic"
    RETENTION = "create a topic with a size limit (retention)"
    CHOOSE_PARTITION = "produce to a chosen partition"
    PRODUCE_KEYS = "send record keys"
    READ_KEYS = "read record keys back"
    HEADERS = "record headers"
    TIMESTAMPS = "read record timestamps"
    FETCH_BY_TIME = "fetch from a timestamp"
    LONG_POLL = "long poll"
    GROUP_OFFSETS = "consumer-group offsets (commit and fetch)"


Outcome = Literal["clamp", "empty", "error"]
ErrorKind = Literal["unknown_topic", "unknown_partition", "offset_out_of_range"]


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as a protocol shows it. ``key`` None: no key (or a protocol that shows none);
    ``timestamp_ms`` None where the protocol shows no timestamp."""

    offset: int
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Out:
    """One record to produce."""

    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetch's answer: records, or the protocol's error turned into an ``ErrorKind``;
    ``earliest`` is the log start the error reports (offset out of range), when it reports one."""

    records: list[Rec] = field(default_factory=list)
    error: ErrorKind | None = None
    earliest: int | None = None
    raw: str = ""


class Rejected(Exception):
    """A produce (or admin request) the broker refused; ``kind`` says why, ``raw`` how."""

    def __init__(self, kind: str, raw: str) -> None:
        super().__init__(f"{kind}: {raw}")
        self.kind = kind
        self.raw = raw


@dataclass(frozen=True, slots=True)
class BadInput:
    """A malformed request and the protocol's documented answer. ``request`` is what the adapter
    sends (bytes, or for Iggy a (command code, payload) pair framed on the connection); ``reply``
    the answer as ``Adapter.send_bad`` renders it ("" for none); ``stays_open`` whether the
    connection keeps serving afterwards."""

    name: str
    request: Any
    reply: str
    stays_open: bool


_ids = itertools.count(1)


class Adapter(ABC):
    """A connection to one broker through one protocol."""

    name: ClassVar[str]
    features: ClassVar[frozenset[Feature]]
    # A fetch below the log start: served from the log start ("clamp") or refused ("error").
    below_start: ClassVar[Outcome]
    # A fetch past the log end (end + 1 or more): no records ("empty") or refused ("error").
    past_end: ClassVar[Outcome]
    # A fetch from a topic that does not exist: "empty" (the protocol cannot tell) or "error".
    unknown_topic_read: ClassVar[Outcome]

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    @classmethod
    def lacks(cls, *needed: Feature) -> str | None:
        """The skip reason when this protocol lacks one of ``needed``, else None."""
        missing = [f.value for f in needed if f not in cls.features]
        return f"{cls.name} has no way to {', '.join(missing)}" if missing else None

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    async def create_topic(self, topic: str, partitions: int = 1, *, retention_bytes: int | None = None
                           ) -> None:
        raise NotImplementedError(self.lacks(Feature.CREATE_TOPIC))

    async def delete_topic(self, topic: str) -> None:
        raise NotImplementedError(self.lacks(Feature.DELETE_TOPIC))

    @abstractmethod
    async def produce(self, topic: str, partition: int, records: Sequence[Out]) -> None:
        """Append ``records`` in order (one request where the protocol allows); Rejected if refused."""

    @abstractmethod
    async def fetch(self, topic: str, partition: int, offset: int) -> Fetched:
        """One fetch from ``offset``, answered at once."""

    async def fetch_all(self, topic: str, partition: int, offset: int = 0) -> list[Rec]:
        """Every record from ``offset`` to the log end (repeated fetches)."""
        out: list[Rec] = []
        while True:
            got = await self.fetch(topic, partition, offset)
            assert got.error is None, got
            new = [r for r in got.records if r.offset >= offset]
            if not new:
                return out
            out += new
            offset = new[-1].offset + 1

    async def fetch_by_time(self, topic: str, partition: int, timestamp_ms: int) -> Fetched:
        raise NotImplementedError(self.lacks(Feature.FETCH_BY_TIME))

    async def long_poll(self, topic: str, partition: int, offset: int, wait_ms: int) -> Fetched:
        raise NotImplementedError(self.lacks(Feature.LONG_POLL))

    async def commit(self, group: str, topic: str, partition: int, next_offset: int) -> None:
        """Commit ``next_offset`` (the next one to read) for ``group`` as a member would."""
        raise NotImplementedError(self.lacks(Feature.GROUP_OFFSETS))

    async def committed(self, group: str, topic: str, partition: int) -> int:
        """The group's committed next offset to read (0 when nothing is committed)."""
        raise NotImplementedError(self.lacks(Feature.GROUP_OFFSETS))

    def local_group(self, group: str, topic: str) -> str:
        """The name this protocol gives the broker group ``group`` (most address it by name)."""
        return group

    @abstractmethod
    async def log_start(self, topic: str, partition: int) -> int:
        """The partition's first offset still stored, as the protocol reports it."""

    @classmethod
    @abstractmethod
    def bad_inputs(cls, topic: str) -> list[BadInput]:
        """Malformed requests against ``topic`` (one partition, holding records) and their answers."""

    @abstractmethod
    async def send_bad(self, case: BadInput) -> tuple[str, bool]:
        """Send ``case.request`` on a fresh connection: (the reply rendered, whether the connection
        still serves a request afterwards)."""


# -- V1 ("rtes", rtes.md) -------------------------------------------------------------------------

_V1_OK = re.compile(r"V1\|(?P<cid>[^|]+)\|OK(?:\|(?P<payload>.*))?$", re.S)


class V1Adapter(Adapter):
    """V1 lines. PRODUCE routes by FNV-1a of the key (rtes.md 6.1): a chosen partition is only
    honoured when the hash lands there, which on one-partition topics it always does. CONSUME
    shows offsets and values (no keys, no timestamps) and starts at the log start when asked
    for less (7.2 [R]); ADMIN_* are the flux-era commands plus bayou's config and delete."""

    name = "v1"
    features = frozenset({Feature.CREATE_TOPIC, Feature.DELETE_TOPIC, Feature.RETENTION,
                          Feature.PRODUCE_KEYS, Feature.GROUP_OFFSETS})
    below_start = "clamp"  # rtes.md 7.2 [R]: "start from the earliest"
    past_end = "empty"  # 7.2 step 3: offset > hw -> messages= hw=<hw>
    unknown_topic_read = "empty"  # 7.2 [O]: messages= hw=-1

    conn: LineConn

    async def open(self) -> None:
        self.conn = await LineConn.open(self.broker.port)

    async def close(self) -> None:
        await self.conn.close()

    async def ask(self, command: str, args: str) -> str:
        cid = next(_ids)
        reply = await self.conn.ask(f"V1|{cid}|{command}|{args}")
        assert reply.startswith(f"V1|{cid}|"), reply
        return reply

    async def ok(self, command: str, args: str) -> str:
        reply = await self.ask(command, args)
        match = _V1_OK.match(reply)
        if match is None:
            raise Rejected(reply.split("|", 4)[3] if reply.count("|") >= 3 else "?", reply)
        return match["payload"] or ""

    async def create_topic(self, topic: str, partitions: int = 1, *, retention_bytes: int | None = None
                           ) -> None:
        extra = f" retention.bytes={retention_bytes}" if retention_bytes is not None else ""
        await self.ok("ADMIN_CREATE_TOPIC", f"{topic} {partitions} 1{extra}")

    async def delete_topic(self, topic: str) -> None:
        payload = await self.ok("ADMIN_DELETE_TOPIC", topic)
        assert payload.startswith(f"topic={topic} deleted=true "), payload  # then term= index=

    async def produce(self, topic: str, partition: int, records: Sequence[Out]) -> None:
        for r in records:
            assert r.key is not None and not r.headers, "V1 records always have a key and no headers"
            payload = await self.ok("PRODUCE", f"{topic} {r.key.decode()}:{r.value.decode()}")
            got = int(payload.split(" ")[0].removeprefix("partition="))
            assert got == partition, f"V1 routed key {r.key!r} to partition {got}, not {partition}"

    async def fetch(self, topic: str, partition: int, offset: int) -> Fetched:
        reply = await self.ask("CONSUME", f"{topic} {partition} {offset}")
        if reply.endswith("|ERR|BAD_REQUEST|invalid partition"):
            return Fetched(error="unknown_partition", raw=reply)
        match = _V1_OK.match(reply)
        assert match is not None, reply
        found = re.fullmatch(r"messages=(?P<list>\S*) hw=(?P<hw>-?\d+)", match["payload"] or "")
        assert found is not None, reply
        records = []
        for item in filter(None, found["list"].split(",")):
            o, _, v = item.partition(":")
            records.append(Rec(int(o), v.encode()))
        return Fetched(records, raw=reply)

    async def commit(self, group: str, topic: str, partition: int, next_offset: int) -> None:
        member = f"v1-{next(_ids)}"
        joined = await self.ok("JOIN", f"{group} {topic} {member}")
        generation = int(re.search(r"generation=(\d+)", joined)[1])  # type: ignore[index]
        assert await self.ok("COMMIT", f"{group} {topic} {member} {generation} {partition} {next_offset}") \
            == "committed=true"
        await self.ok("LEAVE", f"{group} {topic} {member} {generation}")

    async def committed(self, group: str, topic: str, partition: int) -> int:
        return int((await self.ok("OFFSET", f"{group} {topic} {partition}")).removeprefix("offset="))

    async def log_start(self, topic: str, partition: int) -> int:
        described = await self.ok("ADMIN_DESCRIBE_TOPIC", topic)
        starts = re.search(r"log_start=\[([\d ]*)\]", described)
        assert starts is not None, described
        return int(starts[1].split()[partition])

    @classmethod
    def bad_inputs(cls, topic: str) -> list[BadInput]:
        return [  # rtes.md 3 (envelope), 4 (codes), 5 (integers), 7.1 [R], 7.2 [R]
            BadInput("no envelope", b"hello", "V1|0|ERR|BAD_REQUEST|expected format "
                     "V1|<correlation_id>|<command>|<args>", True),
            BadInput("wrong version", b"V2|7|PING|", "V1|0|ERR|BAD_REQUEST|unsupported version", True),
            BadInput("unknown command", b"V1|8|NOPE|x", "V1|8|ERR|UNKNOWN_COMMAND|unsupported command", True),
            BadInput("wrong argument count", f"V1|9|CONSUME|{topic} 0".encode(),
                     "V1|9|ERR|BAD_REQUEST|CONSUME requires: <topic> <partition> <offset>", True),
            BadInput("non-integer offset", f"V1|10|CONSUME|{topic} 0 1_0".encode(),
                     "V1|10|ERR|BAD_REQUEST|invalid offset", True),
            BadInput("negative offset", f"V1|11|CONSUME|{topic} 0 -1".encode(),
                     "V1|11|ERR|BAD_REQUEST|invalid offset", True),
            BadInput("value with a comma", f"V1|12|PRODUCE|{topic} k:a,b".encode(),
                     "V1|12|ERR|BAD_REQUEST|value must not contain ','", True),
            BadInput("bad acks", f"V1|13|PRODUCE|{topic} k:v acks=2".encode(),
                     "V1|13|ERR|BAD_REQUEST|invalid ack mode; expected acks=0|1|all", True),
        ]

    async def send_bad(self, case: BadInput) -> tuple[str, bool]:
        conn = await LineConn.open(self.broker.port)
        try:
            reply = (await conn.ask(case.request)) if case.reply else ""
            try:
                alive = await conn.ask("V1|99|PING|") == "V1|99|OK"
            except (ConnectionError, asyncio.IncompleteReadError):
                alive = False
            return reply, alive
        finally:
            await conn.close()


# -- Cursus (cursus.md) ---------------------------------------------------------------------------


class CursusAdapter(Adapter):
    """Cursus text commands in the topic envelope and binary batches, as the published clients
    send them. Each fetch uses a fresh connection and a group that never commits, because CONSUME
    resumes from a connection's own position or a group's committed offset first (cursus.md 7)."""

    name = "cursus"
    features = frozenset({Feature.CREATE_TOPIC, Feature.DELETE_TOPIC, Feature.RETENTION,
                          Feature.CHOOSE_PARTITION, Feature.PRODUCE_KEYS, Feature.READ_KEYS,
                          Feature.LONG_POLL, Feature.GROUP_OFFSETS})
    below_start = "error"  # cursus.md 7: ERROR: OFFSET_OUT_OF_RANGE requested= earliest= latest=
    past_end = "empty"  # 7: one batch frame, possibly with zero records
    unknown_topic_read = "error"  # 7: command_failed reason="topic '<t>' does not exist"

    conn: FrameConn

    async def open(self) -> None:
        self.conn = await FrameConn.open(self.broker.cursus_port)

    async def close(self) -> None:
        await self.conn.close()

    async def command(self, text: str) -> str:
        reply = await self.conn.command(text)
        if not reply.startswith("OK"):
            raise Rejected(reply.split(" ")[1] if " " in reply else reply, reply)
        return reply

    async def create_topic(self, topic: str, partitions: int = 1, *, retention_bytes: int | None = None
                           ) -> None:
        extra = f" retention_bytes={retention_bytes}" if retention_bytes is not None else ""
        await self.command(f"CREATE topic={topic} partitions={partitions}{extra}")

    async def delete_topic(self, topic: str) -> None:
        assert await self.command(f"DELETE topic={topic}") == f"OK topic={topic} deleted=true"

    async def produce(self, topic: str, partition: int, records: Sequence[Out]) -> None:
        assert all(not r.headers for r in records), "Cursus records have no headers"
        msgs = [message(r.value, i + 1, key=r.key or b"") for i, r in enumerate(records)]
        reply = (await self.conn.ask(build_batch(topic, partition, msgs))).decode(errors="replace")
        if not reply.startswith('{"status":"OK"'):
            kind = {"topic_not_found": "unknown_topic", "partition_not_found": "unknown_partition"}
            raise Rejected(next((v for k, v in kind.items() if k in reply), reply), reply)

    async def _consume(self, topic: str, partition: int, offset: int, wait_ms: int = 0) -> Fetched:
        conn = await FrameConn.open(self.broker.cursus_port)
        try:
            body = await conn.ask(envelope(
                f"CONSUME topic={topic} partition={partition} offset={offset} member=behaviour "
                f"group=behaviour-never-commits batch=1000 wait_ms={wait_ms}"), timeout=30 + wait_ms / 1000)
        finally:
            await conn.close()
        if body.startswith(b"ERROR"):
            text = body.decode(errors="replace")
            out_of_range = re.fullmatch(
                r"ERROR: OFFSET_OUT_OF_RANGE requested=\d+ earliest=(\d+) latest=\d+", text)
            if out_of_range:
                return Fetched(error="offset_out_of_range", earliest=int(out_of_range[1]), raw=text)
            if re.fullmatch(r"ERROR: command_failed reason=\"topic '.*' does not exist\"", text):
                return Fetched(error="unknown_topic", raw=text)
            if re.fullmatch(r"ERROR: command_failed reason=\"partition -?\d+ out of range for .*\"", text):
                return Fetched(error="unknown_partition", raw=text)
            raise AssertionError(f"CONSUME answered {text}")
        head = decode_head(body)
        assert (head.topic, head.partition) == (topic, partition), head
        return Fetched([Rec(m.offset, m.payload, m.key or None) for m in decode_messages(body, head)])

    async def fetch(self, topic: str, partition: int, offset: int) -> Fetched:
        return await self._consume(topic, partition, offset)

    async def long_poll(self, topic: str, partition: int, offset: int, wait_ms: int) -> Fetched:
        return await self._consume(topic, partition, offset, wait_ms)

    async def commit(self, group: str, topic: str, partition: int, next_offset: int) -> None:
        joined = await self.command(f"JOIN_GROUP topic={topic} group={group} member=cursus")
        found = re.fullmatch(r"OK generation=(\d+) member=(\S+) assignments=\[([\d ]*)\]", joined)
        assert found is not None, joined
        generation, member = found[1], found[2]
        assert str(partition) in found[3].split(), f"{member} was not given partition {partition}: {joined}"
        await self.command(f"COMMIT_OFFSET topic={topic} partition={partition} group={group} "
                           f"offset={next_offset} member={member} generation={generation}")
        await self.command(f"LEAVE_GROUP topic={topic} group={group} member={member} generation={generation}")

    async def committed(self, group: str, topic: str, partition: int) -> int:
        reply = await self.command(f"FETCH_OFFSET topic={topic} partition={partition} group={group}")
        return int(reply.removeprefix("OK offset="))

    async def log_start(self, topic: str, partition: int) -> int:
        reply = await self.command(f"LIST_OFFSETS topic={topic} partition={partition}")
        found = re.search(rf"offsets=P{partition}:earliest=(\d+):", reply)
        assert found is not None, reply
        return int(found[1])

    @classmethod
    def bad_inputs(cls, topic: str) -> list[BadInput]:
        def batch_error(reason: str) -> str:
            return f'ERROR: batch_decode_failed reason="{reason}"'
        return [  # cursus.md 2.4 (classification), 4.16, 6.2 (produce errors), 3 (commands)
            BadInput("raw text that is no command", b"FOO x=1",
                     'ERROR: decode_failed reason="invalid topic length"', True),
            BadInput("unknown command", envelope("FOO x=1", topic),
                     "ERROR: malformed_input reason=missing_topic_or_payload", False),
            BadInput("batch counting more records than it holds", build_batch(topic, 0, ["x"], count=5),
                     batch_error("message count 5 is larger than the frame"), True),
            BadInput("batch with no records", build_batch(topic, 0, []),
                     'ERROR: broker_error reason="empty batch messages"', True),
            BadInput("batch with unknown acks", build_batch(topic, 0, ["x"], acks="2"),
                     "ERROR: invalid_acks value=2", True),
            BadInput("positional CONSUME with a missing argument", envelope(f"CONSUME {topic} 0"),
                     "ERROR: invalid_consume_syntax", True),
            BadInput("negative offset", envelope(f"CONSUME topic={topic} partition=0 offset=-1 member=m"),
                     'ERROR: command_failed reason="invalid offset value: -1"', True),
        ]

    async def send_bad(self, case: BadInput) -> tuple[str, bool]:
        conn = await FrameConn.open(self.broker.cursus_port)
        try:
            await conn.send(case.request)
            try:
                reply = (await conn.recv()).decode(errors="replace")
            except ConnectionError:
                reply = ""
            try:
                alive = (await conn.command("LIST")).startswith("OK")
            except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                alive = False
            return reply, alive
        finally:
            await conn.close()


# -- Apache Iggy, binary transport (iggy.md) ------------------------------------------------------

DEFAULT_STREAM = "default"  # its topics are the bayou topics of the same name (server/iggy/catalog.py)


class IggyAdapter(Adapter):
    """apache-iggy 0.9's framing (iggy.md C), logged in as root. A record key travels as the
    ``bayou.key`` user header, bayou's documented extension (server/iggy/); the topics of the
    ``default`` stream are bayou's topics. An Iggy consumer group ``g`` of topic ``t`` is the
    broker group ``iggy.t.g``; its stored offset is the last consumed one (next - 1)."""

    name = "iggy"
    features = frozenset({Feature.CREATE_TOPIC, Feature.DELETE_TOPIC, Feature.RETENTION,
                          Feature.CHOOSE_PARTITION, Feature.PRODUCE_KEYS, Feature.READ_KEYS,
                          Feature.HEADERS, Feature.TIMESTAMPS, Feature.FETCH_BY_TIME,
                          Feature.GROUP_OFFSETS})
    below_start = "clamp"  # iggy.md E.3/E.6: after deletion, polling starts at the first remaining
    past_end = "empty"  # E.3: beyond the current offset the reply is empty
    unknown_topic_read = "error"  # TOPIC_NAME_NOT_FOUND

    conn: VsrConn
    # One personal access token per broker: the first connection logs in with root's password
    # and makes it, the others log in with it (iggy.md C.7), which skips an Argon2 check each.
    _tokens: ClassVar[dict[int, str]] = {}

    async def open(self) -> None:
        self.conn = await self.login(self.broker.iggy_port)

    @classmethod
    async def login(cls, port: int) -> VsrConn:
        token = cls._tokens.get(port)
        if token is None:
            conn = await vsr_login(port)
            try:
                raw = await conn.call(im.CreatePersonalAccessToken(f"behaviour-{port}", 0))
            except IggyStatusError as exc:  # another connection logging in at once made it first
                if exc.status != 51:  # PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS
                    raise
                # a failed request leaves this connection's VSR request numbering behind the
                # server's: log in afresh on a new one
                await conn.close()
                return await vsr_login(port)
            cls._tokens[port] = raw.token
            return conn
        conn = await VsrConn.open(port)
        reply = await conn.call(im.LoginRegisterWithToken(PROTOCOL, "rust-sdk", "0.11.0", token))
        assert isinstance(reply, im.LoginRegisterReply), reply
        conn.session = reply.session
        return conn

    async def close(self) -> None:
        await self.conn.close()

    @staticmethod
    def _kind(status: int) -> str:
        if status in (Status.TOPIC_ID_NOT_FOUND, Status.TOPIC_NAME_NOT_FOUND):
            return "unknown_topic"
        if status == Status.PARTITION_NOT_FOUND:
            return "unknown_partition"
        return Status(status).name if status in Status._value2member_map_ else str(status)

    async def call(self, req: im.Request) -> Any:
        try:
            return await self.conn.call(req)
        except IggyStatusError as exc:
            raise Rejected(self._kind(exc.status), str(exc)) from None

    async def create_topic(self, topic: str, partitions: int = 1, *, retention_bytes: int | None = None
                           ) -> None:
        options = () if retention_bytes is None else (
            im.UserHeader.of("max_topic_size", im.HeaderKind.UINT64, retention_bytes * partitions),)
        await self.call(im.CreateTopic(im.Identifier(DEFAULT_STREAM), topic, partitions, options=options))

    async def delete_topic(self, topic: str) -> None:
        await self.call(im.DeleteTopic(im.Identifier(DEFAULT_STREAM), im.Identifier(topic)))

    async def produce(self, topic: str, partition: int, records: Sequence[Out]) -> None:
        msgs = [im.Message(r.value, headers=(
            *((im.UserHeader(KEY_HEADER, r.key),) if r.key is not None else ()),
            *(im.UserHeader(k, v) for k, v in r.headers))) for r in records]
        await self.call(send(DEFAULT_STREAM, topic, partition, msgs))

    @staticmethod
    def _rec(m: im.PolledMessage) -> Rec:
        key = next((h.value for h in m.headers if h.key == KEY_HEADER), None)
        headers = tuple((h.key, h.value) for h in m.headers if h.key != KEY_HEADER)
        return Rec(m.offset, m.payload, key, headers, m.timestamp // 1000)

    async def _poll(self, topic: str, partition: int, kind: im.PollingKind, value: int) -> Fetched:
        try:
            polled = await self.call(poll(DEFAULT_STREAM, topic, partition, kind=kind, value=value,
                                          count=1000))
        except Rejected as exc:
            if exc.kind in ("unknown_topic", "unknown_partition"):
                return Fetched(error=exc.kind, raw=exc.raw)  # type: ignore[arg-type]
            raise
        assert polled.partition_id == partition, polled
        return Fetched([self._rec(m) for m in polled.messages])

    async def fetch(self, topic: str, partition: int, offset: int) -> Fetched:
        return await self._poll(topic, partition, im.PollingKind.OFFSET, offset)

    async def fetch_by_time(self, topic: str, partition: int, timestamp_ms: int) -> Fetched:
        return await self._poll(topic, partition, im.PollingKind.TIMESTAMP, timestamp_ms * 1000)

    def local_group(self, group: str, topic: str) -> str:
        prefix = f"iggy.{topic}."
        assert group.startswith(prefix), f"an Iggy group of {topic} is a broker group {prefix}<name>"
        return group.removeprefix(prefix)

    async def _group(self, group: str, topic: str) -> im.Consumer:
        name = self.local_group(group, topic)
        with contextlib.suppress(Rejected):  # CONSUMER_GROUP_NAME_ALREADY_EXISTS: the same group
            await self.call(im.CreateConsumerGroup(im.Identifier(DEFAULT_STREAM), im.Identifier(topic), name))
        return im.Consumer(im.ConsumerKind.GROUP, im.Identifier(name))

    async def commit(self, group: str, topic: str, partition: int, next_offset: int) -> None:
        consumer = await self._group(group, topic)
        s, t = im.Identifier(DEFAULT_STREAM), im.Identifier(topic)
        await self.call(im.JoinConsumerGroup(s, t, consumer.id))
        await self.call(im.StoreConsumerOffset(consumer, s, t, partition, next_offset - 1))
        await self.call(im.LeaveConsumerGroup(s, t, consumer.id))

    async def committed(self, group: str, topic: str, partition: int) -> int:
        consumer = await self._group(group, topic)
        info = await self.call(im.GetConsumerOffset(consumer, im.Identifier(DEFAULT_STREAM),
                                                    im.Identifier(topic), partition))
        return 0 if info is None else int(info.stored_offset) + 1

    async def log_start(self, topic: str, partition: int) -> int:
        polled = await self.call(poll(DEFAULT_STREAM, topic, partition, kind=im.PollingKind.FIRST, count=1))
        assert polled.messages, "an empty partition has no first message"
        return int(polled.messages[0].offset)

    @classmethod
    def bad_inputs(cls, topic: str) -> list[BadInput]:
        t = im.Identifier(topic)
        whole_poll = iggy_codec.encode_request(
            poll(DEFAULT_STREAM, topic, 0, kind=im.PollingKind.FIRST), iggy_codec.Dialect.VSR)
        whole_send = iggy_codec.encode_request(send(DEFAULT_STREAM, topic, 0, [b"never stored"]),
                                               iggy_codec.Dialect.VSR)
        return [  # iggy.md B.6 / C.6: a request the server cannot decode is 3 InvalidCommand; B.5, E.4
            BadInput("unknown command code", (999, b""), f"status {Status.INVALID_COMMAND}", True),
            BadInput("truncated poll", (Command.POLL_MESSAGES, whole_poll[:-3]),
                     f"status {Status.INVALID_COMMAND}", True),
            BadInput("poll with trailing bytes", (Command.POLL_MESSAGES, whole_poll + b"\x00"),
                     f"status {Status.INVALID_COMMAND}", True),
            BadInput("send whose message area is cut short", (Command.SEND_MESSAGES, whole_send[:-5]),
                     f"status {Status.INVALID_MESSAGES_SIZE}", True),  # B.5: 4036, not tiled
            BadInput("store an offset past the end",
                     (Command.STORE_CONSUMER_OFFSET, iggy_codec.encode_request(im.StoreConsumerOffset(
                         im.Consumer(im.ConsumerKind.CONSUMER, im.Identifier(1)),
                         im.Identifier(DEFAULT_STREAM), t, 0, 1 << 40), iggy_codec.Dialect.VSR)),
                     f"status {Status.INVALID_OFFSET}", True),
        ]

    async def send_bad(self, case: BadInput) -> tuple[str, bool]:
        code, body = case.request
        conn = await self.login(self.broker.iggy_port)
        try:
            try:
                operation = OPERATION_OF.get(Command(code), Operation.NON_REPLICATED)
            except ValueError:
                operation = Operation.NON_REPLICATED
            frame = conn.raw_frame(operation, body, code=code if operation == Operation.NON_REPLICATED else 0)
            try:
                reply = await conn.ask_raw(frame)
                rendered = f"eviction {reply.eviction}" if reply.eviction is not None \
                    else f"status {reply.result()[0]}"
            except Closed:
                rendered = ""
            try:
                await conn.ping()
                alive = True
            except (Closed, AssertionError, ConnectionError):
                alive = False
            return rendered, alive
        finally:
            await conn.close()


# -- TANK (tank.md) -------------------------------------------------------------------------------

FETCH_SIZE = 1 << 20


def _frame(msg_id: int, payload: bytes) -> bytes:
    return bytes([msg_id]) + len(payload).to_bytes(4, "little") + payload


class TankAdapter(Adapter):
    """TANK 4.0 frames built by bayou's codec. TANK numbers messages from seq 1: offset = seq - 1.
    A chunk never spans two segments (tank.md 5.5), so reading a partition takes a fetch per
    segment. TANK has no delete, no groups and no headers; messages carry a client timestamp."""

    name = "tank"
    features = frozenset({Feature.CREATE_TOPIC, Feature.RETENTION, Feature.CHOOSE_PARTITION,
                          Feature.PRODUCE_KEYS, Feature.READ_KEYS, Feature.TIMESTAMPS, Feature.LONG_POLL})
    below_start = "error"  # tank.md 5.4 rule 5: boundary fault 0x01 with the first available seq
    past_end = "error"  # 5.4 rule 4: seq > last + 1 is a boundary fault too
    unknown_topic_read = "error"  # 5.2: u16 0xffff for an unknown topic

    conn: TankConn

    async def open(self) -> None:
        self.conn = await TankConn.open(self.broker.tank_port)

    async def close(self) -> None:
        await self.conn.close()

    async def call(self, req: Any, timeout: float = 10.0) -> Any:
        await self.conn.send(_frame(*tank_codec.encode_request(req)))
        rid, body = await self.conn.frame(timeout)
        return tank_codec.decode_response(rid, body, request=req)

    async def create_topic(self, topic: str, partitions: int = 1, *, retention_bytes: int | None = None
                           ) -> None:
        config = f"log.retention.bytes={retention_bytes}\n" if retention_bytes is not None else ""
        resp = await self.call(tm.CreateTopic(next(_ids), topic, partitions, config))
        if resp.error:
            raise Rejected(str(resp.error), repr(resp))

    async def produce(self, topic: str, partition: int, records: Sequence[Out]) -> None:
        assert all(not r.headers for r in records), "TANK messages have no headers"
        now = int(time.time() * 1000)
        bundle = encode_bundle([TankMessage(0, now, r.key, r.value) for r in records])
        entry = tm.ProduceEntry(partition, bundle)
        resp = await self.call(tm.Produce(next(_ids), (tm.ProduceTopic(topic, (entry,)),)))
        result = resp.topics[0]
        if result.topic_error == ProduceError.UNKNOWN_TOPIC:
            raise Rejected("unknown_topic", repr(resp))
        if result.errors != (0,):
            raise Rejected("unknown_partition" if result.errors == (ProduceError.UNKNOWN_PARTITION,)
                           else str(result.errors), repr(resp))

    async def _consume(self, topic: str, partition: int, offset: int, wait_ms: int) -> Fetched:
        req = tm.Consume(next(_ids), (tm.ConsumeTopic(topic, (tm.ConsumePartition(partition, offset + 1,
                                                                                  FETCH_SIZE),)),),
                         max_wait=wait_ms)
        resp = await self.call(req, timeout=30 + wait_ms / 1000)
        answer = resp.topics[0]
        if isinstance(answer, tm.ConsumeUnknownTopic):
            return Fetched(error="unknown_topic", raw=repr(answer))
        part = answer.partitions[0]
        if part.flags == ConsumeFlag.UNKNOWN_PARTITION:
            return Fetched(error="unknown_partition", raw=repr(part))
        if part.flags == ConsumeFlag.BOUNDARY_FAULT:
            return Fetched(error="offset_out_of_range", earliest=max(part.first_available - 1, 0),
                           raw=repr(part))
        assert part.flags in (ConsumeFlag.OK, ConsumeFlag.SPARSE), part
        msgs = decode_chunk(part.chunk, part.base_seq, sparse_first=part.flags == ConsumeFlag.SPARSE)
        return Fetched([Rec(m.seq - 1, m.value, m.key, (), m.timestamp) for m in msgs
                        if offset + 1 <= m.seq <= part.hwmark])

    async def fetch(self, topic: str, partition: int, offset: int) -> Fetched:
        return await self._consume(topic, partition, offset, 0)

    async def fetch_all(self, topic: str, partition: int, offset: int = 0) -> list[Rec]:
        end = await self._log_end(topic, partition)
        out: list[Rec] = []
        while offset < end:  # asking at the end would be answered at once, but asking past it is a fault
            got = await self.fetch(topic, partition, offset)
            assert got.error is None and got.records, got
            out += got.records
            offset = got.records[-1].offset + 1
        return out

    async def long_poll(self, topic: str, partition: int, offset: int, wait_ms: int) -> Fetched:
        return await self._consume(topic, partition, offset, wait_ms)

    async def _discover(self, topic: str, partition: int) -> tm.DiscoveredPartition:
        resp = await self.call(tm.DiscoverPartitions(next(_ids), topic))
        return resp.partitions[partition]  # type: ignore[no-any-return]

    async def _log_end(self, topic: str, partition: int) -> int:
        return int((await self._discover(topic, partition)).hwmark)  # last seq = log end offset

    async def log_start(self, topic: str, partition: int) -> int:
        first = (await self._discover(topic, partition)).first_available
        return max(int(first) - 1, 0)

    @classmethod
    def bad_inputs(cls, topic: str) -> list[BadInput]:
        name = topic.encode()
        return [  # tank.md 1 and the server's docstring: malformed frames close without a reply
            BadInput("unknown message id", b"\x42\x00\x00\x00\x00", "", False),
            BadInput("obsolete RegReplica", b"\x04\x02\x00\x00\x00\x01\x00", "", False),
            BadInput("truncated produce", b"\x01\x03\x00\x00\x00\x02\x00\x01", "", False),
            BadInput("consume whose topic name runs past the payload", _frame(2, (
                (2).to_bytes(2, "little") + (1).to_bytes(4, "little") + b"\x00" + bytes(8) + bytes(4)
                + b"\x01" + bytes([len(name) + 40]) + name)), "", False),
        ]

    async def send_bad(self, case: BadInput) -> tuple[str, bool]:
        conn = await TankConn.open(self.broker.tank_port)
        try:
            await conn.send(case.request)
            closed = await conn.is_closed(timeout=5.0)
            return "", not closed
        finally:
            await conn.close()


# -- Kafka (issue 17; the V1 port serves it by the first byte) -------------------------------------


class KafkaAdapter(Adapter):
    """Kafka requests at their newest served versions (flexible, tagged fields) built by bayou's
    codec, on the V1 port (told apart by the first byte). Kafka reports an unknown topic and an
    unknown partition with one code (UNKNOWN_TOPIC_OR_PARTITION); as a client does, the adapter
    asks Metadata which it was. A fetch by time is ListOffsets by timestamp, then a fetch."""

    name = "kafka"
    features = frozenset({Feature.CREATE_TOPIC, Feature.DELETE_TOPIC, Feature.RETENTION,
                          Feature.CHOOSE_PARTITION, Feature.PRODUCE_KEYS, Feature.READ_KEYS,
                          Feature.HEADERS, Feature.TIMESTAMPS, Feature.FETCH_BY_TIME,
                          Feature.LONG_POLL, Feature.GROUP_OFFSETS})
    below_start = "error"  # OFFSET_OUT_OF_RANGE, with the log start offset
    past_end = "error"  # OFFSET_OUT_OF_RANGE (at the end itself: no records)
    unknown_topic_read = "error"  # UNKNOWN_TOPIC_OR_PARTITION

    conn: KafkaConn

    async def open(self) -> None:
        self.conn = await KafkaConn.open(self.broker.port)

    async def close(self) -> None:
        await self.conn.close()

    async def _missing(self, topic: str) -> ErrorKind:
        meta = await self.conn.call(ApiKey.METADATA, topics=[{"name": topic}],
                                    allow_auto_topic_creation=False)
        return "unknown_topic" if meta.topics[0].error_code != KafkaCode.none else "unknown_partition"

    async def create_topic(self, topic: str, partitions: int = 1, *, retention_bytes: int | None = None
                           ) -> None:
        configs = ([] if retention_bytes is None
                   else [{"name": "retention.bytes", "value": str(retention_bytes)}])
        resp = await self.conn.call(ApiKey.CREATE_TOPICS, topics=[
            {"name": topic, "num_partitions": partitions, "replication_factor": 1, "configs": configs}],
            timeout=30_000)
        if resp.topics[0].error_code != KafkaCode.none:
            raise Rejected(resp.topics[0].error_code.name, repr(resp))

    async def delete_topic(self, topic: str) -> None:
        resp = await self.conn.call(ApiKey.DELETE_TOPICS, topic_names=[topic], timeout=30_000)
        assert resp.responses[0].error_code == KafkaCode.none, resp

    async def produce(self, topic: str, partition: int, records: Sequence[Out]) -> None:
        now = int(time.time() * 1000)
        batch = encode_batch([Record(value=r.value, key=r.key, timestamp=now,
                                     headers=tuple((k.decode(), v) for k, v in r.headers))
                              for r in records])
        resp = await self.conn.call(ApiKey.PRODUCE, acks=-1, timeout=30_000, topic_data=[
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}])
        code = resp.responses[0].partition_responses[0].error_code
        if code == KafkaCode.unknown_topic_or_partition:
            raise Rejected(await self._missing(topic), repr(resp))
        if code != KafkaCode.none:
            raise Rejected(code.name, repr(resp))

    async def _fetch(self, topic: str, partition: int, offset: int, wait_ms: int) -> Fetched:
        resp = await self.conn.call(
            ApiKey.FETCH, replica_id=-1, max_wait=wait_ms, min_bytes=1, max_bytes=FETCH_SIZE,
            isolation_level=0, session_epoch=-1, wait_s=30 + wait_ms / 1000,
            topics=[{"topic": topic, "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": FETCH_SIZE}]}])
        part = resp.responses[0].partitions[0]
        if part.error_code == KafkaCode.unknown_topic_or_partition:
            return Fetched(error=await self._missing(topic), raw=repr(part))
        if part.error_code == KafkaCode.offset_out_of_range:
            return Fetched(error="offset_out_of_range", earliest=part.log_start_offset, raw=repr(part))
        assert part.error_code == KafkaCode.none, part
        data = part.records or b""
        recs = [Rec(r.offset, r.value, r.key, tuple((k.encode(), v) for k, v in r.headers), r.timestamp)
                for pos, _h in iter_batches(data) for r in decode_records(data, pos) if r.offset >= offset]
        return Fetched(recs)

    async def fetch(self, topic: str, partition: int, offset: int) -> Fetched:
        return await self._fetch(topic, partition, offset, 0)

    async def long_poll(self, topic: str, partition: int, offset: int, wait_ms: int) -> Fetched:
        return await self._fetch(topic, partition, offset, wait_ms)

    async def _list_offset(self, topic: str, partition: int, timestamp: int) -> int:
        resp = await self.conn.call(ApiKey.LIST_OFFSETS, replica_id=-1, topics=[
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": timestamp}]}])
        part = resp.topics[0].partitions[0]
        assert part.error_code == KafkaCode.none, part
        return int(part.offset)

    async def fetch_by_time(self, topic: str, partition: int, timestamp_ms: int) -> Fetched:
        offset = await self._list_offset(topic, partition, timestamp_ms)
        if offset < 0:  # no record at or after the time
            return Fetched()
        return await self.fetch(topic, partition, offset)

    async def commit(self, group: str, topic: str, partition: int, next_offset: int) -> None:
        # a commit without a generation: a consumer that assigns itself partitions (the group has
        # no Kafka member)
        resp = await self.conn.call(ApiKey.OFFSET_COMMIT, group_id=group, generation_id_or_member_epoch=-1,
                                    member_id="", topics=[{"name": topic, "partitions": [
                                        {"partition_index": partition, "committed_offset": next_offset,
                                         "committed_leader_epoch": -1}]}])
        assert resp.topics[0].partitions[0].error_code == KafkaCode.none, resp

    async def committed(self, group: str, topic: str, partition: int) -> int:
        resp = await self.conn.call(ApiKey.OFFSET_FETCH, groups=[
            {"group_id": group, "member_id": None, "member_epoch": -1,
             "topics": [{"name": topic, "partition_indexes": [partition]}]}])
        offset = int(resp.groups[0].topics[0].partitions[0].committed_offset)
        return max(offset, 0)

    async def log_start(self, topic: str, partition: int) -> int:
        return await self._list_offset(topic, partition, -2)

    @classmethod
    def bad_inputs(cls, topic: str) -> list[BadInput]:
        produce = max(SUPPORTED[ApiKey.PRODUCE].min, 3)
        batch = bytearray(encode_batch([Record(value=b"x", timestamp=1)]))
        batch[-1] ^= 0xFF  # the CRC no longer matches
        bad_crc = build(kafka_codec.request_schema(ApiKey.PRODUCE, produce), acks=1, timeout=5000,
                        topic_data=[{"name": topic, "partition_data": [
                            {"index": 0, "records": bytes(batch)}]}])
        not_two = build(kafka_codec.request_schema(ApiKey.PRODUCE, produce), acks=1, timeout=5000,
                        topic_data=[{"name": topic, "partition_data": [
                            {"index": 0, "records": encode_batch([Record(value=b"a", timestamp=1)]) * 2}]}])
        bad_name = build(kafka_codec.request_schema(ApiKey.CREATE_TOPICS, 7), timeout=5000, topics=[
            {"name": "no spaces allowed", "num_partitions": 1, "replication_factor": 1}])
        versions = kafka_frame(18, 0, 7, build(kafka_codec.request_schema(18, 0)))

        def patched(data: bytes, at: int, value: int) -> bytes:  # the i16 at ``at`` of the frame
            return data[:at] + value.to_bytes(2, "big") + data[at + 2:]

        return [  # Kafka closes the connection on a frame it cannot read, and answers the rest
            BadInput("size below the smallest header", (b"\x00\x00\x00\x02\x00\x00", 0, 0), "", False),
            BadInput("unknown api key", (patched(versions, 4, 999), 0, 0), "", False),
            BadInput("Produce v2 (Kafka 4 removed it)", (patched(kafka_frame(0, 3, 1, bad_crc), 6, 2), 0, 0),
                     "", False),
            BadInput("array count past the body",
                     (b"\x00\x00\x00\x0e\x00\x03\x00\x01\x00\x00\x00\x05\xff\xff\x7f\xff\xff\xff", 0, 0),
                     "", False),
            BadInput("ApiVersions newer than served", (patched(versions, 6, 99), 18, 0),
                     "API_VERSIONS unsupported_version", True),
            BadInput("record batch with a bad CRC", (kafka_frame(0, produce, 3, bad_crc), 0, produce),
                     "PRODUCE corrupt_message", True),
            BadInput("two record batches in one partition", (kafka_frame(0, produce, 4, not_two), 0, produce),
                     "PRODUCE invalid_record", True),
            BadInput("topic name with spaces", (kafka_frame(19, 7, 5, bad_name), 19, 7),
                     "CREATE_TOPICS invalid_topic_exception", True),
        ]

    async def send_bad(self, case: BadInput) -> tuple[str, bool]:
        data, api_key, version = case.request
        conn = await KafkaConn.open(self.broker.port)
        try:
            await conn.send(data)
            reply = ""
            if case.reply:
                _cid, body = kafka_codec.decode_response(await conn.recv(), api_key, version)
                reply = f"{ApiKey(api_key).name} {_first_error(body).name}"
            try:
                versions = await conn.call(ApiKey.API_VERSIONS, 0, wait_s=5)
                alive = versions.error_code == KafkaCode.none
            except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                alive = False
            return reply, alive
        finally:
            await conn.close()


def _first_error(body: Any) -> KafkaCode:
    """The first error code of a response body, however deep (top level, topic, partition)."""
    code = getattr(body, "error_code", None)
    if isinstance(code, KafkaCode) and code != KafkaCode.none:
        return code
    for f in dataclasses.fields(body):
        value = getattr(body, f.name)
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                found = _first_error(item)
                if found != KafkaCode.none:
                    return found
    return KafkaCode.none


ADAPTERS: list[type[Adapter]] = [V1Adapter, CursusAdapter, IggyAdapter, TankAdapter, KafkaAdapter]
