"""Broker-wide settings, with the V1 broker's defaults where a protocol observes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bayou.errors import InvalidConfig
from bayou.storage.config import LogConfig


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    data_dir: Path = Path("data")
    broker_id: int = 0
    default_partitions: int = 3
    auto_create_topics: bool = True
    log: LogConfig = field(default_factory=LogConfig)
    # Replication as a single node reports it (followers report progress with REPLICA_FETCH).
    replication_factor: int = 3
    min_insync_replicas: int = 2
    replica_max_lag: int = 0
    replica_lag_timeout_ms: int = 10_000
    # Cluster mode: a follower further behind the leader's log end than this many records leaves
    # the ISR at once (0: only the lag timeout counts, as in Kafka since 0.9).
    replica_max_lag_records: int = 0
    ack_all_timeout_ms: int = 2_000
    group_session_timeout_ms: int = 10_000
    group_expiry_check_ms: int = 5_000
    retention_check_interval_ms: int = 30_000
    heartbeat_persist_interval_ms: int = 1_000
    # Partitions this broker holds at most, over every topic (PartitionLimitReached beyond).
    max_partitions: int = 100_000
    # Background tasks that fail wait this long before the next attempt, doubling up to the max.
    background_retry_ms: int = 100
    background_retry_max_ms: int = 5_000
    # The scrub (storage/scrub.py): a pass over every stored batch every this often (0: off), its
    # reads held to this rate, as Kafka's log cleaner thread is throttled.
    scrub_interval_ms: int = 3_600_000
    scrub_bytes_per_second: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.default_partitions < 1:
            raise InvalidConfig("default partitions must be >= 1")
        if self.replication_factor < 1:
            raise InvalidConfig("replication factor must be >= 1")
        if not 1 <= self.min_insync_replicas <= self.replication_factor:
            raise InvalidConfig("min in-sync replicas must be between 1 and the replication factor")
        if self.ack_all_timeout_ms <= 0 or self.group_session_timeout_ms <= 0:
            raise InvalidConfig("timeouts must be positive")
        if self.max_partitions < 1:
            raise InvalidConfig("max_partitions must be >= 1")
        if self.scrub_interval_ms < 0 or self.scrub_bytes_per_second <= 0:
            raise InvalidConfig("scrub_interval_ms must be >= 0 (0: off), scrub_bytes_per_second > 0")
        if not 0 < self.background_retry_ms <= self.background_retry_max_ms:
            raise InvalidConfig("background retry delays must be positive, the first <= the max")
