"""Iggy benchmark: send N messages in batches through the official SDK, then poll them back.

Prints figures; never passes or fails. Targets from the issue (100-byte messages, batches of
1,000, through the official SDK): >= 1,000,000 msg/s send and >= 2,000,000 msg/s poll.

    (a) end to end: a broker subprocess (``bayou serve``, --fsync never, then always) and the
        official apache-iggy SDK (0.9 by default, 0.8 with --sdk 08) in its own virtualenv
        (``make iggy-sdks`` creates both): one client sends batches of --batch messages one
        request at a time (the SDK keeps one request in flight per connection), then polls them
        back --batch at a time with the Offset strategy; then --clients connections do the same
        in parallel, one partition each;
    (b) the broker alone, in process: IggyService.handle_vsr() on prebuilt SEND_MESSAGES and
        POLL_MESSAGES frames built with bayou's codec, no sockets, so client and socket cost are
        separated from broker cost.

    .venv/bin/python benchmarks/iggy_bench.py
    .venv/bin/python benchmarks/iggy_bench.py --messages 200000 --sdk 08 --profile

The SDK runs in a child process started with the SDK virtualenv's Python (the two SDK versions
share one package name, so neither can live in bayou's own environment); --driver is that mode.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STREAM, TOPIC = "bench", "events"


def _cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Phase:
    """Wall time and the CPU seconds of this process and of the broker over one phase."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid

    def __enter__(self) -> _Phase:
        self.t0 = time.perf_counter()
        self.c0 = _cpu(os.getpid())
        self.b0 = _cpu(self.broker_pid) if self.broker_pid else 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.s = time.perf_counter() - self.t0
        self.client_cpu = _cpu(os.getpid()) - self.c0
        self.broker_cpu = (_cpu(self.broker_pid) - self.b0) if self.broker_pid else 0.0

    def report(self, **extra: Any) -> dict[str, Any]:
        return {"s": self.s, "client_cpu": self.client_cpu, "broker_cpu": self.broker_cpu, **extra}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


# -- driver: runs inside the SDK virtualenv ------------------------------------------------------


async def _client(ig: Any, port: int, v09: bool) -> Any:
    if v09:
        cfg = ig.TcpConfig(server_address=f"127.0.0.1:{port}",
                           auto_login=ig.AutoLogin.username_password("iggy", "iggy"),
                           reconnection=ig.TcpReconnectionConfig(max_retries=3))
        client = ig.IggyClient(cfg)
    else:
        client = ig.IggyClient.from_connection_string(
            f"iggy://iggy:iggy@127.0.0.1:{port}?reconnection_retries=3&reconnection_interval=200ms")
    await asyncio.wait_for(client.connect(), 30)
    return client


async def _send_all(ig: Any, client: Any, partition: int, batches: int, batch: list[Any],
                    v09: bool) -> list[float]:
    lat = []
    for _ in range(batches):
        t0 = time.perf_counter()
        await client.send_messages(STREAM, TOPIC, partition, batch)
        lat.append(time.perf_counter() - t0)
    return lat


async def _poll_all(ig: Any, client: Any, partition: int, total: int, count: int,
                    v09: bool) -> tuple[int, int, list[float]]:
    got = nbytes = 0
    offset = 0
    lat = []
    while got < total:
        t0 = time.perf_counter()
        if v09:
            msgs = await client.poll_messages(STREAM, TOPIC, consumer=ig.Consumer.Single("bench"),
                                              polling_strategy=ig.PollingStrategy.Offset(offset),
                                              count=count, auto_commit=False, partition_id=partition)
        else:
            msgs = await client.poll_messages(STREAM, TOPIC, partition, ig.PollingStrategy.Offset(offset),
                                              count, False)
        lat.append(time.perf_counter() - t0)
        if not msgs:
            break
        got += len(msgs)
        nbytes += sum(len(m.payload()) for m in msgs[:1]) * len(msgs)
        offset = msgs[-1].offset() + 1
    return got, nbytes, lat


