"""The front ends' facade: the lookups server/ makes instead of reaching into broker internals."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.broker.groups.coordinator import CURSUS_POLICY
from bayou.errors import InvalidTopicName, UnknownPartition, UnknownTopic
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
