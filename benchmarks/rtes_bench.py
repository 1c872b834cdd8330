"""End-to-end V1 line protocol benchmark over loopback against a real broker subprocess.

Prints figures; never passes or fails. Each PRODUCE carries one record (the protocol has no batch
form), so this measures per-request cost: N connections, each pipelining WINDOW requests.

    .venv/bin/python benchmarks/rtes_bench.py --records 100000 --connections 4 --fsync always
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(data: Path, port: int, fsync: str, *extra: str) -> subprocess.Popen[bytes]:
    """A broker serving V1 only (``extra`` flags override, e.g. ``--http 127.0.0.1:PORT``)."""
    proc = subprocess.Popen([sys.executable, "-m", "bayou", "serve", "--data-dir", str(data),
                             "--rtes", f"127.0.0.1:{port}", "--cursus", "off", "--iggy", "off",
                             "--tank", "off", "--http", "off", "--fsync", fsync, "--log-level", "warning",
                             *extra])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("broker did not start")


async def producer(port: int, conn_id: int, count: int, window: int, value: str,
                   latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = 0
    acked = 0
    stamps: list[float] = []
    while acked < count:
        while sent < count and sent - acked < window:
            writer.write(f"V1|{sent}|PRODUCE|bench k{conn_id}-{sent % 97}:{value}\n".encode())
            stamps.append(time.perf_counter())
            sent += 1
        await writer.drain()
        line = await reader.readline()
        if b"|OK|" not in line:
            raise SystemExit(f"produce failed: {line!r}")
        latencies.append(time.perf_counter() - stamps[acked])
        acked += 1
    writer.close()


async def consume_all(port: int, partitions: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 26)
    total = 0
    for p in range(partitions):
        offset = 0
        while True:
            writer.write(f"V1|c|CONSUME|bench {p} {offset}\n".encode())
            await writer.drain()
            line = (await reader.readline()).decode()
            msgs = line.split("messages=", 1)[1].split(" ", 1)[0]
            if not msgs:
                break
            items = msgs.split(",")
            total += len(items)
            offset = int(items[-1].split(":", 1)[0]) + 1
    writer.close()
    return total


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--window", type=int, default=64, help="pipelined requests per connection")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--fsync", default="never")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bayou-rtes-bench-") as tmp:
        port = free_port()
        proc = start_broker(Path(tmp) / "data", port, args.fsync)
        try:
            value = "x" * args.value_size
            per = args.records // args.connections
            latencies: list[float] = []
            t0 = time.perf_counter()
            await asyncio.gather(*(producer(port, i, per, args.window, value, latencies)
                                   for i in range(args.connections)))
            dt = time.perf_counter() - t0
            n = per * args.connections
            latencies.sort()
            print(f"V1 PRODUCE (fsync={args.fsync}, {args.connections} connections x window {args.window}):"
                  f" {n:,} records of {args.value_size} B in {dt:.2f} s")
            print(f"    {n / dt:,.0f} records/s   {n * args.value_size / dt / 2**20:,.1f} MiB/s   "
                  f"latency p50 {latencies[len(latencies) // 2] * 1000:.2f} ms   "
                  f"p99 {latencies[int(len(latencies) * 0.99)] * 1000:.2f} ms")
            t0 = time.perf_counter()
            got = await consume_all(port, 3)
            dt = time.perf_counter() - t0
            print(f"V1 CONSUME: {got:,} records in {dt:.2f} s   {got / dt:,.0f} records/s")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main())
