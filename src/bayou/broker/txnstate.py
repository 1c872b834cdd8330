"""A partition's Kafka transactions: the open ones (what bounds its last stable offset) and the
aborted ones (what a read_committed fetch lists), and the control batches (markers) that end them.
The coordinator is broker/transactions.py; this table sits with the partition's other tables
(broker/idempotence.py) and is rebuilt from the log the same way, the aborted ones also kept in
storage/txnindex.py.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from typing import Any, ClassVar

from bayou.broker.idempotence import producer_rebuild_start, rebuild
from bayou.errors import CorruptRecord
from bayou.records.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    BatchHeader,
    Buffer,
    assemble_batch,
    decode_header,
)
from bayou.records.compression import decompress
from bayou.records.model import Record
from bayou.records.v2 import decode_v2, encode_record
from bayou.storage.log import PartitionLog
from bayou.storage.txnindex import AbortedIndex, AbortedTxn

ABORT, COMMIT = 0, 1  # the control record's type (its key: version int16, type int16)
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def control_batch(producer_id: int, epoch: int, commit: bool, timestamp_ms: int, sequence: int = 0) -> bytes:
    """A transaction marker as Kafka writes it: a transactional control batch of one record, key
    (version 0, type), value (version 0, coordinator epoch). bayou's coordinator epoch field holds
    the transaction's sequence number (broker/transactions.py: the transactional id's how-manieth
    transaction; 0: not known), which fences a late copy of a marker (``TxnTable.duplicate``);
    Kafka's clients do not read it."""
    rec = Record(offset=0, timestamp=timestamp_ms,
                 key=_CONTROL_KEY.pack(0, COMMIT if commit else ABORT),
                 value=_CONTROL_VALUE.pack(0, sequence))
    body = bytearray()
    encode_record(body, rec, 0, timestamp_ms)
    return assemble_batch(bytes(body), record_count=1, base_offset=0,
                          attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
                          base_timestamp=timestamp_ms, max_timestamp=timestamp_ms,
                          producer_id=producer_id, producer_epoch=epoch)


def marker_type(buf: Buffer, pos: int) -> int:
    """ABORT or COMMIT, of the control batch at ``pos`` (its one record's key); CorruptRecord
    when it holds no control record."""
    return marker_info(buf, pos)[0]


def marker_info(buf: Buffer, pos: int) -> tuple[int, int]:
    """(ABORT or COMMIT, the transaction's sequence number: 0 when the value does not say) of the
    control batch at ``pos``; CorruptRecord when it holds no control record."""
    h = decode_header(buf, pos)
    body = bytes(memoryview(buf)[pos + HEADER_SIZE:pos + h.size])
    recs = decode_v2(decompress(h.compression, body) if h.compression else body, h)
    key = recs[0].key if recs else None
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecord(f"control batch at offset {h.base_offset} without a control record")
    value = recs[0].value
    sequence = 0
    if value is not None and len(value) >= _CONTROL_VALUE.size:
        sequence = max(int(_CONTROL_VALUE.unpack_from(value)[1]), 0)
    return int(_CONTROL_KEY.unpack_from(key)[1]), sequence


# -- a partition's transactions -------------------------------------------------------------------


DATA, MARKER_ABORT, MARKER_COMMIT = 0, 1, 2
TxnEvent = tuple[int, int, int, int]  # (producer id, DATA / MARKER_*, offset, marker's sequence)


