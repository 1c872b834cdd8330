"""The aborted-transaction index of a partition: Kafka's ``.txnindex``, one file per partition.

A read_committed Kafka consumer must be told which producers' records in a fetched range belong to
aborted transactions (Fetch's ``aborted_transactions``: producer id and first offset). The abort
markers in the log say so, but finding them means reading the whole log; this file keeps one
24-byte entry per aborted transaction (producer id, first offset, marker offset), appended and
fsynced when the marker is written. A crash between the marker and its entry loses nothing: the
broker's rebuild reads the recent log (broker/transactions.py) and adds the markers it finds.

Plain sync code. A torn last entry (a crash mid-write) is dropped when the file is opened.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from bayou.storage.fsutil import atomic_write

FILE_NAME = "aborted.txnindex"
_ENTRY = struct.Struct(">qqq")


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """A transaction aborted in this partition: its records lie in ``first_offset..last_offset``
    (the abort marker's offset), among other producers' records."""

    last_offset: int
    first_offset: int
    producer_id: int


class AbortedIndex:
    """The entries of one partition's file, in marker order."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME

    def load(self, log_start: int) -> list[AbortedTxn]:
        """Every entry whose marker is at or past ``log_start`` (retention deleted the others'
        records), each once (a marker indexed twice, by a follower's copy and a rebuild, is one
        abort). The file is rewritten without the dropped entries when there are many."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        whole = len(data) - len(data) % _ENTRY.size
        out = []
        seen: set[tuple[int, int]] = set()
        for i in range(0, whole, _ENTRY.size):
            pid, first, last = _ENTRY.unpack_from(data, i)
            if last >= log_start and (pid, last) not in seen:
                seen.add((pid, last))
                out.append(AbortedTxn(last, first, pid))
        if whole != len(data) or len(out) * 2 < whole // _ENTRY.size:
            self.rewrite(out)
        return out

    def append(self, entries: list[AbortedTxn]) -> None:
        """Add ``entries`` durably (written and fsynced before this returns)."""
        if not entries:
            return
        data = b"".join(_ENTRY.pack(e.producer_id, e.first_offset, e.last_offset) for e in entries)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, end: int) -> None:
        """Drop the entries whose marker is at or past ``end``: the log was cut there, and the
        offsets will hold other records (an entry left would call some of them aborted)."""
        entries = self.load(0)
        kept = [e for e in entries if e.last_offset < end]
        if len(kept) != len(entries):
            self.rewrite(kept)

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        atomic_write(self.path, b"".join(_ENTRY.pack(e.producer_id, e.first_offset, e.last_offset)
                                         for e in entries))


__all__ = ["FILE_NAME", "AbortedIndex", "AbortedTxn"]
