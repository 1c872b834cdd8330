"""Test helpers for the Iggy binary protocol (iggy.md): an in-process broker with the Iggy listener
and two small raw clients built on bayou's own sans-IO codec, one per framing.

``LegacyConn`` speaks the u32 length + u32 code framing shared by apache-iggy 0.8 (L) and the
design document (D); ``VsrConn`` speaks apache-iggy 0.9's 256-byte-header framing (V) and keeps the
per-connection client id, session and request counter the way the 0.9 client does (C.2, C.7).
Both can send bytes exactly as given (a vector, a deliberately broken frame) or a request message
encoded by ``bayou.protocols.iggy.codec``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bayou.broker import BrokerConfig
from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, Status
from bayou.protocols.iggy.framing import (
    HEADER_SIZE,
    Dialect,
    ReplyHeader,
    RequestHeader,
    encode_legacy_request,
    encode_vsr_request,
    request_checksum,
    split_result_section,
)
from bayou.server.app import BayouServer, IggyOptions, ServerConfig

ROOT = ("iggy", "iggy")
PROTOCOL = m.pack_version(0, 11, 0)
COMMAND_EVICTION = 13
_LEGACY_HEAD = struct.Struct("<II")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


async def start_iggy(data_dir: Path, *, seed_dialect: bool = False, **broker_overrides: object
                     ) -> BayouServer:
    """A server in the running event loop with only the Iggy listener, on 127.0.0.1:<ephemeral>."""
    cfg = ServerConfig(
        broker=BrokerConfig(data_dir=data_dir, **broker_overrides),  # type: ignore[arg-type]
        listeners={"iggy": ("127.0.0.1", 0)},
        advertised_host="127.0.0.1",
        shutdown_grace_s=2.0,
        iggy=IggyOptions(seed_dialect=seed_dialect),
    )
    server = BayouServer(cfg)
    await server.start()
    return server


def iggy_port(server: BayouServer) -> int:
    return server.listeners["iggy"].port


class Closed(Exception):
    """The server closed the connection instead of answering."""


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def _read(self, n: int, timeout: float) -> bytes:
        try:
            return await asyncio.wait_for(self.reader.readexactly(n), timeout)
        except asyncio.IncompleteReadError as exc:
            raise Closed(f"connection closed (partial {exc.partial!r})") from None
        except ConnectionError as exc:
            raise Closed(str(exc)) from None

    async def is_closed(self, timeout: float = 2.0) -> bool:
        """True when the peer closed the connection within ``timeout`` without sending anything;
        False when it is still open. Data arriving instead is an AssertionError."""
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        assert data == b"", f"expected the connection to close, got {data!r}"
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


# -- legacy framing (L and D) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LegacyReply:
    status: int
    payload: bytes

    @property
    def raw(self) -> bytes:
        return _LEGACY_HEAD.pack(self.status, len(self.payload)) + self.payload


class IggyStatusError(AssertionError):
    def __init__(self, status: int, what: str) -> None:
        name = Status(status).name if status in Status._value2member_map_ else "?"
        super().__init__(f"{what}: status {status} ({name})")
        self.status = status


class LegacyConn(_Conn):
    """A legacy-framed connection; ``dialect`` picks the payload layouts (L or D)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 dialect: Dialect = Dialect.LEGACY) -> None:
        super().__init__(reader, writer)
        self.dialect = dialect

    @classmethod
    async def open(cls, port: int, dialect: Dialect = Dialect.LEGACY) -> LegacyConn:
        r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
        return cls(r, w, dialect)

    async def recv(self, timeout: float = 10.0) -> LegacyReply:
        status, length = _LEGACY_HEAD.unpack(await self._read(8, timeout))
        return LegacyReply(status, await self._read(length, timeout) if length else b"")

    async def ask_raw(self, frame: bytes, timeout: float = 10.0) -> LegacyReply:
        await self.send_raw(frame)
        return await self.recv(timeout)

    async def ask_code(self, code: int, payload: bytes = b"") -> LegacyReply:
        return await self.ask_raw(encode_legacy_request(code, payload))

    def frame(self, req: m.Request) -> bytes:
        return codec.encode_request_frame(req, self.dialect)

    async def ask(self, req: m.Request) -> LegacyReply:
        return await self.ask_raw(self.frame(req))

    async def call(self, req: m.Request) -> Any:
        """Send ``req``; assert status 0 and return the decoded reply (None for an empty one)."""
        reply = await self.ask(req)
        if reply.status:
            raise IggyStatusError(reply.status, type(req).__name__)
        return codec.decode_reply(req.command, reply.payload, self.dialect)

    async def status(self, req: m.Request) -> int:
        return (await self.ask(req)).status

    async def ping(self) -> None:
        reply = await self.ask(m.Ping())
        assert reply == LegacyReply(0, b""), reply

    async def login(self, username: str = ROOT[0], password: str = ROOT[1]) -> int:
        reply = await self.call(m.LoginUser(username, password, "0.10.0"))
        assert isinstance(reply, m.LoginReply)
        return reply.user_id


async def legacy_login(port: int, username: str = ROOT[0], password: str = ROOT[1]) -> LegacyConn:
    conn = await LegacyConn.open(port)
    await conn.login(username, password)
    return conn


