"""A live broker for the property tests that drive the server over real sockets: every listener on
loopback, run by its own event loop in a background thread, so Hypothesis tests (synchronous) talk
to it with plain blocking sockets. Every record the ``bayou`` loggers emit at ERROR or above (an
unhandled exception in a handler is logged that way) is kept in ``LiveBroker.errors``."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.broker import BrokerConfig
from bayou.server.app import BayouServer, ServerConfig

PROTOCOLS = ("rtes", "cursus", "iggy", "tank")
# Partition counts are drawn from their whole range too; the broker-wide limit refuses the large
# ones with each protocol's error, and keeps the topics the tests make small.
MAX_PARTITIONS = 256


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class LiveBroker:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.loop = asyncio.new_event_loop()
        self.server = BayouServer(ServerConfig(
            broker=BrokerConfig(data_dir=data_dir, max_partitions=MAX_PARTITIONS),
            listeners={name: ("127.0.0.1", 0) for name in PROTOCOLS},
            advertised_host="127.0.0.1", shutdown_grace_s=1.0))
        self._thread = threading.Thread(target=self.loop.run_forever, name="live-broker", daemon=True)
        self._log = _Collect()

    def start(self) -> LiveBroker:
        logging.getLogger("bayou").addHandler(self._log)
        self._thread.start()
        self.call(self.server.start(), timeout=30)
        return self

    def stop(self) -> None:
        try:
            self.call(self.server.stop(), timeout=30)
            self.call(_cancel_the_rest(), timeout=10)  # background tasks the services left behind
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()
            logging.getLogger("bayou").removeHandler(self._log)

    def call(self, coro: object, timeout: float = 10.0) -> object:
        """Run a coroutine on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def port(self, protocol: str) -> int:
        return self.server.listeners[protocol].port

    def connect(self, protocol: str, timeout: float = 10.0) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port(protocol)), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    @property
    def errors(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()}" + (f" ({r.exc_info[1]!r})" if r.exc_info else "")
                for r in self._log.records]


async def _cancel_the_rest() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture(scope="module")
def live_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBroker]:
    b = LiveBroker(tmp_path_factory.mktemp("live") / "data").start()
    try:
        yield b
    finally:
        b.stop()


def read_exactly(s: socket.socket, n: int) -> bytes | None:
    """``n`` bytes, or None when the peer closed first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


# Integers a numeric field may hold on the wire, the edges first: Hypothesis starts from the
# sampled edges and then draws anywhere in range.
def edges(bits: int, *, signed: bool = False) -> list[int]:
    top = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    low = -(1 << (bits - 1)) if signed else 0
    picks = {low, low + 1, 0, 1, 2, top, top - 1}
    for b in (7, 8, 15, 16, 31, 32, 53, 62, 63, 64):
        for v in ((1 << b) - 2, (1 << b) - 1, 1 << b, -(1 << b), -(1 << b) + 1):
            if low <= v <= top:
                picks.add(v)
    return sorted(picks)
