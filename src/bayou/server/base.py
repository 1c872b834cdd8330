"""Listener plumbing shared by every protocol: admission, deadlines, the in-flight byte budget,
in-flight tracking and draining.

Every protocol's connections pass through here, so what protects the broker from its clients is
done once:

* **Admission.** At most ``max_connections`` in all, at most ``max_connections_per_ip`` from one
  client address, and a flood on one listener cannot take the last free slots: each other listener
  keeps ``listener_reserve`` slots for itself until it uses them.
* **Deadlines.** A connection must send a complete request within ``idle_timeout_s`` of being
  accepted (TANK closes after 16 s; so does every protocol here). Once a request has begun to
  arrive, the rest must follow within ``request_timeout_s``, extended by one second per
  ``PROGRESS_BYTES_PER_S`` received (Apache's mod_reqtimeout rule): a slowloris client (a byte now
  and then) is closed, a big frame on a slow but moving link is not. A connection idle between
  requests is kept.
* **Bytes in flight.** A broker-wide budget (``max_inflight_bytes``) of request bytes held by
  connections. A handler passes what its framing reader is assembling (``pending``: the frame size
  its header declared, or what it holds so far) to ``read``; when the budget cannot cover it the
  connection stops reading (the kernel's window pushes back on the client) until others release.
  A connection waits holding nothing, so waits cannot deadlock; a frame larger than the whole
  budget is refused by the framing reader's cap (``frame_cap``) with the protocol's own error.
* **TLS.** A listener with a TLS context accepts sockets itself and runs the handshake after
  admission, within the idle deadline (``_accept_tls``); ``Connection.peer_cn`` is the CN of a
  verified client certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bayou.broker.authz import Caller, bind_caller, connection_principal
from bayou.errors import InvalidConfig
from bayou.server.tls import handshake_failure, peer_cn
from bayou.server.writes import CoalescingWriter, SlowReader

log = logging.getLogger("bayou.server")

PROGRESS_BYTES_PER_S = 500  # Apache mod_reqtimeout's MinRate: a slowloris earns no real time
MIN_INFLIGHT_BYTES = 1024 * 1024  # above any request line, login or header a reader must hold


@dataclass(slots=True)
class ConnectionLimits:
    max_connections: int = 10_000
    read_size: int = 256 * 1024
    idle_timeout_s: float = 16.0
    request_timeout_s: float = 30.0
    max_connections_per_ip: int = 1_000
    listener_reserve: int = 64
    max_inflight_bytes: int = 512 * 1024 * 1024
    max_answer_bytes: int = 512 * 1024 * 1024  # answers held until sent, broker-wide (answers.py)

    def __post_init__(self) -> None:
        for name in ("max_connections", "read_size", "max_connections_per_ip"):
            if getattr(self, name) < 1:
                raise InvalidConfig(f"{name} must be at least 1")
        for name in ("idle_timeout_s", "request_timeout_s"):
            if not getattr(self, name) > 0:
                raise InvalidConfig(f"{name} must be above 0 seconds")
        if self.listener_reserve < 0:
            raise InvalidConfig("listener_reserve must be 0 or more")
        if self.max_inflight_bytes < MIN_INFLIGHT_BYTES:
            raise InvalidConfig(f"max_inflight_bytes must be at least {MIN_INFLIGHT_BYTES} (1 MiB)")
        if self.max_answer_bytes < MIN_INFLIGHT_BYTES:
            raise InvalidConfig(f"max_answer_bytes must be at least {MIN_INFLIGHT_BYTES} (1 MiB)")

    def frame_cap(self, protocol_max: int) -> int:
        """What a framing reader may accept: its protocol's cap, and never more than the budget."""
        return min(protocol_max, self.max_inflight_bytes)


