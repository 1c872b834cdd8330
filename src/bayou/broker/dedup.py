"""Message de-duplication of one partition: the last sequence accepted per producer, Iggy style.

A topic with ``message.deduplication=true`` checks every message that carries an id (the u128 Iggy
message id, ``Record.message_id``) before it is appended. The id's high 64 bits name a producer and
its low 64 bits are a sequence number: a message whose sequence is at or below the last one
accepted for its producer is a replay and is dropped; any other message is stored and its
sequence becomes the producer's last. An SDK that numbers its messages ``producer << 64 | seq``
gets Kafka-like idempotence with one entry per producer; random UUID ids behave like Iggy's
exact-id de-duplication (each id is a producer seen once). A message sent with id 0 gets a random
UUIDv4 before the check (as Iggy does), so it is never a replay; it takes a table entry like any
random id (and the rebuild, which cannot tell minted ids from sent ones, counts it the same way).

The table keeps at most ``max_producers`` producers, evicting the least recently *stored to*: a
replay changes nothing. The table is therefore a function of the stored messages alone, in log
order, which is what lets ``rebuild`` recreate it from the log after a restart (a kill -9
included) instead of persisting it: replaying the ids of the last ``window`` offsets of the log
through ``record`` gives the table back, exactly when the window covers everything the live table
had seen, and otherwise forgets only producers whose last stored message is older than the window
(or already deleted by retention): the restart guarantee is bounded by ``window`` offsets, the live
one by ``max_producers``. A forgotten producer's replay is stored again.

Plain sync code. The broker checks and appends in one synchronous step (``check``, append,
``commit``), so concurrent sends to a partition can never both pass the check for one sequence.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bayou.errors import OffsetOutOfRange
from bayou.records.batch import iter_batches, message_ids
from bayou.storage.log import PartitionLog

MASK64 = (1 << 64) - 1
DEFAULT_MAX_PRODUCERS = 100_000
DEFAULT_WINDOW = 1_000_000
_SCAN_BYTES = 8 << 20


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


def rebuild(table: DedupTable, log: PartitionLog, start: int, end: int) -> int:
    """Feed ``table`` the ids of the messages stored at offsets ``start..end-1`` of ``log``, in
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
                table.record(mid for off, mid in message_ids(result.data, pos) if offset <= off < end)
        offset = max(offset, result.next_offset)
    return offset
