"""Spark benchmark: the ``bayou`` data source on local[2] against a broker subprocess on loopback.
Prints figures; never passes or fails. Targets from issue 6: a batch read of 5,000,000 messages of
100 B at >= 1,000,000 rows/s; a streaming query sustaining >= 200,000 rows/s end to end.

Phases:
  load          the SDK fills a topic (Client.send of --batch values a call), for the reads below
  batch-read    spark.read.format("bayou") of the whole topic into the noop sink (every row and
                column materialised by Spark)
  stream-read   readStream (Trigger.AvailableNow, maxOffsetsPerTrigger = --trigger-rows) of the
                topic into the noop sink: the source alone
  stream-e2e    readStream of the topic -> writeStream.format("bayou") into a new deduplicating
                topic (exactly-once sink), Trigger.AvailableNow: bayou to bayou end to end
  stream-live   a producer thread sends --live-rate msg/s while a processingTime query reads them
                into the bayou sink; reports the rows/s the query kept up with

    .venv/bin/python benchmarks/spark_bench.py
    .venv/bin/python benchmarks/spark_bench.py --messages 1000000 --stream-messages 500000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bayou.client import Client  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _report(name: str, rows: int, wall: float, size: int, broker_cpu: float | None) -> None:
    rate = rows / wall if wall else 0.0
    cpu = f"   broker cpu {broker_cpu:6.2f} s" if broker_cpu is not None else ""
    print(f"{name:12s} {rows:>11,d} rows {wall:8.2f} s {rate:>12,.0f} rows/s "
          f"{rate * size / 1e6:8.1f} MB/s{cpu}", flush=True)


def _start_broker(data: Path, fsync: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bayou", "serve", "--data-dir", str(data),
                             "--rtes", "off", "--cursus", "off", "--tank", "off", "--http", "off",
                             "--iggy", f"127.0.0.1:{port}", "--fsync", fsync, "--log-level", "warning"],
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the broker did not start") from None
            time.sleep(0.05)


def _session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from bayou.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("bayou-spark-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.driver.memory", "4g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _fill(client: Client, topic: str, partitions: int, n: int, size: int, batch: int) -> int:
    values = [b"x" * size] * batch
    sent, part = 0, 0
    while sent < n:
        chunk = values if n - sent >= batch else values[: n - sent]
        client.send(topic, part, chunk)
        sent += len(chunk)
        part = (part + 1) % partitions
    return sent


def _progress_rows(query: Any) -> int:
    return sum(json.loads(p.json)["numInputRows"] for p in query.recentProgress)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=5_000_000, help="messages in the batch-read topic")
    ap.add_argument("--stream-messages", type=int, default=2_000_000,
                    help="messages the stream-read and stream-e2e phases read (a prefix of the topic)")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batch", type=int, default=5000, help="values per SDK send while loading")
    ap.add_argument("--trigger-rows", type=int, default=500_000, help="maxOffsetsPerTrigger of the streams")
    ap.add_argument("--live-rate", type=float, default=300_000, help="msg/s the stream-live producer offers")
    ap.add_argument("--live-seconds", type=float, default=20.0)
    ap.add_argument("--fsync", default="never", help="broker fsync policy (always|never|interval:MS)")
    ap.add_argument("--phases", default="batch-read,stream-read,stream-e2e,stream-live")
    args = ap.parse_args()
    phases = set(args.phases.split(","))

    tmp = Path(tempfile.mkdtemp(prefix="bayou-spark-bench-"))
    proc, boot = _start_broker(tmp / "data", args.fsync)
    size, parts = args.size, args.partitions
    print(f"bayou Spark benchmark: local[2], {args.messages:,} messages of {size} B, {parts} partitions, "
          f"fsync={args.fsync}", flush=True)
    try:
        client = Client(boot)
        client.create_topic("bench-src", parts)
        b0, t0 = _cpu(proc.pid), time.perf_counter()
        n = _fill(client, "bench-src", parts, args.messages, size, args.batch)
        _report("load", n, time.perf_counter() - t0, size, _cpu(proc.pid) - b0)
        spark = _session()
        opts = {"bayou.bootstrap.servers": boot}

        def batch_read() -> None:
            df = spark.read.format("bayou").options(**opts, subscribe="bench-src").load()
            df.write.format("noop").mode("overwrite").save()  # warm-up: Python workers, JIT
            for _ in range(2):
                c0, t = _cpu(proc.pid), time.perf_counter()
                df.write.format("noop").mode("overwrite").save()
                _report("batch-read", n, time.perf_counter() - t, size, _cpu(proc.pid) - c0)

        def stream(name: str, sink: str) -> None:
            m = min(args.stream_messages, n)
            per = m // parts
            ending = {"bench-src": {str(p): per for p in range(parts)}}
            # the streams read a prefix of the topic: a copy of it, made once, bounded to m rows
            src = f"bench-stream-{m}"
            if src not in client.list_topics():
                client.create_topic(src, parts)
                (spark.read.format("bayou").options(**opts, subscribe="bench-src",
                                                    endingOffsets=json.dumps(ending)).load()
                 .select("value").write.format("bayou").options(**opts, topic=src).mode("append").save())
            total = sum(client.latest_offset(src, p) for p in range(parts))
            reader = (spark.readStream.format("bayou")
                      .options(**opts, subscribe=src, startingOffsets="earliest",
                               maxOffsetsPerTrigger=str(args.trigger_rows)).load())
            cp = str(tmp / f"cp-{name}")
            if sink == "noop":
                w = reader.writeStream.format("noop")
            else:
                w = (reader.select("key", "value").writeStream.format("bayou")
                     .options(**opts, topic=f"bench-out-{name}", **{"bayou.sink.partitions": str(parts)}))
            c0, t = _cpu(proc.pid), time.perf_counter()
            q = w.option("checkpointLocation", cp).trigger(availableNow=True).start()
            q.awaitTermination()
            wall = time.perf_counter() - t
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            rows = _progress_rows(q)
            assert rows == total, (rows, total)
            _report(name, rows, wall, size, _cpu(proc.pid) - c0)
            batches = [json.loads(p.json) for p in q.recentProgress if json.loads(p.json)["numInputRows"]]
            steady = [b["processedRowsPerSecond"] for b in batches[1:]] or [0.0]
            print(f"{'':12s} {len(batches)} micro-batches (incl. query start); steady batches "
                  f"{sum(steady) / len(steady):,.0f} rows/s as Spark reports processedRowsPerSecond")

        def stream_live() -> None:
            live = "bench-live"
            client.create_topic(live, parts)
            reader = (spark.readStream.format("bayou")
                      .options(**opts, subscribe=live, startingOffsets="earliest").load())
            q = (reader.select("key", "value").writeStream.format("bayou")
                 .options(**opts, topic="bench-live-out", **{"bayou.sink.partitions": str(parts)})
                 .option("checkpointLocation", str(tmp / "cp-live"))
                 .trigger(processingTime="500 milliseconds").start())
            while q.lastProgress is None:  # the first (empty) batch: the Python workers are up
                time.sleep(0.1)
            stop = threading.Event()
            produced = [0]

            def produce() -> None:
                with Client(boot) as c:
                    values = [b"y" * size] * 2000
                    started, part = time.monotonic(), 0
                    while not stop.is_set():
                        c.send(live, part, values)
                        part = (part + 1) % parts
                        produced[0] += len(values)
                        ahead = produced[0] / args.live_rate - (time.monotonic() - started)
                        if ahead > 0:
                            time.sleep(ahead)

            th = threading.Thread(target=produce, daemon=True)
            t = time.perf_counter()
            th.start()
            time.sleep(args.live_seconds)
            stop.set()
            th.join()
            offered = produced[0] / (time.perf_counter() - t)
            # let the query drain what was produced, then measure from first row to last
            deadline = time.monotonic() + 120
            while _progress_rows(q) < produced[0] and time.monotonic() < deadline:
                time.sleep(0.2)
            wall = time.perf_counter() - t
            q.stop()
            rows = _progress_rows(q)
            out = sum(client.latest_offset("bench-live-out", p) for p in range(parts))
            _report("stream-live", rows, wall, size, None)
            print(f"{'':12s} offered {offered:,.0f} msg/s for {args.live_seconds:.0f} s; {out:,d} rows in "
                  f"the output topic (exactly {produced[0]:,d} expected)")

        if "batch-read" in phases:
            batch_read()
        if "stream-read" in phases:
            stream("stream-read", "noop")
        if "stream-e2e" in phases:
            stream("stream-e2e", "bayou")
        if "stream-live" in phases:
            stream_live()
        spark.stop()
        client.close()
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
