"""aiohttp served through the broker's own connection path (server/base.py).

The HTTP port is a ``Listener`` like every protocol's: the shared admission (connection limits,
per-address limit, the other listeners' reserves), draining at shutdown and, once a ``Listener``
can wrap its sockets in TLS, TLS too, all apply to it unchanged. What is aiohttp's is only the
HTTP: ``serve`` takes the admitted connection's transport away from its stream reader and hands
it to an aiohttp request handler (``transport.set_protocol``, as ``loop.start_tls`` does), so
parsing, keep-alive, routing and responses are aiohttp's own, on the broker's event loop.

Deadlines follow base.py's rules, enforced here since aiohttp does not read through
``Connection.read``: a new connection must complete its first request within ``idle_timeout_s``;
a request whose first bytes arrived must be complete within ``request_timeout_s``; an idle
keep-alive connection is kept (aiohttp closes it after ``KEEPALIVE_S``). Bytes are bounded by
aiohttp's own limits rather than the byte budget: request line and each header at most 8 KiB,
at most 128 headers, a body at most ``client_max_size`` (1 MiB), per admitted connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from bayou.broker.authz import Caller, bind_caller
from bayou.server.base import Connection, Listener
from bayou.server.http.auth import authorize, error_body
from bayou.server.metering import UNKNOWN, RequestMeter

if TYPE_CHECKING:
    from bayou.server.app import BayouServer

KEEPALIVE_S = 75.0  # nginx's default keep-alive: Prometheus scrapes every 15-60 s reuse the connection
CLIENT_MAX_SIZE = 1024 * 1024
TICK_S = 0.5  # how often a connection's deadline is looked at while no request is due

# A module adds its routes with a function of the server: probes, metrics, and later the admin API
# and the console, each in its own module (server/http/*.py).
RouteModule = Callable[["BayouServer"], Iterable[web.RouteDef]]


class _QuietBadRequests(logging.Filter):
    """aiohttp logs a malformed request (a port scan, a client speaking another protocol) at error
    level with its traceback; it is the client's fault and already answered 400: one info line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.exc_info = None
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = "bad HTTP request answered %d: %s"
            record.args = (exc.code, (exc.message.splitlines() or [""])[0])
        return True


log = logging.getLogger("bayou.server.http")
log.addFilter(_QuietBadRequests())


class _Tap(asyncio.Protocol):
    """Sits between the transport and aiohttp's handler: notes when a request begins to arrive
    (for the deadline) and tells the stream protocol it replaced that the connection is gone, so
    the listener's ``wait_closed`` returns."""

    def __init__(self, inner: RequestHandler, replaced: asyncio.BaseProtocol, conn: Connection) -> None:
        self.inner = inner
        self.replaced = replaced
        self.conn = conn
        self.partial_since: float | None = None  # first bytes of a request not yet being served
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.partial_since is None and not self.conn.busy and data:
            self.partial_since = time.monotonic()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()  # type: ignore[func-returns-value]

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.inner.connection_lost(exc)
        finally:
            self.replaced.connection_lost(exc)
            if not self.lost.done():
                self.lost.set_result(None)


