"""apache-iggy 0.8.0 from PyPI end to end against a real broker subprocess (the legacy framing).

The SDK runs in its own virtual environment (.venv-iggy08, made by ``make test``): every test runs
a scenario of ``tests/support/iggy_sdk/sdk08.py`` as a subprocess and asserts on the JSON it
reports (``support.iggy_sdk``). 0.8.0 has no user headers, message ids, balanced or key
partitioning, stats, logout, offset getters or low-level group calls, so those are covered by the
0.9 suite only. Covered here: login through the connection string and ``login_user`` (wrong
password, unknown user); streams and topics with expiry / max size / compression / replication
options, 0-based ids and message counts; sends to explicit partitions with server-assigned ids;
polling by Offset, Timestamp, First, Last and Next with auto-commit; a consumer group read by two
high-level consumers on two connections; offsets that survive a broker restart.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.client.rtes import RtesClient
from support.brokers import BrokerProcess
from support.iggy_sdk import messages, offsets, run, start_broker, texts

pytestmark = pytest.mark.timeout(180)

SDK = "0.8"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("iggy08") / "data")
    try:
        yield b
    finally:
        b.stop()


def stream_ids(b: BrokerProcess) -> set[int]:
    """The Iggy stream ids in the broker's catalog (0.8.0 cannot list streams)."""
    path = b.data_dir / "iggy" / "catalog.json"
    if not path.exists():
        return set()
    return {int(s["id"]) for s in json.loads(path.read_text())["streams"]}


def test_login_and_wrong_passwords(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "login")
    assert r["connect_wrong_password"] == "InvalidCredentials"
    assert r["call_after_failed_login"] is not None, "nothing works after a refused auto-login"
    assert r["login_after_failed_login"] is None and r["call_after_login"] is None
    assert r["connect"] is None and r["ping"] is None and r["login_user"] is None
    assert r["login_user_wrong_password"] == "InvalidCredentials"
    assert r["login_user_unknown_user"] == "InvalidCredentials"
    assert r["call_after_refused_login"] is None, "a refused LOGIN_USER keeps the earlier login (L)"


def test_streams_and_topics(broker: BrokerProcess) -> None:
    taken = stream_ids(broker)
    r = run(SDK, broker.iggy_port, "catalog", "cat08")
    lowest_free = min(set(range(len(taken) + 1)) - taken)
    assert r["stream"] == {"id": lowest_free, "name": "cat08", "topics_count": 0, "messages_count": 0}
    assert r["stream_by_id"] == r["stream"]
    assert r["duplicate_stream"].startswith("StreamNameAlreadyExists")
    assert r["missing_stream_is_none"] and r["missing_topic_is_none"]
    assert r["duplicate_topic"].startswith("TopicNameAlreadyExists")
    assert r["zero_partitions"] == "InvalidPartitionsCount"
    assert r["topics"] == {
        "orders": {"id": 0, "name": "orders", "partitions_count": 3, "messages_count": 0},
        "plain": {"id": 1, "name": "plain", "partitions_count": 1, "messages_count": 0},
    }
    assert r["topic_by_ids"] == r["topics"]["plain"]
    assert r["send_to_missing_partition"].startswith("PartitionNotFound")
    assert r["orders_after_send"] == {"id": 0, "name": "orders", "partitions_count": 3, "messages_count": 6}
    assert r["stream_after_send"] == {"id": lowest_free, "name": "cat08", "topics_count": 2,
                                      "messages_count": 6}
    with RtesClient("127.0.0.1", broker.port) as v1:
        d = v1.describe_topic("cat08.orders")
        assert d["partitions"] == "3" and d["log_end"] == "[4 0 2]"
        assert set(d["config"].split(",")) >= {"retention.ms=3600000", "retention.bytes=3333333"}
        assert [v for _o, v in v1.consume("cat08.orders", 0, 0)[0]] == [f"o-{i}" for i in range(4)]


