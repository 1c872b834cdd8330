"""The background scrub: every stored batch is read again, at a bounded rate, and checked (CRC,
lengths, offsets) with recovery's scanner, so damage in data no reader has asked for yet, and in
bytes that zero-copy readers send unchecked (TANK), is found and reported.

It runs like Kafka's log cleaner thread: one pass over every partition at a throttled I/O rate,
then a pause. Damage quarantines the partition (``PartitionLog.check_segment``: logged with file
and position, offline from the damaged offset on). Plain synchronous code: the broker runs a pass
in its own worker thread, never on the event loop, and ``stop`` ends a pass within one read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bayou.storage.log import PartitionLog

log = logging.getLogger("bayou.storage")

# How far back the rate limit remembers: a pause (retention, a slow disk) earns no burst beyond it.
_WINDOW_S = 1.0


class ScrubStopped(Exception):
    """The scrub was asked to stop in the middle of a pass."""


class Throttler:
    """Keeps a caller's reads at ``bytes_per_second`` on average (as Kafka's ``Throttler``): each
    call reports bytes read and sleeps while the reads are ahead of the rate."""

    def __init__(self, bytes_per_second: int, stop: threading.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = bytes_per_second
        self._stop = stop
        self._clock = clock
        self._start = clock()
        self._bytes = 0
        self.slept = 0.0

    def __call__(self, n: int) -> None:
        if self._stop.is_set():
            raise ScrubStopped()
        now = self._clock()
        if now - self._start > _WINDOW_S:
            self._start, self._bytes = now, 0
        self._bytes += n
        ahead = self._bytes / self.rate - (now - self._start)
        if ahead > 0:
            self.slept += ahead
            if self._stop.wait(ahead):
                raise ScrubStopped()


@dataclass(frozen=True, slots=True)
class ScrubReport:
    partitions: int
    bytes_checked: int
    quarantined: tuple[str, ...]  # partitions found damaged in this pass, with the reason
    seconds: float


class Scrubber:
    """``logs()`` names the partitions to check on each pass (read again per pass, so topics
    created or deleted meanwhile are followed)."""

    def __init__(self, logs: Callable[[], Iterable[tuple[str, PartitionLog]]],
                 bytes_per_second: int) -> None:
        if bytes_per_second <= 0:
            raise ValueError("the scrub rate must be positive")
        self._logs = logs
        self.bytes_per_second = bytes_per_second
        self._stop = threading.Event()
        self.passes = 0

    def stop(self) -> None:
        self._stop.set()

    def run_pass(self) -> ScrubReport:
        """Check every partition once. A partition that fails to read (deleted meanwhile, an I/O
        error) is logged and skipped; the next pass tries it again."""
        t0 = time.monotonic()
        throttle = Throttler(self.bytes_per_second, self._stop)
        checked = 0
        partitions = 0
        found: list[str] = []
        for name, plog in list(self._logs()):
            if self._stop.is_set():
                break
            before = plog.damage
            try:
                checked += plog.scrub(throttle)
            except ScrubStopped:
                break
            except Exception:
                log.exception("scrub of %s failed; trying again next pass", name)
                continue
            partitions += 1
            if plog.damage is not None and plog.damage is not before:
                found.append(f"{name}: {plog.damage.describe()}")
        self.passes += 1
        report = ScrubReport(partitions, checked, tuple(found), time.monotonic() - t0)
        if found:
            log.error("scrub pass %d found damage in %d partitions: %s", self.passes, len(found),
                      "; ".join(found))
        else:
            log.info("scrub pass %d: %d partitions, %d bytes checked in %.1f s, no damage",
                     self.passes, partitions, checked, report.seconds)
        return report
