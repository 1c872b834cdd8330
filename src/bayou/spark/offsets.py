"""Offset maps, their checkpoint JSON, admission control and range splitting: pure functions.

Spark stores a source offset as JSON and hands it back parsed, so integer dict keys would come back
as strings; the checkpoint form is therefore Kafka's own, ``{"topic": {"0": 23}}``, where the
number is the next offset to read in that partition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from bayou.spark.options import TopicPartition

OffsetMap = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(doc: Mapping[str, Mapping[str, int]]) -> OffsetMap:
    return {(topic, int(p)): int(o) for topic, parts in doc.items() for p, o in parts.items()}


def rate_limit(begin: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               limit: int) -> OffsetMap:
    """End offsets that admit at most ``limit`` records in all, split in proportion to each
    partition's backlog (``latest - begin``), as Kafka's ``maxOffsetsPerTrigger`` does.

    Kafka rounds small shares up so no partition starves, which can overshoot the limit; here the
    shares are floored and the records left over go to the largest remainders, so the total is
    exactly ``min(limit, backlog)``. A partition left out this time has the largest remainder the
    next time, so none starves either.
    """
    backlog = {tp: latest[tp] - begin[tp] for tp in latest if tp in begin and latest[tp] > begin[tp]}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * size / total for tp, size in backlog.items()}
    take = {tp: min(backlog[tp], math.floor(share)) for tp, share in shares.items()}
    left = limit - sum(take.values())
    by_remainder = sorted(backlog, key=lambda tp: (take[tp] - shares[tp], tp))
    for tp in by_remainder:
        if left <= 0:
            break
        if take[tp] < backlog[tp]:
            take[tp] += 1
            left -= 1
    out = dict(latest)
    for tp, n in take.items():
        out[tp] = begin[tp] + n
    return out


def split_ranges(ranges: list[OffsetRange], max_records: int,
                 min_partitions: int | None) -> list[OffsetRange]:
    """Spark partitions for ``ranges``: empty ranges dropped, each range cut into pieces of at most
    ``max_records`` (maxRecordsPerPartition), and, when that leaves fewer than ``min_partitions``,
    the larger ranges cut further in proportion to their size (Kafka's minPartitions rule)."""
    live = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in live)
    out: list[OffsetRange] = []
    for r in live:
        parts = math.ceil(r.size / max_records)
        if min_partitions is not None and len(live) < min_partitions:
            parts = max(parts, round(r.size / total * min_partitions))
        parts = max(1, min(parts, r.size))
        step, extra = divmod(r.size, parts)
        start = r.start
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out
