"""apache-iggy 0.9.0 from PyPI end to end against a real broker subprocess (the VSR framing).

The SDK runs in its own virtual environment (.venv-iggy09, made by ``make test``): every test runs
a scenario of ``tests/support/iggy_sdk/sdk09.py`` as a subprocess and asserts on the JSON it
reports (``support.iggy_sdk``). Covered: login (wrong password, unknown user, logout, auto-login,
connection string); streams and topics with expiry / max size / compression options, 0-based ids
and message counts; sends with user headers of every plain kind and typed ones, explicit and
client-minted ids; balanced and messages-key partitioning; polling by Offset, Timestamp, First,
Last and Next with auto-commit; stored offsets read with GET_CONSUMER_OFFSET through
``send_binary_request``; a consumer group read by two members (low-level join + group polls, and
the high-level ``consumer_group()``); offsets that survive a broker restart; GET_STATS.
"""

from __future__ import annotations

import platform
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import xxhash

from bayou import __version__
from bayou.client.rtes import RtesClient
from support.brokers import BrokerProcess
from support.iggy_sdk import Msg, messages, offsets, run, start_broker, texts

pytestmark = pytest.mark.timeout(180)

SDK = "0.9"
U128_MAX = 2**128 - 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("iggy09") / "data")
    try:
        yield b
    finally:
        b.stop()


def exactly_once(*groups: list[Msg]) -> Counter[tuple[int, int]]:
    """(partition, offset) -> how many times the consumers together received it."""
    return Counter((m.partition, m.offset) for g in groups for m in g)


# -- session -----------------------------------------------------------------------------------------


def test_login_wrong_password_logout(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "login")
    assert r["ping_before_login"] is None, "PING needs no login"
    assert r["streams_before_login"] == "Unauthenticated"
    assert r["wrong_password"] == "Invalid credentials"
    assert r["unknown_user"] == "Invalid credentials"
    assert r["login"] is None and r["streams_after_login"] is None
    assert r["logout"] is None
    assert r["streams_after_logout"] == "Unauthenticated", "LOGOUT keeps the connection, unauthenticated"
    assert r["login_again"] is None and r["streams_after_login_again"] is None
    assert r["auto_login"] is None and r["auto_login_streams"] is None
    assert r["auto_login_wrong"] == "Invalid credentials"
    assert r["connection_string"] is None
    assert r["connection_string_ping"] is None and r["connection_string_streams"] is None


# -- streams and topics ------------------------------------------------------------------------------


def test_streams_and_topics(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "catalog", "cat09")
    before = set(r["streams_before"])
    lowest_free = min(set(range(len(before) + 1)) - before)
    assert r["stream"] == {"id": lowest_free, "name": "cat09", "topics_count": 0, "messages_count": 0,
                           "size": 0, "created_at": r["stream"]["created_at"], "topics": []}
    assert r["stream_by_id"] == "cat09"
    assert "already exists" in r["duplicate_stream"]
    assert r["missing_stream_is_none"] and r["missing_topic_is_none"]
    assert "already exists" in r["duplicate_topic"]
    assert r["zero_partitions"] == "Invalid partitions count"

    orders, audit, plain = (r["topics"][n] for n in ("orders", "audit", "plain"))
    assert (orders["id"], audit["id"], plain["id"]) == (0, 1, 2), "topic ids are 0-based per stream"
    assert [p["id"] for p in orders["partitions"]] == [0, 1, 2]
    assert (orders["partitions_count"], audit["partitions_count"], plain["partitions_count"]) == (3, 1, 2)
    assert orders["compression"] == "gzip" and audit["compression"] == "none"
    assert orders["expiry"] == ["ExpireDuration", 3600.0]
    assert orders["max_size"] == ["Custom", 10_000_000]
    assert audit["expiry"] == ["NeverExpire", None] and audit["max_size"] == ["Unlimited", None]
    assert all(t["messages_count"] == 0 and t["size"] == 0 for t in (orders, audit, plain))
    assert r["topic_by_ids"] == "orders"
    assert r["topics_list"] == [[0, "orders", 3], [1, "audit", 1], [2, "plain", 2]]

    after = r["orders_after_send"]
    assert after["messages_count"] == 6 and after["size"] > 0
    assert [(p["messages_count"], p["current_offset"]) for p in after["partitions"]] == [
        (4, 3), (0, 0), (2, 1)]
    s = r["stream_after_send"]
    assert (s["topics_count"], s["messages_count"], s["size"]) == (3, 6, after["size"])
    assert s["topics"] == [[0, "orders", 6], [1, "audit", 0], [2, "plain", 0]]
    assert [lowest_free, "cat09", 3, 6] in r["streams_after"]

    # the same topics as bayou topics "<stream>.<topic>", expiry and size mapped to retention
    with RtesClient("127.0.0.1", broker.port) as v1:
        assert {"cat09.orders", "cat09.audit", "cat09.plain"} <= set(v1.list_topics())
        d = v1.describe_topic("cat09.orders")
        assert d["partitions"] == "3"
        assert set(d["config"].split(",")) == {"retention.ms=3600000", "retention.bytes=3333333"}
        assert set(v1.describe_topic("cat09.audit")["config"].split(",")) == {
            "retention.ms=-1", "retention.bytes=-1"}
        assert [v for _o, v in v1.consume("cat09.orders", 0, 0)[0]] == [f"o-{i}" for i in range(4)]