async def _drive(args: argparse.Namespace) -> dict[str, Any]:
    import apache_iggy as ig  # the SDK virtualenv's package

    v09 = hasattr(ig, "TcpConfig")
    clients = [await _client(ig, args.port, v09) for _ in range(max(1, args.clients))]
    first = clients[0]
    with contextlib.suppress(Exception):
        await first.delete_stream(STREAM) if v09 else None
    await asyncio.wait_for(first.create_stream(STREAM), 10)
    await asyncio.wait_for(first.create_topic(STREAM, TOPIC, max(1, args.clients)), 10)
    payload = os.urandom(args.size)
    batch = [ig.SendMessage(payload) for _ in range(args.batch)]
    batches = args.messages // args.batch
    out: dict[str, Any] = {"sdk": "0.9" if v09 else "0.8"}

    # one connection, one request in flight
    with _Phase(args.broker_pid) as ph:
        lat = await _send_all(ig, first, 0, batches, batch, v09)
    out["send1"] = ph.report(msgs=batches * args.batch, p50_ms=_pct(lat, 0.5) * 1e3,
                             p99_ms=_pct(lat, 0.99) * 1e3)
    with _Phase(args.broker_pid) as ph:
        got, nbytes, lat = await _poll_all(ig, first, 0, batches * args.batch, args.batch, v09)
    out["poll1"] = ph.report(msgs=got, bytes=nbytes, p50_ms=_pct(lat, 0.5) * 1e3,
                             p99_ms=_pct(lat, 0.99) * 1e3)

    # several connections in parallel, one partition each (partition 0 already holds a full run)
    if args.clients > 1:
        per = max(1, batches // args.clients)
        t0 = time.perf_counter()
        lats = await asyncio.gather(*(_send_all(ig, c, i, per, batch, v09)
                                      for i, c in enumerate(clients) if i > 0))
        dt = time.perf_counter() - t0
        flat = [x for xs in lats for x in xs]
        out["sendN"] = {"clients": args.clients - 1, "msgs": per * args.batch * (args.clients - 1), "s": dt,
                        "p50_ms": _pct(flat, 0.5) * 1e3, "p99_ms": _pct(flat, 0.99) * 1e3}
        t0 = time.perf_counter()
        res = await asyncio.gather(*(_poll_all(ig, c, i, per * args.batch if i else batches * args.batch,
                                               args.batch, v09) for i, c in enumerate(clients)))
        dt = time.perf_counter() - t0
        out["pollN"] = {"clients": args.clients, "msgs": sum(r[0] for r in res), "s": dt,
                        "p50_ms": statistics.median([x for r in res for x in r[2]]) * 1e3}
    return out


# -- broker alone, in process ------------------------------------------------------------------


def _broker_only(args: argparse.Namespace, data_dir: Path) -> dict[str, float]:
    sys.path.insert(0, str(ROOT / "src"))
    from bayou.broker import Broker, BrokerConfig
    from bayou.protocols.iggy import messages as m
    from bayou.protocols.iggy.codec import encode_request
    from bayou.protocols.iggy.codes import Operation
    from bayou.protocols.iggy.framing import Dialect, RequestHeader, VsrFrame
    from bayou.server.base import Connection
    from bayou.server.iggy import IggyService
    from bayou.storage import FsyncPolicy, LogConfig

    async def run() -> dict[str, float]:
        broker = Broker(BrokerConfig(data_dir=data_dir, log=LogConfig(fsync=FsyncPolicy.parse("never"))))
        await broker.start()
        svc = IggyService(broker, port=0)
        svc.serve_authorizer()  # the Iggy users are the broker's principals (as server/app.py does)
        await svc.start()

        class _W:
            transport = None  # no socket: the requests are handed to the service directly

            def get_extra_info(self, _name: str) -> tuple[str, int]:
                return ("127.0.0.1", 1)

        s = svc.open_session(Connection(None, _W()))  # type: ignore[arg-type]
        s.user = svc.users.get(0)
        s.dialect = Dialect.VSR
        s.session = 1
        sid, tid = m.Identifier("bench"), m.Identifier("events")

        async def call(op: int, req: Any, code: int = 0) -> bytes:
            body = encode_request(req, Dialect.VSR)
            return await svc.handle_vsr(s, VsrFrame(RequestHeader(client=1, operation=op, request=1,
                                                                  session=1, code=code), body))

        await call(Operation.CREATE_STREAM, m.CreateStream("bench"))
        await call(Operation.CREATE_TOPIC, m.CreateTopic(sid, "events", 1))
        now = time.time_ns() // 1000
        msgs = tuple(m.Message(os.urandom(args.size), i + 1, (), now) for i in range(args.batch))
        send = m.SendMessages(sid, tid, m.Partitioning.partition(0), msgs)
        body = encode_request(send, Dialect.VSR)
        frame = VsrFrame(RequestHeader(client=1, operation=Operation.SEND_MESSAGES, request=1, session=1),
                         body)
        batches = args.messages // args.batch
        prof = cProfile.Profile() if args.profile else None
        if prof:
            prof.enable()
        t0 = time.perf_counter()
        for _ in range(batches):
            await svc.handle_vsr(s, frame)
        send_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        offset = got = 0
        while got < batches * args.batch:
            poll = m.PollMessages(m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(1)), sid, tid, 0,
                                  m.PollingStrategy(m.PollingKind.OFFSET, offset), args.batch, False)
            reply = await call(Operation.NON_REPLICATED, poll, 100)
            n = int.from_bytes(reply[256 + 12 : 256 + 16], "little")
            if not n:
                break
            got += n
            offset += n
        poll_s = time.perf_counter() - t0
        if prof:
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
            print(out.getvalue())
        await broker.stop()
        return {"send_msgs_s": batches * args.batch / send_s, "poll_msgs_s": got / poll_s}

    return asyncio.run(run())


