"""Sparse, fixed-width indexes relative to a segment's base offset; always rebuildable from the log.

Offset index entry: relative offset u32, file position u32 (8 bytes).
Time index entry:   max timestamp so far i64, relative offset u32 (12 bytes).

Entries are kept in memory (array) and appended to their file; a torn last entry is ignored on load.
The files are opened through the store's handle cache when appended to, and closed when idle.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

from bayou.storage.handles import CachedFile, HandleCache, default_cache

_OFF = struct.Struct(">II")
_TIME = struct.Struct(">qI")


class OffsetIndex:
    entry_size = _OFF.size

    def __init__(self, path: Path, handles: HandleCache | None = None) -> None:
        self.path = path
        self.rel_offsets: array[int] = array("Q")
        self.positions: array[int] = array("Q")
        self._file = _index_file(path, handles)
        self._dirty = False

    def load(self, max_position: int, max_rel_offset: int) -> bool:
        """Read entries from disk; return False (and keep nothing) if they look inconsistent."""
        self.clear_memory()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        usable = len(data) - len(data) % self.entry_size
        last_rel, last_pos = -1, -1
        for rel, pos in _OFF.iter_unpack(data[:usable]):
            out_of_order = rel <= last_rel or (last_pos >= 0 and pos <= last_pos)
            if out_of_order or pos > max_position or rel > max_rel_offset:
                self.clear_memory()
                return False
            self.rel_offsets.append(rel)
            self.positions.append(pos)
            last_rel, last_pos = rel, pos
        if usable != len(data):
            self.rewrite()
        return True

    def clear_memory(self) -> None:
        self.rel_offsets = array("Q")
        self.positions = array("Q")

    def append(self, rel_offset: int, position: int) -> None:
        # Readers in other threads bisect rel_offsets and index positions: grow positions first.
        self.positions.append(position)
        self.rel_offsets.append(rel_offset)
        _write(self._file, _OFF.pack(rel_offset, position))
        self._dirty = True

    def lookup(self, rel_offset: int) -> int:
        """File position of the last indexed batch starting at or before ``rel_offset`` (0 if none)."""
        i = bisect.bisect_right(self.rel_offsets, rel_offset) - 1
        return self.positions[i] if i >= 0 else 0

    def last_position(self) -> int:
        return self.positions[-1] if self.positions else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or after ``position``."""
        i = bisect.bisect_left(self.positions, position)
        if i < len(self.positions):
            del self.rel_offsets[i:]
            del self.positions[i:]
            self.rewrite()

    def rewrite(self) -> None:
        self.close()
        data = b"".join(_OFF.pack(r, p) for r, p in zip(self.rel_offsets, self.positions, strict=True))
        self.path.write_bytes(data)
        self._dirty = True

    def sync(self) -> None:
        if self._dirty:
            self._dirty = False
            try:
                with self._file.use() as fd:
                    os.fsync(fd)
            except BaseException:
                self._dirty = True
                raise

    def close(self) -> None:
        """Close the descriptor (reopened on the next append)."""
        self._file.close()

    def discard(self) -> None:
        """Close for good (the segment is closed or deleted)."""
        self._file.discard()


class TimeIndex:
    entry_size = _TIME.size

    def __init__(self, path: Path, handles: HandleCache | None = None) -> None:
        self.path = path
        self.timestamps: array[int] = array("q")
        self.rel_offsets: array[int] = array("Q")
        self._file = _index_file(path, handles)
        self._dirty = False

    def load(self, max_rel_offset: int) -> bool:
        self.clear_memory()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        usable = len(data) - len(data) % self.entry_size
        last_ts, last_rel = None, -1
        for ts, rel in _TIME.iter_unpack(data[:usable]):
            if (last_ts is not None and ts <= last_ts) or rel < last_rel or rel > max_rel_offset:
                self.clear_memory()
                return False
            self.timestamps.append(ts)
            self.rel_offsets.append(rel)
            last_ts, last_rel = ts, rel
        if usable != len(data):
            self.rewrite()
        return True

    def clear_memory(self) -> None:
        self.timestamps = array("q")
        self.rel_offsets = array("Q")

    @property
    def last_timestamp(self) -> int | None:
        return self.timestamps[-1] if self.timestamps else None

    def maybe_append(self, max_timestamp: int, rel_offset: int) -> None:
        """Record that from ``rel_offset`` on, timestamps reach ``max_timestamp``."""
        if self.timestamps and max_timestamp <= self.timestamps[-1]:
            return
        # Readers bisect timestamps and index rel_offsets: grow rel_offsets first.
        self.rel_offsets.append(rel_offset)
        self.timestamps.append(max_timestamp)
        _write(self._file, _TIME.pack(max_timestamp, rel_offset))
        self._dirty = True

    def lookup(self, timestamp: int) -> int:
        """Relative offset from which a scan for the first record with ts >= ``timestamp`` may start."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.rel_offsets[i] if i >= 0 else 0

    def truncate_to_rel_offset(self, rel_offset: int) -> None:
        i = bisect.bisect_left(self.rel_offsets, rel_offset)
        if i < len(self.rel_offsets):
            del self.timestamps[i:]
            del self.rel_offsets[i:]
            self.rewrite()

    def rewrite(self) -> None:
        self.close()
        data = b"".join(_TIME.pack(t, r) for t, r in zip(self.timestamps, self.rel_offsets, strict=True))
        self.path.write_bytes(data)
        self._dirty = True

    def sync(self) -> None:
        if self._dirty:
            self._dirty = False
            try:
                with self._file.use() as fd:
                    os.fsync(fd)
            except BaseException:
                self._dirty = True
                raise

    def close(self) -> None:
        """Close the descriptor (reopened on the next append)."""
        self._file.close()

    def discard(self) -> None:
        """Close for good (the segment is closed or deleted)."""
        self._file.discard()


def _index_file(path: Path, handles: HandleCache | None) -> CachedFile:
    return (handles if handles is not None else default_cache()).file(
        path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def _write(file: CachedFile, data: bytes) -> None:
    with file.use() as fd:
        os.write(fd, data)
