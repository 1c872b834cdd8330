"""One segment: a log file of batches named by its 20-digit base offset, plus its two indexes.

Deferred appends (``append(..., defer=True)``): under fsync=always the produce path appends a
batch to the segment's pending bytes instead of writing it, and the group commit's fsync, in the
I/O pool, writes them all with one ``write`` before it fsyncs. A write to a file that an fsync is
flushing waits for the file system (12 us on average here, against 0.8 us without an fsync
running), and the event loop made one per request; now it makes none. Nothing is acknowledged
before its fsync, so nothing acknowledged is ever only pending. Every other use of the file (a
read, a write-through append, a truncation, the fsync, closing) writes the pending bytes first, so
the file always holds the segment's batches in order, and what a reader reads is all there. The
file may be shorter than ``size`` only by the pending bytes. When their write fails (a full disk)
the log undoes them (``drop_pending``, ``PartitionLog.drop_unwritten``), as it undoes a failed
write-through append: none was acknowledged.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import operator
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bayou.errors import CorruptRecord, StorageError
from bayou.records.batch import HEADER_SIZE, LENGTH_PREFIX, BatchHeader, decode_header
from bayou.storage.cached import pread_cached
from bayou.storage.fsutil import fsync
from bayou.storage.handles import HandleCache, default_cache
from bayou.storage.index import OffsetIndex, TimeIndex
from bayou.storage.integrity import batch_fault

log = logging.getLogger("bayou.storage")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
_SCAN_CHUNK = 1 << 20
_FIRST_SCAN = 16 * 1024  # the most a lookup reads first (four index intervals at the default)
_NEAR_SCAN = 1024  # ... from a batch appended lately (the offset is in it or a few batches on)
_RECENT = 64  # batches whose positions a segment remembers beyond its index (at most twice this)
_BASE = operator.itemgetter(0)
MAX_PENDING = 1 << 20  # pending bytes a deferred append writes out at once rather than add to


class PendingWriteFailed(OSError):
    """The write of deferred appends' pending bytes failed (no fsync was attempted): the log
    undoes them and may still fsync what was written before them (``PartitionLog.sync_to``)."""


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(slots=True)
class ScanResult:
    """What a validating scan found: where valid data ends and why it stopped."""

    valid_end: int
    next_offset: int
    max_timestamp: int
    batches: int
    error: str | None


class Segment:
    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int,
                 handles: HandleCache | None = None) -> None:
        """Open (or create) the segment. Its files are opened through ``handles`` on use, and
        closed when idle, so a store may hold more segments than the process may open files."""
        self.base_offset = base_offset
        name = segment_name(base_offset)
        cache = handles if handles is not None else default_cache()
        self.path = directory / (name + LOG_SUFFIX)
        self.index = OffsetIndex(directory / (name + INDEX_SUFFIX), cache)
        self.time_index = TimeIndex(directory / (name + TIMEINDEX_SUFFIX), cache)
        self.index_interval_bytes = index_interval_bytes
        # No O_CREAT on reopening: a segment deleted while a reader holds it must not come back.
        self.file = cache.file(self.path, os.O_RDWR | os.O_APPEND)
        try:
            self.size = os.stat(self.path).st_size
        except FileNotFoundError:  # a new segment: its name (the base offset) is on disk now
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644))
            self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_ms: int | None = None  # time of the first append, for age-based rolling
        self._bytes_since_index = 0
        self.synced_size = self.size
        # (position, reason) when loading found a bad batch and did not cut it (a sealed segment,
        # or any after a clean stop): in memory the segment ends there; the file is left as it is
        # for `bayou verify --repair`, and nothing is ever appended to it.
        self.damage: tuple[int, str] | None = None
        # (base offset, position) of the batches appended last, oldest first: a reader at the
        # tail finds its batch here instead of scanning headers from the last index point. The
        # list is replaced, never cut in place, so a reader in another thread holding it stays
        # consistent (appends only add at its end).
        self._recent: list[tuple[int, int]] = []
        # deferred appends (see the module docstring): ``_pending`` is changed, and ``size`` with
        # it, under ``_pending_lock`` (held for an add or a swap); ``_flush_lock`` is held while
        # they are written, so two threads' writes never interleave
        self._pending = bytearray()
        self._pending_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        # (position, base offset) of the first batch in ``_pending``: where ``drop_pending`` cuts
        self._pending_first: tuple[int, int] | None = None
        # bytes known to be in the file (grows only after a write returned; set by a cut), and
        # cuts made (truncation, undone appends): a ``sync`` racing a cut does not count bytes
        # the cut took away as synced
        self._in_file = self.size
        self._cuts = 0

    # -- appending -----------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int, *,
               defer: bool = False) -> int:
        """Write one batch at the end (``defer``: add it to the pending bytes, see the module
        docstring); return its position."""
        if self.damage is not None:
            raise CorruptRecord(f"{self.path} is damaged at position {self.damage[0]}: not appending")
        size = header.batch_length + LENGTH_PREFIX  # header.size, without the property's call
        base = header.base_offset
        if defer and len(self._pending) + size > MAX_PENDING:
            defer = False
        if not defer:
            # always through flush: it takes the flush lock, so it waits for another thread's
            # write of pending bytes, which a failed write puts back in front of this batch
            self.flush()
        pos = self.size
        if self._bytes_since_index >= self.index_interval_bytes or (not self.index.positions and pos == 0):
            rel = base - self.base_offset
            self.index.append(rel, pos)
            self.time_index.maybe_append(max(self.max_timestamp, header.max_timestamp), rel)
            self._bytes_since_index = 0
        if defer:
            with self._pending_lock:
                if not self._pending:
                    self._pending_first = (pos, base)
                self._pending += data
                self.size += size
        else:
            with self._flush_lock, self.file.use() as fd:
                n = os.write(fd, data)
                if n < size:  # a short write: the rest
                    view = memoryview(data)[n:]
                    while view:
                        n = os.write(fd, view)
                        view = view[n:]
                with self._pending_lock:  # a part written before a failure is cut (undo_partial_write)
                    self._in_file += size
            self.size += size
        self._bytes_since_index += size
        recent = self._recent
        if len(recent) >= 2 * _RECENT:
            recent = self._recent = recent[_RECENT:]
        recent.append((base, pos))
        self.next_offset = base + header.last_offset_delta + 1
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
        if self.created_ms is None:
            self.created_ms = now_ms
        return pos

    def flush(self) -> None:
        """Write the pending bytes of deferred appends. On a failed write what was not written
        stays pending (in front of anything appended since), and the OSError is raised: the log
        then undoes the appends (``drop_pending``), as it undoes a failed write-through append."""
        with self._flush_lock:  # also waits for another thread's write of what it took
            if not self._pending:
                return
            with self._pending_lock:
                data, self._pending = self._pending, bytearray()
                first, self._pending_first = self._pending_first, None
            view = memoryview(data)
            try:
                with self.file.use() as fd:
                    while view:
                        n = os.write(fd, view)
                        view = view[n:]
                        with self._pending_lock:
                            self._in_file += n
            except BaseException as exc:
                with self._pending_lock:
                    self._pending[:0] = view
                    self._pending_first = first  # its batch may now be partly in the file
                if isinstance(exc, OSError):
                    raise PendingWriteFailed(exc.errno, exc.strerror) from exc
                raise
            finally:
                view.release()

    def drop_pending(self) -> tuple[int, int] | None:
        """Forget the pending bytes (their write failed; none was acknowledged): return the
        position and base offset of the first batch they held (a failed write may have put part
        of it in the file), or None when nothing is pending. The caller cuts the segment there
        (``truncate_to_position``) and sets ``next_offset``."""
        with self._flush_lock, self._pending_lock:
            if not self._pending or self._pending_first is None:
                return None
            first = self._pending_first
            self.size -= len(self._pending)
            self._pending = bytearray()
            self._pending_first = None
            return first

    @property
    def written_size(self) -> int:
        """The bytes known to be in the file (a failed write may have left part of a pending
        batch there too)."""
        return self._in_file

    def _unflushed_from(self) -> int:
        """Where bytes a read must not take without a flush begin: the first pending batch
        (a failed write may have put part of it in the file, and undoing it cuts there), else the
        end of what is known to be in the file (another thread may be writing past it). Read
        without the locks; either value read stale is lower, so a read only flushes more."""
        first = self._pending_first
        in_file = self._in_file
        return in_file if first is None else min(first[0], in_file)

    @property
    def dirty(self) -> bool:
        return self.size > self.synced_size or bool(self._pending)

    def sync(self, *, indexes: bool = True) -> None:
        """fsync what was appended before this call (appends racing with it stay dirty), and the
        indexes unless ``indexes`` is false: the active segment's group commits leave them, since
        its load after a crash checks them against the log and rebuilds what they lack
        (``load(recover=True)``); ``sync_indexes`` then, when it is sealed or flushed."""
        cuts = self._cuts
        self.flush()  # waits for a write in flight in another thread too
        in_file = self._in_file
        with self.file.use() as fd:
            fsync(fd)
        if indexes:
            self.sync_indexes()
        with self._pending_lock:
            if self._cuts == cuts:  # a cut meanwhile: what it kept is counted by the next sync
                self.synced_size = max(self.synced_size, in_file)

    def sync_indexes(self) -> None:
        self.index.sync()
        self.time_index.sync()

    # -- reading -------------------------------------------------------------------------------

    def pread(self, size: int, position: int, *, nowait: bool = False) -> bytes:
        """``size`` bytes at ``position``. With ``nowait``, only from the page cache: raises
        WouldBlock instead of waiting for the disk (for reads made on the event loop). The
        pending bytes are written first when the read reaches into them (only then: on a full
        disk, what is in the file stays readable)."""
        if position + size > self._unflushed_from():
            self._flush_for_read()
        with self.file.use() as fd:
            if nowait:
                return pread_cached(fd, size, position, in_file=position + size <= self._in_file)
            return os.pread(fd, size, position)

    def lease_fd(self, seconds: float) -> int:
        """The log file's descriptor, valid for ``seconds`` (zero-copy sends; see handles.py)."""
        self._flush_for_read()
        return self.file.lease(seconds)

    def _flush_for_read(self) -> None:
        """``flush`` before a read; a failed write (a full disk) is the read's StorageError."""
        try:
            self.flush()
        except OSError as exc:
            raise StorageError(f"cannot write appended batches before reading them: {exc}") from exc

    def undo_partial_write(self) -> None:
        """Cut the part of a failed write-through append that reached the file (nothing is
        pending then: the append wrote the pending bytes first)."""
        with self._flush_lock:
            written = self._in_file
            with self.file.use() as fd:
                if os.fstat(fd).st_size != written:
                    os.ftruncate(fd, written)

    def header_at(self, position: int, *, nowait: bool = False) -> BatchHeader:
        return decode_header(self.pread(HEADER_SIZE, position, nowait=nowait))

    def find_position(self, offset: int, end: int | None = None, *,
                      nowait: bool = False) -> tuple[int, BatchHeader | None]:
        """Position of the batch that holds ``offset`` (or the first after it), and its header;
        ``nowait`` as for ``pread``.

        Returns (size, None) when no batch at or after ``offset`` exists in this segment.
        """
        pos, h, _seen, _at = self.find_batch(offset, end, nowait=nowait)
        return pos, h

    def find_batch(self, offset: int, end: int | None = None, *,
                   nowait: bool = False) -> tuple[int, BatchHeader | None, bytes, int]:
        """``find_position``, and the bytes its last read took with their position: a reader at
        the tail finds the batch (and those after it) in them and need not read them again."""
        limit = self.size if end is None else end
        pos = self.index.lookup(max(0, offset - self.base_offset))
        # the batch lies within an index interval of pos: read that much first (a larger batch
        # is read on), or a little when a batch appended lately holds the offset
        want = min(_FIRST_SCAN, self.index_interval_bytes + HEADER_SIZE)
        recent = self._recent
        if recent and offset >= recent[0][0]:
            near = recent[bisect.bisect_right(recent, offset, key=_BASE) - 1][1]
            if near >= pos:
                pos, want = near, _NEAR_SCAN
        while pos < limit:
            chunk = self.pread(min(want, limit - pos), pos, nowait=nowait)
            want = min(_SCAN_CHUNK, want * 4)
            p = 0
            while len(chunk) - p >= HEADER_SIZE:
                h = decode_header(chunk, p)
                if h.next_offset > offset:
                    return pos + p, h, chunk, pos
                p += h.size
            if p == 0:
                break
            pos += p
        return limit, None, b"", limit

    def find_timestamp_position(self, timestamp: int) -> tuple[int, BatchHeader | None]:
        """Position of the first batch whose max timestamp is >= ``timestamp``."""
        rel = self.time_index.lookup(timestamp)
        pos, _ = self.find_position(self.base_offset + rel)
        while pos < self.size:
            h = self.header_at(pos)
            if h.max_timestamp >= timestamp:
                return pos, h
            pos += h.size
        return self.size, None

    # -- recovery ------------------------------------------------------------------------------

    def scan(self, start: int, expected_offset: int | None, verify: bool,
             throttle: Callable[[int], None] | None = None) -> ScanResult:
        """Walk batches from ``start``; with ``verify``, stop at the first torn or corrupt one.
        ``throttle(n)`` is called after each read of ``n`` bytes (the scrub's I/O rate limit)."""
        pos = start
        next_offset = expected_offset if expected_offset is not None else self.base_offset
        max_ts = -1
        batches = 0
        error: str | None = None
        buf = b""
        buf_start = pos
        while pos < self.size:
            rel = pos - buf_start
            if len(buf) - rel < HEADER_SIZE:
                buf = self.pread(_SCAN_CHUNK, pos)
                buf_start, rel = pos, 0
                if throttle is not None:
                    throttle(len(buf))
                if len(buf) < HEADER_SIZE:
                    error = f"torn batch header at position {pos}"
                    break
            try:
                h = decode_header(buf, rel)
            except CorruptRecord as exc:
                error = f"{exc} at position {pos}"
                break
            if pos + h.size > self.size:
                error = f"torn batch at position {pos} ({h.size} bytes, {self.size - pos} present)"
                break
            if verify:
                if len(buf) - rel < h.size:
                    buf = self.pread(max(_SCAN_CHUNK, h.size), pos)
                    buf_start, rel = pos, 0
                    if throttle is not None:
                        throttle(len(buf))
                # Only a sparse batch may start past the previous one's end (a deliberate gap,
                # marked inside the CRC); none may start inside or before it.
                fault = batch_fault(buf, rel, h, next_offset if expected_offset is not None else None)
                if fault is not None:
                    error = f"{fault} at position {pos}"
                    break
            next_offset = h.next_offset
            max_ts = max(max_ts, h.max_timestamp)
            pos += h.size
            batches += 1
        return ScanResult(pos, next_offset, max_ts, batches, error)

    def rebuild_indexes(self, start: int = 0) -> None:
        """Recreate index entries for batches from ``start`` (0: from scratch)."""
        if start == 0:
            self.index.clear_memory()
            self.time_index.clear_memory()
            self.index.rewrite()
            self.time_index.rewrite()
        pos = start
        since = self.index_interval_bytes if start == 0 else 0
        max_ts = self.max_timestamp if start else -1
        while pos < self.size:
            h = self.header_at(pos)
            max_ts = max(max_ts, h.max_timestamp)
            if since >= self.index_interval_bytes:
                rel = h.base_offset - self.base_offset
                self.index.append(rel, pos)
                self.time_index.maybe_append(max_ts, rel)
                since = 0
            since += h.size
            pos += h.size
        self._bytes_since_index = since

    def load(self, *, recover: bool, indexes_on_disk: bool = True) -> int:
        """Open an existing segment. With ``recover``, validate from the last index point and truncate
        a torn or corrupt tail. Returns how many bytes were cut."""
        if self.size == 0 and not indexes_on_disk:
            return 0  # an empty segment without index files: nothing to read (a fast start)
        max_rel = 0xFFFFFFFF
        ok = self.index.load(self.size, max_rel) and self.time_index.load(max_rel)
        if ok and recover and not self.indexes_match_log():
            ok = False
        if not ok and self.size:
            log.info("rebuilding indexes of %s", self.path)
        start = self.index.last_position() if ok else 0
        start_offset: int | None = None
        if ok and self.index.rel_offsets:
            start_offset = self.base_offset + self.index.rel_offsets[-1]
            try:
                h = self.header_at(start)
                if h.base_offset != start_offset:
                    raise CorruptRecord("index points at the wrong batch")
            except CorruptRecord:
                ok, start, start_offset = False, 0, None
        if start == 0:
            start_offset = self.base_offset
        if start:
            self.max_timestamp = self.time_index.last_timestamp or -1
        result = self.scan(start, start_offset, verify=recover)
        self.max_timestamp = max(self.max_timestamp, result.max_timestamp)
        cut = 0
        if result.error is not None and recover:
            log.warning(
                "recovery: truncating %s at position %d (%d bytes cut): %s",
                self.path, result.valid_end, self.size - result.valid_end, result.error,
            )
            cut = self.size - result.valid_end
            self.truncate_to_position(result.valid_end)
        elif result.error is not None:
            # Quarantine, not truncation: acknowledged data past the damage may still be saved
            # from the file (or a replica); the partition log reports it and stays offline.
            self.damage = (result.valid_end, result.error)
            self._recent = [(b, p) for b, p in self._recent if p < result.valid_end]
            self.size = result.valid_end
            self.index.truncate_to_position(result.valid_end)
            last_rel = self.index.rel_offsets[-1] if self.index.rel_offsets else 0
            self.time_index.truncate_to_rel_offset(last_rel + 1)
        self.next_offset = result.next_offset
        self.rebuild_indexes(start if ok else 0)
        if self.size:
            self.created_ms = int(os.stat(self.path).st_mtime * 1000)
        return cut

    def indexes_match_log(self) -> bool:
        """Check loaded indexes against the log: every offset-index entry names the batch at its
        position, and every time-index entry sits on an offset-index point (they are written
        together) with a timestamp no lower than that batch's. A well-formed but wrong file fails."""
        points = dict(zip(self.index.rel_offsets, self.index.positions, strict=True))
        if self.size and (not points or self.index.positions[0] != 0 or not self.time_index.rel_offsets):
            return False
        try:
            for rel, pos in points.items():
                if self.header_at(pos).base_offset != self.base_offset + rel:
                    return False
            for ts, rel in zip(self.time_index.timestamps, self.time_index.rel_offsets, strict=True):
                at = points.get(rel)
                if at is None or self.header_at(at).max_timestamp > ts:
                    return False
        except CorruptRecord:
            return False
        return True

    def truncate_to_position(self, position: int) -> None:
        self.flush()
        self._recent = [(b, p) for b, p in self._recent if p < position]
        with self._flush_lock, self.file.use() as fd:
            os.ftruncate(fd, position)
            with self._pending_lock:  # the file is cut: the segment follows before the fsync
                self._in_file = position
                self._cuts += 1
                self.size = position
                self.synced_size = min(self.synced_size, position)
            self.index.truncate_to_position(position)
            last_rel = self.index.rel_offsets[-1] if self.index.rel_offsets else 0
            self.time_index.truncate_to_rel_offset(last_rel + 1)
            fsync(fd)  # FsyncFailed: the log goes offline (PartitionLog._fsync_failed)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.file.discarded

    def close(self) -> None:
        """Close for good (the pending bytes written first); a reader that still holds this
        segment gets ValueError."""
        try:
            self.flush()
        except (OSError, ValueError) as exc:
            log.error("%s: %d appended bytes could not be written at close: %s",
                      self.path, len(self._pending), exc)
        self.file.discard()
        self.index.discard()
        self.time_index.discard()

    def delete(self, *, close: bool = True) -> None:
        """Remove the files. With ``close=False`` the descriptor stays open, so a reader that
        already holds this segment still reads valid (unlinked) data; close it later."""
        with self._pending_lock:
            self._pending = bytearray()  # its batches go with the file
            self._pending_first = None
        if close:
            self.close()
        else:
            self.index.discard()
            self.time_index.discard()
        for p in (self.path, self.index.path, self.time_index.path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