def test_send_then_poll_every_strategy(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "sendpoll", "poll08")
    every = messages(r["all"])
    assert offsets(every) == [0, 1, 2, 3, 4, 5] and {m.partition for m in every} == {0}
    assert [m.payload for m in every] == [b"\x00\xff binary", "two \u2713".encode(), b"three", b"four",
                                          b"five", b"six"]
    ids = [m.id for m in every]
    assert 0 not in ids and len(set(ids)) == 6, "the server gives each message a unique id"
    assert every[0].timestamp == every[2].timestamp < every[3].timestamp == every[5].timestamp
    assert all(m.headers is None and m.origin_timestamp is None for m in every)  # not in 0.8's API

    assert messages(r["offset"]) == every[2:5]
    assert r["offset_past_end"] == []
    assert messages(r["timestamp"]) == every[3:]
    assert messages(r["timestamp_hour_ago"]) == every and r["timestamp_future"] == []
    assert messages(r["first"]) == every[:2]
    assert messages(r["last"]) == every[4:]
    assert messages(r["last_all"]) == every
    p1 = messages(r["partition1"])
    assert [(m.partition, m.offset, m.text) for m in p1] == [(1, 0, "p1-a"), (1, 1, "p1-b")]
    assert r["missing_partition"].startswith("PartitionNotFound")
    assert [offsets(messages(x)) for x in r["next_no_commit"]] == [[0, 1], [0, 1]]
    assert [offsets(messages(x)) for x in r["next_commit"]] == [[0, 1, 2, 3], [4, 5], []]
    assert offsets(messages(r["next_partition1"])) == [0, 1], "offsets are per partition"
    assert r["topic"]["messages_count"] == 8


def test_consumer_group_with_two_members(broker: BrokerProcess) -> None:
    r = run(SDK, broker.iggy_port, "groups", "grp08")
    assert r["names"] == ["g8", "g8", "grp08", "work"]
    a, b = (messages(x) for x in r["got"])
    assert a and b, "both members consumed"
    pa, pb = {m.partition for m in a}, {m.partition for m in b}
    assert pa.isdisjoint(pb) and pa | pb == {0, 1, 2, 3} and len(pa) == len(pb) == 2
    counts = Counter((m.partition, m.offset) for m in a + b)
    assert len(counts) == 40 and set(counts.values()) == {1}, "every message exactly once"
    for m in a + b:
        assert m.text == f"w-{m.offset * 4 + m.partition}"
    for member in (a, b):
        for p in {m.partition for m in member}:
            assert offsets([m for m in member if m.partition == p]) == list(range(10))
    assert r["late"] == [], "a member joining afterwards finds every offset committed"
    with RtesClient("127.0.0.1", broker.port) as v1:
        assert [v1.offset("iggy.grp08.work.g8", "grp08.work", p) for p in range(4)] == [10] * 4


def test_stored_offsets_survive_a_broker_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = start_broker(data)
    try:
        before = run(SDK, b.iggy_port, "restart-a", "dur08")
    finally:
        b.stop()
    assert texts(messages(before["p0"])) == [f"d0-{i}" for i in range(4)]
    assert texts(messages(before["p1"])) == ["d1-0", "d1-1"]
    assert before["stored_locally"] == 5

    b = start_broker(data, like=b)
    try:
        after = run(SDK, b.iggy_port, "restart-b", "dur08")
    finally:
        b.stop()
    assert after["topic"]["messages_count"] == 16
    assert [(m.offset, m.text) for m in messages(after["p0"])] == [(o, f"d0-{o}") for o in range(4, 10)]
    assert [(m.offset, m.text) for m in messages(after["p1"])] == [(o, f"d1-{o}") for o in range(2, 6)]
    group = messages(after["group"])
    assert sorted((m.partition, m.offset) for m in group) == (
        [(0, o) for o in range(6, 10)] + [(1, o) for o in range(6)]), "store_offset(5) on p0 survived"
