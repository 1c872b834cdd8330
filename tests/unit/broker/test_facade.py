"""The front ends' facade: the lookups server/ makes instead of reaching into broker internals."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.broker.cluster.state import (
    MEMBER_BROKER_SHIFT,
    BrokerRegistration,
    connection_member_base,
    member_broker,
)
from bayou.broker.groups.coordinator import CURSUS_POLICY
from bayou.broker.views import Endpoint
from bayou.errors import InvalidTopicName, NotLeader, UnknownPartition, UnknownTopic
from bayou.records.batch import Record, encode_batch


async def test_topic_and_partition_lookups(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    await b.start()
    try:
        await b.create_topic("t", 3, {"retention.ms": "7200000"})
        assert Broker.check_topic_name("t.a-b_c") == "t.a-b_c"
        for bad in ("", ".", "..", "a/b", "x" * 250):
            with pytest.raises(InvalidTopicName):
                Broker.check_topic_name(bad)
        cfg = b.topic_config("t")
        assert cfg["retention.ms"] == "7200000"
        with pytest.raises(TypeError):
            cfg["retention.ms"] = "1"  # type: ignore[index]
        with pytest.raises(UnknownTopic):
            b.topic_config("none")
        assert b.partition_bounds("t", 1) == (0, 0)
        now = int(time.time() * 1000)
        await b.produce("t", 1, encode_batch([Record(b"a", None, now), Record(b"b", None, now)]))
        assert b.partition_bounds("t", 1) == (0, 2)
        assert (b.log_end_offset("t", 1), b.log_end_offset("t", 0)) == (2, 0)
        with pytest.raises(UnknownPartition):
            b.partition_bounds("t", 3)
        assert b.partition_dir("t", 2) == tmp_path / "d" / "topics" / "t" / "2"
        assert b.partition_dir("t", 2).is_dir()
        assert [b.next_round_robin("t", 3) for _ in range(4)] == [0, 1, 2, 0]
        me = b.config.broker_id  # standalone: this broker leads every partition alone
        assert b.partition_replicas("t", 0) == (me, [me], [me])
    finally:
        await b.stop()


async def test_group_lookups(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    await b.start()
    try:
        await b.create_topic("t", 2)
        assert (b.group_topic("g"), b.group_generation("g"), b.group_members("g")) == (None, 0, frozenset())
        assert b.group_assignment("g", "m") == []
        view = await b.join_group("g", "t", "m-1", "range", CURSUS_POLICY)
        assert b.group_topic("g") == "t"
        assert b.group_generation("g") == view.generation >= 1
        assert b.group_members("g") == frozenset({"m-1"})
        assert b.group_assignment("g", "m-1") == list(view.assignment)
        assert b.group_assignment("g", "other") == []
    finally:
        await b.stop()


async def test_log_and_cluster_lookups_standalone(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    await b.start()
    try:
        await b.create_topic("t", 2)
        assert b.topic_exists("t") and not b.topic_exists("none")
        now = int(time.time() * 1000)
        await b.produce("t", 0, encode_batch([Record(b"a", None, now), Record(b"b", None, now)]))
        totals = b.log_totals()
        assert (totals.partitions, totals.segments, totals.messages) == (2, 2, 2)
        assert totals.size_bytes > 0
        assert not b.clustered
        assert b.shared_documents() is None and b.connection_ids() is None
        assert b.listener_endpoints("iggy") is None
        with pytest.raises(NotLeader):
            await b.fetch_at_leader("t", 0, 0, 0)
    finally:
        await b.stop()


def test_cluster_lookups(tmp_path: Path) -> None:
    """In a cluster, connection ids carry the broker id, and the live brokers' listeners are the
    cluster's (a stand-in node here: the real one is tested in tests/cluster)."""
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", broker_id=3))
    regs = {2: BrokerRegistration(2, "h2", {"iggy": 8092}), 1: BrokerRegistration(1, "h1", {"iggy": 8091}),
            4: BrokerRegistration(4, "h4", {"cursus": 9000})}
    b.cluster = SimpleNamespace(snapshot=SimpleNamespace(controller=2),  # type: ignore[assignment]
                                live_brokers=lambda: regs)
    assert b.clustered
    ids = b.connection_ids()
    assert ids is not None and ids.start == connection_member_base(3) + 1
    assert len(ids) == (1 << MEMBER_BROKER_SHIFT) - 1
    assert all(member_broker(str(i)) == 3 for i in (ids[0], ids[-1]))
    assert b.listener_endpoints("iggy") == [Endpoint(1, "h1", 8091, False), Endpoint(2, "h2", 8092, True)]
