"""bayou beside the brokers people would pick instead, in one run: Redis Streams and NATS JetStream
(issue 18, item 6). ``make bench-peers`` installs both from Debian (redis-server, nats-server)
and runs this.

Prints a table of medians and ratios; never passes or fails. Each broker is started by hand on a
free loopback port and stopped by its PID; every client is a raw asyncio socket client speaking
the broker's own wire protocol (RESP, NATS' text protocol, Kafka and Cursus through bayou's own
codecs), one connection, one 100-byte message per request, requests pipelined:

- **window**: 64 requests in flight, ``--requests`` in all: msg/s, and the broker's CPU per request
  (user + system time of its process over the run, from /proc);
- **rate**: a steady ``--rate`` requests/s for ``--seconds`` (open loop): p50/p99 from when each
  request was due to its acknowledgement;
- **end to end**: the same steady rate with a consumer waiting on the broker (Redis XREAD BLOCK,
  a NATS JetStream push consumer, a Kafka Fetch long poll, a Cursus STREAM): p50/p99 from when
  each message was sent to when the consumer had it (benchmarks/e2e_latency.py).

Rows, with the durability of each:
- Redis ``XADD`` to a stream: appendonly off (fsync never), then ``appendfsync always``;
- NATS JetStream publish with acknowledgement (file storage; the 2.9 server in Debian fsyncs on
  its own 2-minute timer, there is no per-message fsync in it): shown under fsync=never;
- bayou: Kafka Produce and Cursus PUBLISH, ``--fsync never`` then ``--fsync always``.

Rounds alternate the order of the brokers (``--rounds``); the figures are medians over rounds.

    make bench-peers
    .venv/bin/python benchmarks/peers.py --requests 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

import e2e_latency as e2e  # noqa: E402
from pipeline_bench import Cursus, Kafka, Proto, Result, rate_run, window_run  # noqa: E402

VALUE = b"x" * 100
STREAM = "bench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{what} did not start")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """One broker process on a free port, stopped by its PID."""

    def __init__(self, argv: list[str], port: int, what: str, env: dict[str, str] | None = None) -> None:
        self.port, self.what = port, what
        self.dir = Path(tempfile.mkdtemp(prefix="bayou-peers-"))
        self.proc = subprocess.Popen([a.replace("{dir}", str(self.dir)) for a in argv], cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _wait_port(port, self.proc, what)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the peers' protocols ---------------------------------------------------------------------


def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class RedisXadd(Proto):
    name = "redis XADD"

    def request(self, i: int) -> bytes:
        return _resp(b"XADD", STREAM.encode(), b"*", b"v", VALUE)

    async def reply(self, r: asyncio.StreamReader) -> None:
        line = await r.readline()
        if line.startswith(b"$"):
            await r.readexactly(int(line[1:]) + 2)
        elif not line.startswith(b"+"):
            raise SystemExit(f"redis refused: {line[:200]!r}")


class NatsJetStream(Proto):
    """JetStream publish: PUB with a reply inbox; the server's acknowledgement (a JSON PubAck)
    comes back as a MSG on the inbox, in order."""

    name = "nats jetstream"

    async def setup(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readline()  # INFO
        w.write(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nSUB _INBOX.b.* 1\r\n')
        config = json.dumps({"name": STREAM.upper(), "subjects": [STREAM], "storage": "file"}).encode()
        w.write(b"PUB $JS.API.STREAM.CREATE.%s _INBOX.b.0 %d\r\n%s\r\n" % (
            STREAM.upper().encode(), len(config), config))
        await self.reply(r)  # created, or already exists: either way the stream is there

    def request(self, i: int) -> bytes:
        return b"PUB %s _INBOX.b.1 %d\r\n%s\r\n" % (STREAM.encode(), len(VALUE), VALUE)

    async def reply(self, r: asyncio.StreamReader) -> None:
        while True:
            line = await r.readline()
            if line.startswith(b"MSG"):
                n = int(line.split()[-1])
                body = await r.readexactly(n + 2)
                if b'"error"' in body and b"stream name already in use" not in body:
                    raise SystemExit(f"nats refused: {body[:200]!r}")
                return
            if line.startswith(b"PING"):
                continue  # answered by nobody: the server only checks on idle connections
            if line.startswith(b"-ERR"):
                raise SystemExit(f"nats: {line[:200]!r}")


# -- the workloads -----------------------------------------------------------------------------


def _pct(lat: list[float], q: float) -> float:
    s = sorted(lat)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


async def _bounded(coro: Awaitable[Result], timeout: float) -> Result | None:
    try:
        return await asyncio.wait_for(coro, timeout)
    except TimeoutError:
        return None


# -- the brokers ---------------------------------------------------------------------------------


def start_redis(fsync: str) -> Server:
    port = _free_port()
    aof = ["--appendonly", "yes", "--appendfsync", "always"] if fsync == "always" else ["--appendonly", "no"]
    return Server([shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1",
                   "--save", "", "--dir", "{dir}", *aof], port, "redis-server")


def _nats_server() -> str:
    return shutil.which("nats-server") or "/usr/sbin/nats-server"  # Debian puts it in sbin


def start_nats(fsync: str) -> Server:
    port = _free_port()
    return Server([_nats_server(), "-a", "127.0.0.1", "-p", str(port),
                   "-js", "-sd", "{dir}/js"], port, "nats-server")


def start_bayou(fsync: str, listener: str) -> Server:
    port = _free_port()
    flag = {"kafka": "--kafka", "cursus": "--cursus"}[listener]
    off = [a for name in ("--rtes", "--cursus", "--iggy", "--tank", "--http") if name != flag
           for a in (name, "off")]
    return Server([sys.executable, "-m", "bayou", "serve", "--data-dir", "{dir}/data",
                   flag, f"127.0.0.1:{port}",
                   *off, "--fsync", fsync, "--advertised-host", "127.0.0.1", "--log-level", "warning"],
                  port, "bayou", env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))


Row = tuple[str, str, Callable[[str], Server], Callable[[], Proto], Callable[[], e2e.System]]
ROWS: list[Row] = [
    ("redis XADD", "never", start_redis, RedisXadd, e2e.RedisXread),
    ("nats jetstream", "never (timer)", start_nats, NatsJetStream, e2e.NatsJetStream),
    ("bayou kafka", "never", lambda f: start_bayou(f, "kafka"), Kafka, e2e.KafkaFetch),
    ("bayou cursus", "never", lambda f: start_bayou(f, "cursus"), Cursus, e2e.CursusStream),
    ("redis XADD", "always", start_redis, RedisXadd, e2e.RedisXread),
    ("bayou kafka", "always", lambda f: start_bayou(f, "kafka"), Kafka, e2e.KafkaFetch),
    ("bayou cursus", "always", lambda f: start_bayou(f, "cursus"), Cursus, e2e.CursusStream),
]


def measure(row: Row, args: argparse.Namespace) -> dict[str, float]:
    _name, fsync, start, proto, system = row
    server = start(fsync.split()[0])
    try:
        cpu0 = _cpu_seconds(server.proc.pid)
        window = window_run(server.port, proto(), args.requests, args.window)
        got = asyncio.run(_bounded(window, args.timeout))
        cpu = _cpu_seconds(server.proc.pid) - cpu0
        out: dict[str, float] = {}
        if got is not None:
            rate, lat = got
            out.update(window=rate, cpu_us=cpu / args.requests * 1e6, w_p99=_pct(lat, 0.99))
        if args.rate:
            got = asyncio.run(_bounded(rate_run(server.port, proto(), args.rate, args.seconds), args.timeout))
            if got is not None:
                reached, lat = got
                out.update(reached=reached, p50=_pct(lat, 0.5), p99=_pct(lat, 0.99))
            seen, _sent = e2e.measure(system(), server.port, args.rate, args.seconds)
            if seen.latencies:
                out.update(e2e_p50=_pct(seen.latencies, 0.5), e2e_p99=_pct(seen.latencies, 0.99),
                           e2e_lost=seen.total - len(seen.latencies))
        return out
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000, help="one-message requests per window run")
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--rate", type=int, default=10_000, help="requests/s of the rate run (0 skips it)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    missing = [b for b, path in (("redis-server", shutil.which("redis-server")),
                                  ("nats-server", shutil.which(_nats_server()))) if path is None]
    rows = [r for r in ROWS if not any(r[0].startswith(m.split("-")[0]) for m in missing)]
    if missing:
        print(f"not installed, skipped: {', '.join(missing)} (make bench-peers installs them)")
    results: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(rows))}
    for rnd in range(args.rounds):
        order = list(range(len(rows)))
        if rnd % 2:
            order.reverse()
        for i in order:
            results[i].append(measure(rows[i], args))
            print(f"round {rnd + 1}: {rows[i][0]} fsync={rows[i][1]}: {results[i][-1]}", file=sys.stderr,
                  flush=True)

    def med(i: int, key: str) -> float | None:
        vals = [r[key] for r in results[i] if key in r]
        return statistics.median(vals) if vals else None

    print(f"\none connection, one {len(VALUE)}-byte message per request, pipelined; medians of "
          f"{args.rounds} rounds")
    print(f"{'broker':<16} {'fsync':<15} {'window msg/s':>13} {'CPU/request':>12} {'p99 (window)':>13}"
          f" {'at ' + format(args.rate, ',') + '/s: reached':>20} {'p50':>9} {'p99':>9}"
          f" {'end to end p50':>15} {'p99':>9}")
    for i, (name, fsync, _s, _p, _e) in enumerate(rows):
        def f(key: str, fmt: str, i: int = i) -> str:
            v = med(i, key)
            return "-" if v is None else format(v, fmt)
        print(f"{name:<16} {fsync:<15} {f('window', ',.0f'):>13} {f('cpu_us', '.1f') + ' us':>12} "
              f"{f('w_p99', '.2f') + ' ms':>13} {f('reached', ',.0f'):>20} {f('p50', '.2f') + ' ms':>9} "
              f"{f('p99', '.2f') + ' ms':>9} {f('e2e_p50', '.2f') + ' ms':>15} "
              f"{f('e2e_p99', '.2f') + ' ms':>9}")
    # ratios: bayou against Redis at the same durability
    print("\nratios (bayou / redis, same fsync): window msg/s and CPU per request")
    for fsync in ("never", "always"):
        redis = next((i for i, r in enumerate(rows) if r[0] == "redis XADD" and r[1] == fsync), None)
        if redis is None:
            continue
        for i, (name, f_, _s, _p, _e) in enumerate(rows):
            ours, theirs = med(i, "window"), med(redis, "window")
            if not name.startswith("bayou") or f_ != fsync or not ours or not theirs:
                continue
            cpu_ours, cpu_theirs = med(i, "cpu_us"), med(redis, "cpu_us")
            cpu = f"x{cpu_ours / cpu_theirs:.1f}" if cpu_ours and cpu_theirs else "-"
            print(f"  {name:<14} fsync={fsync:<7} throughput x{ours / theirs:.2f}   CPU/request {cpu}")


if __name__ == "__main__":
    main()
