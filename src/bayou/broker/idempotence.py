"""Idempotent produce: the state that tells a replayed send from a new one, per partition.

Every idempotent produce path runs one step (``Broker._append_checked``): ``check`` the send's keys
against the partition's table (nothing changes), append the kept messages, ``commit`` what the
check staged; with no await in between, so concurrent sends to a partition can never both pass
the check for one sequence. The table is not persisted: after a start it is rebuilt from the log
(``rebuild``, Kafka's producer-state rebuild) by the first send that needs it, reading each stored
batch's keys through the payload-format table (records/formats.py). Two kinds of state exist:

- ``ProducerTable``: (producer id, epoch, sequence) per message, the Cursus idempotent producer's
  rules (cursus.md 11), which are Kafka's in spirit. Rebuilt from the oldest segment that holds a
  record newer than the producer expiry (30 minutes), at most ``PRODUCER_REBUILD_BYTES`` back from
  the log end (``producer_rebuild_start``). The Kafka front end's idempotent produce uses it too.
- ``DedupTable``: the u128 message id of an Iggy send (``message.deduplication``), read as
  ``producer << 64 | sequence``. Rebuilt from the last ``message.deduplication.window`` offsets,
  bounded by ``message.deduplication.producers``.

Plain sync code, but for ``Rebuilt``, the lazily rebuilt slot a partition holds per kind.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from bayou.errors import OffsetOutOfRange, OutOfOrderSequence, ProducerFenced
from bayou.records.batch import Buffer, iter_batches, message_ids, producer_sequences
from bayou.records.formats import ProducerSequence as ProducerSequence  # re-exported
from bayou.storage.log import PartitionLog

MASK64 = (1 << 64) - 1
DEFAULT_MAX_PRODUCERS = 100_000
DEFAULT_WINDOW = 1_000_000
DEFAULT_PRODUCER_TTL_MS = 30 * 60 * 1000
_SCAN_BYTES = 8 << 20
# How far back from the log end a producer-table rebuild may read: a producer whose last send
# lies further back (and within the expiry) is forgotten, as if it had expired. The bound keeps
# the first idempotent send after a start from reading gigabytes; Kafka keeps snapshots instead.
PRODUCER_REBUILD_BYTES = 128 << 20



class Table(Protocol):
    """An idempotence table: ``check`` a send's keys (which to keep, and what to stage), ``commit``
    the staged state once the kept messages are appended; for ``rebuild``, the (offset, key)
    pairs a stored batch holds and taking keys in, in log order."""

    KIND: ClassVar[str]  # what the broker's log calls it

    def __len__(self) -> int: ...

    def check(self, keys: Any) -> tuple[list[bool], Any]: ...

    def commit(self, staged: Any) -> None: ...

    @staticmethod
    def stored(buf: Buffer, pos: int) -> Sequence[tuple[int, Any]]: ...

    def record(self, keys: Iterable[Any]) -> None: ...


TableT = TypeVar("TableT", bound=Table)


# -- producer id, epoch, sequence (Cursus; Kafka's idempotent producer) --------------------------


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_seq: int
    touched: float


class ProducerTable:
    """Last (epoch, sequence) per producer id. For a known producer and epoch, a sequence at or
    below the last one is a replay (dropped, still acknowledged), the next one is appended,
    anything else is a gap; a new producer starts at 1; a higher epoch fences the old one and
    restarts at 1; a lower epoch is stale. Records without a producer id or with sequence 0
    bypass the check. Entries expire after ``ttl_ms`` without activity."""

    KIND: ClassVar[str] = "producer sequences"

    def __init__(self, ttl_ms: int = DEFAULT_PRODUCER_TTL_MS) -> None:
        self.ttl_s = ttl_ms / 1000
        self.entries: dict[bytes, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def expire(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for pid in [p for p, e in self.entries.items() if now - e.touched > self.ttl_s]:
            del self.entries[pid]

    def check(self, records: Sequence[ProducerSequence]) -> tuple[list[bool], dict[bytes, ProducerEntry]]:
        """Which of (producer id, epoch, seq) to append, and the entries to ``commit`` once they
        are. Changes nothing. Raises ProducerFenced for a stale epoch and OutOfOrderSequence for a
        gap."""
        now = time.monotonic()
        keep: list[bool] = []
        staged: dict[bytes, ProducerEntry] = {}
        for pid, epoch, seq in records:
            if not pid or seq == 0:
                keep.append(True)
                continue
            cur = staged.get(pid) or self.entries.get(pid)
            if cur is not None and now - cur.touched > self.ttl_s:
                cur = None  # expired: a new producer again
            if cur is not None and epoch < cur.epoch:
                raise ProducerFenced(f"stale_producer_epoch producer={pid.decode(errors='replace')} "
                                     f"current={cur.epoch} got={epoch}")
            if cur is None or epoch > cur.epoch:
                if seq != 1:
                    first = "first message" if cur is None else f"first message in new producer epoch {epoch}"
                    raise OutOfOrderSequence(f"idempotency error: {first} for producer "
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
        return keep, staged

    def commit(self, staged: dict[bytes, ProducerEntry]) -> None:
        self.entries.update(staged)

    @staticmethod
    def stored(buf: Buffer, pos: int) -> list[tuple[int, ProducerSequence]]:
        return producer_sequences(buf, pos)

    def record(self, keys: Iterable[ProducerSequence]) -> None:
        """Sequences of stored messages, in log order (the rebuild): the last one of each
        producer is its state, as fresh as if it had just been sent."""
        now = time.monotonic()
        for pid, epoch, seq in keys:
            self.entries[pid] = ProducerEntry(epoch, seq, now)


# -- u128 message ids (Iggy's message.deduplication) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class IdRun:
    """The ids ``producer << 64 | first`` .. ``producer << 64 | (first + count - 1)``: one
    producer's consecutive sequences, what an idempotent SDK batch carries. Checked in O(1)."""

    producer: int
    first: int
    count: int