def test_partitions_updates_purges_and_deletes(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "lifecycle", "life09")
    grown, shrunk = r["after_create_partitions"], r["after_delete_partitions"]
    assert [p["id"] for p in grown["partitions"]] == [0, 1, 2, 3] and grown["messages_count"] == 2
    assert [p["id"] for p in shrunk["partitions"]] == [0, 1, 2] and shrunk["messages_count"] == 2
    assert r["update_topic"] is None and r["old_name_is_none"]
    updated = r["after_update_topic"]
    assert (updated["id"], updated["name"], updated["compression"]) == (0, "renamed", "gzip")
    assert updated["expiry"] == ["ExpireDuration", 300.0] and updated["max_size"] == ["Custom", 3_000_000]
    assert "already exists" in r["update_topic_name_taken"]
    assert r["after_purge_topic"]["messages_count"] == 0 and r["after_purge_topic"]["size"] == 0
    assert texts(messages(r["poll_after_purge"])) == ["after-purge"], "a purged topic keeps only new messages"
    assert r["renamed_stream"]["name"] == "life09-x" and r["renamed_stream"]["topics_count"] == 2
    assert r["deleted_topic_is_none"]
    assert r["after_purge_stream"]["messages_count"] == 0 and r["after_purge_stream"]["topics_count"] == 1
    assert r["deleted_stream_is_none"] and "life09-x" not in r["streams_after_delete"]
    assert r["producer_topic"]["partitions_count"] == 2 and r["producer_topic"]["messages_count"] == 3
    with RtesClient("127.0.0.1", broker.port) as v1:
        names = v1.list_topics()
        assert "life09-p.auto" in names
        assert not [n for n in names if n.startswith("life09.")], "deleting the stream deleted its topics"


# -- sending and polling -----------------------------------------------------------------------------

BATCH1_HEADERS: list[dict[Any, Any] | None] = [
    {("String", "s"): ("String", "text"), ("String", "i"): ("UnsignedInt8", 7),
     ("String", "neg"): ("Int8", -3), ("String", "big"): ("UnsignedInt64", 2**40),
     ("String", "flag"): ("Bool", True), ("String", "f"): ("Float32", 1.5),
     ("String", "f64"): ("Float64", 0.1), ("String", "raw"): ("Raw", b"\x00\x01")},
    {("String", "u64"): ("UnsignedInt64", 2**63), ("String", "i128"): ("Int128", -(2**100)),
     ("String", "f32"): ("Float32", 0.25), ("UnsignedInt8", 5): ("String", "int key"),
     ("Raw", b"\x01bk"): ("String", "bytes key")},
    None,
]


