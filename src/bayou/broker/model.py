"""The values the broker's API takes and returns (acks, produce and fetch results, topic and
partition descriptions) and its topic record: in a module of their own so that the interfaces the
broker is built on (broker/coordination.py) and their implementations (broker/cluster/) can name
them without importing the broker."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from bayou.broker.partition import Partition
from bayou.storage import LogConfig, TopicMeta


class Acks(enum.IntEnum):
    NONE = 0
    LEADER = 1
    ALL = -1


@dataclass(slots=True)  # not frozen: built per request, and a frozen one costs 4x to build
class ProduceResult:
    partition: int
    base_offset: int
    last_offset: int
    high_watermark: int  # exclusive
    log_start_offset: int


@dataclass(slots=True)  # not frozen: built per request, and a frozen one costs 4x to build
class FetchResult:
    data: bytes  # whole batches; the first may start before the requested offset
    record_count: int
    next_offset: int
    high_watermark: int  # exclusive
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    role: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segments: int
    offline: str | None = None  # why the partition is quarantined (damaged data), if it is


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    config: dict[str, str]


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    acked_offset: int
    high_watermark: int  # inclusive, -1 when empty
    isr: tuple[int, ...]
    under_replicated: bool


@dataclass(slots=True)
class Topic:
    meta: TopicMeta
    log_config: LogConfig
    partitions: list[Partition] = field(default_factory=list)