def split_id(message_id: int) -> tuple[int, int]:
    """(producer, sequence) of a message id."""
    return message_id >> 64, message_id & MASK64


class DedupTable:
    """The last sequence stored per producer, a message id being ``producer << 64 | sequence``.

    A message whose sequence is at or below its producer's last is a replay and is dropped; any
    other is stored and its sequence becomes the producer's last. An SDK that numbers its messages
    ``producer << 64 | seq`` gets Kafka-like idempotence with one entry per producer; random UUID
    ids behave like Iggy's exact-id de-duplication (each id is a producer seen once). A message
    sent with id 0 gets a random UUIDv4 before the check (as Iggy does), so it is never a replay;
    it takes a table entry like any random id (and the rebuild, which cannot tell minted ids from
    sent ones, counts it the same way).

    The table keeps at most ``max_producers`` producers, evicting the least recently *stored to*:
    a replay changes nothing. The table is therefore a function of the stored messages alone, in
    log order, which is what lets ``rebuild`` recreate it after a restart (a kill -9 included):
    replaying the ids of the last ``window`` offsets gives the table back, exactly when the window
    covers everything the live table had seen, and otherwise forgets only producers whose last
    stored message is older than the window (or already deleted by retention): the restart
    guarantee is bounded by ``window`` offsets, the live one by ``max_producers``. A forgotten
    producer's replay is stored again.
    """

    KIND: ClassVar[str] = "message de-duplication"

    def __init__(self, max_producers: int = DEFAULT_MAX_PRODUCERS) -> None:
        if max_producers < 1:
            raise ValueError("max_producers must be >= 1")
        self.max_producers = max_producers
        self._last: OrderedDict[int, int] = OrderedDict()  # producer -> last sequence, LRU first

    def __len__(self) -> int:
        return len(self._last)

    def last(self, producer: int) -> int | None:
        """The last sequence stored for ``producer``; None when the table does not know it."""
        return self._last.get(producer)

    def check(self, ids: Sequence[int] | IdRun) -> tuple[list[bool], dict[int, int]]:
        """Which of ``ids`` (in send order) to store, and the new last sequences to ``commit`` once
        they are appended. Changes nothing. A later id of the same send is checked against the
        earlier ones, so a send repeating a sequence stores it once. Id 0 (none) is always stored
        and never remembered."""
        if isinstance(ids, IdRun):
            return self._check_run(ids)
        staged: dict[int, int] = {}
        keep: list[bool] = []
        table = self._last
        for mid in ids:
            if not mid:
                keep.append(True)
                continue
            producer, seq = mid >> 64, mid & MASK64
            last = staged.get(producer)
            if last is None:
                last = table.get(producer)
            if last is not None and seq <= last:
                keep.append(False)
            else:
                staged[producer] = seq
                keep.append(True)
        return keep, staged

    def _check_run(self, run: IdRun) -> tuple[list[bool], dict[int, int]]:
        """``check`` of a run: the sequences above the producer's last are a suffix of it."""
        if run.count <= 0:
            return [], {}
        if run.producer == 0 and run.first == 0:  # starts with id 0 (none): no shortcut
            return self.check([(run.producer << 64) | (run.first + i) for i in range(run.count)])
        last = self._last.get(run.producer)
        dropped = 0 if last is None else min(run.count, max(0, last - run.first + 1))
        if dropped == run.count:
            return [False] * run.count, {}
        return [False] * dropped + [True] * (run.count - dropped), {run.producer: run.first + run.count - 1}

    def commit(self, staged: dict[int, int]) -> None:
        """Apply what ``check`` staged (after the append succeeded), evicting the least recently
        used producers beyond ``max_producers``."""
        table = self._last
        for producer, seq in staged.items():
            table[producer] = seq
            table.move_to_end(producer)
        while len(table) > self.max_producers:
            table.popitem(last=False)

    @staticmethod
    def stored(buf: Buffer, pos: int) -> list[tuple[int, int]]:
        return message_ids(buf, pos)

    def record(self, ids: Iterable[int]) -> None:
        """Ids of stored messages, in log order (the rebuild): each becomes its producer's last."""
        table = self._last
        cap = self.max_producers
        for mid in ids:
            if not mid:
                continue
            producer = mid >> 64
            table[producer] = mid & MASK64
            table.move_to_end(producer)
            if len(table) > cap:
                table.popitem(last=False)


