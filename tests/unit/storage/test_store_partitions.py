"""Removing partition directories: Store.delete_partition and the start-up prune of directories
beyond a topic's partition count."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.records import Record, encode_batch
from bayou.storage import LogConfig, Store, TopicMeta


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "data")
    s.open()
    yield s
    s.close()


def test_delete_partition_moves_only_that_directory(store: Store) -> None:
    store.write_topic(TopicMeta("t", 3))
    logs = [store.open_log("t", p, LogConfig()) for p in range(3)]
    info = logs[2].append(encode_batch([Record(b"v", None, 1)]))
    store.delete_partition("t", 2)
    store.delete_partition("t", 2)  # already gone: nothing to do
    tdir = store.topic_dir("t")
    assert sorted(p.name for p in tdir.iterdir()) == ["0", "1", "topic.json"]
    assert list((store.root / "trash").iterdir()) == []
    # the open log still reads its (unlinked) data
    assert logs[2].read(info.base_offset, 1000).record_count == 1
    for lg in logs:
        lg.close()


def test_prune_partitions_removes_directories_beyond_the_count(store: Store) -> None:
    store.write_topic(TopicMeta("t", 4))
    for p in range(4):
        store.open_log("t", p, LogConfig()).close()
    tdir = store.topic_dir("t")
    (tdir / "07").mkdir()  # not a name bayou writes: left alone
    (tdir / "notes").mkdir()
    meta = store.load_topics()["t"]
    assert store.prune_partitions(meta) == []
    meta.partitions = 2
    store.write_topic(meta)
    assert store.prune_partitions(meta) == [2, 3]
    assert sorted(p.name for p in tdir.iterdir()) == ["0", "07", "1", "notes", "topic.json"]
