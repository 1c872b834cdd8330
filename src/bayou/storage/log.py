"""A partition's log: an ordered list of segments, appends, reads, group-commit fsync, retention.

Plain synchronous code, safe to call from several threads: appends and segment changes hold
``_lock``; fsyncs run outside it so appends continue while the disk works (group commit).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bayou.errors import (
    AppendsUndone,
    CorruptRecord,
    CorruptStorage,
    OffsetOutOfRange,
    RecordTooLarge,
    StorageError,
    WouldBlock,
)
from bayou.records.batch import (
    HEADER_SIZE,
    LENGTH_PREFIX,
    MAX_OFFSET,
    BatchHeader,
    Record,
    batch_crc,
    decode_header,
    decode_records,
    iter_batches,
    rebased,
    refresh_crc,
    set_base_offset,
    set_leader_epoch,
)
from bayou.stats import STORAGE
from bayou.storage.cached import pread_cached
from bayou.storage.config import LogConfig
from bayou.storage.fsutil import FsyncFailed, fsync_dir
from bayou.storage.handles import HandleCache, default_cache
from bayou.storage.integrity import Damage, first_bad_batch
from bayou.storage.segment import LOG_SUFFIX, PendingWriteFailed, Segment

READ_CHUNK = 256 * 1024  # first read of a record-limited fetch
NOWAIT_MAX_BATCHES = 64  # the most batches a locate on the event loop walks (locate(nowait=True))
_CUTS_KEPT = 64  # the latest undos remembered for ``kept`` (a waiter from before older ones is refused)

log = logging.getLogger("bayou.storage")


GRAVE_SECONDS = 60.0

# Sealed segments are fsynced here after a roll, so an append that rolls (on the event loop,
# under the log lock) never waits for the disk (Kafka schedules the same flush).
_roll_syncer: ThreadPoolExecutor | None = None
_roll_syncer_lock = threading.Lock()


def _background(fn: Callable[[], None]) -> Future[None]:
    global _roll_syncer
    with _roll_syncer_lock:
        if _roll_syncer is None:
            _roll_syncer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="bayou-roll-sync")
        return _roll_syncer.submit(fn)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)  # not frozen: built per request, and a frozen one costs 4x to build
class AppendInfo:
    base_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    size: int
    # the log's ``drops`` when appended: a later count means a failed write may have undone it
    drops: int = 0


@dataclass(slots=True)  # not frozen: built per request, and a frozen one costs 4x to build
class ReadResult:
    """Whole batches, in order, starting with the batch that holds the requested offset."""

    data: bytes
    start_offset: int  # base offset of the first batch in ``data`` (or the requested offset if empty)
    next_offset: int  # offset after the last batch in ``data``
    record_count: int
    log_start_offset: int
    log_end_offset: int


@dataclass(slots=True)
class FileSpan:
    """Consecutive whole batches in one segment file: (position, header) each. The descriptor is
    leased: ``release()`` when done with it (a segment removed meanwhile is then closed and its
    space freed at once); an unreleased lease ends after GRAVE_SECONDS."""

    fd: int
    batches: tuple[tuple[int, BatchHeader], ...]
    # The log and segment the span lies in, for ``read_batch``'s check (None: unchecked reads).
    log: PartitionLog | None = None
    segment: Segment | None = None
    # Reads of the file past the span must stop before this offset: the limit the log applied
    # (the caller's max offset, the log end, and the damage of a quarantined partition).
    limit: int = 0
    released: bool = False

    @property
    def next_offset(self) -> int:
        return self.batches[-1][1].next_offset

    def release(self) -> None:
        if not self.released and self.segment is not None:
            self.released = True
            self.segment.file.release()

    def pread(self, size: int, position: int, *, nowait: bool = False) -> bytes:
        """Unchecked bytes of the span's file (a sender cutting stored bytes out of batches);
        ``nowait``: from the page cache only, or WouldBlock (storage/cached.py)."""
        return pread_cached(self.fd, size, position) if nowait else os.pread(self.fd, size, position)

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        """The stored bytes of one batch of the span, CRC-checked, for a reader that decodes or
        converts them (zero-copy senders pass bytes through; the scrub checks those). Damage
        raises CorruptStorage and quarantines the partition."""
        data = os.pread(self.fd, header.size, position)
        if self.log is None or self.segment is None or (
                len(data) == header.size and first_bad_batch(data, header.base_offset) is None):
            return data
        self.log.check_segment(self.segment)
        raise self.log.offline_error()


class PartitionLog:
    def __init__(self, directory: Path, config: LogConfig, *, recover: bool = True,
                 handles: HandleCache | None = None) -> None:
        self.dir = directory
        self.config = config
        self.handles = handles if handles is not None else default_cache()
        self._roll_syncs: list[Future[None]] = []
        self.closed = False
        self._lock = threading.RLock()
        self._sync_cond = threading.Condition()
        self._syncing = False
        self._durable_offset = 0
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        # Segments removed by retention or truncation keep their descriptor open for a while, so
        # a concurrent reader never preads a recycled descriptor number.
        self._graveyard: list[tuple[float, Segment]] = []
        self.truncated_bytes = 0
        # The first damaged batch found (at load, by a read or by the scrub): the partition is
        # quarantined, offline for appends and for reads from ``damage.offset`` on.
        self.damage: Damage | None = None
        self._truncations = 0  # changes that rewrite bytes (check_segment must not race with them)
        # deferred appends undone after their write failed (``drop_unwritten``); a waiter for the
        # fsync of an append made under an older count is refused (broker/durability.py)
        self.drops = 0
        # the first offset each of the latest undos cut, with the ``drops`` count it made: a
        # waiter whose records all lie below every cut since its append is still good (``kept``)
        self._cut_at: deque[tuple[int, int]] = deque(maxlen=_CUTS_KEPT)
        self._first_base: tuple[tuple[int, int, int], int] | None = None  # first_batch_base's
        # why an fsync of this log failed (``_fsync_failed``): from then on nothing more is made
        # durable and appends are refused, until the log is opened again (a restart)
        self.fsync_error: str | None = None
        self._load(recover)

    # -- opening -------------------------------------------------------------------------------

    def _load(self, recover: bool) -> None:
        try:
            names = set(os.listdir(self.dir))  # one listing: a broker may open 50,000 of these
        except FileNotFoundError:
            self.dir.mkdir(parents=True, exist_ok=True)
            names = set()
        for stale in [n for n in names if n.endswith((".deleted", ".tmp"))]:
            (self.dir / stale).unlink(missing_ok=True)
        bases = sorted(int(n[: -len(LOG_SUFFIX)]) for n in names
                       if n.endswith(LOG_SUFFIX) and n[: -len(LOG_SUFFIX)].isdigit())
        for i, base in enumerate(bases):
            seg = Segment(self.dir, base, self.config.index_interval_bytes, self.handles)
            is_active = i == len(bases) - 1
            indexed = seg.index.path.name in names or seg.time_index.path.name in names
            self.truncated_bytes += seg.load(recover=recover and is_active, indexes_on_disk=indexed)
            if seg.damage is not None:
                self._quarantine(Damage(seg.path, seg.damage[0], seg.next_offset, seg.damage[1]))
            if not is_active and seg.next_offset != bases[i + 1] and seg.size:
                log.warning("segment %s ends at offset %d but the next starts at %d",
                            seg.path, seg.next_offset, bases[i + 1])
            self.segments.append(seg)
        if not self.segments:
            self.segments.append(Segment(self.dir, 0, self.config.index_interval_bytes, self.handles))
        self._bases = [s.base_offset for s in self.segments]
        self._durable_offset = self.next_offset

    # -- properties ----------------------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def next_offset(self) -> int:
        """The log end offset: the offset the next record will get."""
        return self.segments[-1].next_offset

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def durable_offset(self) -> int:
        return self._durable_offset

    # -- appending -----------------------------------------------------------------------------

    def append(self, batch: bytes | bytearray, *, verify_crc: bool = True,
               stamp: Callable[[bytearray, int], None] | None = None,
               at_offset: int | None = None, leader_epoch: int | None = None,
               defer: bool = False) -> AppendInfo:
        """Append one batch, assigning its offsets. The batch's own base offset is overwritten.

        ``stamp(batch, base_offset)`` may write the assigned offsets into the records (formats that
        carry per-record offsets); the CRC is recomputed after it.

        ``at_offset`` places the batch at a chosen base offset at or past the log end; an offset
        below the log end raises ``OffsetOutOfRange``. Only a sparse batch (``ATTR_SPARSE``, TANK's
        sparse bundles) may leave a gap of unused offsets before it or hold fewer records than its
        offset span (``last_offset_delta + 1``). ``leader_epoch`` stamps the partition leader epoch
        (outside the CRC), as a cluster leader does on every batch it appends. ``defer`` leaves
        the write to the next fsync (or read) of the segment (storage/segment.py): only for a
        caller that waits for ``sync_to`` past the batch before anything depends on it.
        """
        header = decode_header(batch)
        size = len(batch)  # (the header's ``size``, a property: read once here)
        if header.batch_length + LENGTH_PREFIX != size:
            raise CorruptRecord("batch length does not match its header")
        if size > self.config.max_batch_bytes:
            raise RecordTooLarge(f"batch of {size} bytes exceeds {self.config.max_batch_bytes}")
        if header.sparse:
            if not 1 <= header.record_count <= header.last_offset_delta + 1:
                raise CorruptRecord("record count does not fit the batch's offset span")
        elif header.record_count != header.last_offset_delta + 1:
            raise CorruptRecord("record count does not match last offset delta")
        if verify_crc and batch_crc(batch, 0, size) != header.crc:
            raise CorruptRecord("batch CRC mismatch")
        buf = batch if isinstance(batch, bytearray) else bytearray(batch)
        now = now_ms()
        with self._lock:
            self._check_open()
            if self.damage is not None:
                raise self.offline_error()
            if self.fsync_error is not None:
                raise StorageError(self._fsync_offline())
            try:
                self._maybe_roll(size, now)
            except OSError as exc:  # no room for the new segment file (ENOSPC, EDQUOT)
                self.drop_unwritten()  # the roll writes the pending bytes first
                raise StorageError(f"cannot start a new segment: {exc}") from exc
            base = self.active.next_offset
            last = (base if at_offset is None else at_offset) + header.last_offset_delta
            if last > MAX_OFFSET:  # before any segment is named after it
                raise OffsetOutOfRange(f"offset {last} is past the largest storable offset {MAX_OFFSET}")
            if at_offset is not None:
                if at_offset < base:
                    raise OffsetOutOfRange(f"offset {at_offset} is below the log end {base}")
                if at_offset > base and not header.sparse:
                    raise CorruptRecord("only a sparse batch may leave a gap of offsets")
                if at_offset + header.last_offset_delta - self.active.base_offset > 0xFFFFFFF0:
                    self._roll_to(at_offset)  # relative offsets are u32 within a segment
                base = at_offset
            set_base_offset(buf, base)
            if leader_epoch is not None:
                set_leader_epoch(buf, leader_epoch)
                header = decode_header(buf)
            if stamp is not None:
                stamp(buf, base)
                refresh_crc(buf)
                header = decode_header(buf)
            placed = rebased(header, base)
            try:
                self.active.append(buf, placed, now, defer=defer)
            except OSError as exc:
                if not self.drop_unwritten():  # its flush of the pending bytes failed
                    self._undo_partial_write()
                raise StorageError(f"append failed: {exc}") from exc
            return AppendInfo(base, base + header.last_offset_delta, header.record_count,
                              header.max_timestamp, size, self.drops)

    def drop_unwritten(self) -> bool:
        """Undo the deferred appends whose write failed (ENOSPC, EIO): none of them was
        acknowledged (that waits for the fsync, which writes them first), so, as a failed
        write-through append, they are not kept: the active segment is cut where they begin, the
        log ends there, and ``drops`` moves on so the waiters for their fsync are refused. Returns
        whether anything was pending."""
        with self._lock:
            seg = self.active
            first = seg.drop_pending()
            if first is None:
                return False
            position, base = first
            end = seg.next_offset
            self._truncations += 1
            try:
                seg.truncate_to_position(position)
            except FsyncFailed as exc:  # cut, but what lies below may not be on disk
                self._fsync_failed(exc)
            except (OSError, ValueError) as exc:  # the file and the segment no longer agree
                seg.size = position
                self._quarantine(Damage(seg.path, position, base, f"undone appends could not be cut: {exc}"))
            seg.next_offset = base
            with self._sync_cond:
                self.drops += 1
                self._cut_at.append((self.drops, base))
                self._durable_offset = min(self._durable_offset, base)
            STORAGE.dropped_appends += end - base
            log.warning("%s: undid offsets %d..%d, whose write failed", self._label(), base, end - 1)
            return True

    def end_and_drops(self) -> tuple[int, int]:
        """The log end and the ``drops`` count, read together (an undo moves both, in another
        thread: read one by one they could pair the end an undo left with the count before it)."""
        with self._lock:
            return self.next_offset, self.drops

    def kept(self, end: int, drops: int) -> int | None:
        """Whether the records below ``end``, appended when the log's ``drops`` count was
        ``drops``, are all still in the log: the current count if no undo since then cut below
        ``end`` (their offsets hold the same records), else None (also when the undos since are
        too many to tell). A waiter for the fsync of records below every cut is still served."""
        if self.drops == drops:  # the common case, without the lock
            return drops
        with self._sync_cond:
            now = self.drops
            if now - drops > len(self._cut_at):
                return None
            for count, base in self._cut_at:
                if count > drops and base < end:
                    return None
            return now

    def _undo_partial_write(self) -> None:
        seg = self.active
        try:
            seg.undo_partial_write()
        except (OSError, ValueError):
            log.exception("could not undo a partial write on %s", seg.path)

    def _maybe_roll(self, incoming: int, now: int) -> None:
        seg = self.active
        if seg.size == 0:
            return
        too_big = seg.size + incoming > self.config.segment_bytes
        too_old = seg.created_ms is not None and now - seg.created_ms >= self.config.segment_ms
        offsets_full = seg.next_offset - seg.base_offset > 0xFFFFFFF0
        if too_big or too_old or offsets_full:
            self.roll()
            if 0 < self.config.retention_segments < len(self.segments):
                self.apply_retention(now)  # a segment count is enforced as segments appear

    def _roll_to(self, base: int) -> None:
        """Start a new active segment at ``base`` (>= the log end); an empty active segment is
        replaced rather than kept."""
        old = self.active
        if old.size == 0:
            self.segments.pop()
            self._bases.pop()
            old.delete()
        else:
            old.flush()  # as in ``roll``
            self._sync_after_roll(old)
        seg = Segment(self.dir, base, self.config.index_interval_bytes, self.handles)
        self.segments.append(seg)
        self._bases.append(base)

    def roll(self) -> None:
        """Seal the active segment and start a new one at the log end. The sealed segment is
        fsynced in the background (``_sync_after_roll``)."""
        with self._lock:
            old = self.active
            if old.size == 0:
                return
            # a crash must never find a later segment's batches without all of this one's
            old.flush()
            seg = Segment(self.dir, old.next_offset, self.config.index_interval_bytes,
                          self.handles)
            seg.next_offset = old.next_offset
            self.segments.append(seg)
            self._bases.append(seg.base_offset)
            self._sync_after_roll(old)

    def _sync_after_roll(self, old: Segment) -> None:
        """Make a sealed segment durable off the caller's thread (through ``sync_to``, so the
        durable offset moves and concurrent fsyncs are shared). A failure is logged (a failed
        fsync takes the log offline: ``_fsync_failed``)."""
        offset = old.next_offset

        def run() -> None:
            try:
                self.sync_to(offset)
                old.sync_indexes()  # sealed: loaded without a check after a crash
            except ValueError:  # deleted (retention) before its fsync: nothing to make durable
                pass
            except OSError as exc:
                log.error("fsync of sealed segment %s's indexes failed: %s", old.path, exc)
                if isinstance(exc, FsyncFailed):
                    self._fsync_failed(exc)
            except StorageError as exc:
                log.error("fsync of sealed segment %s failed: %s", old.path, exc)

        self._roll_syncs = [f for f in self._roll_syncs if not f.done()]
        self._roll_syncs.append(_background(run))

    # -- durability ----------------------------------------------------------------------------

    def sync_to(self, offset: int) -> None:
        """Block until every record below ``offset`` is on disk. Concurrent callers share fsyncs.

        When the write of deferred appends fails (a full disk) they are undone
        (``drop_unwritten``) and what was written before them is still fsynced; then
        ``AppendsUndone`` if ``offset`` is not durable (``kept`` tells whose records survived).
        StorageError when an fsync fails: nothing it covered counts as durable, and it is never
        retried (after a failed fsync the kernel may have dropped the dirty pages, and a second
        fsync would succeed without writing them): every later call past the durable offset
        raises too (``fsync_error``)."""
        with self._sync_cond:
            while True:
                if self._durable_offset >= offset:
                    return
                if self.fsync_error is not None:
                    raise StorageError(self._fsync_offline())
                if not self._syncing:
                    self._syncing = True
                    break
                self._sync_cond.wait()
        undone: OSError | None = None
        try:
            for _attempt in range(2):
                try:
                    self._sync_all()
                    break
                except OSError as exc:
                    STORAGE.fsync_failures += 1
                    if isinstance(exc, FsyncFailed):
                        self._fsync_failed(exc)
                    dropped = self.drop_unwritten()  # a failed write of deferred appends: not kept
                    if (undone is not None or not dropped or not isinstance(exc, PendingWriteFailed)
                            or self.fsync_error is not None):  # the undo's own fsync failed
                        raise StorageError(f"fsync failed: {exc}") from exc
                    undone = exc  # no fsync ran: fsync what was written before them
        finally:
            with self._sync_cond:
                self._syncing = False
                self._sync_cond.notify_all()
        if undone is not None and self._durable_offset < offset:
            raise AppendsUndone(f"fsync failed: {undone}") from undone

    def _fsync_failed(self, exc: OSError) -> None:
        """An fsync failed: the records past the durable offset may not be on disk, and no later
        fsync can tell. The log stops claiming durability for them (``sync_to`` raises) and takes
        no more appends, as Kafka takes a log directory offline after an I/O error; opening the
        log again (a restart) recovers it from what the disk holds."""
        with self._sync_cond:
            if self.fsync_error is not None:
                return
            self.fsync_error = f"an fsync failed ({exc})"
        log.error("partition %s: %s; offline for appends, offsets from %d on may not be on disk; "
                  "restart the broker to recover the log from disk", self._label(), self.fsync_error,
                  self._durable_offset)

    def _fsync_offline(self) -> str:
        return (f"partition {self._label()} is offline: {self.fsync_error}; restart the broker to "
                "recover it from disk")

    def _sync_all(self) -> None:
        """One fsync of every dirty segment (``sync_to``'s, which holds ``_syncing``)."""
        synced = False
        started = time.perf_counter()
        with self._lock:
            drops = self.drops
            target = self.next_offset
            dirty = [s for s in self.segments if s.dirty]
            active = self.segments[-1]
        try:
            for seg in dirty:
                if seg.closed:
                    continue
                try:
                    # the active segment's indexes are checked and rebuilt after a crash: a group
                    # commit fsyncs its records only (one fsync, not three); ``flush`` and the
                    # roll fsync them too
                    seg.sync(indexes=seg is not active)
                except ValueError:  # deleted (retention, truncation) while we looked
                    continue
            synced = True
        finally:
            with self._sync_cond:
                # a failed fsync makes nothing durable (waiters retry and see the error); nor does
                # one that appends were undone under (``target`` may count them)
                if synced and self.drops == drops:
                    if dirty and target > self._durable_offset:  # one group commit: for /metrics
                        STORAGE.fsync_seconds.observe(time.perf_counter() - started)
                        STORAGE.group_commit_records.observe(target - self._durable_offset)
                    self._durable_offset = max(self._durable_offset, target)

    def flush(self) -> None:
        """Everything appended so far on disk, the active segment's indexes included (deferred
        appends that cannot be written are undone, ``drop_unwritten``, and the rest is made
        durable: a full disk still lets a shutdown leave a clean log)."""
        drops = self.drops
        try:
            self.sync_to(self.next_offset)
        except StorageError:
            if self.drops == drops or self.fsync_error is not None:  # a failed fsync: never again
                raise
            self.sync_to(self.next_offset)
        with self._lock:
            active = self.segments[-1]
        try:
            active.sync_indexes()
        except ValueError:  # deleted (retention, truncation) meanwhile
            pass
        except OSError as exc:
            STORAGE.fsync_failures += 1
            if isinstance(exc, FsyncFailed):
                self._fsync_failed(exc)
            raise StorageError(f"fsync failed: {exc}") from exc

    # -- reading -------------------------------------------------------------------------------

    def _segment_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             max_records: int | None = None, nowait: bool = False) -> ReadResult:
        """Read whole batches from the one holding ``offset``, stopping before ``max_offset``.

        At least one batch is returned when one is visible, even if it is larger than ``max_bytes``,
        so a consumer can always make progress. With ``max_records``, no further batch is added
        once the records at or after ``offset`` reach that count.

        Every batch returned has passed its CRC and offset checks: damage is never served. A read
        that meets damage quarantines the partition (``check_segment``) and returns the good
        batches before it; a read from the damaged offset on raises CorruptStorage.

        ``nowait`` (a read on the event loop) raises WouldBlock rather than wait: for bytes not in
        the page cache, for the log's lock held by another thread, for more bytes than an
        event-loop read copies (``cached.MAX_BYTES``), and for anything that needs the checks
        above.
        """
        for _attempt in range(3):
            result = self._read(offset, max_bytes, max_offset, max_records, nowait)
            if result is not None:
                return result
            offset = max(offset, self.log_start_offset)
        raise StorageError(f"read of {self.dir} at offset {offset} kept racing with changes; retry")

    def _read(self, offset: int, max_bytes: int, max_offset: int | None,
              max_records: int | None, nowait: bool = False) -> ReadResult | None:
        """One attempt of ``read``; None when it raced with a change (retention, truncation) or
        found damage just recorded: the caller tries again."""
        if not self._lock.acquire(blocking=not nowait):
            raise WouldBlock
        try:
            self._check_open()
            start = self.log_start_offset
            end = self.next_offset
            limit = end if max_offset is None else min(max_offset, end)
            if offset < start or offset > end:
                raise OffsetOutOfRange(f"offset {offset} outside [{start}, {end}]")
            damage = self.damage
            if damage is not None:
                if offset >= damage.offset:
                    raise self.offline_error()
                limit = min(limit, damage.offset)
            if offset >= limit:
                return ReadResult(b"", offset, offset, 0, start, end)
            i = self._segment_for(offset)
            segments = self.segments[i:]
        finally:
            self._lock.release()
        for seg in segments:
            if seg.base_offset >= limit:
                break
            try:
                seg_size = self._readable_end(seg, damage)
                pos, first, seen, seen_at = seg.find_batch(offset, seg_size, nowait=nowait)
            except (OSError, ValueError):
                return None  # the segment was deleted by retention while we looked
            except CorruptRecord:
                if nowait:
                    raise WouldBlock from None
                self.check_segment(seg)
                return None
            if first is None:
                continue
            size = min(max(max_bytes, first.size), seg_size - pos)
            # With a record limit, read in growing chunks rather than max_bytes at once: a small
            # CONSUME must not copy megabytes it is going to drop.
            chunk = size if max_records is None else min(size, max(first.size, READ_CHUNK))
            lo = pos - seen_at
            try:
                while True:
                    if len(seen) - lo >= chunk:  # the lookup read it already (a reader at the tail)
                        data = seen[lo:lo + chunk]
                    else:
                        data = seg.pread(chunk, pos, nowait=nowait)
                    taken = 0
                    count = 0
                    next_off = first.base_offset
                    wanted = 0
                    done = False
                    for p, h in iter_batches(data):
                        if h.last_offset >= limit or (taken and p + h.size > max_bytes):
                            done = True
                            break
                        if max_records is not None and taken and wanted >= max_records:
                            done = True
                            break
                        taken = p + h.size
                        count += h.record_count
                        wanted += h.next_offset - max(offset, h.base_offset)
                        next_off = h.next_offset
                        if max_records is not None and wanted >= max_records:
                            # enough: said now, not when the next batch is seen, which may
                            # not be whole in this chunk (that read four times the bytes,
                            # past what an event-loop read takes, for every such poll)
                            done = True
                            break
                    if done or chunk >= size:
                        break
                    chunk = min(size, chunk * 4)
            except (OSError, ValueError):
                return None
            except CorruptRecord:
                if nowait:
                    raise WouldBlock from None
                self.check_segment(seg)
                return None
            if first_bad_batch(memoryview(data)[:taken]) is not None:
                if nowait:
                    raise WouldBlock
                self.check_segment(seg)
                return None
            return ReadResult(data[:taken], first.base_offset, next_off if taken else offset, count,
                              start, end)
        return ReadResult(b"", offset, offset, 0, start, end)

    # -- integrity -----------------------------------------------------------------------------

    @staticmethod
    def _readable_end(seg: Segment, damage: Damage | None) -> int:
        """Where reads of ``seg`` must stop: its size, or the damage in it."""
        if damage is not None and damage.path == seg.path:
            return min(seg.size, damage.position)
        return seg.size

    def _label(self) -> str:
        return f"{self.dir.parent.name}/{self.dir.name}"

    def offline_error(self) -> CorruptStorage:
        d = self.damage
        if d is None:
            return CorruptStorage(f"partition {self._label()}: stored data changed during a read")
        return CorruptStorage(f"partition {self._label()} is offline: damaged data in {d.describe()}")

    def _quarantine(self, damage: Damage) -> None:
        if self.damage is not None and self.damage.offset <= damage.offset:
            return
        self.damage = damage
        log.error("partition %s quarantined: damaged data in %s position %d (%s); offline from "
                  "offset %d, readable below it; stop the broker and run "
                  "`bayou verify --data-dir DIR --repair`",
                  self._label(), damage.path, damage.position, damage.reason, damage.offset)

    def check_segment(self, seg: Segment) -> Damage | None:
        """Check ``seg`` with recovery's scanner after a read saw something wrong; real damage
        quarantines the partition. Returns the partition's damage (None: the read had raced with
        a change, e.g. a truncation).

        The scan runs outside the log lock (appends go on); what it finds is confirmed under the
        lock: the segment is still there, nothing was truncated since the scan began (appends
        never rewrite bytes, so everything before the bad batch is as scanned), and that one batch,
        complete by the log's own size, is still bad."""
        with self._lock:
            if seg not in self.segments or (self.damage is not None and self.damage.path == seg.path):
                return self.damage
            truncations = self._truncations
        try:
            result = seg.scan(0, seg.base_offset, verify=True)
        except (OSError, ValueError):
            return self.damage
        with self._lock:
            if seg not in self.segments or self._truncations != truncations:
                return self.damage
            if result.error is not None:
                if self._batch_is_bad(seg, result.valid_end, result.next_offset):
                    self._quarantine(Damage(seg.path, result.valid_end, result.next_offset, result.error))
            elif not seg.indexes_match_log():
                log.warning("rebuilding the damaged indexes of %s", seg.path)
                seg.rebuild_indexes(0)
            return self.damage

    @staticmethod
    def _batch_is_bad(seg: Segment, pos: int, expected: int) -> bool:
        """Whether the batch at ``pos`` of ``seg`` fails its checks (log lock held: the segment's
        size is exact). Nothing complete there yet (an append in flight when scanned) is good."""
        if pos >= seg.size:
            return False
        data = seg.pread(min(seg.size - pos, HEADER_SIZE), pos)
        try:
            h = decode_header(data)
        except CorruptRecord:
            return True
        if pos + h.size > seg.size:
            return True
        return first_bad_batch(seg.pread(h.size, pos), expected) is not None

    def scrub(self, throttle: Callable[[int], None] | None = None) -> int:
        """Check every batch of every segment (CRC, lengths, offsets) with recovery's scanner,
        outside the log lock; what looks damaged is checked again under it (``check_segment``)
        and quarantines the partition. Returns how many bytes were checked."""
        with self._lock:
            segments = list(self.segments)
        checked = 0
        for seg in segments:
            damage = self.damage
            if damage is not None and damage.path == seg.path:
                continue
            try:
                result = seg.scan(0, seg.base_offset, verify=True, throttle=throttle)
            except (OSError, ValueError):
                continue  # deleted by retention while we looked
            checked += result.valid_end
            if result.error is not None:
                self.check_segment(seg)
        return checked

    def _forget_removed_damage(self) -> None:
        """The damaged segment is gone (retention, delete-records, truncation): back online."""
        d = self.damage
        if d is not None and all(s.path != d.path for s in self.segments):
            self._forget_damage(d)

    def _forget_damage(self, d: Damage) -> None:
        self.damage = None
        log.warning("partition %s back online: the damaged part of %s was removed", self._label(),
                    d.path)

    @property
    def offline_reason(self) -> str | None:
        d = self.damage
        if d is not None:
            return d.describe()
        return self.fsync_error

    def locate(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
               payload_only: bool = False, nowait: bool = False, _checked: bool = False,
               _retried: bool = False) -> FileSpan | None:
        """Where the whole batches a read from ``offset`` would return lie in one segment file,
        without reading them: for zero-copy serving (``os.sendfile``) of stored bytes.

        Same rules as ``read``: from the batch holding ``offset`` (or the first after it), whole
        batches below ``max_offset``, at least one, about ``max_bytes``, never across segments.
        With ``payload_only`` the limit counts records sections only (not batch headers) and, as
        TANK does, batches are added until the limit is reached or passed.
        None when nothing is visible. The descriptor stays valid while the caller sends: a segment
        removed by retention is closed only after the graveyard delay.

        Headers are checked on the way (lengths, offsets; CRCs are the scrub's and
        ``FileSpan.read_batch``'s); damage met quarantines the partition as in ``read``. A segment
        that cannot be read (deleted by retention meanwhile, an I/O error) is retried once from
        the segment list as it is then; a second failure is a StorageError.

        ``nowait`` as for ``read``: WouldBlock for headers not in the page cache, the lock held
        elsewhere, and every failure (the blocking call handles it).
        """
        if not self._lock.acquire(blocking=not nowait):
            raise WouldBlock
        try:
            self._check_open()
            start = self.log_start_offset
            end = self.next_offset
            limit = end if max_offset is None else min(max_offset, end)
            if offset < start or offset > end:
                raise OffsetOutOfRange(f"offset {offset} outside [{start}, {end}]")
            damage = self.damage
            if damage is not None:
                if offset >= damage.offset:
                    raise self.offline_error()
                limit = min(limit, damage.offset)
            if offset >= limit:
                return None
            segments = self.segments[self._segment_for(offset):]
        finally:
            self._lock.release()
        for seg in segments:
            if seg.base_offset >= limit:
                break
            try:
                seg_size = self._readable_end(seg, damage)
                pos, first = seg.find_position(offset, seg_size, nowait=nowait)
                if first is None:
                    continue
                batches: list[tuple[int, BatchHeader]] = []
                taken = 0
                h: BatchHeader | None = first
                while h is not None and h.last_offset < limit:
                    size = h.size - HEADER_SIZE if payload_only else h.size
                    if batches and (taken >= max_bytes if payload_only else taken + size > max_bytes):
                        break
                    if nowait and len(batches) >= NOWAIT_MAX_BATCHES:
                        raise WouldBlock  # a header read each: many is a thread's work
                    batches.append((pos, h))
                    taken += size
                    pos += h.size
                    nxt = seg.header_at(pos, nowait=nowait) if pos < seg_size else None
                    # The CRC does not cover base offsets and lengths: a batch must follow the last.
                    if nxt is not None and (nxt.base_offset < h.next_offset or (
                            nxt.base_offset > h.next_offset and not nxt.sparse)):
                        raise CorruptRecord("offset gap")
                    h = nxt
            except (OSError, ValueError, CorruptRecord) as exc:
                if nowait:
                    raise WouldBlock from None
                if not isinstance(exc, CorruptRecord):
                    return self._locate_again(seg, exc, offset, max_bytes, max_offset, payload_only,
                                              _checked, _retried)
                if _checked:
                    raise StorageError(f"{seg.path} changed while it was read; retry") from None
                self.check_segment(seg)  # quarantines, unless the walk raced with a change
                return self.locate(max(offset, self.log_start_offset), max_bytes, max_offset=max_offset,
                                   payload_only=payload_only, _checked=True, _retried=_retried)
            if not batches:
                return None
            try:
                fd = seg.lease_fd(GRAVE_SECONDS)
            except (OSError, ValueError) as exc:
                if nowait:
                    raise WouldBlock from None
                return self._locate_again(seg, exc, offset, max_bytes, max_offset, payload_only,
                                          _checked, _retried)
            return FileSpan(fd, tuple(batches), self, seg, limit)
        return None

    def first_batch_base(self, *, nowait: bool = False) -> int | None:
        """The base offset of the batch holding the log start (None while nothing is stored):
        TANK's first available sequence, asked on every consume. Remembered until the log's
        first segment or start changes (retention, a purge) or a truncation rewrites bytes;
        ``nowait`` as for ``locate``."""
        for _attempt in range(3):
            first = self.segments[0]
            key = (first.base_offset, self._truncations, id(first))
            cached = self._first_base
            if cached is not None and cached[0] == key:
                return cached[1]
            try:
                span = self.locate(first.base_offset, 1, nowait=nowait)
            except OffsetOutOfRange:
                if self.segments[0] is first:
                    raise
                continue  # retention removed that segment meanwhile: the new first one
            if span is None:
                return None
            span.release()
            base = span.batches[0][1].base_offset
            self._first_base = (key, base)
            return base
        raise StorageError(f"the start of {self.dir} kept moving while it was read; retry")

    def _locate_again(self, seg: Segment, exc: Exception, offset: int, max_bytes: int,
                      max_offset: int | None, payload_only: bool, checked: bool,
                      retried: bool) -> FileSpan | None:
        """``locate`` once more after ``seg`` could not be read (retention deleted it, or an I/O
        error): the segment list is read again. A second failure is the caller's error."""
        if retried:
            raise StorageError(f"cannot locate offset {offset} in {seg.path}: {exc}") from None
        return self.locate(max(offset, self.log_start_offset), max_bytes, max_offset=max_offset,
                           payload_only=payload_only, _checked=checked, _retried=True)

    def read_records(self, offset: int, max_records: int, *, max_offset: int | None = None,
                     max_bytes: int = 1 << 20) -> list[Record]:
        """Decode records from ``offset`` (convenience for protocol layers and tests)."""
        result = self.read(offset, max_bytes, max_offset=max_offset)
        out: list[Record] = []
        for p, _h in iter_batches(result.data):
            for rec in decode_records(result.data, p):
                if rec.offset >= offset and len(out) < max_records:
                    out.append(rec)
        return out

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp``; None if there is none."""
        with self._lock:
            segments = list(self.segments)
        for seg in segments:
            if seg.max_timestamp < timestamp:
                continue
            pos, h = seg.find_timestamp_position(timestamp)
            if h is None:
                continue
            damage = self.damage
            if damage is not None and (h.last_offset >= damage.offset
                                       or pos >= self._readable_end(seg, damage)):
                raise self.offline_error()
            data = seg.pread(h.size, pos)
            if first_bad_batch(data, h.base_offset) is not None:
                self.check_segment(seg)
                raise self.offline_error()
            for rec in decode_records(data):
                if rec.timestamp >= timestamp:
                    return rec.offset
        return None

    def batch_header_at(self, offset: int) -> BatchHeader | None:
        with self._lock:
            seg = self.segments[self._segment_for(offset)]
        _pos, h = seg.find_position(offset)
        return h

    # -- truncation and retention --------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose base offset is >= ``offset`` (for replicas that diverged)."""
        with self._lock:
            if offset >= self.next_offset:
                return
            while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
                seg = self.segments.pop()
                self._bases.pop()
                self._bury(seg)
            seg = self.active
            pos, h = seg.find_position(offset)
            if h is not None and h.base_offset < offset:
                pos += h.size  # keep the batch that straddles ``offset``
            self._truncations += 1
            failed: FsyncFailed | None = None
            try:
                seg.truncate_to_position(pos)
            except FsyncFailed as exc:  # cut, but what lies below may not be on disk
                self._fsync_failed(exc)
                failed = exc
            d = self.damage
            if d is not None and d.path == seg.path and pos <= d.position:
                seg.damage = None  # the damaged bytes are cut off
                self._forget_damage(d)
            seg.next_offset = self._end_offset_of(seg)
            with self._sync_cond:
                self._durable_offset = min(self._durable_offset, seg.next_offset)
                self.drops += 1  # fsync waiters for what was cut are refused (broker/durability.py)
                self._cut_at.append((self.drops, seg.next_offset))
            self._forget_removed_damage()
            if failed is not None:
                raise StorageError(f"fsync failed: {failed}") from failed

    @staticmethod
    def _end_offset_of(seg: Segment) -> int:
        pos = seg.index.last_position()
        next_offset = seg.base_offset
        while pos < seg.size:
            h = seg.header_at(pos)
            next_offset = h.next_offset
            pos += h.size
        return next_offset

    def apply_retention(self, now: int | None = None) -> int:
        """Delete old segments by age and total size; never the active one. Returns how many."""
        now = now_ms() if now is None else now
        deleted = 0
        with self._lock:
            total = self.size_bytes
            while len(self.segments) > 1:
                seg = self.segments[0]
                by_count = 0 < self.config.retention_segments < len(self.segments)
                by_size = by_count or (
                    self.config.retention_bytes >= 0 and total - seg.size >= self.config.retention_bytes)
                newest = seg.max_timestamp if seg.max_timestamp >= 0 else (seg.created_ms or now)
                by_age = self.config.retention_ms >= 0 and now - newest > self.config.retention_ms
                if not (by_size or by_age):
                    break
                self.segments.pop(0)
                self._bases.pop(0)
                total -= seg.size
                log.info("retention: deleting %s (%s)", seg.path, "size" if by_size else "age")
                self._bury(seg)
                deleted += 1
            self._close_buried()
            self._forget_removed_damage()
        return deleted

    def purge(self, start: int | None = None) -> None:
        """Delete every record without reusing offsets (Kafka's delete-records up to the end).
        ``start`` (at or past the log end) makes the empty log start there instead: a follower
        whose leader's log begins past the follower's end.

        A new empty active segment is created at the log end before the old segments go, so the
        log start (the first segment's base offset) equals the log end from then on, also after
        a crash at any point: the empty segment's name carries the offset. Readers already in
        another thread keep reading the old segments through the graveyard.
        """
        with self._lock:
            end = self.next_offset if start is None else max(start, self.next_offset)
            keep_active = self.active.size == 0 and self.active.base_offset == end
            old = self.segments[:-1] if keep_active else list(self.segments)
            if not old:
                return
            if not keep_active:
                try:
                    seg = Segment(self.dir, end, self.config.index_interval_bytes, self.handles)
                except OSError as exc:
                    raise StorageError(f"purge failed: {exc}") from exc
                try:
                    fsync_dir(self.dir)  # the new base offset is on disk before any data goes
                except OSError as exc:
                    seg.close()  # an empty segment left behind reopens harmlessly
                    raise StorageError(f"purge failed: {exc}") from exc
            del self.segments[: len(old)]
            if not keep_active:
                self.segments.append(seg)
            self._bases = [s.base_offset for s in self.segments]
            try:
                for s in old:
                    self._bury(s)
                fsync_dir(self.dir)
            except OSError as exc:
                raise StorageError(f"purge failed: {exc}") from exc
            with self._sync_cond:
                # Nothing below ``end`` exists any more, so nothing a crash could take back.
                self._durable_offset = max(self._durable_offset, end)
                self._sync_cond.notify_all()
            self._close_buried()
            self._forget_removed_damage()
            log.info("purged %s: log starts at %d", self.dir, end)

    def delete_oldest_segments(self, count: int) -> int:
        """Delete up to ``count`` of the oldest segments, never the active one. Returns how many."""
        deleted = 0
        with self._lock:
            while deleted < count and len(self.segments) > 1:
                seg = self.segments.pop(0)
                self._bases.pop(0)
                self._bury(seg)
                deleted += 1
            if deleted:
                try:
                    fsync_dir(self.dir)
                except OSError as exc:
                    raise StorageError(f"fsync of {self.dir} failed: {exc}") from exc
                log.info("deleted %d oldest segments of %s: log starts at %d", deleted, self.dir,
                         self.log_start_offset)
            self._close_buried()
            self._forget_removed_damage()
        return deleted

    def delete_segments_below(self, offset: int) -> int:
        """Delete the oldest segments whose records all lie below ``offset`` (a follower taking
        its leader's log start), never the active one. Returns how many."""
        with self._lock:  # an RLock: counted and deleted in one step (retention may run meanwhile)
            count = 0
            while count + 1 < len(self.segments) and self._bases[count + 1] <= offset:
                count += 1
            return self.delete_oldest_segments(count) if count else 0

    def _bury(self, seg: Segment) -> None:
        """Remove a segment's files. Its log file is closed (its space freed) now unless a
        reader or a zero-copy send holds it; then as soon as the last one lets go, or after
        GRAVE_SECONDS at most (``_close_buried``)."""
        seg.delete(close=False)
        if not seg.file.retire():
            self._graveyard.append((time.monotonic(), seg))

    def _close_buried(self, older_than: float = GRAVE_SECONDS) -> None:
        now = time.monotonic()
        keep = []
        for t, seg in self._graveyard:
            if seg.closed:
                continue  # its last holder let go
            if now - t >= older_than:
                seg.close()
            else:
                keep.append((t, seg))
        self._graveyard = keep

    def _check_open(self) -> None:
        if self.closed:
            raise StorageError(f"the log {self.dir} is closed")

    def close(self) -> None:
        """Close every file for good (a reader in another thread finishes its current read;
        later reads raise StorageError)."""
        with self._lock:
            self.closed = True
            for seg in self.segments:
                seg.close()
            self._close_buried(0)

    def delete(self) -> None:
        with self._lock:
            for seg in self.segments:
                seg.delete()
            self.segments = []


__all__ = ["HEADER_SIZE", "AppendInfo", "PartitionLog", "ReadResult"]
