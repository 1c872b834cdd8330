"""One connection to bayou's Iggy listener, legacy (apache-iggy 0.8) framing: sync and asyncio.

Why the legacy framing: it is what apache-iggy 0.8 speaks, every bayou broker serves it, and its
fixed 8-byte request/reply heads cost less per request than 0.9's 256-byte VSR headers with their
checksums. Requests are answered in order, so a caller may pipeline several frames and then read
the replies (``send_frames`` + ``read_reply``), which the producer does.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Sequence
from typing import Any

from bayou.client.errors import AuthenticationError, BrokerConnectionError, error_for
from bayou.client.tls import TlsConfig
from bayou.client.wire import FrameBuffer, UniformSend
from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command
from bayou.protocols.iggy.framing import Dialect

_HEAD = struct.Struct("<II")  # status, payload length
SDK_VERSION = "bayou-sdk-0.1.0"
DEFAULT_PORT = 8090


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (a bare host means port 8090) as a list of addresses."""
    out: list[tuple[str, int]] = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, str(DEFAULT_PORT)
        try:
            out.append((host.strip("[]") or "127.0.0.1", int(port)))
        except ValueError:
            raise ValueError(f"bad bootstrap address {item!r} (want host:port)") from None
    if not out:
        raise ValueError("no bootstrap address given")
    return out


def encode(req: m.Request) -> bytes:
    return codec.encode_request_frame(req, Dialect.LEGACY)


def decode(req_command: Command, status: int, payload: bytes, what: str) -> Any:
    if status:
        raise error_for(status, what)
    return codec.decode_reply(req_command, payload, Dialect.LEGACY)


class Connection:
    """A blocking connection, safe to share between threads (one request at a time)."""

    def __init__(self, bootstrap: str, *, username: str = "iggy", password: str = "iggy",
                 timeout: float = 30.0, tls: TlsConfig | None = None) -> None:
        self.addresses = parse_bootstrap(bootstrap)
        self.username = username
        self.password = password
        self.timeout = timeout
        self.tls = tls
        self.lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._rfile: Any = None
        self._out = FrameBuffer()  # the frames being sent (used under the lock)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self.lock:
            if self._sock is not None:
                try:
                    self._sock.close()
                finally:
                    self._sock = None
                    self._rfile = None

    def _connect(self) -> socket.socket:
        last: Exception | None = None
        for host, port in self.addresses:
            try:
                sock = socket.create_connection((host, port), timeout=self.timeout)
            except OSError as exc:
                last = exc
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                try:
                    sock = self.tls.wrap(sock, host)
                except OSError as exc:  # ssl.SSLError: the broker's certificate, or not TLS
                    sock.close()
                    last = exc
                    continue
            self._sock = sock
            self._rfile = sock.makefile("rb", buffering=1 << 20)
            try:
                self._login()
            except BaseException:
                self.close()
                raise
            return sock
        raise BrokerConnectionError(f"cannot connect to {self.addresses}: {last}")

    def _login(self) -> None:
        req = m.LoginUser(self.username, self.password, SDK_VERSION)
        self.send_frames([encode(req)])
        status, payload = self.read_reply()
        if status:
            err = error_for(status, "login")
            raise AuthenticationError(str(err), status)
        decode(req.command, status, payload, "login")

    def sock(self) -> socket.socket:
        return self._sock if self._sock is not None else self._connect()

    def send_frames(self, frames: Sequence[bytes | UniformSend]) -> None:
        try:
            self.sock().sendall(self._out.frames(frames))
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(f"send failed: {exc}") from None

    def read_reply(self) -> tuple[int, bytes]:
        try:
            head = self._rfile.read(8)
            if len(head) < 8:
                raise ConnectionError("broker closed the connection")
            status, length = _HEAD.unpack(head)
            payload = self._rfile.read(length) if length else b""
            if len(payload) < length:
                raise ConnectionError("broker closed the connection mid-reply")
        except (OSError, ValueError, AttributeError) as exc:
            self.close()
            raise BrokerConnectionError(f"receive failed: {exc}") from None
        return status, payload

    def raw(self, frame: bytes | UniformSend) -> tuple[int, bytes]:
        """Send one encoded request frame and return (status, payload)."""
        [reply] = self.raw_many([frame])
        return reply

    def raw_many(self, frames: Sequence[bytes | UniformSend]) -> list[tuple[int, bytes]]:
        """Send ``frames`` together and return each one's (status, payload), in order. Anything
        that interrupts the reading (a signal handler's exception, KeyboardInterrupt) closes the
        connection: the replies left unread would be read as the next requests' replies."""
        with self.lock:
            self.send_frames(frames)
            try:
                return [self.read_reply() for _ in frames]
            except BaseException:
                self.close()
                raise

    def call(self, req: m.Request) -> Any:
        """Send ``req`` and return its decoded reply; a non-zero status raises."""
        status, payload = self.raw(encode(req))
        return decode(req.command, status, payload, type(req).__name__)


class AsyncConnection:
    """The asyncio twin of ``Connection``; requests on one connection are serialised by a lock."""

    def __init__(self, bootstrap: str, *, username: str = "iggy", password: str = "iggy",
                 timeout: float = 30.0, tls: TlsConfig | None = None) -> None:
        self.addresses = parse_bootstrap(bootstrap)
        self.username = username
        self.password = password
        self.timeout = timeout
        self.tls = tls
        self.lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> AsyncConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _connect(self) -> None:
        last: Exception | None = None
        for host, port in self.addresses:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(
                    host, port, limit=1 << 24, ssl=self.tls.context() if self.tls else None,
                    server_hostname=host if self.tls else None), self.timeout)
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            self._reader, self._writer = r, w
            req = m.LoginUser(self.username, self.password, SDK_VERSION)
            [(status, _payload)] = await self._exchange([encode(req)])
            if status:
                await self.close()
                raise AuthenticationError(str(error_for(status, "login")), status)
            return
        raise BrokerConnectionError(f"cannot connect to {self.addresses}: {last}")

    async def _exchange(self, frames: Sequence[bytes | UniformSend]) -> list[tuple[int, bytes]]:
        """Send ``frames`` together; each one's (status, payload), in order."""
        assert self._writer is not None and self._reader is not None
        replies = []
        try:
            # bytes, not a reused buffer: the transport may keep what it could not send yet
            self._writer.write(b"".join(f if isinstance(f, bytes) else bytes(f) for f in frames))
            await self._writer.drain()
            for _ in frames:
                head = await asyncio.wait_for(self._reader.readexactly(8), self.timeout)
                status, length = _HEAD.unpack(head)
                payload = await self._reader.readexactly(length) if length else b""
                replies.append((status, payload))
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            await self.close()
            raise BrokerConnectionError(f"request failed: {exc}") from None
        except BaseException:  # cancelled mid-exchange: the replies left unread would be read as the
            # next requests' replies, so the connection goes (without awaiting: we are cancelled)
            writer, self._writer, self._reader = self._writer, None, None
            if writer is not None:
                writer.close()
            raise
        return replies

    async def raw(self, frame: bytes | UniformSend) -> tuple[int, bytes]:
        async with self.lock:
            if self._writer is None:
                await self._connect()
            [reply] = await self._exchange([frame])
            return reply

    async def raw_many(self, frames: Sequence[bytes]) -> list[tuple[int, bytes]]:
        """Send ``frames`` together and return each one's (status, payload), in order."""
        async with self.lock:
            if self._writer is None:
                await self._connect()
            return await self._exchange(frames)

    async def call(self, req: m.Request) -> Any:
        status, payload = await self.raw(encode(req))
        return decode(req.command, status, payload, type(req).__name__)
