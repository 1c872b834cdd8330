"""Listener plumbing shared by every protocol: connection limits, in-flight tracking, draining."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("bayou.server")


@dataclass(slots=True)
class ConnectionLimits:
    max_connections: int = 10_000
    read_size: int = 256 * 1024


class Connection:
    """One accepted socket; ``busy`` while a request is being served."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.busy = 0
        self.task: asyncio.Task[None] | None = None
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


Handler = Callable[[Connection, "Listener"], Awaitable[None]]


class Listener:
    def __init__(self, name: str, host: str, port: int, handler: Handler, limits: ConnectionLimits,
                 counter: list[int]) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.handler = handler
        self.limits = limits
        self._counter = counter  # shared across listeners: [open connections]
        self.connections: set[Connection] = set()
        self.server: asyncio.Server | None = None
        self.draining = False

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, self.host, self.port,
                                                 limit=self.limits.read_size, reuse_address=True)
        sock = self.server.sockets[0]
        self.port = sock.getsockname()[1]
        log.info("listening", extra={"protocol": self.name, "host": self.host, "port": self.port})

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.draining or self._counter[0] >= self.limits.max_connections:
            log.warning("refusing connection", extra={"protocol": self.name,
                                                      "reason": "draining" if self.draining else "limit"})
            writer.close()
            return
        conn = Connection(reader, writer)
        conn.task = asyncio.current_task()
        self._counter[0] += 1
        self.connections.add(conn)
        try:
            await self.handler(conn, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection handler failed", extra={"protocol": self.name, "peer": conn.peer})
        finally:
            self.connections.discard(conn)
            self._counter[0] -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def stop_accepting(self) -> None:
        self.draining = True
        if self.server is not None:
            self.server.close()

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
