"""Test helpers that start real brokers: in-process on an ephemeral port, or as a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from bayou.broker import BrokerConfig
from bayou.server.app import BayouServer, ServerConfig

_HANDED_OUT: deque[int] = deque(maxlen=4096)  # ports free_port gave this process lately
_PORTS_BELOW_EPHEMERAL = 12_000  # how many ports below the kernel's ephemeral range to draw from


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback port for a broker's listener: nothing listens on it now, this process was not
    given it lately, and it lies below the kernel's ephemeral range. A port from ``bind(0)`` is
    an ephemeral one, which any outgoing connection of any process may take before the broker
    binds it ("address already in use" under load), and the kernel may hand the same one to two
    binds in a row (one broker given it for two listeners)."""
    start = _ephemeral_start()
    low = max(1024, start - _PORTS_BELOW_EPHEMERAL)
    for _ in range(1000):
        port = random.randrange(low, start) if start - low >= 1000 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port
    raise RuntimeError("no free loopback port found")


async def start_inprocess(data_dir: Path, **broker_overrides: object) -> BayouServer:
    """A server in the running event loop with only the V1 listener, on 127.0.0.1:<ephemeral>."""
    cfg = ServerConfig(broker=BrokerConfig(data_dir=data_dir, **broker_overrides),  # type: ignore[arg-type]
                       listeners={"rtes": ("127.0.0.1", 0)})
    server = BayouServer(cfg)
    await server.start()
    return server


class LineConn:
    """An asyncio V1 connection: send lines, read reply lines."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> LineConn:
        r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
        return cls(r, w)

    async def send(self, line: bytes | str) -> None:
        if isinstance(line, str):
            line = line.encode()
        self.writer.write(line + b"\n")
        await self.writer.drain()

    async def recv(self, timeout: float = 10.0) -> bytes:
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        if not line.endswith(b"\n"):
            raise ConnectionError(f"connection closed (got {line!r})")
        return line[:-1]

    async def ask(self, line: bytes | str, timeout: float = 10.0) -> str:
        await self.send(line)
        return (await self.recv(timeout)).decode("utf-8", "surrogateescape")

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


class BrokerProcess:
    """``python -m bayou serve`` as a real subprocess on a fixed loopback port."""

    def __init__(self, data_dir: Path, *extra_args: str, port: int | None = None,
                 fsync: str = "always", cursus_port: int | None = None,
                 iggy_port: int | None = None, tank_port: int | None = None,
                 http_port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.cursus_port = cursus_port or free_port()
        self.iggy_port = iggy_port or free_port()
        self.tank_port = tank_port or free_port()
        self.http_port = http_port or free_port()  # never the default 9080: brokers run side by side
        self.extra = list(extra_args)
        self.fsync = fsync
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    def _fresh_ports(self) -> None:
        """New free ports for every listener, including a ``--replication`` address in the
        extra arguments (the data directory stays)."""
        self.port, self.cursus_port, self.iggy_port = free_port(), free_port(), free_port()
        self.tank_port, self.http_port = free_port(), free_port()
        for i, arg in enumerate(self.extra[:-1]):
            if arg == "--replication":
                host = self.extra[i + 1].rsplit(":", 1)[0]
                self.extra[i + 1] = f"{host}:{free_port()}"

    def start(self, timeout: float = 20.0, *, wait: bool = True, rebound: bool = False) -> BrokerProcess:
        """Start the subprocess and wait until every listener that is on accepts connections
        (``wait=False``: return at once, e.g. to watch the HTTP port during crash recovery)."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        since = self.log_path.stat().st_size if self.log_path.exists() else 0  # this start's lines
        logf = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bayou", "serve", "--data-dir", str(self.data_dir),
             "--rtes", f"127.0.0.1:{self.port}", "--cursus", f"127.0.0.1:{self.cursus_port}",
             "--iggy", f"127.0.0.1:{self.iggy_port}", "--tank", f"127.0.0.1:{self.tank_port}",
             "--http", f"127.0.0.1:{self.http_port}", "--fsync", self.fsync, *self.extra],
            stdout=logf, stderr=subprocess.STDOUT, env=env)
        logf.close()
        if not wait:
            return self
        deadline = time.monotonic() + timeout
        # the listeners open one after another: wait for every one that is on, not just V1's
        ports = [self.port] + [port for name, port in (("cursus", self.cursus_port), ("iggy", self.iggy_port),
                                                       ("tank", self.tank_port), ("http", self.http_port))
                               if not self._off(name)]
        while ports and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if not rebound and "address already in use" in self.log()[-600:]:
                    # a port of this broker (a restart keeps them) was taken meanwhile by another
                    # process on the machine: come back on fresh ports, as a moved broker would
                    self._fresh_ports()
                    return self.start(max(1.0, deadline - time.monotonic()), rebound=True)
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", ports[0]), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.05)
                continue
            # and bound by this broker: a port another process took meanwhile accepts too (the
            # broker then fails to bind it and exits, handled above), so it counts once the broker
            # has logged that it listens there
            if self._logged_listening(ports[0], since):
                ports.pop(0)
            else:
                time.sleep(0.05)
        if not ports:
            return self
        self.proc.kill()  # a broker that never came up must not outlive the test
        self.proc.wait(10)
        raise TimeoutError(f"broker did not listen on {ports[0]}: {self.log()}")

    def _logged_listening(self, port: int, since: int) -> bool:
        """Whether this start's log lines (from byte ``since``) say it listens on ``port``
        (JSON ``"port": N`` or text ``port=N``)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except OSError:
            return False
        return any("listening" in line and re.search(rf"\bport\W+{port}\b", line)
                   for line in text.splitlines())

    def _off(self, name: str) -> bool:
        """Whether the extra arguments turn listener ``name`` off (the last flag wins)."""
        value = None
        for flag, arg in zip(self.extra, self.extra[1:], strict=False):
            if flag == f"--{name}":
                value = arg
        return value is not None and value.lower() == "off"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 20.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        return self.kill(signal.SIGTERM)