# -- VSR framing (V) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VsrReply:
    """One V reply frame, or an eviction (``eviction`` = the reason byte, ``header`` None)."""

    raw: bytes
    header: ReplyHeader | None
    body: bytes
    eviction: int | None = None

    @property
    def status(self) -> int:
        assert self.header is not None, f"evicted, reason {self.eviction}"
        return self.header.status

    def result(self) -> tuple[int, bytes]:
        """(result code, payload): header status first, then the result section (C.6)."""
        assert self.header is not None, f"evicted, reason {self.eviction}"
        if self.header.status:
            return self.header.status, self.body
        return split_result_section(self.header.operation, self.body)


class VsrConn(_Conn):
    """A V connection with a fixed random client id; ``session`` is set by ``login``; every request
    after the first takes the next request number (as apache-iggy 0.9 does)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: int) -> None:
        super().__init__(reader, writer)
        self.client = client
        self.session = 0
        self.request = 0

    @classmethod
    async def open(cls, port: int, client: int | None = None) -> VsrConn:
        r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
        return cls(r, w, client if client is not None else secrets.randbits(127) | 1)

    async def recv(self, timeout: float = 10.0) -> VsrReply:
        head = await self._read(HEADER_SIZE, timeout)
        if head[60] == COMMAND_EVICTION:
            return VsrReply(head, None, b"", head[255])
        assert head[60] == 8, f"reply header command {head[60]}"
        (size,) = _U32.unpack_from(head, 48)
        body = await self._read(size - HEADER_SIZE, timeout) if size > HEADER_SIZE else b""
        return VsrReply(head + body, ReplyHeader.decode(head), body)

    async def ask_raw(self, frame: bytes, timeout: float = 10.0) -> VsrReply:
        await self.send_raw(frame)
        return await self.recv(timeout)

    def frame(self, req: m.Request) -> bytes:
        """``req`` as the 0.9 client frames it on this connection (uses up a request number)."""
        if req.command in (Command.LOGIN_REGISTER, Command.LOGIN_REGISTER_WITH_PAT):
            return codec.encode_request_frame(req, Dialect.VSR, client=self.client)
        self.request += 1
        return codec.encode_request_frame(req, Dialect.VSR, client=self.client, request=self.request,
                                          session=self.session)

    def raw_frame(self, operation: int, body: bytes = b"", *, code: int = 0) -> bytes:
        """A request with any operation byte, code and body (for malformed input)."""
        self.request += 1
        header = RequestHeader(client=self.client, operation=operation, request=self.request,
                               session=self.session, code=code,
                               request_checksum=request_checksum(operation, body))
        return encode_vsr_request(header, body)

    async def ask(self, req: m.Request) -> VsrReply:
        return await self.ask_raw(self.frame(req))

    async def call(self, req: m.Request) -> Any:
        """Send ``req``; assert success (header status and result section) and decode the reply."""
        reply = await self.ask(req)
        code, payload = reply.result()
        if code:
            raise IggyStatusError(code, type(req).__name__)
        return codec.decode_reply(req.command, payload, Dialect.VSR)

    async def status(self, req: m.Request) -> int:
        return (await self.ask(req)).result()[0]

    async def ping(self) -> None:
        reply = await self.ask(m.Ping())
        assert reply.eviction is None and reply.status == 0 and reply.body == b"", reply

    async def login(self, username: str = ROOT[0], password: str = ROOT[1]) -> m.LoginRegisterReply:
        reply = await self.call(m.LoginRegister(PROTOCOL, "rust-sdk", "0.11.0", username, password))
        assert isinstance(reply, m.LoginRegisterReply)
        self.session = reply.session
        return reply


async def vsr_login(port: int, username: str = ROOT[0], password: str = ROOT[1]) -> VsrConn:
    conn = await VsrConn.open(port)
    await conn.login(username, password)
    return conn


# -- request builders ---------------------------------------------------------------------------


def ident(value: int | str) -> m.Identifier:
    return m.Identifier(value)


def send(stream: int | str, topic: int | str, partition: int | None, payloads: Sequence[bytes | m.Message],
         ) -> m.SendMessages:
    """SEND_MESSAGES of ``payloads`` to one partition (None = balanced)."""
    msgs = tuple(p if isinstance(p, m.Message) else m.Message(p) for p in payloads)
    partitioning = m.Partitioning.balanced() if partition is None else m.Partitioning.partition(partition)
    return m.SendMessages(ident(stream), ident(topic), partitioning, msgs)


def poll(stream: int | str, topic: int | str, partition: int | None, *,
         kind: m.PollingKind = m.PollingKind.OFFSET, value: int = 0, count: int = 100,
         auto_commit: bool = False, consumer: m.Consumer | None = None) -> m.PollMessages:
    c = consumer or m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(0))
    return m.PollMessages(c, ident(stream), ident(topic), partition, m.PollingStrategy(kind, value), count,
                          auto_commit)


def create_topic(stream: int | str, name: str, partitions: int = 1) -> m.CreateTopic:
    return m.CreateTopic(ident(stream), name, partitions)


__all__ = [
    "PROTOCOL",
    "ROOT",
    "Closed",
    "IggyStatusError",
    "LegacyConn",
    "LegacyReply",
    "VsrConn",
    "VsrReply",
    "create_topic",
    "ident",
    "iggy_port",
    "legacy_login",
    "poll",
    "send",
    "start_iggy",
    "vsr_login",
]
