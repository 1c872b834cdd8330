"""The broker API without any protocol: topics, produce, fetch, long-poll, offsets, retention."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bayou.broker import Acks, Broker, BrokerConfig
from bayou.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidTopicName,
    NotLeader,
    OffsetOutOfRange,
    ReplicationTimeout,
    TopicAlreadyExists,
    UnknownPartition,
    UnknownTopic,
)
from bayou.records.batch import Record, decode_records, encode_batch, iter_batches
from bayou.storage import FsyncPolicy, LogConfig


def batch(*values: bytes, ts: int | None = None) -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    return encode_batch([Record(v, None, now) for v in values])


def values(data: bytes, start: int = 0) -> list[bytes]:
    out = []
    for pos, _h in iter_batches(data):
        out += [r.value for r in decode_records(data, pos) if r.offset >= start]
    return out


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", min_insync_replicas=1))
    await b.start()
    yield b
    await b.stop()


async def test_topic_admin(broker: Broker) -> None:
    await broker.create_topic("t", 2, {"retention.ms": "60000"})
    with pytest.raises(TopicAlreadyExists):
        await broker.create_topic("t", 2)
    with pytest.raises(InvalidTopicName):
        await broker.create_topic("../x", 1)
    with pytest.raises(InvalidPartitions):
        await broker.create_topic("z", 0)
    with pytest.raises(InvalidConfig):
        await broker.create_topic("y", 1, {"no.such.key": "1"})
    assert broker.list_topics() == ["t"]
    await broker.add_partitions("t", 4)
    info = broker.describe_topic("t")
    assert len(info.partitions) == 4 and info.config == {"retention.ms": "60000"}
    with pytest.raises(InvalidPartitions):
        await broker.add_partitions("t", 3)
    assert await broker.alter_topic_config("t", {"retention.ms": None, "segment.bytes": "4096"}) == {
        "segment.bytes": "4096"}
    assert broker.partition("t", 0).log.config.segment_bytes == 4096
    await broker.delete_topic("t")
    assert broker.list_topics() == []
    with pytest.raises(UnknownTopic):
        broker.describe_topic("t")


async def test_produce_fetch_offsets(broker: Broker) -> None:
    r1 = await broker.produce("t", 1, batch(b"a", b"b"))
    r2 = await broker.produce("t", 1, batch(b"c"))
    assert (r1.base_offset, r1.last_offset, r2.base_offset, r2.high_watermark) == (0, 1, 2, 3)
    f = await broker.fetch("t", 1, 1)
    assert values(f.data, 1) == [b"b", b"c"] and f.high_watermark == 3 and f.next_offset == 3
    empty = await broker.fetch("t", 1, 3)
    assert empty.data == b"" and empty.record_count == 0
    with pytest.raises(OffsetOutOfRange):
        await broker.fetch("t", 1, -1)
    with pytest.raises(UnknownPartition):
        await broker.produce("t", 7, batch(b"x"))
    with pytest.raises(UnknownTopic):
        await broker.fetch("nope", 0, 0)


async def test_long_poll_wakes_on_data_and_times_out(broker: Broker) -> None:
    await broker.create_topic("t", 1)
    t0 = time.monotonic()
    waiting = asyncio.create_task(broker.fetch("t", 0, 0, max_wait_ms=5000))
    await asyncio.sleep(0.05)
    await broker.produce("t", 0, batch(b"x"))
    got = await waiting
    assert values(got.data) == [b"x"] and time.monotonic() - t0 < 2
    t0 = time.monotonic()
    none = await broker.fetch("t", 0, 1, max_wait_ms=200)
    assert none.data == b"" and 0.15 < time.monotonic() - t0 < 2


async def test_min_bytes_waits_for_enough(broker: Broker) -> None:
    await broker.create_topic("t", 1)
    await broker.produce("t", 0, batch(b"x"))
    t0 = time.monotonic()
    r = await broker.fetch("t", 0, 0, max_wait_ms=300, min_bytes=10_000)
    assert values(r.data) == [b"x"] and time.monotonic() - t0 >= 0.25


async def test_roles_and_acks_all(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", ack_all_timeout_ms=200))
    await b.start()
    try:
        await b.create_topic("t", 1)
        with pytest.raises(ReplicationTimeout):
            await b.produce("t", 0, batch(b"x"), Acks.ALL)
        assert b.partition("t", 0).log.next_offset == 1  # the record stays appended
        task = asyncio.create_task(b.produce("t", 0, batch(b"y"), Acks.ALL))
        await asyncio.sleep(0.02)
        rep = await b.replica_progress("t", 0, 1, 1)
        assert rep.isr == (0, 1) and not rep.under_replicated
        assert (await task).base_offset == 1
        await b.set_partition_role("t", 0, "follower")
        with pytest.raises(NotLeader):
            await b.produce("t", 0, batch(b"z"))
        assert b.partition("t", 0).log.next_offset == 2
    finally:
        await b.stop()


async def test_committed_offsets_survive_restart(tmp_path: Path) -> None:
    cfg = BrokerConfig(data_dir=tmp_path / "d")
    b = Broker(cfg)
    await b.start()
    await b.produce("t", 0, batch(b"a"))
    await b.commit_offset("g", "t", 0, 1)
    view = await b.join_group("g2", "t", "m1")
    await b.stop()
    assert (tmp_path / "d" / ".clean_shutdown").exists()
    b = Broker(cfg)
    await b.start()
    try:
        assert b.committed_offset("g", "t", 0) == 1
        assert b.describe_group("g2").generation == view.generation
        assert b.partition("t", 0).high_watermark == 1
        with pytest.raises(OffsetOutOfRange):
            await b.commit_offset("g", "t", 0, -1)
    finally:
        await b.stop()


async def test_retention_runs_and_fetch_below_start_errors(tmp_path: Path) -> None:
    log_cfg = LogConfig(segment_bytes=1024, retention_bytes=2048, fsync=FsyncPolicy("never"))
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", log=log_cfg))
    await b.start()
    try:
        for i in range(40):
            await b.produce("t", 0, batch(b"v%03d" % i + b"x" * 200))
        assert await b.run_retention() > 0
        part = b.partition("t", 0)
        assert part.log.log_start_offset > 0 and part.log.size_bytes <= 2048 + 1024
        with pytest.raises(OffsetOutOfRange):
            await b.fetch("t", 0, 0)
        r = await b.fetch("t", 0, part.log.log_start_offset)
        assert r.record_count > 0
    finally:
        await b.stop()


async def test_interval_fsync_flushes_in_background(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(fsync=FsyncPolicy.parse("interval:20"))))
    await b.start()
    try:
        await b.produce("t", 0, batch(b"a"))
        part = b.partition("t", 0)
        for _ in range(100):
            if part.log.durable_offset == 1:
                break
            await asyncio.sleep(0.01)
        assert part.log.durable_offset == 1
    finally:
        await b.stop()


async def test_fsync_always_hides_nothing_acknowledged(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    await b.start()
    try:
        results = await asyncio.gather(*(b.produce("t", 0, batch(b"%d" % i)) for i in range(50)))
        part = b.partition("t", 0)
        assert sorted(r.base_offset for r in results) == list(range(50))
        assert part.log.durable_offset == 50 and part.high_watermark == 50
    finally:
        await b.stop()


def test_fsync_policy_parse() -> None:
    assert str(FsyncPolicy.parse("interval:5")) == "interval:5"
    for bad in ("sometimes", "interval:0", "interval:x"):
        with pytest.raises(InvalidConfig):
            FsyncPolicy.parse(bad)


async def test_fetch_max_records_is_batch_granular(broker: Broker) -> None:
    for i in range(5):
        await broker.produce("t", 0, batch(b"%d-a" % i, b"%d-b" % i))
    r = await broker.fetch("t", 0, 0, max_records=3)
    assert values(r.data) == [b"0-a", b"0-b", b"1-a", b"1-b"] and r.next_offset == 4
    r = await broker.fetch("t", 0, 1, max_records=1)  # one wanted record in the first batch
    assert values(r.data, 1) == [b"0-b"] and r.next_offset == 2
    r = await broker.fetch("t", 0, 0, max_records=1)
    assert r.record_count == 2  # never less than one whole batch


async def test_reads_at_the_tail_do_not_wait_for_the_io_threads(tmp_path: Path) -> None:
    """A consumer at the tail reads bytes just written: they are in the page cache and are served
    on the event loop (storage/cached.py), so a busy I/O pool (a slow disk, a large catch-up read)
    does not delay them. Checked with every I/O thread blocked (fsync=never: an fsync=always
    produce waits for an I/O thread by design)."""
    broker = Broker(BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(fsync=FsyncPolicy("never"))))
    await broker.start()
    try:
        await _tail_reads_without_threads(broker)
    finally:
        await broker.stop()


async def _tail_reads_without_threads(broker: Broker) -> None:
    await broker.create_topic("t", 1)
    await broker.produce("t", 0, batch(b"a", b"b"))
    gate = threading.Event()
    pool = broker._io
    blockers = [pool.submit(gate.wait, 30) for _ in range(pool._max_workers)]
    try:
        r = await asyncio.wait_for(broker.fetch("t", 0, 0), 5)
        assert values(r.data) == [b"a", b"b"]
        span = await asyncio.wait_for(broker.locate("t", 0, 1), 5)
        assert span is not None and span.batches[0][1].base_offset == 0
        span.release()
        waiting = asyncio.create_task(broker.fetch("t", 0, 2, max_wait_ms=10_000))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await broker.produce("t", 0, batch(b"c"))
        r = await asyncio.wait_for(waiting, 5)  # the long poll woke and read without a thread
        assert values(r.data, 2) == [b"c"]
    finally:
        gate.set()
        for f in blockers:
            f.result(10)


async def test_a_backlog_read_from_the_page_cache_lets_other_tasks_run(tmp_path: Path) -> None:
    """Reads served on the event loop never wait: a reader going through a cached backlog in large
    reads yields to the loop after each one, so other connections are served meanwhile."""
    broker = Broker(BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(fsync=FsyncPolicy("never"))))
    await broker.start()
    try:
        await broker.create_topic("t", 1)
        for _ in range(40):
            await broker.produce("t", 0, batch(*[b"x" * 1000] * 100))  # 40 x 100 KB, cached
        ticks = 0

        async def other() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1

        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        offset, reads, before = 0, 0, ticks
        while offset < 4000:
            r = await broker.fetch("t", 0, offset, max_bytes=200_000)
            offset, reads = r.next_offset, reads + 1
        task.cancel()
        assert reads >= 10 and ticks - before >= reads - 1
    finally:
        await broker.stop()
