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
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from bayou.storage.fsutil import fsync
from bayou.storage.handles import HandleCache, default_cache

_OFF = struct.Struct(">II")
_TIME = struct.Struct(">qI")


class _Column:
    """An index's own name for one of its two arrays (read-only)."""

    def __init__(self, array_name: str) -> None:
        self.array_name = array_name

    def __get__(self, index: object, owner: type | None = None) -> array[int]:
        column: array[int] = getattr(index, self.array_name)
        return column


class _SparseIndex:
    """What both indexes are: a file of fixed-width (key, value) entries, keys ascending, mirrored
    in two arrays. Readers in other threads bisect ``keys`` and index ``values`` with what they
    found, so ``values`` always grows first."""

    _entry: ClassVar[struct.Struct]
    entry_size: ClassVar[int]
    _typecodes: ClassVar[tuple[str, str]]  # (keys, values)

    def __init_subclass__(cls) -> None:
        cls.entry_size = cls._entry.size

    def __init__(self, path: Path, handles: HandleCache | None = None) -> None:
        self.path = path
        self.clear_memory()
        self._file = (handles if handles is not None else default_cache()).file(
            path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._dirty = False

    def clear_memory(self) -> None:
        self.keys: array[int] = array(self._typecodes[0])
        self.values: array[int] = array(self._typecodes[1])

    def _load(self, follows: Callable[[int, int, int, int], bool]) -> bool:
        """Read entries from disk; return False (and keep nothing) if they look inconsistent:
        ``follows(last_key, last_value, key, value)`` (-1, -1 before the first) judges each one."""
        self.clear_memory()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        usable = len(data) - len(data) % self.entry_size
        last_key, last_value = -1, -1
        for key, value in self._entry.iter_unpack(data[:usable]):
            if not follows(last_key, last_value, key, value):
                self.clear_memory()
                return False
            self.keys.append(key)
            self.values.append(value)
            last_key, last_value = key, value
        if usable != len(data):
            self.rewrite()
        return True

    def _append(self, key: int, value: int) -> None:
        self.values.append(value)
        self.keys.append(key)
        with self._file.use() as fd:
            os.write(fd, self._entry.pack(key, value))
        self._dirty = True

    def _truncate(self, i: int) -> None:
        """Drop entry ``i`` and every one after it."""
        if i < len(self.keys):
            del self.keys[i:]
            del self.values[i:]
            self.rewrite()

    def rewrite(self) -> None:
        self.close()
        pack = self._entry.pack
        self.path.write_bytes(b"".join(pack(k, v) for k, v in zip(self.keys, self.values, strict=True)))
        self._dirty = True

    def sync(self) -> None:
        if self._dirty:
            self._dirty = False
            try:
                with self._file.use() as fd:
                    fsync(fd)
            except BaseException:
                self._dirty = True
                raise

    def close(self) -> None:
        """Close the descriptor (reopened on the next append)."""
        self._file.close()

    def discard(self) -> None:
        """Close for good (the segment is closed or deleted)."""
        self._file.discard()


class OffsetIndex(_SparseIndex):
    """Relative offset -> file position of the batch that starts there."""

    _entry, _typecodes = _OFF, ("Q", "Q")

    rel_offsets = _Column("keys")
    positions = _Column("values")

    def load(self, max_position: int, max_rel_offset: int) -> bool:
        """Read entries from disk; return False (and keep nothing) if they look inconsistent."""
        def follows(last_rel: int, last_pos: int, rel: int, pos: int) -> bool:
            out_of_order = rel <= last_rel or (last_pos >= 0 and pos <= last_pos)
            return not (out_of_order or pos > max_position or rel > max_rel_offset)
        return self._load(follows)

    def append(self, rel_offset: int, position: int) -> None:
        self._append(rel_offset, position)

    def lookup(self, rel_offset: int) -> int:
        """File position of the last indexed batch starting at or before ``rel_offset`` (0 if none)."""
        i = bisect.bisect_right(self.keys, rel_offset) - 1
        return self.values[i] if i >= 0 else 0

    def last_position(self) -> int:
        return self.values[-1] if self.values else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or after ``position``."""
        self._truncate(bisect.bisect_left(self.values, position))


class TimeIndex(_SparseIndex):
    """Max timestamp so far -> the relative offset from which timestamps reach it."""

    _entry, _typecodes = _TIME, ("q", "Q")

    timestamps = _Column("keys")
    rel_offsets = _Column("values")

    def load(self, max_rel_offset: int) -> bool:
        def follows(last_ts: int, last_rel: int, ts: int, rel: int) -> bool:
            return not ((last_rel >= 0 and ts <= last_ts) or rel < last_rel or rel > max_rel_offset)
        return self._load(follows)

    @property
    def last_timestamp(self) -> int | None:
        return self.keys[-1] if self.keys else None

    def maybe_append(self, max_timestamp: int, rel_offset: int) -> None:
        """Record that from ``rel_offset`` on, timestamps reach ``max_timestamp``."""
        if self.keys and max_timestamp <= self.keys[-1]:
            return
        self._append(max_timestamp, rel_offset)

    def lookup(self, timestamp: int) -> int:
        """Relative offset from which a scan for the first record with ts >= ``timestamp`` may start."""
        i = bisect.bisect_left(self.keys, timestamp) - 1
        return self.values[i] if i >= 0 else 0

    def truncate_to_rel_offset(self, rel_offset: int) -> None:
        self._truncate(bisect.bisect_left(self.values, rel_offset))