# -- the rebuild from the log ---------------------------------------------------------------------


def producer_rebuild_start(log: PartitionLog, now_ms: int, ttl_ms: int = DEFAULT_PRODUCER_TTL_MS,
                           max_bytes: int = PRODUCER_REBUILD_BYTES) -> int:
    """The first offset a producer-table rebuild reads: the base of the oldest segment with a
    record written within ``ttl_ms`` (older producers have expired), but no segment that ends
    more than ``max_bytes`` before the log end. Not just the active segment: a producer whose
    last send sits in a segment that has just rolled would be unknown after a restart or a
    leader change, and its next send refused as out of order."""
    segments = list(log.segments)  # a copy: retention may remove the oldest meanwhile
    start = segments[-1].base_offset
    behind = 0
    for seg in reversed(segments[:-1]):
        behind += seg.size
        newest = seg.max_timestamp if seg.max_timestamp >= 0 else (seg.created_ms or now_ms)
        if behind > max_bytes or now_ms - newest > ttl_ms:
            break
        start = seg.base_offset
    return max(start, log.log_start_offset)


def rebuild(table: Table, log: PartitionLog, start: int, end: int) -> int:
    """Feed ``table`` the keys of the messages stored at offsets ``start..end-1`` of ``log``, in
    order; returns the offset the scan reached (``end`` unless the log is shorter). Blocking I/O:
    run it in a worker thread."""
    offset = max(start, log.log_start_offset)
    while offset < end:
        try:
            result = log.read(offset, _SCAN_BYTES, max_offset=end)
        except OffsetOutOfRange:
            if offset >= log.log_start_offset:  # past the end: the log was cut meanwhile
                break
            offset = log.log_start_offset  # retention moved the start meanwhile
            continue
        if not result.data:
            break
        for pos, h in iter_batches(result.data):
            if h.next_offset > offset:
                table.record(key for off, key in table.stored(result.data, pos) if offset <= off < end)
        offset = max(offset, result.next_offset)
    return offset


class Rebuilt(Generic[TableT]):
    """A partition's table of one kind: None until the first send that needs it after a start
    rebuilds it from the log (``loading`` while that runs); ``reset`` forgets it (settings changed,
    log purged or cut) and ``generation`` tells a rebuild still running that it was."""

    __slots__ = ("generation", "loading", "table")

    def __init__(self) -> None:
        self.table: TableT | None = None
        self.loading: asyncio.Task[TableT] | None = None
        self.generation = 0

    def reset(self) -> None:
        self.table = None
        self.loading = None
        self.generation += 1
