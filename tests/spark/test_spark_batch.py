"""Batch reads (offset and timestamp ranges, headers, subscriptions, splitting, data loss) and
batch writes, against a real broker subprocess."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from sparkutil import Broker, wait_for

from bayou.spark.errors import BayouDataLossError
from bayou.spark.options import parse_source_options
from bayou.spark.reader import BayouInputPartition, read_partition


def read(spark: Any, broker: Broker, **options: str) -> Any:
    return spark.read.format("bayou").options(**broker.options(**options)).load()


def rows(df: Any) -> list[tuple[str, int, int, bytes]]:
    return sorted((r.topic, r.partition, r.offset, bytes(r.value))
                  for r in df.select("topic", "partition", "offset", "value").collect())


def test_offset_ranges(spark: Any, broker: Broker) -> None:
    t = broker.topic(2)
    broker.produce(t, 0, [b"a%d" % i for i in range(100)])
    broker.produce(t, 1, [b"b%d" % i for i in range(30)])
    df = read(spark, broker, subscribe=t)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    everything = rows(df)
    assert len(everything) == 130
    assert everything[0] == (t, 0, 0, b"a0") and everything[-1] == (t, 1, 29, b"b29")
    got = rows(read(spark, broker, subscribe=t, startingOffsets=f'{{"{t}": {{"0": 10, "1": -2}}}}',
                    endingOffsets=f'{{"{t}": {{"0": 50, "1": -1}}}}'))
    assert [r[2] for r in got if r[1] == 0] == list(range(10, 50))
    assert [r[2] for r in got if r[1] == 1] == list(range(30))
    # a partition left out of endingOffsets ends at latest
    got = rows(read(spark, broker, subscribe=t, endingOffsets=f'{{"{t}": {{"1": 5}}}}'))
    assert len(got) == 100 + 5


def test_timestamp_ranges(spark: Any, broker: Broker) -> None:
    t = broker.topic(1)
    firsts = []
    for group in range(3):
        broker.produce(t, 0, [b"g%d-%d" % (group, i) for i in range(10)])
        firsts.append(broker.client.fetch_arrow(t, 0, group * 10, 1).column("timestamp")[0].value)
        time.sleep(0.05)
    start_ms, end_ms = firsts[1] // 1000, firsts[2] // 1000  # microseconds -> ms
    got = rows(read(spark, broker, subscribe=t, startingTimestamp=str(start_ms),
                    endingTimestamp=str(end_ms)))
    assert [r[3] for r in got] == [b"g1-%d" % i for i in range(10)]
    # per-partition form; an ending timestamp past every record means latest
    got = rows(read(spark, broker, subscribe=t,
                    startingOffsetsByTimestamp=f'{{"{t}": {{"0": {end_ms}}}}}',
                    endingTimestamp=str(int(time.time() * 1000) + 60_000)))
    assert [r[2] for r in got] == list(range(20, 30))
    # no record at or after the starting timestamp: an error by default, the end with "latest"
    future = str(int(time.time() * 1000) + 60_000)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        read(spark, broker, subscribe=t, startingTimestamp=future).collect()
    assert read(spark, broker, subscribe=t, startingTimestamp=future,
                startingOffsetsByTimestampStrategy="latest").count() == 0


def test_headers_keys_and_subscriptions(spark: Any, broker: Broker) -> None:
    prefix = f"pat{time.monotonic_ns()}"
    a, b = broker.topic(2, prefix=prefix), broker.topic(1, prefix=prefix)
    other = broker.topic(1, prefix="other")
    broker.produce(a, 1, [b"x", b"y"], keys=[b"k1", None], headers=[[("h1", b"v1"), ("h2", b"v2")], []])
    broker.produce(b, 0, [b"z"])
    broker.produce(other, 0, [b"never"])
    df = read(spark, broker, subscribePattern=f"{prefix}-.*", includeHeaders="true")
    assert df.columns[-1] == "headers"
    got = sorted((r.topic, bytes(r.value), r.key and bytes(r.key),
                  [(h.key, bytes(h.value)) for h in r.headers]) for r in df.collect())
    assert got == sorted([(a, b"x", b"k1", [("h1", b"v1"), ("h2", b"v2")]), (a, b"y", None, []),
                          (b, b"z", None, [])])
    assert [bytes(r.value) for r in read(spark, broker, assign=f'{{"{a}": [1]}}').collect()] == [b"x", b"y"]
    assert read(spark, broker, assign=f'{{"{a}": [0]}}').count() == 0
    with pytest.raises(Exception, match="'assign'"):
        read(spark, broker, assign=f'{{"{a}": [7]}}').collect()
    # a subscribed topic that does not exist reads as empty (read() gets InputPartition(None))
    assert read(spark, broker, subscribe="no-such-topic").count() == 0


def test_large_ranges_are_split(spark: Any, broker: Broker) -> None:
    t = broker.topic(2)
    broker.produce(t, 0, [b"%d" % i for i in range(1000)])
    broker.produce(t, 1, [b"%d" % i for i in range(10)])
    df = read(spark, broker, subscribe=t, maxRecordsPerPartition="300")
    assert df.rdd.getNumPartitions() == 4 + 1
    got = rows(df)
    assert [r[2] for r in got if r[1] == 0] == list(range(1000))
    assert read(spark, broker, subscribe=t, minPartitions="8").rdd.getNumPartitions() >= 8
    # small fetches still return every record once
    assert read(spark, broker, subscribe=t, **{"bayou.fetch.maxRecords": "7"}).count() == 1010


def test_bad_options_fail_through_spark(spark: Any, broker: Broker) -> None:
    with pytest.raises(Exception, match=re.escape("'bayou.bootstrap.servers'")):
        spark.read.format("bayou").option("subscribe", "t").load().collect()
    for options, name in [({"subscribe": "t", "assign": '{"t":[0]}'}, "'subscribe'"),
                          ({"subscribe": "t", "startingOffsets": "{oops"}, "'startingOffsets'"),
                          ({"subscribe": "t", "maxRecordsPerPartition": "lots"}, "'maxRecordsPerPartition'")]:
        with pytest.raises(Exception, match=name):
            read(spark, broker, **options).collect()


def retained_topic(broker: Broker) -> str:
    """A topic whose first segments retention has already deleted (30 records, 10 per segment)."""
    t = broker.topic(1, {"segment.bytes": "2048", "retention.ms": "100"})
    for i in range(3):
        broker.produce(t, 0, [b"%02d" % (10 * i + j) + b"x" * 150 for j in range(10)])
    wait_for(lambda: broker.client.earliest_offset(t, 0) > 0, 20, "retention")
    return t


def test_fail_on_data_loss_batch(spark: Any, broker: Broker) -> None:
    t = retained_topic(broker)
    earliest = broker.client.earliest_offset(t, 0)
    from_zero = f'{{"{t}": {{"0": 0}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, broker, subscribe=t, startingOffsets=from_zero).collect()
    got = rows(read(spark, broker, subscribe=t, startingOffsets=from_zero, failOnDataLoss="false"))
    assert [r[2] for r in got] == list(range(earliest, 30))
    assert read(spark, broker, subscribe=t).count() == 30 - earliest  # earliest is no loss


def test_read_partition_notices_deleted_offsets(broker: Broker) -> None:
    """The executor-side check, for retention that strikes between planning and reading."""
    t = retained_topic(broker)
    earliest = broker.client.earliest_offset(t, 0)
    conn = parse_source_options(broker.options(subscribe=t), streaming=False).conn
    with pytest.raises(BayouDataLossError, match="failOnDataLoss"):
        list(read_partition(BayouInputPartition(conn, t, 0, 0, 30, False, True, 1000)))
    batches = list(read_partition(BayouInputPartition(conn, t, 0, 0, 30, False, False, 1000)))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(earliest, 30))
    # offsets past the log end: the log shrank (or the topic was recreated)
    with pytest.raises(BayouDataLossError, match="log now ends at 30"):
        list(read_partition(BayouInputPartition(conn, t, 0, 30, 40, False, True, 1000)))


def test_batch_write(spark: Any, broker: Broker) -> None:
    from pyspark.sql import functions as F

    target = f"out-{time.monotonic_ns()}"
    df = spark.createDataFrame([(f"k{i % 5}", f"v{i}") for i in range(50)], ["key", "value"])
    df = df.withColumn("headers", F.array(F.struct(F.lit("src").alias("key"),
                                                   F.lit(b"test").alias("value"))))
    (df.write.format("bayou").options(**broker.options(topic=target, **{"bayou.sink.partitions": "3",
                                                                         "bayou.compression.type": "lz4"}))
     .mode("append").save())
    back = read(spark, broker, subscribe=target, includeHeaders="true").collect()
    assert sorted(bytes(r.value) for r in back) == sorted(b"v%d" % i for i in range(50))
    assert broker.client.partition_count(target) == 3
    from bayou.client import partition_for_key

    for r in back:  # keyed rows go where the SDK's partitioner sends them
        assert r.partition == partition_for_key(bytes(r.key), 3)
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("src", b"test")]
    # topic and partition columns, no topic option
    t2 = broker.topic(2)
    spark.createDataFrame([(t2, 1, b"p1"), (t2, 0, b"p0")], ["topic", "partition", "value"]) \
        .write.format("bayou").options(**broker.options()).mode("append").save()
    assert sorted((r.partition, bytes(r.value)) for r in read(spark, broker, subscribe=t2).collect()) \
        == [(0, b"p0"), (1, b"p1")]
    with pytest.raises(Exception, match="'topic'"):
        spark.createDataFrame([("v",)], ["value"]).write.format("bayou") \
            .options(**broker.options()).mode("append").save()
    with pytest.raises(Exception, match="'value'"):
        spark.createDataFrame([("v",)], ["body"]).write.format("bayou") \
            .options(**broker.options(topic=t2)).mode("append").save()


def test_save_modes_other_than_append_say_what_to_do(spark: Any, broker: Broker) -> None:
    """Spark itself rejects a plain .save() (ErrorIfExists) and Ignore for every Python data
    source, naming Append and Overwrite; Overwrite reaches bayou, whose error names the fix."""
    t = broker.topic(1)
    df = spark.createDataFrame([("v",)], ["value"])

    def writer() -> Any:
        return df.write.format("bayou").options(**broker.options(topic=t))

    with pytest.raises(Exception, match=r"UNSUPPORTED_DATA_SOURCE_SAVE_MODE.*ErrorIfExists"):
        writer().save()
    with pytest.raises(Exception, match=r"UNSUPPORTED_DATA_SOURCE_SAVE_MODE.*Ignore"):
        writer().mode("ignore").save()
    fix = re.escape("bayou option 'mode'") + ".*" + re.escape('.mode("append")')
    with pytest.raises(Exception, match=fix):
        writer().mode("overwrite").save()
    assert broker.values(t) == []
    writer().mode("append").save()
    assert broker.values(t) == [b"v"]
