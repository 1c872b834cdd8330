"""Per-log settings and the fsync policy."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bayou.errors import InvalidConfig

_INTERVAL = re.compile(r"^interval:(\d+)$")


@dataclass(frozen=True, slots=True)
class FsyncPolicy:
    """``always``: an append is acknowledged after its fsync (group commit);
    ``interval``: a background flush every ``interval_ms``; ``never``: the OS decides."""

    mode: str = "always"
    interval_ms: int = 0

    @classmethod
    def parse(cls, text: str) -> FsyncPolicy:
        t = text.strip().lower()
        if t in ("always", "never"):
            return cls(t, 0)
        m = _INTERVAL.match(t)
        if m and int(m.group(1)) > 0:
            return cls("interval", int(m.group(1)))
        raise InvalidConfig(f"fsync must be always, never or interval:<ms>, not {text!r}")

    def __str__(self) -> str:
        return f"interval:{self.interval_ms}" if self.mode == "interval" else self.mode


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 64 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    index_interval_bytes: int = 4096
    max_batch_bytes: int = 64 * 1024 * 1024
    retention_segments: int = 0  # 0: no limit; else keep at most this many segments (TANK's count)
    fsync: FsyncPolicy = FsyncPolicy()
    # Broker-wide ([log] only, not a topic key): segment and index files kept open at once by
    # the store's handle cache (storage/handles.py); 0: half the process's open-file limit.
    max_open_files: int = 0

    def __post_init__(self) -> None:
        if not 64 <= self.segment_bytes <= 1 << 31:
            raise InvalidConfig("segment.bytes must be between 64 bytes and 2 GiB")
        if self.segment_ms <= 0:
            raise InvalidConfig("segment.ms must be positive")
        if self.retention_ms < -1 or self.retention_ms == 0:
            raise InvalidConfig("retention.ms must be positive or -1")
        if self.retention_bytes < -1 or self.retention_bytes == 0:
            raise InvalidConfig("retention.bytes must be positive or -1")
        if self.index_interval_bytes <= 0:
            raise InvalidConfig("index.interval.bytes must be positive")
        if self.retention_segments < 0 or self.retention_segments == 1:
            raise InvalidConfig("retention.segments must be 0 (no limit) or at least 2")
        if self.max_batch_bytes <= 0:
            raise InvalidConfig("max.batch.bytes must be positive")
        if self.max_open_files < 0:
            raise InvalidConfig("max_open_files must be 0 (derived from the open-file limit) or positive")


# Topic-level keys (Kafka's names) mapped to LogConfig fields.
TOPIC_CONFIG_KEYS: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "max.message.bytes": "max_batch_bytes",
    "retention.segments": "retention_segments",
    "fsync": "fsync",
}


def apply_overrides(base: LogConfig, overrides: dict[str, str]) -> LogConfig:
    """A LogConfig with topic-level ``overrides`` (string values, Kafka key names) applied."""
    import dataclasses

    changes: dict[str, object] = {}
    for key, raw in overrides.items():
        field = TOPIC_CONFIG_KEYS.get(key)
        if field is None:
            raise InvalidConfig(f"unknown topic config {key!r}")
        if field == "fsync":
            changes[field] = FsyncPolicy.parse(str(raw))
            continue
        try:
            changes[field] = int(str(raw).strip())
        except ValueError:
            raise InvalidConfig(f"topic config {key} must be an integer, not {raw!r}") from None
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