class ByteBudget:
    """Bytes of requests held by connections, broker-wide; granted whole, first come first served."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def try_acquire(self, n: int) -> bool:
        """``acquire`` when it would not wait (no coroutine): whether ``n`` was granted."""
        n = min(n, self.total)
        if not self._waiters and self.used + n <= self.total:
            self.used += n
            return True
        return False

    async def acquire(self, n: int) -> None:
        n = min(n, self.total)
        if not self._waiters and self.used + n <= self.total:
            self.used += n
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n, fut)
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(n)  # granted just as the connection was cancelled
            else:
                with contextlib.suppress(ValueError):  # _grant may have dropped it already
                    self._waiters.remove(entry)
                self._grant()
            raise

    def release(self, n: int) -> None:
        self.used -= min(n, self.total)
        self._grant()

    def take(self, n: int) -> None:
        """Take ``n`` more at once, past what is free if need be (the answer budget's batch begun
        under an answer's bound); given back by ``release`` like the rest."""
        self.used += n

    def _grant(self) -> None:
        while self._waiters:
            n, fut = self._waiters[0]
            if fut.done():  # cancelled, its task not yet resumed: never granted, nothing to count
                self._waiters.popleft()
                continue
            if self.used + n > self.total:
                return
            self._waiters.popleft()
            self.used += n
            fut.set_result(None)

    @property
    def waiting(self) -> int:
        return len(self._waiters)


class Admission:
    """The connection counts every listener of one server shares."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.total = 0
        self.per_ip: Counter[str] = Counter()
        self.listeners: list[Listener] = []
        self.budget = ByteBudget(limits.max_inflight_bytes)
        self.answers = ByteBudget(limits.max_answer_bytes)  # answers held until sent (answers.py)

    def refusal(self, listener: Listener, ip: str) -> str | None:
        """Why a new connection to ``listener`` from ``ip`` is refused, or None to admit it."""
        lim = self.limits
        if self.per_ip[ip] >= lim.max_connections_per_ip:
            return "per-address limit"
        reserved = sum(max(0, lim.listener_reserve - len(other.connections))
                       for other in self.listeners if other is not listener and not other.draining)
        if self.total + reserved >= lim.max_connections:
            return "limit"
        return None


class Connection:
    """One accepted socket; ``busy`` while a request is being served.

    Handlers read through ``read`` (deadlines, byte budget) and count each complete request by
    raising ``busy`` while serving it: the first rise ends the idle deadline of a new connection.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 limits: ConnectionLimits | None = None, budget: ByteBudget | None = None,
                 answers: ByteBudget | None = None) -> None:
        self.reader = reader
        self.limits = limits = limits or ConnectionLimits()
        # replies leave once per pass, and must be read: PROGRESS_BYTES_PER_S as for requests
        self.writer: asyncio.StreamWriter = CoalescingWriter(  # type: ignore[assignment]
            writer, deadline_s=limits.request_timeout_s,
            min_progress=int(PROGRESS_BYTES_PER_S * limits.request_timeout_s))
        self.budget = budget
        self.answers = answers  # the answer budget (answers.py), None: answers are not counted
        self._busy = 0
        self.requests = 0
        self.held = 0  # bytes of the byte budget this connection holds
        self.task: asyncio.Task[None] | None = None
        self.peer_cn: str | None = None  # CN of a verified TLS client certificate
        peer = writer.get_extra_info("peername")
        self.ip = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._loop = asyncio.get_running_loop()
        self.accepted_at = self._loop.time()
        self._last_data_at = self.accepted_at
        self._partial_since: float | None = None
        self._partial_bytes = 0

    @property
    def busy(self) -> int:
        return self._busy

    @busy.setter
    def busy(self, value: int) -> None:
        if value > self._busy:
            self.requests += 1
        self._busy = value

    def deadline(self, pending: int) -> float | None:
        """When the connection is closed unless more bytes arrive (None: never)."""
        lim = self.limits
        if pending <= 0:
            self._partial_since = None
            self._partial_bytes = 0
        elif self._partial_since is None:
            self._partial_since = self._last_data_at  # the read that brought the request's first bytes
            self._partial_bytes = 0
        if self.requests == 0:
            return self.accepted_at + lim.idle_timeout_s
        if self._partial_since is None:
            return None
        return self._partial_since + lim.request_timeout_s + self._partial_bytes / PROGRESS_BYTES_PER_S

    async def read(self, pending: int = 0) -> bytes:
        """The next bytes from the client (b"" at EOF). ``pending`` is what the caller's framing
        reader holds or expects for the request not yet complete (0 at a request boundary).

        Raises ``TimeoutError`` when a deadline passes (the listener closes the connection)."""
        if self.budget is not None and pending != self.held:
            await self.hold(pending)
        deadline = self.deadline(pending)
        if deadline is None:
            data = await self.reader.read(self.limits.read_size)
        else:
            async with asyncio.timeout_at(deadline):
                data = await self.reader.read(self.limits.read_size)
        self._last_data_at = self._loop.time()
        if pending > 0:
            self._partial_bytes += len(data)
        return data

    async def hold(self, n: int) -> None:
        """Hold ``n`` bytes of the budget: shrinking is immediate; growing releases what is held
        and waits for the whole amount, so a waiting connection holds nothing."""
        budget = self.budget
        if budget is None or n == self.held:
            return
        if n < self.held:
            budget.release(self.held - n)
            self.held = n
            return
        if self.held:
            budget.release(self.held)
            self.held = 0
        await budget.acquire(n)
        self.held = min(n, budget.total)


