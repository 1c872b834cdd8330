"""The leader epoch cache (storage/epochs.py): assignment, end offsets, truncation, persistence."""

from __future__ import annotations

from pathlib import Path

from bayou.storage.epochs import FILE_NAME, LeaderEpochCache


def test_epochs_end_where_the_next_begins(tmp_path: Path) -> None:
    c = LeaderEpochCache(tmp_path)
    assert c.latest_epoch == -1 and c.end_offset_for(0, 10) == (-1, -1)
    c.assign(0, 0)
    c.assign(2, 40)
    c.assign(2, 50)  # not newer: ignored
    c.assign(1, 45)  # older: ignored
    c.assign(5, 70)
    assert c.entries == [(0, 0), (2, 40), (5, 70)]
    assert c.end_offset_for(0, 99) == (0, 40)
    assert c.end_offset_for(1, 99) == (0, 40)  # the largest epoch <= 1 is 0
    assert c.end_offset_for(2, 99) == (2, 70)
    assert c.end_offset_for(7, 99) == (5, 99)  # the newest ends at the log end
    assert LeaderEpochCache(tmp_path).entries == c.entries  # persisted


def test_truncation_and_a_new_epoch_below_old_entries(tmp_path: Path) -> None:
    c = LeaderEpochCache(tmp_path)
    for e, o in ((0, 0), (1, 10), (2, 20)):
        c.assign(e, o)
    c.truncate_from(15)
    assert c.entries == [(0, 0), (1, 10)]
    c.assign(4, 12)  # a newer epoch starting below an entry drops it
    assert c.entries == [(0, 0), (1, 10), (4, 12)]
    c.assign(5, 11)
    assert c.entries == [(0, 0), (1, 10), (5, 11)]
    assert LeaderEpochCache(tmp_path).entries == c.entries


def test_an_unreadable_file_starts_over(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("{not json")
    assert LeaderEpochCache(tmp_path).entries == []
