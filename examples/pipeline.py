"""The reference pipeline: events into bayou, Spark Structured Streaming computes windowed
aggregates with a watermark, results go both to a bayou topic (exactly-once) and to Parquet.

What it does
    1. A producer thread sends ``--events`` JSON events ``{"user", "amount", "event_time"}`` to the
       topic ``events-<run>`` with the SDK (``bayou.client.Client.send``), keyed by user. Event
       times run forward with up to 5 s of disorder, and a last heartbeat event far ahead moves the
       watermark past every window so append mode emits them all.
    2. One streaming read (format ``bayou``) feeds two queries: both parse the JSON with
       ``from_json`` and count events and sum amounts per user in 10 s tumbling event-time windows
       with a 30 s watermark (append mode: a window is written once, when it is final).
       Query 1 writes JSON results to the bayou topic ``aggregates-<run>`` (the sink creates it
       with message.deduplication=true: a replayed micro-batch is dropped, not doubled);
       query 2 writes Parquet files under ``--output``.
    3. It stops when both sinks hold every window (checked against aggregates computed from the
       events sent) or after ``--duration`` seconds, prints a summary, and exits 1 on a mismatch.

Run it locally (local[2]; without --bootstrap it starts its own broker in a temporary directory):

    .venv/bin/python examples/pipeline.py
    .venv/bin/python examples/pipeline.py --bootstrap 127.0.0.1:8090 --events 50000

Run it on a cluster, unchanged, with spark-submit: the master, the Python interpreters and every
--conf then come from spark-submit (the README's "Run on a cluster" walks through it on a
standalone cluster, with the exact commands the test suite runs):

    make spark-package                          # dist/bayou.zip
    bayou serve --iggy 10.0.0.5:8090 --rtes off --cursus off --tank off   # an address executors reach
    PYTHONPATH=$PWD/dist/bayou.zip spark-submit --master spark://spark-master:7077 \\
        --py-files dist/bayou.zip --conf spark.pyspark.python=/opt/bayou-venv/bin/python \\
        examples/pipeline.py --bootstrap 10.0.0.5:8090 \\
        --checkpoint hdfs:///pipelines/bayou/checkpoint --output hdfs:///pipelines/bayou/out

  - ``--py-files dist/bayou.zip`` ships bayou to the executors and to this script;
    ``PYTHONPATH`` on spark-submit's own command line is what lets the driver-side Python worker
    that plans a streaming read import it (PySpark 4.3 does not give that worker the
    ``--py-files``). Installing bayou into the interpreter below on every host also does.
  - ``spark.pyspark.python`` (or ``PYSPARK_PYTHON``): the interpreter of every Python worker, on
    the executors and on the driver host; it must exist at that path everywhere and have bayou's
    dependencies (pyarrow, numpy, xxhash, crc32c, cramjam, lz4, zstandard). This script defaults
    it (to its own interpreter) only for a local master.
  - Executors connect to the broker themselves, to the address in ``--bootstrap``: the broker must
    listen on an interface they reach and the host name must resolve on the executors, not just on
    the driver. ``--checkpoint`` and ``--output`` must be on storage every node shares.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayou.client import Client, partition_for_key

WINDOW_S = 10
WATERMARK = "30 seconds"
USERS = 20
HEARTBEAT_USER = "__heartbeat__"


@dataclass
class Expected:
    """Aggregates computed on the producer side, to check what the pipeline wrote."""

    windows: dict[tuple[int, str], tuple[int, float]] = field(default_factory=dict)
    produced: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def produce(bootstrap: str, topic: str, events: int, rate: float, seed: int, exp: Expected) -> None:
    """Send ``events`` events at about ``rate`` per second, then the heartbeat."""
    rng = random.Random(seed)
    base = (int(time.time()) // WINDOW_S) * WINDOW_S - 3600  # an hour ago, on a window boundary
    acc: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0, 0.0])
    batch = 1000
    started = time.monotonic()
    try:
        with Client(bootstrap) as client:
            partitions = client.partition_count(topic)
            for lo in range(0, events, batch):
                by_part: dict[int, tuple[list[bytes], list[bytes | None]]] = defaultdict(lambda: ([], []))
                for i in range(lo, min(lo + batch, events)):
                    user = f"user-{rng.randrange(USERS)}"
                    amount = round(rng.uniform(1, 100), 2)
                    # 100 events per second of event time, up to 5 s late
                    event_ms = base * 1000 + i * 10 - rng.randrange(5000)
                    window = (event_ms // 1000) // WINDOW_S * WINDOW_S
                    acc[(window, user)][0] += 1
                    acc[(window, user)][1] += amount
                    value = json.dumps({"user": user, "amount": amount,
                                        "event_time": _iso(event_ms)}).encode()
                    values, keys = by_part[partition_for_key(user.encode(), partitions)]
                    values.append(value)
                    keys.append(user.encode())
                for part, (values, keys) in by_part.items():
                    client.send(topic, part, values, keys=keys)
                exp.produced = min(lo + batch, events)
                ahead = exp.produced / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            last_ms = base * 1000 + events * 10
            beat = json.dumps({"user": HEARTBEAT_USER, "amount": 0.0,
                               "event_time": _iso(last_ms + 120_000)}).encode()
            client.send(topic, 0, [beat])
        exp.windows = {k: (int(v[0]), round(v[1], 2)) for k, v in acc.items()}
    except BaseException as exc:  # reported by the main thread
        exp.error = exc
    finally:
        exp.done.set()


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def build_queries(spark: Any, bootstrap: str, events_topic: str, results_topic: str,
                  checkpoint: str, output: str, trigger: str) -> tuple[Any, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

    schema = StructType([StructField("user", StringType()), StructField("amount", DoubleType()),
                         StructField("event_time", TimestampType())])
    events = (spark.readStream.format("bayou")
              .option("bayou.bootstrap.servers", bootstrap)
              .option("subscribe", events_topic)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "50000")
              .load()
              .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
              .select("e.*"))
    # No filter drops the heartbeat: Spark pushes a filter on ``user`` below withWatermark (and
    # through the aggregate), and the heartbeat must reach the watermark to move it. Its own
    # window is never emitted: the watermark it sets stays 30 s behind it.
    windows = (events.withWatermark("event_time", WATERMARK)
               .groupBy(F.window("event_time", f"{WINDOW_S} seconds"), "user")
               .agg(F.count("*").alias("events"), F.round(F.sum("amount"), 2).alias("amount"))
               .select(F.col("window.start").alias("window_start"),
                       F.col("window.end").alias("window_end"), "user", "events", "amount"))
    to_bayou = (windows
                .select(F.col("user").alias("key"), F.to_json(F.struct("*")).alias("value"))
                .writeStream.format("bayou")
                .option("bayou.bootstrap.servers", bootstrap)
                .option("topic", results_topic)
                .option("bayou.sink.partitions", "3")
                .option("checkpointLocation", os.path.join(checkpoint, "bayou"))
                .outputMode("append")
                .trigger(processingTime=trigger)
                .queryName("aggregates_to_bayou")
                .start())
    wait_source_started(to_bayou)
    to_parquet = (windows.writeStream.format("parquet")
                  .option("path", output)
                  .option("checkpointLocation", os.path.join(checkpoint, "parquet"))
                  .outputMode("append")
                  .trigger(processingTime=trigger)
                  .queryName("aggregates_to_parquet")
                  .start())
    return to_bayou, to_parquet


def wait_source_started(query: Any, timeout: float = 300.0) -> None:
    """Return once ``query`` is past "Initializing sources" (or has stopped). Each streaming query
    starts a Python worker on the driver to run its source, and Spark gives a new Python worker a
    fixed 10 s to connect back: two started at once on a busy small machine overran it ("Python
    worker failed to connect back"), so the second query waits for the first one's."""
    deadline = time.monotonic() + timeout
    while query.isActive and time.monotonic() < deadline:
        if not str(query.status.get("message", "")).startswith("Initializing"):
            return
        time.sleep(0.2)


def bayou_results(bootstrap: str, topic: str) -> dict[tuple[int, str], tuple[int, float]]:
    out: dict[tuple[int, str], tuple[int, float]] = {}
    dups = 0
    with Client(bootstrap) as client:
        try:
            desc = client.describe_topic(topic)
        except Exception:
            return out
        for po in desc.partitions:
            offset = po.earliest
            while offset < po.latest:
                batch = client.fetch_arrow(topic, po.partition, offset, 10_000)
                if batch.num_rows == 0:
                    break
                for raw in batch.column("value").to_pylist():
                    row = json.loads(raw)
                    key = (_epoch(row["window_start"]), row["user"])
                    dups += key in out
                    out[key] = (row["events"], row["amount"])
                offset = batch.column("offset")[-1].as_py() + 1
    if dups:
        out[(-1, "duplicates")] = (dups, 0.0)  # makes the comparison fail, visibly
    return out


def parquet_results(spark: Any, output: str) -> dict[tuple[int, str], tuple[int, float]]:
    if not (Path(output) / "_spark_metadata").exists() and "://" not in output:
        return {}
    from pyspark.sql import functions as F

    try:
        rows = (spark.read.parquet(output)
                .select(F.col("window_start").cast("long").alias("start"), "user", "events", "amount")
                .collect())
    except Exception:
        return {}
    return {(r.start, r.user): (r.events, r.amount) for r in rows}


def _epoch(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


@contextlib.contextmanager
def own_broker() -> Iterator[str]:
    """A throwaway ``bayou serve`` (Iggy listener only) for a local run without --bootstrap."""
    data = tempfile.mkdtemp(prefix="bayou-pipeline-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "bayou", "serve", "--data-dir", data,
                             "--iggy", f"127.0.0.1:{port}", "--rtes", "off", "--cursus", "off",
                             "--tank", "off", "--http", "off", "--fsync", "never", "--log-level", "warning"])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the broker did not start") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def run(spark: Any, bootstrap: str, *, events: int, rate: float, duration: float, checkpoint: str,
        output: str, trigger: str = "1 second", run_id: str | None = None) -> bool:
    """The whole pipeline on ``spark``; True when both sinks hold exactly the expected windows."""
    run_id = run_id or uuid.uuid4().hex[:8]
    events_topic, results_topic = f"events-{run_id}", f"aggregates-{run_id}"
    with Client(bootstrap) as client:
        client.create_topic(events_topic, 3)
    exp = Expected()
    producer = threading.Thread(target=produce, name="producer", daemon=True,
                                args=(bootstrap, events_topic, events, rate, 7, exp))
    started = time.monotonic()
    producer.start()
    queries = build_queries(spark, bootstrap, events_topic, results_topic, checkpoint, output, trigger)
    got_bayou: dict[tuple[int, str], tuple[int, float]] = {}
    got_parquet: dict[tuple[int, str], tuple[int, float]] = {}
    try:
        while time.monotonic() - started < duration:
            for q in queries:
                if q.exception() is not None:
                    raise RuntimeError(f"query {q.name} failed: {q.exception()}")
            if exp.error is not None:
                raise RuntimeError(f"producer failed: {exp.error}")
            if exp.done.is_set():
                got_bayou = bayou_results(bootstrap, results_topic)
                got_parquet = parquet_results(spark, output)
                if len(got_bayou) >= len(exp.windows) and len(got_parquet) >= len(exp.windows):
                    break
            time.sleep(1)
        got_bayou = bayou_results(bootstrap, results_topic)
        got_parquet = parquet_results(spark, output)
    finally:
        for q in queries:
            q.stop()
    elapsed = time.monotonic() - started
    ok = exp.done.is_set() and got_bayou == exp.windows and got_parquet == exp.windows
    rows_in = sum(p["numInputRows"] for p in _progress(queries[0]))
    print(f"bayou pipeline run {run_id}: {'OK' if ok else 'MISMATCH'}")
    print(f"  events produced        {exp.produced:>10}   (topic {events_topic}, 3 partitions)")
    print(f"  events read by query 1 {rows_in:>10}")
    print(f"  windows expected       {len(exp.windows):>10}   ({WINDOW_S} s tumbling, watermark {WATERMARK})")
    print(f"  windows in bayou       {len(got_bayou):>10}   (topic {results_topic})")
    print(f"  windows in parquet     {len(got_parquet):>10}   ({output})")
    print(f"  elapsed                {elapsed:>10.1f} s")
    if not ok:
        missing = sorted(set(exp.windows) - set(got_bayou))[:5]
        wrong = sorted(k for k in exp.windows if k in got_bayou and got_bayou[k] != exp.windows[k])[:5]
        print(f"  bayou: missing {missing} wrong {wrong}")
    return ok