class TxnTable:
    """A partition's open transactions (producer id -> the first offset it wrote in the open one)
    and its aborted ones. Rebuilt from the log like broker/idempotence.py's tables (``stored``,
    ``record``); ``unsaved`` are aborts the rebuild found that the index file lacked."""

    KIND: ClassVar[str] = "transactions"

    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self.ongoing: dict[int, int] = {}
        self.aborted: list[AbortedTxn] = sorted(aborted)
        self._known = {(a.producer_id, a.last_offset) for a in self.aborted}
        self._ended: dict[int, int] = {}  # producer id -> the offset after its last marker seen
        self.scan_start = 0
        self.unsaved: list[AbortedTxn] = []
        # cluster mode: producer id -> the epoch whose open transaction the coordinator's state
        # was found to hold this partition in (broker/transactions.py); until its marker
        self.verified: dict[int, int] = {}
        self.marker_seq: dict[int, int] = {}  # producer id -> sequence of its last marker here
        self.markers = 0  # markers seen: a check that awaited sees whether one came meanwhile

    def __len__(self) -> int:
        return len(self.ongoing)

    def check(self, keys: Any) -> tuple[list[bool], Any]:  # the Table protocol; nothing to check
        return [True] * len(keys), None

    def commit(self, staged: Any) -> None:
        pass

    @staticmethod
    def stored(buf: Buffer, pos: int) -> list[tuple[int, TxnEvent]]:
        h = decode_header(buf, pos)
        if not h.transactional or h.producer_id < 0:
            return []
        if not h.control:
            return [(h.base_offset, (h.producer_id, DATA, h.base_offset, 0))]
        marker, sequence = marker_info(buf, pos)
        kind = MARKER_COMMIT if marker == COMMIT else MARKER_ABORT
        return [(h.base_offset, (h.producer_id, kind, h.base_offset, sequence))]

    def record(self, events: Iterable[TxnEvent]) -> None:
        for pid, kind, offset, sequence in events:
            if kind == DATA:
                self.ongoing.setdefault(pid, offset)
            else:
                entry = self.end(pid, offset, kind == MARKER_COMMIT, sequence)
                if entry is not None and entry not in self.unsaved:
                    self.unsaved.append(entry)

    def begin(self, producer_id: int, offset: int) -> None:
        """``producer_id`` writes at ``offset`` or later in its open transaction."""
        self.ongoing.setdefault(producer_id, offset)

    def duplicate(self, producer_id: int, sequence: int) -> bool:
        """Whether a marker of the producer's transaction ``sequence`` ended it here already (a
        coordinator's retry, or a late one from a broker that coordinated it before): appending it
        again would end the producer's next transaction early."""
        return sequence > 0 and self.marker_seq.get(producer_id, 0) >= sequence

    def end(self, producer_id: int, marker_offset: int, commit: bool, sequence: int = 0) -> AbortedTxn | None:
        """The marker at ``marker_offset`` ends the producer's transaction here: the aborted entry
        to keep when it was an abort (None when already kept, or a commit)."""
        first = self.open_since(producer_id)  # else opened before the rebuild's window
        self.ongoing.pop(producer_id, None)
        self.verified.pop(producer_id, None)
        self.marker_seq[producer_id] = max(self.marker_seq.get(producer_id, 0), sequence)
        self.markers += 1
        self._ended[producer_id] = marker_offset + 1
        if commit or (producer_id, marker_offset) in self._known:
            return None
        entry = AbortedTxn(marker_offset, min(first, marker_offset), producer_id)
        self._known.add((producer_id, marker_offset))
        self.aborted.append(entry)
        return entry

    def open_since(self, producer_id: int) -> int:
        """The first offset of the producer's open transaction as far as this table saw: its
        first record, else after its last marker, else where the table's scan began."""
        return self.ongoing.get(producer_id, self._ended.get(producer_id, self.scan_start))

    def stable(self, high_watermark: int) -> int:
        """The last stable offset: below the first record of any open transaction."""
        return min(min(self.ongoing.values(), default=high_watermark), high_watermark)

    def aborted_in(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in ``start..end-1`` (what a fetch of that range
        reports), by first offset. ``aborted`` is in marker order: the ones ending before
        ``start`` are skipped by bisection."""
        i = bisect.bisect_left(self.aborted, start, key=lambda a: a.last_offset)
        return sorted((a for a in self.aborted[i:] if a.first_offset < end), key=lambda a: a.first_offset)

    def forget_before(self, log_start: int) -> None:
        """Drop the aborted transactions that ended before ``log_start`` (retention deleted them)."""
        i = bisect.bisect_left(self.aborted, log_start, key=lambda a: a.last_offset)
        if i:
            del self.aborted[:i]


# -- a follower's copies -------------------------------------------------------------------------


class CopiedTxns:
    """A follower's view of the transactions in the batches it copies from the leader (cluster
    mode, broker/cluster/fetcher.py): each producer's first offset in its open transaction, so
    that an abort marker copied goes into the partition's aborted index as it did at the leader.
    A follower that becomes leader rebuilds its table from the log's recent segments only
    (``producer_rebuild_start``); the aborts before those come from the index. Runs on the
    storage worker thread, with the copy."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.ended: dict[int, int] = {}  # producer id -> the offset after its last marker copied
        # what the log held before copying began here (a restart, a truncation): read once, by
        # the first marker of a producer not seen since
        self.before: TxnTable | None = None

    def copied(self, log: PartitionLog, buf: Buffer, pos: int, h: BatchHeader, now_ms: int) -> None:
        """``h`` (the batch at ``pos`` of ``buf``) was appended to ``log``: an abort marker's entry
        is appended to the aborted index."""
        if not h.transactional or h.producer_id < 0:
            return
        pid = h.producer_id
        if not h.control:
            self.open.setdefault(pid, h.base_offset)
            return
        first = self.open.pop(pid, None)
        if first is None:
            first = self.ended.get(pid)
        self.ended[pid] = h.base_offset + 1
        if marker_type(buf, pos) == COMMIT:
            return
        if first is None:  # opened before this broker started copying: find it in the log
            first = self._before(log, h.base_offset, now_ms).open_since(pid)
        AbortedIndex(log.dir).append([AbortedTxn(h.base_offset, min(first, h.base_offset), pid)])

    def _before(self, log: PartitionLog, end: int, now_ms: int) -> TxnTable:
        """The transactions of the log below ``end`` as a leader's rebuild would find them (from
        the same recent segments), read once."""
        if self.before is None:
            table = TxnTable()
            table.scan_start = start = min(producer_rebuild_start(log, now_ms), end)
            rebuild(table, log, start, end)
            self.before = table
        return self.before


__all__ = ["ABORT", "COMMIT", "CopiedTxns", "TxnTable", "control_batch", "marker_info", "marker_type"]
