"""The batch and streaming readers: planning on the driver, reading on the executors.

Planning (``Catalog``, ``partitions``, ``latestOffset``) runs in a driver-side Python process;
``read`` runs in executor Python workers on a pickled copy of the reader, so it must not rely on
anything the driver set later: each ``BayouInputPartition`` carries all a read needs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from bayou.client import Client
from bayou.client.errors import UnknownPartitionError, UnknownTopicError
from bayou.spark import connection
from bayou.spark.errors import BayouDataLossError, BayouOptionError
from bayou.spark.offsets import OffsetMap, OffsetRange, from_json, rate_limit, split_ranges, to_json
from bayou.spark.options import (
    EARLIEST,
    LATEST,
    ConnectionSpec,
    OffsetSpec,
    SourceOptions,
    TopicPartition,
)

log = logging.getLogger("bayou.spark")

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
              "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"


def schema_ddl(include_headers: bool) -> str:
    return f"{SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else SCHEMA_DDL


@dataclass(frozen=True)
class BayouInputPartition(InputPartition):
    """One Spark task's read: offsets ``start`` to ``end`` (exclusive) of one partition."""

    conn: ConnectionSpec
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    fetch_max_records: int


def _input_partition(opts: SourceOptions, r: OffsetRange) -> BayouInputPartition:
    return BayouInputPartition(opts.conn, r.topic, r.partition, r.start, r.end, opts.include_headers,
                               opts.fail_on_data_loss, opts.fetch_max_records)


def report_data_loss(fail: bool, detail: str) -> None:
    if fail:
        raise BayouDataLossError(detail)
    log.warning("%s; some data may have been lost (failOnDataLoss=false: skipping it)", detail)