def test_send_with_headers_and_ids_then_poll_every_strategy(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "sendpoll", "poll09")
    sid = r["confirmations"][0][0]
    assert r["confirmations"] == [[sid, 0, 0, 0], [sid, 0, 0, 3], [sid, 0, 1, 0]]

    every = messages(r["all"])
    assert offsets(every) == [0, 1, 2, 3, 4, 5] and {m.partition for m in every} == {0}
    assert [m.payload for m in every] == [b"\x00\xff binary", "two \u2713".encode(), b"three", b"four",
                                          b"five", b"six"]
    ids = [m.id for m in every]
    assert ids[:2] == [1, U128_MAX] and ids[3:] == [4, 5, 6]
    assert ids[2] not in (0, 1, 4, 5, 6, U128_MAX), "id 0 (none given) is replaced by a unique one"
    assert [m.headers for m in every] == [
        *BATCH1_HEADERS, {("String", "batch"): ("UnsignedInt8", 2)}, None, None]
    # one server timestamp per batch, the later batch later; origin timestamps come from the producer
    assert every[0].timestamp == every[1].timestamp == every[2].timestamp < every[3].timestamp
    assert every[3].timestamp == every[5].timestamp
    for m in every:
        assert m.origin_timestamp is not None and 0 < m.origin_timestamp <= m.timestamp

    assert messages(r["offset"]) == every[2:5]
    assert r["offset_past_end"] == []
    assert messages(r["timestamp"]) == every[3:], "Timestamp starts at the first message at or after it"
    assert messages(r["timestamp_hour_ago"]) == every and r["timestamp_future"] == []
    assert messages(r["first"]) == every[:2]
    assert messages(r["last"]) == every[4:], "Last(count 2) is the last two messages"
    assert messages(r["last_all"]) == every
    p1 = messages(r["partition1"])
    assert [(m.partition, m.offset, m.text) for m in p1] == [(1, 0, "p1-a"), (1, 1, "p1-b")]
    assert messages(r["no_partition"]) == every[:1], "a regular consumer without partition reads 0"

    assert [offsets(messages(x)) for x in r["next_no_commit"]] == [[0, 1], [0, 1]]
    assert r["offset_before_commit"] is None
    assert [offsets(messages(x)) for x in r["next_commit"]] == [[0, 1, 2, 3], [4, 5], []]
    assert r["offset_after_commit"] == {"partition": 0, "current": 5, "stored": 5}
    assert offsets(messages(r["next_numeric_consumer"])) == [0], "consumer 7 has offsets of its own"
    assert r["offset_numeric_consumer"] == {"partition": 0, "current": 5, "stored": 0}
    t = r["topic"]
    assert t["messages_count"] == 8
    assert [(p["messages_count"], p["current_offset"]) for p in t["partitions"]] == [(6, 5), (2, 1)]


def test_balanced_and_messages_key_partitioning(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "partitioning", "route09")
    assert Counter(r["balanced"]) == {0: 2, 1: 2, 2: 2}, r["balanced"]
    [[_s, _t, batch_partition, batch_base]] = r["balanced_batch"]
    assert batch_base == 2, "a balanced batch lands whole in one partition, after its 2 messages"
    for key, partition in r["keyed"]:
        assert partition == xxhash.xxh32_intdigest(key.encode()) % 3, f"key {key!r}"
    assert r["binary_key"] == xxhash.xxh32_intdigest(b"\x00bin") % 3

    placed: dict[str, int] = {f"bal-{i}": p for i, p in enumerate(r["balanced"])}
    placed.update({f"batch-{i}": batch_partition for i in range(3)})
    placed.update({f"key-{key}-{i}": p for i, (key, p) in enumerate(r["keyed"])})
    placed["bin-key"] = r["binary_key"]
    seen: dict[str, int] = {}
    for p, raw in enumerate(r["by_partition"]):
        msgs = messages(raw)
        assert offsets(msgs) == list(range(len(msgs)))
        for m in msgs:
            assert m.text not in seen, f"{m.text} stored twice"
            seen[m.text] = p
    assert seen == placed
    batch = [m for m in messages(r["by_partition"][batch_partition]) if m.text.startswith("batch-")]
    assert offsets(batch) == [2, 3, 4] and texts(batch) == ["batch-0", "batch-1", "batch-2"]


# -- consumer groups ---------------------------------------------------------------------------------


def members_split(group: dict[str, Any]) -> list[set[int]]:
    parts = [set(p) for _id, p in group["members"]]
    assert group["members_count"] == len(parts) == 2
    assert parts[0].isdisjoint(parts[1]) and parts[0] | parts[1] == {0, 1, 2, 3}
    assert sorted(len(p) for p in parts) == [2, 2], "4 partitions over 2 members: 2 each"
    return parts