class HttpFrontEnd:
    """The HTTP listener's handler: one aiohttp application for the server, its routes from
    ``modules``. ``meter`` counts requests per route (the ``http`` protocol in /metrics)."""

    def __init__(self, server: BayouServer, modules: Iterable[RouteModule]) -> None:
        self.server = server
        self.meter = RequestMeter("http")
        self.app = web.Application(middlewares=[self._middleware], client_max_size=CLIENT_MAX_SIZE,
                                   handler_args={"keepalive_timeout": KEEPALIVE_S, "logger": log})
        for module in modules:
            self.app.add_routes(list(module(server)))
        self._taps: dict[Any, _Tap] = {}  # aiohttp's handler -> its tap
        self._runner: web.AppRunner | None = None
        self._setup: asyncio.Task[web.AppRunner] | None = None

    async def _runner_ready(self) -> web.AppRunner:
        if self._setup is None:
            self._setup = asyncio.get_running_loop().create_task(self._make_runner())
        return await asyncio.shield(self._setup)

    async def _make_runner(self) -> web.AppRunner:
        runner = web.AppRunner(self.app, handle_signals=False, access_log=None)
        await runner.setup()
        self._runner = runner
        return runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def serve(self, conn: Connection, listener: Listener) -> None:
        runner = await self._runner_ready()
        factory = runner.server
        assert factory is not None
        transport = conn.writer.transport
        inner = factory()
        tap = _Tap(inner, transport.get_protocol(), conn)
        self._taps[inner] = tap
        try:
            transport.set_protocol(tap)
            tap.connection_made(transport)
            buffered = bytes(getattr(conn.reader, "_buffer", b""))  # arrived before the switch
            if buffered:
                tap.data_received(buffered)
            # the client closed before the switch (a TCP probe, a port check): the stream
            # protocol kept the half-closed transport open for its reader, which is gone now;
            # do what the transport does on an EOF its protocol does not keep open, so the
            # connection and its admission slot end now rather than at the idle deadline
            if getattr(conn.reader, "_eof", False) and not tap.eof_received():
                transport.close()
            await self._watch(conn, tap, transport, listener)
        finally:
            self._taps.pop(inner, None)

    async def _watch(self, conn: Connection, tap: _Tap, transport: asyncio.BaseTransport,
                     listener: Listener) -> None:
        """Wait for the connection to end; close it when a deadline passes (TimeoutError, which
        the listener logs) or when the listener drains and no request is being served."""
        limits = conn.limits
        accepted = time.monotonic()
        try:
            while not tap.lost.done():
                now = time.monotonic()
                if conn.requests == 0 and not conn.busy:
                    deadline: float | None = accepted + limits.idle_timeout_s
                elif tap.partial_since is not None and not conn.busy:
                    deadline = tap.partial_since + limits.request_timeout_s
                else:
                    deadline = None
                if deadline is not None and now >= deadline:
                    transport.close()
                    raise TimeoutError
                if listener.draining and not conn.busy:
                    transport.close()
                    return
                wait = TICK_S if deadline is None else min(TICK_S, deadline - now)
                await asyncio.wait([tap.lost], timeout=wait)
        except asyncio.CancelledError:
            transport.close()
            raise

    @web.middleware
    async def _middleware(self, request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
        """Each request: the connection is busy (the listener's drain waits for it, the first
        one ends the idle deadline), its principal may reach the route (auth.py), and it is
        counted under its route, never under the path a client made up. The principal is bound
        for the handler (broker calls check it), and an HTTP error aiohttp raises (no such route,
        method not allowed, body too large) gets the port's JSON error shape."""
        tap = self._taps.get(request.protocol)
        conn = tap.conn if tap is not None else None
        if conn is not None:
            conn.busy += 1
        started = time.perf_counter()
        route = request.match_info.route.resource
        name = route.canonical if route is not None else UNKNOWN
        status = 500
        try:
            principal = await authorize(self.server, request, None if route is None else name,
                                        conn.peer if conn is not None else str(request.remote),
                                        conn.peer_cn if conn is not None else None)
            token = None if principal is None else bind_caller(Caller(principal))
            try:
                response = await handler(request)
            finally:
                if token is not None:
                    token.var.reset(token)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            if exc.status < 400 or exc.content_type == "application/json":
                raise
            headers = {k: v for k, v in exc.headers.items()
                       if k.lower() not in ("content-type", "content-length")}
            return web.Response(status=exc.status, headers=headers, content_type="application/json",
                                text=error_body(exc.reason.upper().replace(" ", "_"),
                                                f"{exc.reason}: {request.method} {request.path}"))
        finally:
            self.meter.record(name, started, status >= 400)
            if conn is not None:
                conn.busy -= 1
            if tap is not None:
                tap.partial_since = None


__all__ = ["HttpFrontEnd", "RouteModule"]
