"""A Structured Streaming query with the ``bayou`` format: copy a topic to another, exactly once,
restartable from its checkpoint.

    .venv/bin/python examples/stream_copy.py --bootstrap 127.0.0.1:8090 --source clicks \\
        --target clicks-copy --checkpoint /tmp/cp-clicks-copy --available-now
    spark-submit ... examples/stream_copy.py --bootstrap HOST:8090 --source clicks \\
        --target clicks-copy --checkpoint hdfs:///cp/clicks-copy

The query reads the source from its earliest offset (for a new checkpoint; a restarted query goes
on from the offsets its checkpoint holds), at most ``--max-offsets-per-trigger`` records per
micro-batch, and appends key, value and headers to the target through the exactly-once sink: the
target is created with message.deduplication=true, so a micro-batch replayed after a crash (its
records written, its commit not) is dropped by the broker instead of doubled.

``--available-now`` processes what the source holds when the query starts, then exits; without
it the query runs with a ``--trigger`` interval until ``--duration`` seconds have passed or the
process is stopped. One line is printed per micro-batch, then a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from pyspark.errors import StreamingQueryException

from bayou.spark import get_session


def build_query(spark: Any, args: argparse.Namespace) -> Any:
    reader = (spark.readStream.format("bayou")
              .option("bayou.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.source)
              .option("startingOffsets", "earliest")
              .option("includeHeaders", "true"))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    writer = (reader.load().select("key", "value", "headers")
              .writeStream.format("bayou")
              .option("bayou.bootstrap.servers", args.bootstrap)
              .option("topic", args.target)
              .option("bayou.sink.partitions", str(args.target_partitions))
              .option("checkpointLocation", args.checkpoint)
              .queryName("bayou_stream_copy"))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True, help="the broker's Iggy listener host:port")
    ap.add_argument("--source", required=True, help="topic to read")
    ap.add_argument("--target", required=True, help="topic to append to")
    ap.add_argument("--checkpoint", required=True, help="checkpoint directory (shared storage)")
    ap.add_argument("--target-partitions", type=int, default=3, help="partitions of a new target")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=0, help="records per micro-batch")
    ap.add_argument("--trigger", default="1 second", help="micro-batch interval")
    ap.add_argument("--available-now", action="store_true", help="process what is there, then exit")
    ap.add_argument("--duration", type=float, default=0, help="stop after this many seconds (0: never)")
    ap.add_argument("--master", help="Spark master (default local[2], or spark-submit's)")
    args = ap.parse_args(argv)

    spark = get_session("bayou-stream-copy", args.master)
    spark.sparkContext.setLogLevel("WARN")
    query = build_query(spark, args)
    started = time.monotonic()
    seen: set[int] = set()
    rows = 0
    error: Exception | None = None
    try:
        while query.isActive:
            if args.duration and time.monotonic() - started > args.duration:
                query.stop()
            query.awaitTermination(0.5)
            rows += report(query, seen)
    except StreamingQueryException as exc:  # the query failed: reported below, exit 1
        error = exc
    rows += report(query, seen)
    first = min(seen, default=None)
    print(f"bayou stream copy: {rows} records in {len(seen)} micro-batches with data "
          f"(batch ids {first}..{max(seen, default=None)}), "
          f"{'failed: ' + str(error) if error else 'stopped'}")
    spark.stop()
    return 1 if error else 0


def report(query: Any, seen: set[int]) -> int:
    """Print each micro-batch that read records and was not printed yet; returns their records.
    (An idle query reports progress under the id of its next batch, with no records.)"""
    rows = 0
    for p in query.recentProgress:
        progress = json.loads(p.json) if hasattr(p, "json") else dict(p)
        batch = int(progress["batchId"])
        if batch in seen or not progress["numInputRows"]:
            continue
        seen.add(batch)
        rows += int(progress["numInputRows"])
        print(f"micro-batch {batch}: {progress['numInputRows']} records", flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
