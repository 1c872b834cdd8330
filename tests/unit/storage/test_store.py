"""The data directory: topic names, the clean-shutdown marker, the lock, topic metadata."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.errors import InvalidTopicName, StorageError
from bayou.records import Record, encode_batch
from bayou.storage import LogConfig, Store, TopicMeta, validate_topic_name
from bayou.storage.store import CLEAN_MARKER


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "data")
    s.open()
    yield s
    s.close()


# -- topic names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["a", "A", "0", "topic", "my.topic", "my_topic", "my-topic", "...", "-", "_", ".a", "a.", "..a",
     "__consumer_offsets", "Az09._-", "x" * 249, "." * 3],
)
def test_valid_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a/b", "../x", "/abs", "a\\b", "x" * 250, "x" * 1000, "tópico", "ü", "日本",
     "a b", " a", "a\tb", "a\x00b", "a:b", "a*", "a\u200b", "\uff41"],  # last: fullwidth 'a'
    ids=repr,
)
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicName):
        validate_topic_name(name)


@pytest.mark.parametrize("name", [b"topic", None, 5])
def test_non_string_topic_names(name: object) -> None:
    with pytest.raises(InvalidTopicName):
        validate_topic_name(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["a\n", "x" * 249 + "\n"], ids=["newline", "250-with-newline"])
def test_trailing_newline_is_invalid(name: str) -> None:
    with pytest.raises(InvalidTopicName):
        validate_topic_name(name)


def test_invalid_name_never_becomes_a_path(store: Store) -> None:
    for bad in ("../x", "..", "a/b"):
        with pytest.raises(InvalidTopicName):
            store.topic_dir(bad)
        with pytest.raises(InvalidTopicName):
            store.write_topic(TopicMeta(bad, 1))
        with pytest.raises(InvalidTopicName):
            store.delete_topic(bad)
    assert sorted(p.name for p in store.root.iterdir()) == [".lock", "topics"]
    assert list(store.topics_dir.iterdir()) == []


# -- marker and lock --------------------------------------------------------------------------


def test_clean_marker_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "data"
    s = Store(root)
    s.open()  # a brand-new directory (whether that counts as clean is the store's choice)
    s.close()  # no marker written: an unclean stop

    s = Store(root)
    assert s.open() is False
    assert s.was_clean is False
    s.mark_clean()
    assert (root / CLEAN_MARKER).read_bytes() == b""  # empty: writable on a full disk
    assert not list(root.glob("*.tmp"))
    s.close()

    s = Store(root)
    assert s.open() is True
    assert s.was_clean is True
    assert not (root / CLEAN_MARKER).exists()  # consumed: a crash from now on means recovery
    s.close()

    s = Store(root)
    assert s.open() is False
    s.close()


def test_second_open_of_the_same_directory_fails(tmp_path: Path) -> None:
    root = tmp_path / "data"
    first = Store(root)
    first.open()
    second = Store(root)
    with pytest.raises(StorageError):
        second.open()
    with pytest.raises(StorageError):
        Store(root).open()
    first.close()
    second.open()  # free again once the owner closes
    second.close()


def test_close_is_idempotent(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.open()
    s.close()
    s.close()


def test_open_empties_the_trash(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.open()
    s.close()
    (tmp_path / "trash" / "old-123").mkdir(parents=True)
    (tmp_path / "trash" / "old-123" / "f").write_bytes(b"x")
    s = Store(tmp_path)
    s.open()
    assert not (tmp_path / "trash").exists()
    s.close()


# -- topics -----------------------------------------------------------------------------------


def test_write_and_load_topics(store: Store) -> None:
    store.write_topic(TopicMeta("orders", 3, {"retention.ms": "1000"}))
    store.write_topic(TopicMeta("a.b-c_d", 1, created_ms=42))
    topics = store.load_topics()
    assert sorted(topics) == ["a.b-c_d", "orders"]
    assert topics["orders"].partitions == 3
    assert topics["orders"].config == {"retention.ms": "1000"}
    assert topics["orders"].created_ms > 0
    assert topics["a.b-c_d"].created_ms == 42
    raw = json.loads((store.topics_dir / "orders" / "topic.json").read_text())
    assert raw["name"] == "orders"
    assert not list(store.topics_dir.rglob("*.tmp"))


def test_unreadable_topic_json_is_skipped(store: Store) -> None:
    store.write_topic(TopicMeta("good", 1))
    for name, content in [("bad1", "not json"), ("bad2", "{}"), ("bad3", '{"name": "../x", "partitions": 1}'),
                          ("bad4", '{"name": "t", "partitions": "many"}')]:
        (store.topics_dir / name).mkdir()
        (store.topics_dir / name / "topic.json").write_text(content)
    (store.topics_dir / "no-meta").mkdir()
    (store.topics_dir / "stray-file").write_text("x")
    assert list(store.load_topics()) == ["good"]


def test_open_log_and_delete_topic(store: Store) -> None:
    store.write_topic(TopicMeta("t1", 2))
    for p in range(2):
        lg = store.open_log("t1", p, LogConfig())
        lg.append(encode_batch([Record(b"x")]))
        lg.close()
    tdir = store.topics_dir / "t1"
    assert (tdir / "0" / "00000000000000000000.log").exists()
    assert (tdir / "1" / "00000000000000000000.log").exists()
    store.delete_topic("t1")
    assert not tdir.exists()
    assert store.load_topics() == {}
    assert not any((store.root / "trash").iterdir())
    store.delete_topic("t1")  # already gone: no error
    store.delete_topic("never-existed")


def test_recreate_after_delete_starts_empty(store: Store) -> None:
    store.write_topic(TopicMeta("t", 1))
    lg = store.open_log("t", 0, LogConfig())
    lg.append(encode_batch([Record(b"x")]))
    lg.close()
    store.delete_topic("t")
    store.write_topic(TopicMeta("t", 1))
    lg = store.open_log("t", 0, LogConfig())
    assert lg.next_offset == 0
    lg.close()


def test_open_log_recovers_only_after_an_unclean_stop(tmp_path: Path) -> None:
    root = tmp_path / "data"
    s = Store(root)
    s.open()
    s.close()
    s = Store(root)
    assert s.open() is False  # the directory exists and has no marker
    lg = s.open_log("t", 0, LogConfig())
    lg.append(encode_batch([Record(b"x")]))
    seg = lg.active.path
    lg.close()
    s.close()  # no marker: unclean
    with seg.open("ab") as f:
        f.write(b"\x00" * 10)
    s = Store(root)
    assert s.open() is False
    lg = s.open_log("t", 0, LogConfig())
    assert lg.truncated_bytes == 10 and lg.next_offset == 1
    lg.close()
    s.mark_clean()
    s.close()
    s = Store(root)
    assert s.open() is True
    lg = s.open_log("t", 0, LogConfig())  # clean: no recovery scan needed, none done
    assert lg.truncated_bytes == 0 and lg.next_offset == 1
    lg.close()
    s.close()
