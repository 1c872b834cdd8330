"""The two sparse indexes (storage/index.py): what they share (a file of fixed-width entries,
mirrored in memory, torn tails dropped, inconsistent files refused) and what each one looks up."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayou.storage.handles import HandleCache
from bayou.storage.index import OffsetIndex, TimeIndex


@pytest.fixture
def handles() -> HandleCache:
    return HandleCache(16)


def test_offset_index_round_trips_through_its_file(tmp_path: Path, handles: HandleCache) -> None:
    idx = OffsetIndex(tmp_path / "0.index", handles)
    for rel, pos in ((0, 0), (10, 4096), (25, 9000)):
        idx.append(rel, pos)
    idx.sync()
    assert [idx.lookup(r) for r in (0, 9, 10, 24, 99)] == [0, 0, 4096, 4096, 9000]
    assert idx.last_position() == 9000
    again = OffsetIndex(tmp_path / "0.index", handles)
    assert again.load(max_position=9000, max_rel_offset=25)
    assert (list(again.rel_offsets), list(again.positions)) == ([0, 10, 25], [0, 4096, 9000])
    assert not OffsetIndex(tmp_path / "0.index", handles).load(max_position=8999, max_rel_offset=25)
    refused = OffsetIndex(tmp_path / "0.index", handles)
    assert not refused.load(max_position=9000, max_rel_offset=24)
    assert list(refused.rel_offsets) == [] and list(refused.positions) == []
    again.truncate_to_position(4096)
    assert list(again.positions) == [0] and (tmp_path / "0.index").stat().st_size == OffsetIndex.entry_size


def test_time_index_keeps_only_rising_timestamps(tmp_path: Path, handles: HandleCache) -> None:
    idx = TimeIndex(tmp_path / "0.timeindex", handles)
    assert idx.last_timestamp is None
    for ts, rel in ((100, 0), (100, 5), (90, 6), (200, 7), (300, 7)):
        idx.maybe_append(ts, rel)
    assert (list(idx.timestamps), list(idx.rel_offsets)) == ([100, 200, 300], [0, 7, 7])
    assert (idx.lookup(50), idx.lookup(150), idx.lookup(201), idx.last_timestamp) == (0, 0, 7, 300)
    again = TimeIndex(tmp_path / "0.timeindex", handles)
    assert again.load(max_rel_offset=7)
    assert list(again.timestamps) == [100, 200, 300]
    assert not TimeIndex(tmp_path / "0.timeindex", handles).load(max_rel_offset=6)
    again.truncate_to_rel_offset(7)
    assert list(again.timestamps) == [100]


@pytest.mark.parametrize("kind", [OffsetIndex, TimeIndex])
def test_a_torn_last_entry_is_dropped_and_the_file_rewritten(tmp_path: Path, handles: HandleCache,
                                                             kind: type[OffsetIndex | TimeIndex]) -> None:
    path = tmp_path / "0.idx"
    idx = kind(path, handles)
    if isinstance(idx, OffsetIndex):
        idx.append(0, 0)
        idx.append(3, 100)
    else:
        idx.maybe_append(10, 0)
        idx.maybe_append(20, 3)
    idx.close()
    whole = path.read_bytes()
    path.write_bytes(whole + whole[: kind.entry_size - 1])
    again = kind(path, handles)
    ok = again.load(100, 3) if isinstance(again, OffsetIndex) else again.load(3)
    assert ok and path.read_bytes() == whole


@pytest.mark.parametrize("kind", [OffsetIndex, TimeIndex])
def test_a_missing_file_loads_nothing(tmp_path: Path, handles: HandleCache,
                                      kind: type[OffsetIndex | TimeIndex]) -> None:
    idx = kind(tmp_path / "none", handles)
    assert not (idx.load(1, 1) if isinstance(idx, OffsetIndex) else idx.load(1))
