"""The log refuses an offset it cannot represent (base offsets are int64, and so is the log end):
nothing is written, no segment is named after it, and the partition keeps serving. Before this
check a TANK sparse bundle at seq 2^63 left an empty segment named 18446744073709551613 and every
later append failed with struct.error, across restarts (issue 13 item 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayou.errors import OffsetOutOfRange
from bayou.records.batch import MAX_OFFSET, iter_batches
from bayou.storage import LogConfig, PartitionLog
from unit.storage.test_log_sparse import dense, headers, sparse

CFG = LogConfig(segment_bytes=4096, index_interval_bytes=64)


@pytest.mark.parametrize(("at", "n", "span"), [
    (MAX_OFFSET + 1, 1, 1),           # the first offset past the limit
    (MAX_OFFSET, 2, 2),               # fits at its base, its last offset does not
    (MAX_OFFSET - 1, 2, 3),
    ((1 << 64) - 2, 1, 1),            # TANK's largest seq - 1: what was reproduced
    ((1 << 63) - 1, 1, 1),
])
def test_unrepresentable_offset_is_refused_and_nothing_changes(tmp_path: Path, at: int, n: int,
                                                               span: int) -> None:
    lg = PartitionLog(tmp_path / "p", CFG)
    lg.append(dense(2))
    before = sorted(p.name for p in (tmp_path / "p").iterdir())
    with pytest.raises(OffsetOutOfRange):
        lg.append(sparse(n, span), at_offset=at)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == before
    lg.append(dense(1))  # the partition still takes appends
    assert headers(lg) == [(0, 1, 2), (2, 2, 1)]
    lg.close()
    again = PartitionLog(tmp_path / "p", CFG)  # and reopens
    assert headers(again) == [(0, 1, 2), (2, 2, 1)]
    again.close()


def test_the_largest_offset_is_storable_and_survives_a_restart(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path / "p", CFG)
    lg.append(dense(1))
    info = lg.append(sparse(1, 1), at_offset=MAX_OFFSET)
    assert (info.base_offset, info.last_offset) == (MAX_OFFSET, MAX_OFFSET)
    assert lg.next_offset == MAX_OFFSET + 1 == (1 << 63) - 1
    with pytest.raises(OffsetOutOfRange):  # the log is full: even a dense append is refused
        lg.append(dense(1))
    lg.close()
    again = PartitionLog(tmp_path / "p", CFG)
    assert again.next_offset == MAX_OFFSET + 1
    assert headers(again) == [(0, 0, 1)]  # a read stays within one segment: the first
    tail = again.read(MAX_OFFSET, 1 << 20)
    assert [(h.base_offset, h.record_count) for _p, h in iter_batches(tail.data)] == [(MAX_OFFSET, 1)]
    again.close()