Handler = Callable[[Connection, "Listener"], Awaitable[None]]


class Listener:
    def __init__(self, name: str, host: str, port: int, handler: Handler, limits: ConnectionLimits,
                 admission: Admission | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.name = name
        self.tls = tls  # TLS on this listener: the handshake follows admission (_accept_tls)
        self.host = host
        self.port = port
        self.handler = handler
        self.limits = limits
        self.admission = admission or Admission(limits)
        self.admission.listeners.append(self)
        self.connections: set[Connection] = set()
        self.server: asyncio.Server | None = None
        self._socks: list[socket.socket] = []  # a TLS listener's own listening sockets
        self._accepting: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self.draining = False
        self.refused = 0

    async def start(self) -> None:
        if self.tls is not None:
            await self._listen_tls(self.tls)
        else:
            self.server = await asyncio.start_server(self._accept, self.host, self.port,
                                                     limit=self.limits.read_size, reuse_address=True)
            self.port = self.server.sockets[0].getsockname()[1]
        log.info("listening", extra={"protocol": self.name, "host": self.host, "port": self.port,
                                     "tls": self.tls is not None})

    def _admit(self, ip: str, peer: str) -> bool:
        """Count a new connection from ``ip`` in, or refuse it (False; logged 1st, 2nd, 4th... time)."""
        adm = self.admission
        reason = "draining" if self.draining else adm.refusal(self, ip)
        if reason is not None:
            self.refused += 1
            if self.refused & (self.refused - 1) == 0:  # 1st, 2nd, 4th, 8th...: a flood is not a log flood
                log.warning("refusing connection", extra={"protocol": self.name, "reason": reason,
                                                          "peer": peer, "refused": self.refused})
            return False
        adm.total += 1
        adm.per_ip[ip] += 1
        return True

    def _release(self, ip: str) -> None:
        adm = self.admission
        adm.total -= 1
        adm.per_ip[ip] -= 1
        if adm.per_ip[ip] <= 0:
            del adm.per_ip[ip]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer, self.limits, self.admission.budget, self.admission.answers)
        if not self._admit(conn.ip, conn.peer):
            writer.close()
            return
        await self._serve(conn)

    async def _serve(self, conn: Connection) -> None:
        """Run the protocol's handler on an admitted connection; release it however it ends."""
        conn.task = asyncio.current_task()
        self.connections.add(conn)
        budget = self.admission.budget
        try:
            bind_caller(Caller(connection_principal(conn.peer_cn)))  # the principal: broker/authz.py
            await self.handler(conn, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except SlowReader as exc:
            log.info("closing connection: replies not read: %s", exc,
                     extra={"protocol": self.name, "peer": conn.peer})
        except TimeoutError:
            log.info("closing connection: %s", "no complete request in time" if conn.requests == 0
                     else "request not completed in time", extra={"protocol": self.name, "peer": conn.peer})
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection handler failed", extra={"protocol": self.name, "peer": conn.peer})
        finally:
            self.connections.discard(conn)
            self._release(conn.ip)
            if budget is not None and conn.held:
                budget.release(conn.held)
                conn.held = 0
            conn.writer.close()
            with contextlib.suppress(Exception):
                await conn.writer.wait_closed()

    # -- TLS -----------------------------------------------------------------------------------
    # A TLS listener accepts sockets itself: the handshake must follow admission, and a stream
    # server's transport has already read the ClientHello (uvloop reads at once) where
    # StreamWriter.start_tls cannot see it. The handshake runs on the accepted socket
    # (loop.connect_accepted_socket), within the connection's idle deadline.

    async def _listen_tls(self, ctx: ssl.SSLContext) -> None:
        """Bind every address ``host`` resolves to (as asyncio.start_server does), one accept loop
        each."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host or None, self.port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        try:
            for family, _type, _proto, _name, addr in dict.fromkeys(infos):
                sock = socket.socket(family, socket.SOCK_STREAM)
                self._socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((addr[0], self.port, *addr[2:]))  # port 0: the first bind's port for all
                sock.listen(socket.SOMAXCONN)
                sock.setblocking(False)
                self.port = sock.getsockname()[1]  # an ephemeral port: the same one on every address
        except OSError:
            for sock in self._socks:
                sock.close()
            self._socks.clear()
            raise
        self._accepting = [loop.create_task(self._accept_loop(sock, ctx), name=f"accept-{self.name}")
                           for sock in self._socks]

    async def _accept_loop(self, sock: socket.socket, ctx: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        while not self.draining:
            try:
                client, _addr = await loop.sock_accept(sock)
            except OSError as exc:  # out of descriptors, or the socket closed while stopping
                if self.draining:
                    return
                log.warning("accept failed: %s", exc, extra={"protocol": self.name})
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._accept_tls(client, ctx))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _accept_tls(self, sock: socket.socket, ctx: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        accepted_at = loop.time()
        try:
            peer_addr = sock.getpeername()
        except OSError:
            sock.close()
            return
        ip, peer = str(peer_addr[0]), f"{peer_addr[0]}:{peer_addr[1]}"
        if not self._admit(ip, peer):
            sock.close()
            return
        deadline = accepted_at + self.limits.idle_timeout_s
        reader = asyncio.StreamReader(limit=self.limits.read_size)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            async with asyncio.timeout_at(deadline):  # the loop's own handshake timer is a backstop
                transport, _p = await loop.connect_accepted_socket(
                    lambda: protocol, sock, ssl=ctx, ssl_handshake_timeout=deadline - loop.time() + 1)
        except BaseException as exc:
            self._release(ip)
            sock.close()
            if isinstance(exc, asyncio.CancelledError) or not isinstance(exc, Exception):
                raise
            if isinstance(exc, TimeoutError):
                log.info("closing connection: TLS handshake not completed in time",
                         extra={"protocol": self.name, "peer": peer})
            elif isinstance(exc, OSError | asyncio.IncompleteReadError):  # ssl.SSLError is an OSError
                reason = handshake_failure(exc)
                if reason is not None:
                    log.info("closing connection: TLS handshake failed: %s", reason,
                             extra={"protocol": self.name, "peer": peer})
            else:
                log.exception("TLS handshake failed", extra={"protocol": self.name, "peer": peer})
            return
        self._handshakes.discard(asyncio.current_task())  # drain() ends it now
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        conn = Connection(reader, writer, self.limits, self.admission.budget, self.admission.answers)
        conn.accepted_at = conn._last_data_at = accepted_at  # the handshake spent the idle time
        conn.peer_cn = peer_cn(writer)
        await self._serve(conn)

    def stop_accepting(self) -> None:
        self.draining = True
        if self.server is not None:
            self.server.close()
        for task in (*self._accepting, *self._handshakes):
            task.cancel()
        for sock in self._socks:
            sock.close()

    async def drain(self, grace: float) -> None:
        """Let busy connections finish their request (up to ``grace`` s), then close everything."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while any(c.busy for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for c in list(self.connections):
            if c.task is not None and c.task is not asyncio.current_task():
                c.task.cancel()
        while self.connections and loop.time() < deadline + 1:
            await asyncio.sleep(0.01)