def _progress(query: Any) -> list[dict[str, Any]]:
    return [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in query.recentProgress]


def session(master: str | None) -> Any:
    """spark-submit's session when launched by it, else ``master`` or local[2]; bayou registered."""
    from bayou.spark import get_session

    spark = get_session("bayou-pipeline", master)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="the broker's Iggy listener host:port (default: start one)")
    ap.add_argument("--master", help="Spark master (default local[2], or spark-submit's)")
    ap.add_argument("--checkpoint", help="checkpoint directory (default: a new temporary one)")
    ap.add_argument("--output", default="pipeline-output", help="Parquet output directory")
    ap.add_argument("--events", type=int, default=20_000, help="events to produce")
    ap.add_argument("--rate", type=float, default=5_000, help="events per second")
    ap.add_argument("--duration", type=float, default=300, help="give up after this many seconds")
    ap.add_argument("--trigger", default="1 second", help="micro-batch interval")
    args = ap.parse_args(argv)
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="bayou-pipeline-checkpoint-")
    run_id = uuid.uuid4().hex[:8]
    output = os.path.join(args.output, run_id) if "://" not in args.output else f"{args.output}/{run_id}"
    spark = session(args.master)
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap or stack.enter_context(own_broker())
        ok = run(spark, bootstrap, events=args.events, rate=args.rate, duration=args.duration,
                 checkpoint=os.path.join(checkpoint, run_id), output=output, trigger=args.trigger,
                 run_id=run_id)
    spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
