"""Structured Streaming against a real broker: restart from a checkpoint, a replayed sink batch,
admission control, Trigger.AvailableNow, partitions added mid-stream, failOnDataLoss."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from sparkutil import Broker, wait_for

pytestmark = pytest.mark.slow


def stream(spark: Any, broker: Broker, **options: str) -> Any:
    return spark.readStream.format("bayou").options(**broker.options(**options)).load()


def progress(query: Any) -> list[dict[str, Any]]:
    return [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in query.recentProgress]


def data_batches(query: Any) -> list[dict[str, Any]]:
    return [p for p in progress(query) if p["numInputRows"] > 0]


def to_bayou(df: Any, broker: Broker, checkpoint: str, topic: str, **trigger: Any) -> Any:
    return (df.select("key", "value").writeStream.format("bayou")
            .options(**broker.options(topic=topic, **{"bayou.sink.partitions": "2"}))
            .option("checkpointLocation", checkpoint).trigger(**trigger).start())


def run_available_now(df: Any, broker: Broker, checkpoint: str, topic: str) -> Any:
    q = to_bayou(df, broker, checkpoint, topic, availableNow=True)
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    return q


def values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def test_restart_from_checkpoint_delivers_exactly_once(spark: Any, broker: Broker, checkpoint: str) -> None:
    src, dst = broker.topic(3), f"dst-{uuid.uuid4().hex[:8]}"
    sent: list[bytes] = []
    for p in range(3):
        sent += values(100, f"a{p}")
        broker.produce(src, p, values(100, f"a{p}"), keys=[b"k%d" % i for i in range(100)])
    df = stream(spark, broker, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger="40")
    q = to_bayou(df, broker, checkpoint, dst, processingTime="50 milliseconds")
    wait_for(lambda: len(data_batches(q)) >= 3, 90, "three micro-batches")
    q.stop()
    first_run = len(broker.values(dst))
    assert 0 < first_run < 300  # stopped mid-run
    for p in range(3):
        sent += values(50, f"b{p}")
        broker.produce(src, p, values(50, f"b{p}"))
    run_available_now(stream(spark, broker, subscribe=src, startingOffsets="earliest",
                             maxOffsetsPerTrigger="400"), broker, checkpoint, dst)
    got = broker.values(dst)
    assert len(got) == len(sent) == 450
    assert sorted(got) == sorted(sent)


def test_replayed_sink_batch_writes_no_duplicates(spark: Any, broker: Broker, tmp_path: Path) -> None:
    src = broker.topic(2)
    for p in range(2):
        broker.produce(src, p, values(50, f"r{p}"))
    dedup = f"dedup-{uuid.uuid4().hex[:8]}"  # created by the sink: message.deduplication=true
    plain = broker.topic(2, prefix="plain")  # created without it: the control
    for target in (dedup, plain):
        cp = str(tmp_path / target)
        df = stream(spark, broker, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger="60")
        q = run_available_now(df, broker, cp, target)
        assert [b["numInputRows"] for b in data_batches(q)] == [60, 40]
        assert len(broker.values(target)) == 100
        last = max(int(f.name) for f in (Path(cp) / "commits").iterdir() if f.name.isdigit())
        (Path(cp) / "commits" / str(last)).unlink()
        (Path(cp) / "commits" / f".{last}.crc").unlink(missing_ok=True)  # or Spark refuses to rewrite it
        q = run_available_now(stream(spark, broker, subscribe=src, maxOffsetsPerTrigger="60"), broker, cp,
                              target)
        replayed = data_batches(q)
        assert [(b["batchId"], b["numInputRows"]) for b in replayed] == [(last, 40)]
    assert sorted(broker.values(dedup)) == sorted(values(50, "r0") + values(50, "r1"))
    assert len(broker.values(plain)) == 140  # without deduplication the replay doubles the batch


def test_admission_control_and_checkpoint_offsets(spark: Any, broker: Broker, checkpoint: str) -> None:
    src = broker.topic(3)
    for p, n in enumerate((200, 40, 10)):
        broker.produce(src, p, values(n, f"p{p}"))
    name = f"adm_{uuid.uuid4().hex[:8]}"
    df = stream(spark, broker, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger="60")
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    sizes = [b["numInputRows"] for b in data_batches(q)]
    assert sizes == [60, 60, 60, 60, 10]
    rows = spark.table(name).select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (p, o) for p, n in enumerate((200, 40, 10)) for o in range(n))
    # Spark checkpoints Kafka's offset JSON (string partition keys); the last one is the log end
    offsets_dir = Path(checkpoint) / "offsets"
    last = max(int(f.name) for f in offsets_dir.iterdir() if f.name.isdigit())
    doc = json.loads((offsets_dir / str(last)).read_text().strip().splitlines()[-1])
    assert doc == {src: {"0": 200, "1": 40, "2": 10}}


def test_latest_start_and_partitions_added_mid_stream(spark: Any, broker: Broker, checkpoint: str) -> None:
    src = broker.topic(1)
    broker.produce(src, 0, values(10, "before"))  # before the query: not read (startingOffsets=latest)
    name = f"grow_{uuid.uuid4().hex[:8]}"
    q = (stream(spark, broker, subscribe=src, includeHeaders="true").writeStream.format("memory")
         .queryName(name).option("checkpointLocation", checkpoint)
         .trigger(processingTime="50 milliseconds").start())
    try:
        wait_for(lambda: q.lastProgress is not None, 60, "the first trigger")
        broker.produce(src, 0, values(20, "p0"), headers=[[("h", b"1")]] * 20)
        wait_for(lambda: spark.table(name).count() == 20, 60, "20 rows")
        broker.client.create_partitions(src, 3)
        broker.produce(src, 1, values(5, "p1"))
        broker.produce(src, 2, values(7, "p2"))
        wait_for(lambda: spark.table(name).count() == 32, 60, "rows of the new partitions")
    finally:
        q.stop()
    rows = spark.table(name).collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        [(0, 10 + i) for i in range(20)] + [(1, i) for i in range(5)] + [(2, i) for i in range(7)])
    assert all([(h.key, bytes(h.value)) for h in r.headers] == [("h", b"1")]
               for r in rows if r.partition == 0)


def test_fail_on_data_loss_stream(spark: Any, broker: Broker, tmp_path: Path) -> None:
    t = broker.topic(1, {"segment.bytes": "2048", "retention.ms": "100"})
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")

    def start(**extra: str) -> Any:
        return (stream(spark, broker, subscribe=t, startingOffsets="earliest", **extra)
                .select("offset", "value").writeStream.format("parquet").option("path", out)
                .option("checkpointLocation", cp).trigger(availableNow=True).start())

    broker.produce(t, 0, [b"first" + b"x" * 150] * 5)
    q = start()
    q.awaitTermination(120)
    assert spark.read.parquet(out).count() == 5
    # while the query is down, retention deletes records it has not read
    for i in range(3):
        broker.produce(t, 0, [b"%02d" % (10 * i + j) + b"x" * 150 for j in range(10)])
    wait_for(lambda: broker.client.earliest_offset(t, 0) > 5, 20, "retention")
    earliest = broker.client.earliest_offset(t, 0)
    q = start()
    with pytest.raises(Exception, match="failOnDataLoss"):
        q.awaitTermination(120)
    q = start(failOnDataLoss="false")
    q.awaitTermination(120)
    assert q.exception() is None
    offsets = sorted(r.offset for r in spark.read.parquet(out).collect())
    # retention (100 ms) may delete more before the last query starts: it resumes at the log
    # start it then finds, at or after ``earliest``, and reads every record from there on
    resumed = offsets[5] if len(offsets) > 5 else 35
    assert resumed >= earliest and offsets == list(range(5)) + list(range(resumed, 35)), offsets


def test_stream_bad_options(spark: Any, broker: Broker) -> None:
    for options, name in [({"subscribe": "t", "endingOffsets": "latest"}, "endingOffsets"),
                          ({"subscribe": "t", "maxOffsetsPerTrigger": "x"}, "maxOffsetsPerTrigger"),
                          ({"subscribe": "t", "assign": '{"t":[0]}'}, "subscribe")]:
        with pytest.raises(Exception, match=re.escape(f"'{name}'")):
            q = stream(spark, broker, **options).writeStream.format("memory").queryName("bad").start()
            try:
                q.awaitTermination(60)
            finally:
                q.stop()
