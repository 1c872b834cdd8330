"""The Iggy stream catalog over bayou's flat topic namespace (bayou.server.iggy.catalog): the bayou
topic names Iggy topics get, reconciliation with topics made or deleted by other protocols, the
default stream, lowest-free ids, and the durable round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.server.iggy.catalog import (
    DEFAULT_STREAM_ID,
    DEFAULT_STREAM_NAME,
    MAX_TOPIC_NAME,
    Catalog,
)
from bayou.storage.store import validate_topic_name

NOW = 1_795_317_064_557_463


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return Catalog(tmp_path / "iggy" / "catalog.json")


# -- bayou topic names --------------------------------------------------------------------------


def test_a_safe_free_name_is_stream_dot_topic(catalog: Catalog) -> None:
    assert catalog.bayou_topic_name("orders", "eu-west_1", set()) == "orders.eu-west_1"


def test_unsafe_characters_become_underscores_with_a_hash(catalog: Catalog) -> None:
    name = catalog.bayou_topic_name("my stream", "t/1", set())
    assert name.startswith("my_stream.t_1-") and len(name) == len("my_stream.t_1-") + 8
    assert name == catalog.bayou_topic_name("my stream", "t/1", set())  # deterministic
    # two Iggy names that clean to the same text get different bayou topics
    assert catalog.bayou_topic_name("my_stream", "t_1", set()) == "my_stream.t_1"
    dotted = catalog.bayou_topic_name("my.stream", "t", set())
    assert dotted != catalog.bayou_topic_name("my", "stream.t", set())


def test_a_taken_name_gets_a_longer_hash_each_time(catalog: Catalog) -> None:
    taken = {"s.t"}
    first = catalog.bayou_topic_name("s", "t", taken)
    assert first.startswith("s.t-") and first not in taken
    taken.add(first)
    second = catalog.bayou_topic_name("s", "t", taken)
    assert second.startswith("s.t-") and second not in taken and len(second) == len(first) + 1


def test_long_names_are_cut_to_the_topic_limit(catalog: Catalog) -> None:
    name = catalog.bayou_topic_name("s" * 255, "t" * 255, set())
    assert len(name) == MAX_TOPIC_NAME
    assert validate_topic_name(name) == name
    other = catalog.bayou_topic_name("s" * 255, "t" * 254 + "u", set())
    assert other != name  # the hash tells apart names that share the kept prefix


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=255), st.text(min_size=1, max_size=255),
       st.sets(st.text(alphabet="abc._-", min_size=1, max_size=8), max_size=5))
def test_every_name_is_a_valid_free_bayou_topic(stream: str, topic: str, taken: set[str]) -> None:
    name = Catalog(Path("/nonexistent")).bayou_topic_name(stream, topic, taken)
    assert validate_topic_name(name) == name
    assert name not in taken


# -- ids and lookups ----------------------------------------------------------------------------


def test_ids_are_the_lowest_free_ones(catalog: Catalog) -> None:
    a = catalog.add_stream("a", NOW)
    b = catalog.add_stream("b", NOW)
    assert (a.id, b.id) == (0, 1)
    catalog.remove_stream(a)
    assert catalog.add_stream("c", NOW).id == 0
    chosen = catalog.add_stream("d", NOW, stream_id=9)  # D: the client chooses
    assert chosen.id == 9 and catalog.add_stream("e", NOW).id == 2
    t0 = catalog.add_topic(b, "x", "b.x", NOW)
    t5 = catalog.add_topic(b, "y", "b.y", NOW, topic_id=5)
    assert (t0.id, t5.id, catalog.add_topic(b, "z", "b.z", NOW).id) == (0, 5, 1)
    g0 = t0.add_group("g")
    assert (g0.id, t0.add_group("h", 3).id, t0.add_group("i").id) == (0, 3, 1)


def test_lookups_by_id_and_name(catalog: Catalog) -> None:
    s = catalog.add_stream("orders", NOW)
    t = catalog.add_topic(s, "eu", "orders.eu", NOW)
    g = t.add_group("workers")
    assert catalog.stream(0) is s and catalog.stream("orders") is s
    assert catalog.stream(1) is None and catalog.stream("nope") is None
    assert s.topic(0) is t and s.topic("eu") is t and s.topic("us") is None
    assert t.group(0) is g and t.group("workers") is g and t.group("x") is None
    assert t.broker_group(g) == "iggy.orders.eu.workers"
    assert catalog.mapped_topics() == {"orders.eu"}
    assert catalog.stream_name_taken("orders") and catalog.stream_name_taken(DEFAULT_STREAM_NAME)
    assert not catalog.stream_name_taken("other")


# -- sync with the broker's topics --------------------------------------------------------------


def test_foreign_topics_appear_in_the_default_stream(catalog: Catalog) -> None:
    # the default stream always resolves (empty), but is listed only while it holds topics
    assert catalog.stream(DEFAULT_STREAM_ID) is catalog.stream(DEFAULT_STREAM_NAME) is catalog.default
    assert catalog.default.topics == {}
    assert catalog.visible_streams() == []
    assert catalog.sync(["zeta", "alpha"], NOW) is True
    default = catalog.stream(DEFAULT_STREAM_NAME)
    assert default is not None and default.is_default and catalog.stream(DEFAULT_STREAM_ID) is default
    assert [(t.id, t.name, t.topic) for t in default.topics.values()] == [
        (0, "alpha", "alpha"), (1, "zeta", "zeta")]
    assert default.created_at == NOW
    assert catalog.visible_streams() == [default]
    assert catalog.sync(["zeta", "alpha"], NOW + 1) is False  # nothing new


def test_iggy_topics_stay_out_of_the_default_stream(catalog: Catalog) -> None:
    s = catalog.add_stream("s", NOW)
    catalog.add_topic(s, "t", "s.t", NOW)
    catalog.sync(["s.t", "other"], NOW)
    assert [t.name for t in catalog.default.topics.values()] == ["other"]
    assert [x.id for x in catalog.visible_streams()] == [0, DEFAULT_STREAM_ID]
    assert [(st.id, t.name) for st, t in catalog.all_topics()] == [(0, "t"), (DEFAULT_STREAM_ID, "other")]


def test_a_default_topic_later_mapped_by_iggy_leaves_the_default_stream(catalog: Catalog) -> None:
    catalog.sync(["s.t"], NOW)
    assert [t.topic for t in catalog.default.topics.values()] == ["s.t"]
    s = catalog.add_stream("s", NOW)
    catalog.add_topic(s, "t", "s.t", NOW)
    assert catalog.sync(["s.t"], NOW) is True
    assert catalog.default.topics == {} and catalog.visible_streams() == [s]


def test_deletions_elsewhere_are_forgotten(catalog: Catalog) -> None:
    s = catalog.add_stream("s", NOW)
    catalog.add_topic(s, "a", "s.a", NOW)
    catalog.add_topic(s, "b", "s.b", NOW)
    catalog.sync(["s.a", "s.b", "foreign", "gone-soon"], NOW)
    assert catalog.sync(["s.b", "foreign"], NOW) is True
    assert [t.name for t in s.topics.values()] == ["b"]
    assert [t.name for t in catalog.default.topics.values()] == ["foreign"]
    assert catalog.stream("s") is s  # a stream outlives its topics
    assert catalog.sync([], NOW) is True
    assert s.topics == {} and catalog.default.topics == {} and catalog.visible_streams() == [s]
    # a name that comes back is a new topic with the lowest free id
    catalog.sync(["gone-soon"], NOW)
    assert [(t.id, t.name) for t in catalog.default.topics.values()] == [(0, "gone-soon")]


# -- persistence --------------------------------------------------------------------------------


def test_round_trip(catalog: Catalog, tmp_path: Path) -> None:
    s = catalog.add_stream("orders", NOW)
    d = catalog.add_stream("seeded", NOW + 1, stream_id=7)
    t = catalog.add_topic(s, "eu", "orders.eu", NOW + 2, compression=2, message_expiry=3_600_000_000,
                          max_topic_size=10_000_000, replication_factor=1)
    t.add_group("workers")
    t.add_group("5", 5)
    catalog.add_topic(d, "x", "seeded.x", NOW + 3, topic_id=4)
    catalog.sync(["orders.eu", "seeded.x", "foreign"], NOW + 4)
    catalog.save()
    assert catalog.path.exists()
    assert [p.name for p in catalog.path.parent.iterdir()] == ["catalog.json"]  # no temp file left over
    json.loads(catalog.path.read_bytes())

    again = Catalog(catalog.path)
    again.load()
    assert again.snapshot() == catalog.snapshot()
    t2 = again.stream("orders").topics[0]  # type: ignore[union-attr]
    assert (t2.name, t2.topic, t2.created_at, t2.compression, t2.message_expiry, t2.max_topic_size,
            t2.replication_factor) == ("eu", "orders.eu", NOW + 2, 2, 3_600_000_000, 10_000_000, 1)
    assert {g.id: g.name for g in t2.groups.values()} == {0: "workers", 5: "5"}
    assert again.stream(7).topics[4].topic == "seeded.x"  # type: ignore[union-attr]
    assert [x.name for x in again.default.topics.values()] == ["foreign"]
    assert again.sync(["orders.eu", "seeded.x", "foreign"], NOW + 5) is False


def test_a_missing_file_is_an_empty_catalog(tmp_path: Path) -> None:
    c = Catalog(tmp_path / "absent" / "catalog.json")
    c.load()
    assert c.streams == {} and c.visible_streams() == []


def test_old_files_without_optional_fields_load(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    topic = {"id": 0, "name": "t", "topic": "s.t", "created_at": 2}
    path.write_text(json.dumps({"streams": [{"id": 3, "name": "s", "created_at": 1, "topics": [topic]}]}))
    c = Catalog(path)
    c.load()
    t = c.stream(3).topics[0]  # type: ignore[union-attr]
    assert (t.compression, t.message_expiry, t.max_topic_size, t.replication_factor) == (1, 0, 0, 0)
    assert t.groups == {}


# -- where a bayou topic is, for the permission check --------------------------------------------


def test_locate_follows_every_change(catalog: Catalog) -> None:
    sec = catalog.add_stream("sec", NOW)
    priv = catalog.add_topic(sec, "priv", "sec.priv", NOW)
    assert catalog.locate("sec.priv") == (sec.id, priv.id)
    # not in the catalog yet (being created, or made through another protocol a moment ago):
    # the stream whose prefix it bears, the longest one, else the default stream; no topic id
    longer = catalog.add_stream("sec.x", NOW)
    assert catalog.locate("sec.new") == (sec.id, None)
    assert catalog.locate("sec_x.new") == (longer.id, None)  # the stream name's safe form
    assert catalog.locate("plain") == (DEFAULT_STREAM_ID, None)
    catalog.sync(["sec.priv", "plain"], NOW)
    plain = catalog.default.topic("plain")
    assert plain is not None and catalog.locate("plain") == (DEFAULT_STREAM_ID, plain.id)
    catalog.remove_topic(sec, priv.id)
    assert catalog.locate("sec.priv") == (sec.id, None)
    catalog.remove_stream(sec)
    assert catalog.locate("sec.priv") == (DEFAULT_STREAM_ID, None)
    again = Catalog(catalog.path)
    again.replace(catalog.snapshot())
    assert again.locate("plain") == catalog.locate("plain")