def read_partition(p: BayouInputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of ``p``'s offsets, one per fetch. A fetch that starts past the offset
    asked for means the records in between were deleted (when the log start has passed them) or
    never existed (a gap, e.g. after compaction); only the first is data loss."""
    columns = [*COLUMNS, "headers"] if p.include_headers else list(COLUMNS)
    offset = p.start
    where = f"{p.topic}/{p.partition}"
    while offset < p.end:
        want = min(p.fetch_max_records, p.end - offset)

        def fetch(c: Client, at: int = offset, n: int = want) -> pa.RecordBatch:
            return c.fetch_arrow(p.topic, p.partition, at, n, end_offset=p.end,
                                 include_headers=p.include_headers)

        try:
            batch = connection.call(p.conn, fetch)
        except (UnknownTopicError, UnknownPartitionError):
            report_data_loss(p.fail_on_data_loss, f"{where} no longer exists (reading offsets {offset} "
                             f"to {p.end})")
            return
        if batch.num_rows == 0:
            latest = connection.call(p.conn, lambda c: c.latest_offset(p.topic, p.partition))
            report_data_loss(p.fail_on_data_loss, f"{where}: offsets {offset} to {p.end} are gone, the "
                             f"log now ends at {latest}")
            return
        offsets = batch.column("offset")
        first = offsets[0].as_py()
        if first > offset:
            earliest = connection.call(p.conn, lambda c: c.earliest_offset(p.topic, p.partition))
            if earliest > offset:
                report_data_loss(p.fail_on_data_loss, f"{where}: offsets {offset} to "
                                 f"{min(first, p.end)} were deleted (the log now starts at {earliest})")
        yield batch.select(columns)
        offset = offsets[-1].as_py() + 1


class Catalog:
    """The driver's view of the subscribed partitions and where their logs start and end."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def current(self, *, strict: bool = False) -> dict[TopicPartition, tuple[int, int]]:
        """(earliest, latest) of every partition the subscription covers now. With ``strict``, an
        assigned partition that does not exist is an error (at query start); otherwise it is left
        out (mid-query, a vanished partition is data loss, found by comparing offsets)."""
        sub = self.opts.subscription
        spec = self.opts.conn
        if sub.kind == "subscribe":
            topics = list(sub.topics)
        elif sub.kind == "subscribePattern":
            topics = [t for t in connection.call(spec, lambda c: c.list_topics()) if sub.matches(t)]
        else:
            topics = sorted({t for t, _p in sub.assigned})
        out: dict[TopicPartition, tuple[int, int]] = {}
        for topic in topics:
            try:
                desc = connection.call(spec, functools.partial(Client.describe_topic, topic=topic))
            except UnknownTopicError:
                if strict and sub.kind == "assign":
                    raise BayouOptionError("assign", f"topic {topic!r} does not exist") from None
                continue  # subscribed topics may appear later; their partitions start at earliest
            for po in desc.partitions:
                out[(topic, po.partition)] = (po.earliest, po.latest)
        if sub.kind == "assign":
            missing = [tp for tp in sub.assigned if tp not in out]
            if missing and strict:
                raise BayouOptionError("assign", "no such partitions: "
                                       + ", ".join(f"{t}/{p}" for t, p in missing))
            out = {tp: out[tp] for tp in sub.assigned if tp in out}
        return out

    def resolve(self, spec: OffsetSpec, current: dict[TopicPartition, tuple[int, int]], *,
                start: bool) -> OffsetMap:
        """Concrete offsets for ``spec`` in every current partition."""
        unknown = spec.named() - current.keys()
        if unknown:
            raise BayouOptionError(spec.option, "names partitions outside the subscription or that do "
                                   "not exist: " + ", ".join(f"{t}/{p}" for t, p in sorted(unknown)))
        out: OffsetMap = {}
        for tp, (earliest, latest) in current.items():
            ts = spec.timestamp if spec.timestamp is not None else spec.timestamps.get(tp)
            if ts is not None:
                topic, part = tp
                found = connection.call(self.opts.conn, functools.partial(
                    Client.offset_for_time, topic=topic, partition=part, timestamp_ms=ts))
                if found is None:
                    if start and self.opts.timestamp_strategy == "error":
                        raise BayouOptionError(spec.option, f"no record of {topic}/{part} has a timestamp "
                                               f"at or after {ts}; set startingOffsetsByTimestampStrategy "
                                               "to latest to start such partitions at their end")
                    found = latest
                out[tp] = found
                continue
            offset = spec.offsets.get(tp, spec.default)
            out[tp] = earliest if offset == EARLIEST else latest if offset == LATEST else offset
        return out


class BayouBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        assert opts.ending is not None
        catalog = Catalog(opts)
        current = catalog.current(strict=True)
        start = catalog.resolve(opts.starting, current, start=True)
        end = catalog.resolve(opts.ending, current, start=False)
        ranges: list[OffsetRange] = []
        for tp in sorted(current):
            topic, part = tp
            s, e = start[tp], end[tp]
            if s > e:
                raise BayouOptionError(opts.starting.option, f"{topic}/{part} would start at offset {s}, "
                                       f"after its end {e} (from {opts.ending.option})")
            earliest = current[tp][0]
            if s < earliest and s < e:
                report_data_loss(opts.fail_on_data_loss, f"{topic}/{part}: offsets {s} to "
                                 f"{min(earliest, e)} were deleted (the log now starts at {earliest})")
                s = min(earliest, e)
            ranges.append(OffsetRange(topic, part, s, e))
        return [_input_partition(opts, r)
                for r in split_ranges(ranges, opts.max_records_per_partition, opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # With no partitions planned Spark still calls read once, with InputPartition(None).
        if isinstance(partition, BayouInputPartition):
            yield from read_partition(partition)


class BayouStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are Kafka's ``{"topic": {"partition": next offset}}``. Partitions that appear
    mid-query (a new topic matching the subscription, partitions added) start at their earliest."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.catalog = Catalog(opts)
        self._initial: dict[str, dict[str, int]] | None = None
        self._available_now: OffsetMap | None = None  # the target of a Trigger.AvailableNow run
        self._latest: OffsetMap | None = None

    def initialOffset(self) -> dict[str, dict[str, int]]:
        # Spark asks twice per query start; "latest" must give the same answer both times.
        if self._initial is None:
            current = self.catalog.current(strict=True)
            self._initial = to_json(self.catalog.resolve(self.opts.starting, current, start=True))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {tp: latest for tp, (_e, latest) in self.catalog.current().items()}

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, dict[str, int]]:
        begin = from_json(start)
        current = self.catalog.current()
        self._latest = {tp: latest for tp, (_e, latest) in current.items()}
        latest = dict(self._available_now if self._available_now is not None else self._latest)
        if isinstance(limit, ReadMaxRows):
            full = dict(begin)
            for tp in latest:
                if tp not in full:
                    full[tp] = current[tp][0] if tp in current else 0
            latest = rate_limit(full, latest, limit.max_rows)
        return to_json(latest)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
                   ) -> Sequence[InputPartition]:
        opts = self.opts
        fail = opts.fail_on_data_loss
        begin, until = from_json(start), from_json(end)
        for topic, part in sorted(begin.keys() - until.keys()):
            report_data_loss(fail, f"{topic}/{part} is gone (its topic or partition was deleted)")
        if begin == until:
            return []
        current = self.catalog.current()
        ranges: list[OffsetRange] = []
        for tp, u in sorted(until.items()):
            topic, part = tp
            b = begin.get(tp)
            earliest = current[tp][0] if tp in current else None
            if b is None:  # a partition that appeared after the previous batch
                if earliest is None:
                    report_data_loss(fail, f"cannot find the earliest offset of new partition {topic}/{part}")
                    continue
                if earliest != 0:
                    report_data_loss(fail, f"added partition {topic}/{part} starts at offset {earliest} "
                                     "instead of 0")
                b = earliest
            if b > u:
                report_data_loss(fail, f"{topic}/{part}: offset went back from {b} to {u}")
                continue
            if earliest is not None and b < earliest and b < u:
                report_data_loss(fail, f"{topic}/{part}: offsets {b} to {min(earliest, u)} were deleted "
                                 f"(the log now starts at {earliest})")
                b = min(earliest, u)
            ranges.append(OffsetRange(topic, part, b, u))
        return [_input_partition(opts, r)
                for r in split_ranges(ranges, opts.max_records_per_partition, opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, BayouInputPartition):
            yield from read_partition(partition)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets, as with Spark's Kafka source (which
        never commits to Kafka either). Spark calls this a batch late, so it is only a hint."""

    def stop(self) -> None:
        connection.close_all()
