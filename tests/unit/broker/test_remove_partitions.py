"""Broker.remove_partitions: the last N partitions of a topic go, with their data, committed
offsets, group assignments and metadata; a restart sees the smaller count and no directories."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.broker.groups.coordinator import CURSUS_POLICY
from bayou.errors import InvalidPartitions, UnknownPartition, UnknownTopic
from bayou.records.batch import Record, encode_batch


def batch(*values: bytes) -> bytes:
    return encode_batch([Record(v, None, int(time.time() * 1000)) for v in values])


def config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(data_dir=tmp_path / "d", min_insync_replicas=1, replication_factor=1)


def partition_dirs(b: Broker, topic: str) -> list[str]:
    return sorted(p.name for p in b.store.topic_dir(topic).iterdir() if p.is_dir())


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(config(tmp_path))
    await b.start()
    yield b
    await b.stop()


async def test_remove_partitions_shrinks_and_survives_restart(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    b = Broker(cfg)
    await b.start()
    await b.create_topic("t", 4)
    for p in range(4):
        await b.produce("t", p, batch(b"p%d" % p))
        await b.commit_offset("g", "t", p, 1)
    topic = await b.remove_partitions("t", 2)
    assert len(topic.partitions) == 2 and topic.meta.partitions == 2
    assert b.partition_count("t") == 2 and len(b.describe_topic("t").partitions) == 2
    assert sorted(k for k in b.metadata.partitions if k[0] == "t") == [("t", 0), ("t", 1)]
    assert [b.committed_offset("g", "t", p) for p in range(4)] == [1, 1, None, None]
    assert partition_dirs(b, "t") == ["0", "1"]
    with pytest.raises(UnknownPartition):
        await b.produce("t", 2, batch(b"x"))
    with pytest.raises(UnknownPartition):
        await b.fetch("t", 3, 0)
    await b.stop()

    b = Broker(cfg)
    await b.start()
    try:
        assert b.partition_count("t") == 2 and partition_dirs(b, "t") == ["0", "1"]
        assert sorted(k for k in b.metadata.partitions if k[0] == "t") == [("t", 0), ("t", 1)]
        assert [b.committed_offset("g", "t", p) for p in range(4)] == [1, 1, None, None]
        assert b.partition("t", 1).log.next_offset == 1
        await b.add_partitions("t", 3)  # a partition added again starts empty
        assert b.partition("t", 2).log.next_offset == 0
    finally:
        await b.stop()


async def test_remove_partitions_refuses_to_remove_everything(broker: Broker) -> None:
    await broker.create_topic("t", 3)
    for count in (3, 4, 0, -1):
        with pytest.raises(InvalidPartitions):
            await broker.remove_partitions("t", count)
    assert broker.partition_count("t") == 3
    await broker.remove_partitions("t", 2)
    with pytest.raises(InvalidPartitions):
        await broker.remove_partitions("t", 1)
    with pytest.raises(UnknownTopic):
        await broker.remove_partitions("nope", 1)


async def test_long_poll_on_a_removed_partition_ends(broker: Broker) -> None:
    await broker.create_topic("t", 2)
    on_removed = asyncio.create_task(broker.fetch("t", 1, 0, max_wait_ms=10_000))
    on_kept = asyncio.create_task(broker.fetch("t", 0, 0, max_wait_ms=10_000))
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    await broker.remove_partitions("t", 1)
    with pytest.raises(UnknownPartition):
        await asyncio.wait_for(on_removed, 2)
    assert time.monotonic() - t0 < 2
    assert not on_kept.done()
    await broker.produce("t", 0, batch(b"x"))
    assert (await asyncio.wait_for(on_kept, 2)).record_count == 1


async def test_long_poll_on_a_deleted_topic_ends(broker: Broker) -> None:
    await broker.create_topic("t", 1)
    waiting = asyncio.create_task(broker.fetch("t", 0, 0, max_wait_ms=10_000))
    await asyncio.sleep(0.05)
    await broker.delete_topic("t")
    with pytest.raises(UnknownTopic):
        await asyncio.wait_for(waiting, 2)


async def test_groups_lose_removed_partitions(broker: Broker) -> None:
    await broker.create_topic("t", 4)
    await broker.join_group("g", "t", "a")
    view = await broker.join_group("g", "t", "b")
    assert broker.describe_group("g").members[1][2] == (1, 3)
    await broker.register_group("c", "t", CURSUS_POLICY)
    assert broker.describe_group("c").partition_count == 4
    await broker.join_group("other", "u", "a")
    other_gen = broker.describe_group("other").generation

    await broker.remove_partitions("t", 2)
    g = broker.describe_group("g")
    assert g.generation == view.generation + 1  # members rejoin and see the new assignment
    assert [m[2] for m in g.members] == [(0,), (1,)]
    assert broker.describe_group("c").partition_count == 2
    assert broker.describe_group("other").generation == other_gen


async def test_a_crash_before_the_directories_go_is_cleaned_up_at_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path)
    b = Broker(cfg)
    await b.start()
    await b.create_topic("t", 3)
    await b.produce("t", 2, batch(b"old"))
    monkeypatch.setattr(b.store, "delete_partition", lambda topic, partition: None)
    await b.remove_partitions("t", 1)
    assert partition_dirs(b, "t") == ["0", "1", "2"]  # the count is written, the directory is not gone
    await b.stop()

    b = Broker(cfg)
    await b.start()
    try:
        assert partition_dirs(b, "t") == ["0", "1"]
        await b.add_partitions("t", 3)
        assert b.partition("t", 2).log.next_offset == 0  # not the old data
    finally:
        await b.stop()
