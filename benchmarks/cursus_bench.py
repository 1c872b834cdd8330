"""Cursus batch-path benchmark: produce N messages in batches, then consume them back.

Prints figures; never passes or fails. Targets from the issue: >= 500,000 msg/s produce and
>= 1,000,000 msg/s consume (100-byte messages, batches of 1,000).

    (a) end to end over loopback against a broker subprocess (--fsync never, then always): a raw
        pipelined socket client built on bayou's own codec; every batch frame is encoded before the
        clock starts (one frame per partition, sent again and again: the topic is not idempotent,
        so each send stores 1,000 new records), so the client only writes bytes and reads acks;
    (b) consume the same records back with pipelined ``CONSUME ... batch=<N>`` (the connection's
        read position advances by itself), counting records from the batch headers;
    (c) the broker alone, in process: CursusService.handle() on the same frame bodies (produce)
        and CONSUME commands, no sockets, so client/socket cost and broker cost are separated;
    (d) optionally (--client-messages N) the published cursus-client Producer, for comparison.

MB/s counts payload bytes (100 B per message by default); a stored Cursus record adds 48 bytes of
fields plus the producer id. --profile prints where the in-process broker spends its time.

    .venv/bin/python benchmarks/cursus_bench.py
    .venv/bin/python benchmarks/cursus_bench.py --messages 200000 --fsync never --profile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bayou.broker import Broker, BrokerConfig  # noqa: E402
from bayou.protocols.cursus.batch import encode_batch  # noqa: E402
from bayou.records.cursus import CursusMessage, encode_message  # noqa: E402
from bayou.server.cursus import Advertised, ConnState, CursusService  # noqa: E402
from bayou.storage import FsyncPolicy, LogConfig  # noqa: E402

_U32 = struct.Struct(">I")
TOPIC = "bench"
ENVELOPE = b"\x00\x00"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def frame(body: bytes) -> bytes:
    return _U32.pack(len(body)) + body


def batch_body(partition: int, batch: int, size: int) -> bytes:
    """One batch of ``batch`` messages of ``size`` payload bytes, as the Python client lays it out."""
    out = bytearray()
    payload = (b"%d-" % partition + b"x" * size)[:size]
    for i in range(batch):
        encode_message(CursusMessage(payload, 0, i + 1, b"bench-producer", b"", 1_700_000_000), out)
    return encode_batch(TOPIC, partition, bytes(out), batch, 1, batch, "1")


def batch_count(body: bytes) -> int:
    """Record count from a batch header (cursus.md 5.1) without decoding the records."""
    if body[:2] != b"\xba\x7c":
        raise SystemExit(f"not a batch: {body[:120]!r}")
    tlen = (body[2] << 8) | body[3]
    alen = body[8 + tlen]
    return int(struct.unpack_from(">i", body, 9 + tlen + alen + 17)[0])


def rate(label: str, msgs: int, seconds: float, size: int, note: str = "") -> dict[str, Any]:
    r = {"label": label, "msgs": msgs, "s": seconds, "msg_s": msgs / seconds,
         "mb_s": msgs * size / seconds / 1e6}
    print(f"  {label:<44} {msgs:>9,} msgs  {seconds:7.2f} s  {r['msg_s']:>11,.0f} msg/s  "
          f"{r['mb_s']:7.1f} MB/s{('  ' + note) if note else ''}", flush=True)
    return r


# -- a raw pipelined client ----------------------------------------------------------------------


class FrameStream:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> FrameStream:
        r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 26)
        sock = w.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(r, w)

    async def recv(self) -> bytes:
        (n,) = _U32.unpack(await self.reader.readexactly(4))
        return await self.reader.readexactly(n) if n else b""

    async def command(self, text: str) -> bytes:
        self.writer.write(frame(ENVELOPE + text.encode()))
        return await self.recv()

    def close(self) -> None:
        self.writer.close()


async def produce_conn(port: int, framed: bytes, batches: int, window: int) -> None:
    c = await FrameStream.open(port)
    sent = acked = 0
    try:
        while acked < batches:
            while sent < batches and sent - acked < window:
                c.writer.write(framed)
                sent += 1
            await c.writer.drain()
            ack = await c.recv()
            if not ack.startswith(b'{"status":"OK"'):
                raise SystemExit(f"produce failed: {ack[:200]!r}")
            acked += 1
    finally:
        c.close()


async def consume_conn(port: int, partition: int, expect: int, batch: int, window: int) -> int:
    c = await FrameStream.open(port)
    req = frame(ENVELOPE + f"CONSUME topic={TOPIC} partition={partition} offset=0 member=bench "
                           f"group=bench-reader batch={batch}".encode())
    got = inflight = 0
    try:
        while got < expect:
            while inflight < window and got + inflight * batch < expect:
                c.writer.write(req)
                inflight += 1
            await c.writer.drain()
            n = batch_count(await c.recv())
            inflight -= 1
            if n == 0 and inflight == 0:
                raise SystemExit(f"partition {partition}: only {got} of {expect} records")
            got += n
        while inflight:  # drain replies to requests sent past the end
            await c.recv()
            inflight -= 1
    finally:
        c.close()
    return got


def start_broker(data: Path, fsync: str, profile: Path | None) -> tuple[subprocess.Popen[bytes], int]:
    port, rtes = free_port(), free_port()
    prefix = [sys.executable] + (["-m", "cProfile", "-o", str(profile)] if profile else []) + ["-m", "bayou"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([*prefix, "serve", "--data-dir", str(data), "--cursus", f"127.0.0.1:{port}",
                             "--rtes", f"127.0.0.1:{rtes}", "--iggy", "off", "--tank", "off", "--http", "off",
                             "--advertised-host", "127.0.0.1",
                             "--fsync", fsync, "--log-level", "warning"], env=env)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("broker did not start")


async def end_to_end(args: argparse.Namespace, fsync: str, frames: list[bytes]) -> list[dict[str, Any]]:
    data = Path(tempfile.mkdtemp(prefix="cursus-bench-"))
    prof = data.parent / f"{data.name}.prof" if args.profile_e2e else None
    proc, port = start_broker(data / "data", fsync, prof)
    results = []
    try:
        c = await FrameStream.open(port)
        reply = await c.command(f"CREATE topic={TOPIC} partitions={args.partitions}")
        c.close()
        if not reply.startswith(b"OK "):
            raise SystemExit(f"CREATE failed: {reply!r}")
        per_part = args.messages // args.batch // args.partitions
        total = per_part * args.batch * args.partitions
        t0 = time.perf_counter()
        await asyncio.gather(*(produce_conn(port, frames[p], per_part, args.window)
                               for p in range(args.partitions)))
        results.append(rate(f"(a) produce e2e, fsync {fsync}", total, time.perf_counter() - t0, args.size,
                            f"{args.partitions} conns x window {args.window}"))
        for batch in args.consume_batch:
            t0 = time.perf_counter()
            counts = await asyncio.gather(*(
                consume_conn(port, p, per_part * args.batch, batch, args.consume_window)
                for p in range(args.partitions)))
            results.append(rate(f"(b) consume e2e, batch={batch}", sum(counts), time.perf_counter() - t0,
                                args.size, f"{args.partitions} conns x window {args.consume_window}"))
            if sum(counts) != total:
                raise SystemExit(f"consumed {sum(counts)} of {total}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)
    if prof is not None and prof.exists():
        print(f"\n  broker subprocess profile (fsync {fsync}), top by own time:")
        print_profile(pstats.Stats(str(prof)), args.top)
        prof.unlink()
    return results


# -- the broker alone ----------------------------------------------------------------------------


async def in_process(args: argparse.Namespace, fsync: str, bodies: list[bytes],
                     profiler: cProfile.Profile | None) -> list[dict[str, Any]]:
    data = Path(tempfile.mkdtemp(prefix="cursus-bench-inproc-"))
    broker = Broker(BrokerConfig(data_dir=data, log=LogConfig(fsync=FsyncPolicy.parse(fsync))))
    await broker.start()
    results = []
    try:
        svc = CursusService(broker, Advertised("127.0.0.1", 9000))
        state = ConnState()
        await svc.handle(ENVELOPE + f"CREATE topic={TOPIC} partitions={args.partitions}".encode(), state)
        per_part = args.messages // args.batch // args.partitions
        total = per_part * args.batch * args.partitions

        async def produce_part(p: int) -> None:
            st = ConnState()
            for _ in range(per_part):
                ack = await svc.handle(bodies[p], st)
                assert isinstance(ack, bytes) and ack.startswith(b'{"status":"OK"'), ack

        def consume_part(batch: int) -> Callable[[int], Awaitable[int]]:
            async def run(p: int) -> int:
                st = ConnState()
                cmd = ENVELOPE + (f"CONSUME topic={TOPIC} partition={p} offset=0 member=bench "
                                  f"group=bench-reader batch={batch}").encode()
                got = 0
                while True:
                    body = await svc.handle(cmd, st)
                    assert isinstance(body, bytes)
                    n = batch_count(body)
                    if not n:
                        return got
                    got += n
            return run

        async def timed(label: str, work: Callable[[int], Awaitable[Any]]) -> list[Any]:
            if profiler:
                profiler.enable()
            t0 = time.perf_counter()
            out = await asyncio.gather(*(work(p) for p in range(args.partitions)))
            dt = time.perf_counter() - t0
            if profiler:
                profiler.disable()
            results.append(rate(label, total, dt, args.size))
            return out

        await timed(f"(c) produce, broker only, fsync {fsync}", produce_part)
        for batch in args.consume_batch:
            counts = await timed(f"(c) consume, broker only, batch={batch}", consume_part(batch))
            if sum(counts) != total:
                raise SystemExit(f"consumed {sum(counts)} of {total}")
    finally:
        await broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    return results


def print_profile(stats: pstats.Stats, top: int) -> None:
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    lines = out.getvalue().splitlines()
    start = next((i for i, ln in enumerate(lines) if "ncalls" in ln), 0)
    for ln in lines[max(0, start - 3):]:
        if ln.strip():
            print("    " + ln)


# -- the published client -----------------------------------------------------------------------


def published_client(args: argparse.Namespace) -> dict[str, Any]:
    from cursus import Producer
    from cursus.config import ProducerConfig

    data = Path(tempfile.mkdtemp(prefix="cursus-bench-client-"))
    proc, port = start_broker(data / "data", "never", None)
    try:
        payload = "x" * args.size
        n = args.client_messages
        cfg = ProducerConfig(topic=TOPIC, brokers=[f"127.0.0.1:{port}"], partitions=args.partitions,
                             batch_size=args.batch, buffer_size=max(10_000, 4 * args.batch), linger_ms=1)
        with Producer(cfg) as p:
            t0 = time.perf_counter()
            busy = 0.0
            for _ in range(n):
                while True:
                    try:
                        p.send(payload)
                        break
                    except BufferError:
                        b0 = time.perf_counter()
                        time.sleep(0.0005)
                        busy += time.perf_counter() - b0
            p.flush()
            dt = time.perf_counter() - t0
            acked = p.unique_ack_count
        note = f"acked {acked:,}; send() waited for buffer space {busy:.2f} s"
        return rate("(d) produce, published cursus-client", n, dt, args.size, note)
    finally:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="payload bytes per message")
    ap.add_argument("--batch", type=int, default=1000, help="messages per produce batch")
    ap.add_argument("--partitions", type=int, default=4, help="partitions = connections")
    ap.add_argument("--window", type=int, default=8, help="batches in flight per connection")
    ap.add_argument("--consume-batch", type=lambda t: [int(x) for x in t.split(",")], default=[1000, 10_000],
                    help="CONSUME batch= values, comma-separated")
    ap.add_argument("--consume-window", type=int, default=4, help="CONSUMEs in flight per connection")
    ap.add_argument("--fsync", default="never,always", help="comma-separated fsync modes for (a)-(c)")
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--skip-inprocess", action="store_true")
    ap.add_argument("--client-messages", type=int, default=100_000,
                    help="also time the published Producer with this many messages (d); 0: skip")
    ap.add_argument("--profile", action="store_true", help="cProfile the in-process broker (c)")
    ap.add_argument("--profile-e2e", action="store_true", help="cProfile the broker subprocess (a, b)")
    ap.add_argument("--top", type=int, default=25, help="profile rows to print")
    args = ap.parse_args()

    try:
        import uvloop
    except ImportError:
        uvloop = None
    run = uvloop.run if uvloop is not None else asyncio.run

    t0 = time.perf_counter()
    bodies = [batch_body(p, args.batch, args.size) for p in range(args.partitions)]
    frames = [frame(b) for b in bodies]
    print(f"cursus batch path: {args.messages:,} messages x {args.size} B, batches of {args.batch} "
          f"({len(bodies[0]):,} B per frame), {args.partitions} partitions, {os.cpu_count()} CPUs "
          f"(client and broker share them); frames encoded in {time.perf_counter() - t0:.2f} s", flush=True)
    results: list[dict[str, Any]] = []
    for fsync in args.fsync.split(","):
        if not args.skip_e2e:
            results += run(end_to_end(args, fsync, frames))
        if not args.skip_inprocess:
            prof = cProfile.Profile() if args.profile else None
            results += run(in_process(args, fsync, bodies, prof))
            if prof is not None:
                print(f"\n  in-process broker profile (fsync {fsync}, produce + consume), top by own time "
                      "(rates above are slowed by the profiler; the event-loop thread only: storage reads "
                      "run in the broker's I/O executor and do not show):")
                print_profile(pstats.Stats(prof), args.top)
                print()
    if args.client_messages:
        result: list[dict[str, Any]] = []
        t = threading.Thread(target=lambda: result.append(published_client(args)))
        t.start()
        t.join()
        results += result
    produce = [r["msg_s"] for r in results if "produce" in r["label"] and "(d)" not in r["label"]]
    consume = [r["msg_s"] for r in results if "consume" in r["label"]]
    print(f"targets: produce >= 500,000 msg/s (best {max(produce, default=0):,.0f}), "
          f"consume >= 1,000,000 msg/s (best {max(consume, default=0):,.0f}); "
          f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
