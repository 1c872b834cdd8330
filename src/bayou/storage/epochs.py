"""The leader epoch cache of one partition: which leader epoch began at which offset.

Kafka's ``leader-epoch-checkpoint`` (KIP-101): every leader of a partition has an epoch, handed out
by the cluster controller, and the offset at which its first record sits. A follower that rejoins
after a leader change asks the leader where the follower's last epoch ended on the leader and
truncates its log there: whatever it holds past that point diverged (it was never committed) and
would otherwise be served by a future leader. Comparing epochs instead of high watermarks means an
acknowledged record (held by every in-sync replica) is never truncated away.

Entries are (epoch, start offset), both strictly increasing. The file is JSON written temp + fsync +
rename (STYLE habit 9). Plain sync code.
"""

from __future__ import annotations

import json
from pathlib import Path

from bayou.storage.fsutil import atomic_write

FILE_NAME = "leader-epochs.json"


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self.entries: list[tuple[int, int]] = []
        try:
            doc = json.loads(self.path.read_text())
            self.entries = [(int(e), int(o)) for e, o in doc["entries"]]
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError):
            self.entries = []  # unreadable: start over; the leader's answers rebuild what matters

    @property
    def latest_epoch(self) -> int:
        """The newest epoch this replica knows (-1 when none)."""
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` begins at ``start_offset`` (a new leader's log end, or the first
        batch of ``epoch`` a follower copied). Older or equal epochs change nothing."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        self.entries = [(e, o) for e, o in self.entries if o < start_offset]
        self.entries.append((epoch, start_offset))
        self._save()

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """(the largest epoch <= ``epoch`` this replica knows, the offset where it ended here): the
        start of the next epoch, or ``log_end`` for the newest. (-1, -1) when it knows none."""
        best = -1
        end = -1
        for i, (e, _start) in enumerate(self.entries):
            if e > epoch:
                break
            best = e
            end = self.entries[i + 1][1] if i + 1 < len(self.entries) else log_end
        return best, end

    def truncate_from(self, offset: int) -> None:
        """Forget epochs that start at or after ``offset`` (the log was cut there)."""
        kept = [(e, o) for e, o in self.entries if o < offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def _save(self) -> None:
        atomic_write(self.path, json.dumps({"entries": self.entries}).encode())
