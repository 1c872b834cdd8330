"""The Spark sink and source carry any Kafka record exactly: keys of 0 bytes and far past Iggy's
255, null (tombstone) and empty values, headers with null, empty and long values; a long key written
through V1 reads back through the source."""

from __future__ import annotations

import time
from typing import Any

from sparkutil import Broker

from bayou.client.rtes import RtesClient

Hdrs = list[tuple[str, bytes | None]]
ROWS: list[tuple[bytes | None, bytes | None, Hdrs]] = [
    (b"k", b"plain", []),
    (b"", b"empty key", []),
    (b"K" * 300, b"long key", []),
    (b"B" * 70_000, b"big key", []),
    (b"k", None, []),
    (b"k", b"", []),
    (None, b"no key", [("null", None), ("empty", b""), ("long", b"x" * 1000)]),
]


def _schema() -> Any:
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

    header = StructType([StructField("key", StringType(), False), StructField("value", BinaryType(), True)])
    return StructType([StructField("key", BinaryType(), True), StructField("value", BinaryType(), True),
                       StructField("headers", ArrayType(header, False), True)])


def _tagged() -> list[tuple[bytes | None, bytes | None, Hdrs]]:
    """Each row with an ``id`` header first, so rows are matched whatever order Spark writes."""
    return [(k, v, [("id", b"%d" % i), *h]) for i, (k, v, h) in enumerate(ROWS)]


def _collect(spark: Any, broker: Broker, topic: str) -> list[tuple[bytes | None, bytes | None, Hdrs]]:
    df = (spark.read.format("bayou").options(**broker.options(subscribe=topic, includeHeaders="true"))
          .load())
    out = []
    for r in df.collect():
        headers = [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or ()]
        out.append((None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
                    headers))
    return sorted(out, key=lambda row: int(row[2][0][1] or b"-1"))


def test_sink_and_source_carry_any_record(spark: Any, broker: Broker) -> None:
    target = f"anyrec-{time.monotonic_ns()}"
    df = spark.createDataFrame(_tagged(), _schema())
    (df.write.format("bayou").options(**broker.options(topic=target, **{"bayou.sink.partitions": "1"}))
     .mode("append").save())
    assert _collect(spark, broker, target) == _tagged()
    # the SDK reads the sink's records the same way
    batch = broker.client.fetch_arrow(target, 0, 0)
    got = sorted(zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                     [[(h["key"], h["value"]) for h in row] for row in batch.column("headers").to_pylist()],
                     strict=True), key=lambda row: int(row[2][0][1]))
    assert [(k, v, h) for k, v, h in got] == _tagged()


def test_source_reads_long_v1_keys(spark: Any, broker: Broker) -> None:
    topic = broker.topic(1, prefix="v1keys")
    with RtesClient("127.0.0.1", broker.proc.port) as c:
        c.produce(topic, "L" * 400, "long", "1")
        c.produce(topic, "s", "short", "1")
    df = spark.read.format("bayou").options(**broker.options(subscribe=topic)).load()
    got = sorted((bytes(r.key), bytes(r.value)) for r in df.collect())
    assert got == [(b"L" * 400, b"long"), (b"s", b"short")]
