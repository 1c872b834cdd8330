"""Damaging stored data on purpose, for the integrity tests (unit and chaos)."""

from __future__ import annotations

from pathlib import Path

from bayou.records import Record, encode_batch
from bayou.storage import LogConfig, PartitionLog

# Small segments (several per log) and an index entry per batch.
SMALL_SEGMENTS = LogConfig(segment_bytes=1024, index_interval_bytes=1)


def batch(i: int) -> bytes:
    """Three records ``v<i>-0..2`` (keys ``k``)."""
    return encode_batch([Record(f"v{i}-{j}".encode(), key=b"k", timestamp=1000 + 10 * i + j)
                         for j in range(3)])


def build(path: Path, batches: int = 30, config: LogConfig = SMALL_SEGMENTS) -> list[tuple[Path, int, int]]:
    """A closed log of ``batch(i)``; returns (segment file, position, base offset) of each batch."""
    lg = PartitionLog(path, config)
    where = []
    for i in range(batches):
        info = lg.append(batch(i))
        seg = lg.active
        where.append((seg.path, seg.size - info.size, info.base_offset))
    lg.close()
    return where


def flip(path: Path, position: int, mask: int = 0x40) -> None:
    """XOR one byte of ``path`` at ``position`` with ``mask``."""
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)[0]
        f.seek(position)
        f.write(bytes([b ^ mask]))


def sealed_victim(where: list[tuple[Path, int, int]]) -> tuple[Path, int, int]:
    """The third batch of the first segment (a sealed one, with batches before and after it)."""
    first_seg = where[0][0]
    in_first = [w for w in where if w[0] == first_seg]
    assert len(in_first) >= 4 and where[-1][0] != first_seg
    return in_first[2]
