"""Idempotent-producer state of one partition: last (epoch, sequence) per producer id.

The rules are the Cursus broker's (cursus.md 11), which are Kafka's in spirit: for a known producer
and epoch, a sequence at or below the last one is a replay (dropped, still acknowledged), the next
one is appended, anything else is a gap; a new producer starts at 1; a higher epoch fences the old
one and restarts at 1; a lower epoch is stale. Records without a producer id or with sequence 0
bypass de-duplication. Entries expire after ``ttl_ms`` without activity.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from bayou.errors import OutOfOrderSequence, ProducerFenced


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_seq: int
    touched: float


class ProducerTable:
    def __init__(self, ttl_ms: int = 30 * 60 * 1000) -> None:
        self.ttl_s = ttl_ms / 1000
        self.entries: dict[bytes, ProducerEntry] = {}

    def expire(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for pid in [p for p, e in self.entries.items() if now - e.touched > self.ttl_s]:
            del self.entries[pid]

    def admit(self, records: Sequence[tuple[bytes, int, int]]
              ) -> tuple[list[bool], dict[bytes, ProducerEntry | None]]:
        """Decide, for each (producer id, epoch, seq), whether to append it.

        Applies the new state at once (so a concurrent batch sees it) and returns the previous
        entries, for ``restore`` if the append then fails. Raises ProducerFenced for a stale epoch
        and OutOfOrderSequence for a gap; nothing changes then.
        """
        now = time.monotonic()
        keep: list[bool] = []
        staged: dict[bytes, ProducerEntry] = {}
        for pid, epoch, seq in records:
            if not pid or seq == 0:
                keep.append(True)
                continue
            cur = staged.get(pid) or self.entries.get(pid)
            if cur is None or now - cur.touched > self.ttl_s:
                if seq != 1:
                    raise OutOfOrderSequence(
                        f"idempotency error: first message for producer {pid.decode(errors='replace')} "
                        f"must have seqNum 1, got {seq}")
                staged[pid] = ProducerEntry(epoch, 1, now)
                keep.append(True)
            elif epoch < cur.epoch:
                raise ProducerFenced(
                    f"stale_producer_epoch producer={pid.decode(errors='replace')} "
                    f"current={cur.epoch} got={epoch}")
            elif epoch > cur.epoch:
                if seq != 1:
                    raise OutOfOrderSequence(
                        f"idempotency error: first message in new producer epoch {epoch} for producer "
                        f"{pid.decode(errors='replace')} must have seqNum 1, got {seq}")
                staged[pid] = ProducerEntry(epoch, 1, now)
                keep.append(True)
            elif seq <= cur.last_seq:
                keep.append(False)
            elif seq == cur.last_seq + 1:
                staged[pid] = ProducerEntry(epoch, seq, now)
                keep.append(True)
            else:
                raise OutOfOrderSequence(
                    f"idempotency gap for producer {pid.decode(errors='replace')}: "
                    f"expected {cur.last_seq + 1}, got {seq}")
        previous = {pid: self.entries.get(pid) for pid in staged}
        self.entries.update(staged)
        return keep, previous

    def restore(self, previous: dict[bytes, ProducerEntry | None]) -> None:
        for pid, entry in previous.items():
            if entry is None:
                self.entries.pop(pid, None)
            else:
                self.entries[pid] = entry
