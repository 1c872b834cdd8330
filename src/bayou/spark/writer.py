"""The sink, batch and streaming: rows to bayou topics, exactly once per (query, batch).

Every record is sent with a u128 message id ``producer << 64 | sequence``. The producer id is a
64-bit hash of where the rows come from: (query id, batch id, Spark partition, target topic,
target partition) for a stream, (a token drawn once per write, Spark partition, target topic,
target partition) for a batch write; the sequence counts that group's rows from 1. A topic created
with ``message.deduplication=true`` drops a message whose sequence is not above the last one stored
for its producer, so when Spark replays a micro-batch (a task retried, a query restarted after a
crash before the batch was committed) the records already written are dropped, not doubled.

That holds when the replay hands each Spark partition the same rows in the same order, which a
bayou or Kafka source and row-wise transformations guarantee. After a shuffle the order within a
partition may differ between attempts: a fully written batch is still dropped whole (same row count
per group), but a task that died half-way could then resend different rows under the sequences it
already used. ``sortWithinPartitions`` before the write makes the order deterministic.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from bayou.client import Client, partition_for_key
from bayou.client.errors import TopicExistsError, UnknownTopicError
from bayou.spark import connection
from bayou.spark.errors import BayouOptionError
from bayou.spark.options import SinkOptions

DEDUP_CONFIG = {"message.deduplication": "true"}


@dataclass(frozen=True)
class SinkPlan:
    """What the driver learnt from the options and the input schema; shipped to every task."""

    opts: SinkOptions
    has_key: bool
    has_headers: bool
    has_topic: bool
    has_partition: bool


@dataclass(frozen=True)
class BayouCommitMessage(WriterCommitMessage):
    records: int = 0
    groups: int = 0  # (topic, partition) groups the task wrote to


def plan_sink(schema: StructType, opts: SinkOptions) -> SinkPlan:
    """Check the input columns (Kafka's sink columns) and make sure the ``topic`` option's topic
    exists; raises an error naming the column or option at fault."""
    types = {f.name.lower(): f.dataType for f in schema.fields}

    def check(name: str, ok: tuple[type[DataType], ...], want: str) -> bool:
        dt = types.get(name)
        if dt is None:
            return False
        if not isinstance(dt, ok):
            raise ValueError(f"bayou sink: column '{name}' must be {want}, not {dt.simpleString()}")
        return True

    if not check("value", (BinaryType, StringType), "binary or string"):
        raise ValueError("bayou sink: the input needs a 'value' column (binary or string); optional "
                         "columns are key, headers, topic and partition")
    has_key = check("key", (BinaryType, StringType), "binary or string")
    has_topic = check("topic", (StringType,), "string")
    has_partition = check("partition", (IntegerType, LongType, ShortType), "int")
    has_headers = check("headers", (ArrayType,), "array<struct<key: string, value: binary>>")
    if has_headers:
        element = types["headers"].elementType  # type: ignore[attr-defined]
        names = [f.name for f in element.fields] if isinstance(element, StructType) else []
        if names != ["key", "value"] or not isinstance(element.fields[0].dataType, StringType) \
                or not isinstance(element.fields[1].dataType, (BinaryType, StringType)):
            raise ValueError("bayou sink: column 'headers' must be array<struct<key: string, value: "
                             f"binary>>, not {types['headers'].simpleString()}")
    if opts.topic is None and not has_topic:
        raise BayouOptionError("topic", "the sink needs a topic option or a 'topic' column")
    if opts.topic is not None:
        connection.call(opts.conn, lambda c: ensure_topic(c, str(opts.topic), opts.new_topic_partitions))
    return SinkPlan(opts, has_key, has_headers, has_topic, has_partition)


def ensure_topic(client: Client, topic: str, partitions: int) -> int:
    """The partition count of ``topic``, creating it (deduplicating, ``partitions`` partitions) if
    it does not exist. Exactly-once needs message.deduplication=true on every target topic: a
    topic made some other way must have been created with it."""
    try:
        return client.partition_count(topic)
    except UnknownTopicError:
        pass
    with contextlib.suppress(TopicExistsError):  # another task may have created it first
        client.create_topic(topic, partitions, dict(DEDUP_CONFIG))
    return client.partition_count(topic)


def producer_id(seed: str, topic: str, partition: int) -> int:
    digest = hashlib.blake2b(f"{seed}\x00{topic}\x00{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


@dataclass
class _Group:
    topic: str
    partition: int
    producer: int
    sent: int = 0  # sequence of the last record handed to a send
    values: list[bytes | None] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] = field(default_factory=list)


class SinkTask:
    """One Spark task's writes: rows grouped by target (topic, partition), numbered per group and
    sent in chunks of ``batch_size``."""

    def __init__(self, plan: SinkPlan, seed: str) -> None:
        self.plan = plan
        self.seed = seed
        self.groups: dict[tuple[str, int], _Group] = {}
        self.counts: dict[str, int] = {}
        self.records = 0

    def partition_count(self, topic: str) -> int:
        n = self.counts.get(topic)
        if n is None:
            opts = self.plan.opts
            n = connection.call(opts.conn, lambda c: ensure_topic(c, topic, opts.new_topic_partitions))
            self.counts[topic] = n
        return n

    def unkeyed_partition(self, topic: str) -> int:
        """Rows with neither key nor partition: every row of this task to one partition, picked by
        hashing the task's seed, so a replay picks the same one and tasks spread over partitions."""
        return producer_id(self.seed, topic, -1) % self.partition_count(topic)

    def group(self, topic: str, partition: int) -> _Group:
        g = self.groups.get((topic, partition))
        if g is None:
            n = self.partition_count(topic)
            if not 0 <= partition < n:
                raise ValueError(f"bayou sink: partition {partition} out of range: topic {topic!r} has "
                                 f"{n} partitions")
            g = _Group(topic, partition, producer_id(self.seed, topic, partition))
            self.groups[(topic, partition)] = g
        return g

    def add(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        plan = self.plan
        cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        values = _binary_list(cols["value"])  # a null value stays null (Kafka's tombstone)
        key_col = cols["key"] if plan.has_key else None
        # a key column of nulls only (e.g. a source's key that was never set) is no key at all
        keys = _binary_list(key_col, null=None) if key_col is not None and key_col.null_count < n else None
        headers = _headers_list(cols["headers"]) if plan.has_headers else None
        fixed = plan.opts.topic
        if fixed is not None and keys is None and not plan.has_partition:
            g = self.group(fixed, self.unkeyed_partition(fixed))
            g.values.extend(values)
            if headers is not None:
                g.headers.extend(headers)
            self.flush(g, full_only=True)
            return
        topics = cols["topic"].to_pylist() if fixed is None else None
        parts = cols["partition"].to_pylist() if plan.has_partition else None
        for i in range(n):
            topic = fixed if topics is None else topics[i]
            if topic is None:
                raise ValueError("bayou sink: a row has a null topic and there is no topic option")
            key = keys[i] if keys is not None else None
            part = parts[i] if parts is not None else None
            if part is None:
                part = (partition_for_key(key, self.partition_count(topic)) if key is not None
                        else self.unkeyed_partition(topic))
            g = self.group(topic, part)
            g.values.append(values[i])
            if keys is not None:
                g.keys.append(key)
            if headers is not None:
                g.headers.append(headers[i])
            if len(g.values) >= plan.opts.batch_size:
                self.flush(g)

    def flush(self, g: _Group, *, full_only: bool = False) -> None:
        """Send ``g``'s pending rows in chunks of ``batch_size`` (only whole chunks with
        ``full_only``, the rest waits for more rows or the end of the task)."""
        size = self.plan.opts.batch_size
        total = len(g.values)
        stop = total - total % size if full_only else total
        for lo in range(0, stop, size):
            hi = min(lo + size, stop)
            values = g.values[lo:hi]
            keys = g.keys[lo:hi] if g.keys else None
            headers = g.headers[lo:hi] if g.headers else None
            first = g.sent + 1
            base = (g.producer << 64) | first
            ids = range(base, base + len(values))  # sequences stay far below 2**64
            connection.call(self.plan.opts.conn, functools.partial(
                Client.send, topic=g.topic, partition=g.partition, values=values, keys=keys,
                headers=headers, message_ids=ids, compression=self.plan.opts.compression))
            g.sent += len(values)
            self.records += len(values)
        if stop:
            del g.values[:stop]
            del g.keys[:stop]
            del g.headers[:stop]

    def finish(self) -> BayouCommitMessage:
        for g in self.groups.values():
            self.flush(g)
        return BayouCommitMessage(self.records, len(self.groups))


def _binary_list(col: pa.Array, null: bytes | None = None) -> list[Any]:
    """A binary or string column as bytes; a null value becomes ``null``. Keys, values and header
    values Iggy cannot carry itself (null, empty, over 255 bytes) travel in bayou's record envelope
    (``bayou.client.wire``), so they come back exactly."""
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    if col.null_count and null is not None:
        col = col.fill_null(null)
    values: list[Any] = col.to_pylist()
    return values


def _headers_list(col: pa.Array) -> list[list[tuple[str, bytes | None]]]:
    out: list[list[tuple[str, bytes | None]]] = []
    for row in col.to_pylist():
        hdrs: list[tuple[str, bytes | None]] = []
        for h in row or ():
            value = h["value"]
            if isinstance(value, str):
                value = value.encode()
            hdrs.append((h["key"], value))  # a null header value stays null
        out.append(hdrs)
    return out


def _run(plan: SinkPlan, seed: str, iterator: Iterator[pa.RecordBatch]) -> BayouCommitMessage:
    task = SinkTask(plan, seed)
    for batch in iterator:
        task.add(batch)
    return task.finish()


class BayouBatchWriter(DataSourceArrowWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan
        # Drawn once on the driver and shipped to every task: a retried task reuses its producer
        # ids, so the broker drops what the failed attempt already stored.
        self.token = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BayouCommitMessage:
        ctx = TaskContext.get()
        spark_partition = ctx.partitionId() if ctx is not None else 0
        return _run(self.plan, f"batch\x00{self.token}\x00{spark_partition}", iterator)


class BayouStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan
        self.fallback = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BayouCommitMessage:
        ctx = TaskContext.get()
        query = batch = None
        spark_partition = 0
        if ctx is not None:
            query = ctx.getLocalProperty("sql.streaming.queryId")
            batch = ctx.getLocalProperty("streaming.sql.batchId")
            spark_partition = ctx.partitionId()
        if query is None or batch is None:  # not seen in practice; then only at-least-once
            query, batch = self.fallback, "0"
        return _run(self.plan, f"stream\x00{query}\x00{batch}\x00{spark_partition}", iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every record is stored when its task ends; a replay of ``batchId`` is
        dropped by the broker, so there is nothing to make atomic here."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records of tasks that succeeded stay; the retry of the batch resends them under the
        same ids and the broker drops them."""