# -- orchestration -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_broker(data_dir: Path, port: int, fsync: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "bayou", "serve", "--data-dir", str(data_dir),
         "--rtes", "off", "--cursus", "off", "--tank", "off", "--http", "off", "--iggy", f"127.0.0.1:{port}",
         "--fsync", fsync,
         "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("broker did not start")


def _rate(n: float, s: float) -> str:
    return f"{n / s:>12,.0f} msg/s" if s else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--clients", type=int, default=3, help="parallel connections for the second run")
    ap.add_argument("--sdk", choices=["08", "09"], default="09")
    ap.add_argument("--fsync", action="append", help="broker fsync policies to run (default: never, always)")
    ap.add_argument("--profile", action="store_true", help="profile the in-process broker run")
    ap.add_argument("--broker-only", action="store_true", help="only the in-process broker run")
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--broker-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        print(json.dumps(asyncio.run(_drive(args))), flush=True)
        os._exit(0)  # skip interpreter teardown: the SDK's runtime threads may abort it
    sdk_python = ROOT / f".venv-iggy{args.sdk}" / "bin" / "python"
    if not sdk_python.exists() and not args.broker_only:
        raise SystemExit(f"{sdk_python} is missing: run `make iggy-sdks` (or `make test`) first")
    print(f"Iggy benchmark: {args.messages:,} messages of {args.size} B in batches of {args.batch:,}, "
          f"apache-iggy {args.sdk[0]}.{args.sdk[1]} SDK, loopback, {os.cpu_count()} cores")
    for fsync in [] if args.broker_only else args.fsync or ["never", "always"]:
        tmp = Path(tempfile.mkdtemp(prefix="iggy-bench-"))
        port = _free_port()
        proc = _start_broker(tmp / "data", port, fsync)
        try:
            cmd = [str(sdk_python), __file__, "--driver", "--port", str(port), "--broker-pid", str(proc.pid),
                   "--messages", str(args.messages),
                   "--batch", str(args.batch), "--size", str(args.size), "--clients", str(args.clients)]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            if r.returncode != 0:
                print(r.stdout[-2000:], r.stderr[-3000:], r.returncode)
                raise SystemExit("driver failed")
            res = json.loads(r.stdout.strip().splitlines()[-1])
        finally:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            shutil.rmtree(tmp, ignore_errors=True)
        s1, p1 = res["send1"], res["poll1"]
        print(f"\n[end to end, fsync={fsync}, SDK {res['sdk']}]")
        mb = s1['msgs'] * args.size / s1['s'] / 1e6
        print(f"  send, 1 connection : {_rate(s1['msgs'], s1['s'])}  {mb:7.1f} MB/s"
              f"  batch latency p50 {s1['p50_ms']:.2f} ms p99 {s1['p99_ms']:.2f} ms")
        print(f"  poll, 1 connection : {_rate(p1['msgs'], p1['s'])}  {p1['bytes'] / p1['s'] / 1e6:7.1f} MB/s"
              f"  poll latency  p50 {p1['p50_ms']:.2f} ms p99 {p1['p99_ms']:.2f} ms")
        for label, r in (("send", s1), ("poll", p1)):
            per = 1e6 / r["msgs"]
            print(f"    {label} CPU per 1,000 messages: client (SDK) {r['client_cpu'] * per:.2f} ms,"
                  f" broker {r['broker_cpu'] * per:.2f} ms, wall {r['s'] * per:.2f} ms")
        if "sendN" in res:
            sn, pn = res["sendN"], res["pollN"]
            print(f"  send, {sn['clients']} connections: {_rate(sn['msgs'], sn['s'])}"
                  f"  batch latency p50 {sn['p50_ms']:.2f} ms p99 {sn['p99_ms']:.2f} ms")
            print(f"  poll, {pn['clients']} connections: {_rate(pn['msgs'], pn['s'])}"
                  f"  poll latency  p50 {pn['p50_ms']:.2f} ms")
    tmp = Path(tempfile.mkdtemp(prefix="iggy-bench-"))
    try:
        b = _broker_only(args, tmp / "data")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n[broker alone, in process, fsync=never]")
    print(f"  send : {b['send_msgs_s']:>12,.0f} msg/s")
    print(f"  poll : {b['poll_msgs_s']:>12,.0f} msg/s")


if __name__ == "__main__":
    main()