def test_consumer_group_with_two_members(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "groups", "grp09")
    assert r["low_created"] == {"id": 0, "name": "g-low", "partitions_count": 4, "members_count": 0,
                                "members": []}
    assignment = members_split(r["low_joined"])
    assert r["low_groups"] == [[0, "g-low", 2]]
    a, b = messages(r["low_got"]["a"]), messages(r["low_got"]["b"])
    assert a and b, "both members consumed"
    got_parts = [{m.partition for m in a}, {m.partition for m in b}]
    assert sorted(got_parts, key=min) == sorted(assignment, key=min), "each read its own partitions"
    counts = exactly_once(a, b)
    assert len(counts) == 40 and set(counts.values()) == {1}, "every message exactly once"
    assert sorted(m.text for m in a + b) == sorted(f"w-{i}" for i in range(40))
    for m in a + b:
        assert m.text == f"w-{m.offset * 4 + m.partition}"
    for member in (a, b):
        for p in {m.partition for m in member}:
            assert offsets([m for m in member if m.partition == p]) == list(range(10))
    assert r["low_offsets"] == [{"partition": p, "current": 9, "stored": 9} for p in range(4)]
    assert "not found" in r["low_non_member_poll"], "a non-member cannot poll as the group"
    after = r["low_after_leave"]
    assert after["members_count"] == 1 and after["members"][0][1] == [0, 1, 2, 3]

    # the high-level consumer_group() on two more clients: both join, then read concurrently
    members_split(r["high_joined"])
    c, d = (messages(x) for x in r["high_got"])
    assert c and d, "both high-level consumers received messages"
    counts = exactly_once(c, d)
    assert len(counts) == 40 and set(counts.values()) == {1}, "every message exactly once"
    assert {m.partition for m in c}.isdisjoint({m.partition for m in d})
    assert r["high_offsets"] == [{"partition": p, "current": 9, "stored": 9} for p in range(4)]

    # Iggy's stored offset (last consumed) is V1's committed offset (next to read) - 1
    with RtesClient("127.0.0.1", broker.port) as v1:
        assert [v1.offset("iggy.grp09.work.g-low", "grp09.work", p) for p in range(4)] == [10] * 4
        assert [v1.offset("iggy.grp09.work.g-high", "grp09.work", p) for p in range(4)] == [10] * 4


# -- restart -----------------------------------------------------------------------------------------


def test_stored_offsets_survive_a_broker_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = start_broker(data)
    try:
        before = run(SDK, b.iggy_port, "restart-a", "dur09")
    finally:
        b.stop()
    assert offsets(messages(before["keeper_p0"])) == [0, 1, 2, 3]
    assert [(m.partition, m.offset) for m in messages(before["group_p1"])] == [(1, 0), (1, 1), (1, 2)]
    expected_offsets = {
        "keeper": [{"partition": 0, "current": 9, "stored": 3}, {"partition": 1, "current": 5, "stored": 2}],
        "g-durable": [None, {"partition": 1, "current": 5, "stored": 2}],
        "g-stored": [{"partition": 0, "current": 9, "stored": 6}, None],
    }
    assert before["offsets"] == expected_offsets

    b = start_broker(data, like=b)
    try:
        after = run(SDK, b.iggy_port, "restart-b", "dur09")
    finally:
        b.stop()
    t = after["topic"]
    assert t["messages_count"] == 16 and [p["messages_count"] for p in t["partitions"]] == [10, 6]
    assert after["groups"] == ["g-durable", "g-stored"]
    assert after["offsets"] == expected_offsets, "GET_CONSUMER_OFFSET after the restart"
    assert after["members_after_restart"]["members_count"] == 0, "members are connections"

    def read(raw: list[Any]) -> list[tuple[int, int, str]]:
        return [(m.partition, m.offset, m.text) for m in messages(raw)]

    keeper0, keeper1 = (read(x) for x in after["keeper"])
    assert keeper0 == [(0, o, f"d0-{o}") for o in range(4, 10)], "Next continues after stored 3"
    assert keeper1 == [(1, o, f"d1-{o}") for o in range(3, 6)], "Next continues after stored 2"
    durable0, durable1 = (read(x) for x in after["g-durable"])
    assert durable0 == [(0, o, f"d0-{o}") for o in range(10)]
    assert durable1 == [(1, o, f"d1-{o}") for o in range(3, 6)]
    stored0, stored1 = (read(x) for x in after["g-stored"])
    assert stored0 == [(0, o, f"d0-{o}") for o in range(7, 10)], "store_offset(6) survived"
    assert stored1 == [(1, o, f"d1-{o}") for o in range(6)]


# -- stats -------------------------------------------------------------------------------------------


def test_stats_match_what_the_getters_report(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "stats")
    st = r["stats"]
    for key, value in r["expected"].items():
        assert st[key] == value, f"{key}: stats {st[key]}, getters {value}"
    assert broker.proc is not None and st["process_id"] == broker.proc.pid
    assert st["clients_count"] >= 2
    major, minor, patch = (int(x) for x in __version__.split(".")[:3])
    assert st["iggy_server_version"] == f"bayou-{__version__}"
    assert st["iggy_server_semver"] == major * 1_000_000 + minor * 1_000 + patch
    assert st["hostname"] == socket.gethostname() and st["os_name"] == platform.system()
    assert st["segments_count"] >= st["partitions_count"]
    assert 0 < st["available_memory"] <= st["total_memory"] and st["memory_usage"] > 0
    assert 0 < st["free_disk_space"] <= st["total_disk_space"]
    assert st["threads_count"] >= 1 and r["cache_metrics"] == 0
    assert 0 < r["run_time_s"] < 3600
    assert 0 < r["now_us"] - st["start_time"] < 3600 * 1_000_000
