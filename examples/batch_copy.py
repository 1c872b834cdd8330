"""Batch read and write with the ``bayou`` format: copy a topic's records to another topic.

    .venv/bin/python examples/batch_copy.py --bootstrap 127.0.0.1:8090 --source clicks --target clicks-copy
    spark-submit ... examples/batch_copy.py --bootstrap HOST:8090 --source clicks --target clicks-copy

Reads every record the source holds now (``startingOffsets`` earliest, ``endingOffsets`` latest),
keeps key, value and headers, and appends them to the target (created with
``--target-partitions`` partitions and message.deduplication=true if it does not exist), keyed rows
going to the partition the SDK's partitioner picks. Batch writes take ``.mode("append")``: Spark
allows no other save mode for a Python data source that cannot overwrite. Prints the counts read
and written; exits 1 if they differ.
"""

from __future__ import annotations

import argparse
import sys

from bayou.client import Client
from bayou.spark import get_session


def topic_records(bootstrap: str, topic: str) -> int:
    """Records ``topic`` holds now (0 if it does not exist)."""
    with Client(bootstrap) as client:
        if topic not in client.list_topics():
            return 0
        return sum(p.latest - p.earliest for p in client.describe_topic(topic).partitions)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True, help="the broker's Iggy listener host:port")
    ap.add_argument("--source", required=True, help="topic to read")
    ap.add_argument("--target", required=True, help="topic to append to")
    ap.add_argument("--target-partitions", type=int, default=3, help="partitions of a new target")
    ap.add_argument("--master", help="Spark master (default local[2], or spark-submit's)")
    args = ap.parse_args(argv)

    spark = get_session("bayou-batch-copy", args.master)
    spark.sparkContext.setLogLevel("WARN")
    before = topic_records(args.bootstrap, args.target)
    df = (spark.read.format("bayou")
          .option("bayou.bootstrap.servers", args.bootstrap)
          .option("subscribe", args.source)
          .option("startingOffsets", "earliest")
          .option("endingOffsets", "latest")
          .option("includeHeaders", "true")
          .load()
          .select("key", "value", "headers")
          .cache())
    read = df.count()
    (df.write.format("bayou")
     .option("bayou.bootstrap.servers", args.bootstrap)
     .option("topic", args.target)
     .option("bayou.sink.partitions", str(args.target_partitions))
     .mode("append")
     .save())
    written = topic_records(args.bootstrap, args.target) - before
    print(f"bayou batch copy: read {read} records from {args.source}, "
          f"wrote {written} records to {args.target}")
    spark.stop()
    return 0 if read == written else 1


if __name__ == "__main__":
    sys.exit(main())
