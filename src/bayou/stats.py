"""Plain counters the hot paths bump, read by the metrics endpoint at scrape time.

Nothing here knows about Prometheus: storage, broker and server code increment plain numbers (an
attribute add, or ``Histogram.observe``: a bisect and two adds under a lock), and the HTTP front
end's collector (server/http/metrics.py) turns them into metric families only when scraped. So a
broker nobody scrapes pays almost nothing, and no layer below the server imports prometheus-client.

``STORAGE`` is process-wide, as the storage layer's own handle cache is (storage/handles.py): the
fsyncs of every log of the process, whichever broker owns it.
"""

from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass, field

# Seconds: 0.1 ms to 10 s, for request latencies and fsyncs alike (Prometheus' default buckets
# start at 5 ms, too coarse for a produce acknowledged from the page cache).
LATENCY_BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Records made durable by one fsync (group commit): 1 when every append waits for its own fsync.
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536)


class Histogram:
    """Counts per upper bound (the last bucket is +Inf) and the sum of what was observed.

    Safe to observe from worker threads (fsyncs run there); ``snapshot`` gives the cumulative
    counts Prometheus expects."""

    __slots__ = ("_lock", "bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self.counts[i] += 1
            self.total += value

    def snapshot(self) -> tuple[list[tuple[float, int]], float]:
        """Cumulative ``(upper bound, count)`` pairs ending with infinity, and the sum."""
        with self._lock:
            counts = list(self.counts)
            total = self.total
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, math.inf), counts, strict=True):
            running += n
            out.append((float(bound), running))
        return out, total


@dataclass(slots=True)
class Recovery:
    """The start-up load of a data directory: how many partitions are opened so far, of how many,
    whether their tails were validated (no clean-shutdown marker) and what was cut."""

    partitions_total: int = 0
    partitions_done: int = 0
    validated: bool = False  # True when the last stop was not clean: active segments are checked
    validated_bytes: int = 0  # bytes of active segments whose batches were CRC-checked
    truncated_bytes: int = 0
    truncated_partitions: int = 0
    seconds: float = 0.0
    done: bool = False


@dataclass(slots=True)
class StorageStats:
    fsync_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    group_commit_records: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))
    fsync_failures: int = 0
    dropped_appends: int = 0  # records of deferred appends undone after their write failed


STORAGE = StorageStats()
