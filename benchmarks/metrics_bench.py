"""Produce throughput with a Prometheus scrape of /metrics every second vs none (issue 16: target
under 2 % difference).

Prints figures; never passes or fails. One broker subprocess (fsync never, so the produce path is
CPU-bound and any cost of the metrics shows), with ``--partitions`` partitions on other topics so
that a scrape has realistic work (a family sample per partition); then rounds that alternate
"no scrape" and "scrape every second", each producing ``--records`` V1 records over
``--connections`` pipelined connections (V1 has no batches: one request per record, the worst
case for per-request counters). The median of each mode's rounds is compared, twice: as records/s
(wall clock), and as the broker process's CPU time per record (user + system, from /proc), which
a shared, loaded machine disturbs far less: on a CPU-bound broker, throughput is its inverse.

    .venv/bin/python benchmarks/metrics_bench.py --records 60000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from rtes_bench import free_port, producer, start_broker


class Scraper(threading.Thread):
    """GET /metrics every ``interval`` s until stopped; remembers each scrape's time and size."""

    def __init__(self, url: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.interval = interval
        self.stop_flag = threading.Event()
        self.times: list[float] = []
        self.size = 0

    def run(self) -> None:
        while not self.stop_flag.is_set():
            t0 = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as resp:
                self.size = len(resp.read())
            self.times.append(time.perf_counter() - t0)
            self.stop_flag.wait(max(0.0, self.interval - (time.perf_counter() - t0)))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def produce_round(port: int, pid: int, records: int, connections: int, window: int,
                        value: str) -> tuple[float, float]:
    """(records/s, broker CPU microseconds per record) of one round."""
    per = records // connections
    latencies: list[float] = []
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.gather(*(producer(port, i, per, window, value, latencies) for i in range(connections)))
    n = per * connections
    return n / (time.perf_counter() - t0), (cpu_seconds(pid) - cpu0) / n * 1e6


async def create_partitions(port: int, partitions: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for t in range(0, partitions, 10):
        writer.write(f"V1|{t}|ADMIN_CREATE_TOPIC|other{t} 10 1\n".encode())
        await writer.drain()
        line = await reader.readline()
        if b"|OK|" not in line:
            raise SystemExit(f"create failed: {line!r}")
    writer.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=60_000, help="records per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per mode (alternating)")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=500, help="partitions on other topics")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    args = ap.parse_args()
    value = "x" * args.value_size
    with tempfile.TemporaryDirectory(prefix="bayou-metrics-bench-") as tmp:
        port, http = free_port(), free_port()
        proc = start_broker(Path(tmp) / "data", port, "never", "--http", f"127.0.0.1:{http}")
        try:
            await create_partitions(port, args.partitions)
            await produce_round(port, proc.pid, args.records // 4, args.connections, args.window, value)
            plain: list[tuple[float, float]] = []
            scraped: list[tuple[float, float]] = []
            scrape_times: list[float] = []
            size = 0
            for _ in range(args.rounds):
                plain.append(await produce_round(port, proc.pid, args.records, args.connections, args.window,
                                                 value))
                scraper = Scraper(f"http://127.0.0.1:{http}/metrics", args.interval)
                scraper.start()
                try:
                    scraped.append(await produce_round(port, proc.pid, args.records, args.connections,
                                                       args.window, value))
                finally:
                    scraper.stop_flag.set()
                    scraper.join(10)
                scrape_times += scraper.times
                size = scraper.size
            print(f"V1 PRODUCE, fsync never, {args.connections} connections x window {args.window}, "
                  f"{args.records:,} records of {args.value_size} B per round, "
                  f"{args.rounds} rounds per mode, {args.partitions + 3} partitions")
            for what, i, unit in (("throughput", 0, "records/s"), ("broker CPU per record", 1, "us")):
                a = statistics.median(r[i] for r in plain)
                b = statistics.median(r[i] for r in scraped)
                print(f"  {what}:")
                print(f"    no scrape:          median {a:,.1f} {unit}   (rounds: "
                      f"{', '.join(f'{r[i]:,.1f}' for r in plain)})")
                print(f"    scrape every {args.interval:g} s: median {b:,.1f} {unit}   (rounds: "
                      f"{', '.join(f'{r[i]:,.1f}' for r in scraped)})")
                print(f"    difference: {(b - a) / a * 100:+.2f} %")
            took = statistics.median(scrape_times) * 1000
            print(f"  {len(scrape_times)} scrapes of {size:,} B, median {took:.1f} ms each "
                  "(wall clock, behind the produce load)")
            cpu0 = cpu_seconds(proc.pid)
            for _ in range(20):  # the broker idle: what one scrape costs it
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10) as resp:
                    resp.read()
            per = (cpu_seconds(proc.pid) - cpu0) / 20
            print(f"  one scrape, broker idle: {per * 1000:.1f} ms of broker CPU "
                  f"({per * 100 / args.interval:.2f} % of a core at one scrape every {args.interval:g} s)")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main())
