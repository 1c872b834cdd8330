"""Deleting records on request through the broker: purge_topic and delete_segments."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.errors import InvalidRequest, OffsetOutOfRange, UnknownPartition, UnknownTopic
from bayou.records.batch import Record, decode_records, encode_batch, iter_batches
from bayou.storage import LogConfig


def batch(*values: bytes) -> bytes:
    return encode_batch([Record(v, None, int(time.time() * 1000)) for v in values])


def values(data: bytes, start: int = 0) -> list[bytes]:
    return [r.value for pos, _h in iter_batches(data) for r in decode_records(data, pos)
            if r.offset >= start]


def config(tmp_path: Path, **log: int) -> BrokerConfig:
    return BrokerConfig(data_dir=tmp_path / "d", min_insync_replicas=1, replication_factor=1,
                        log=LogConfig(**log))


async def crash(b: Broker) -> None:
    """Stop without flushing, closing or the clean-shutdown marker (the next start recovers)."""
    for t in b._tasks:
        t.cancel()
    await asyncio.gather(*b._tasks, return_exceptions=True)
    b.store.close()
    b._io.shutdown(wait=True)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(config(tmp_path, segment_bytes=1024))
    await b.start()
    yield b
    await b.stop()


async def test_purge_topic_keeps_offsets(broker: Broker) -> None:
    await broker.create_topic("t", 2)
    for i in range(30):
        await broker.produce("t", i % 2, batch(b"v%02d" % i + b"x" * 100))
    await broker.purge_topic("t")
    for p in broker.describe_topic("t").partitions:
        assert (p.log_start_offset, p.log_end_offset, p.high_watermark) == (15, 15, 15)
        assert (p.size_bytes, p.segments) == (0, 1)
    with pytest.raises(OffsetOutOfRange):
        await broker.fetch("t", 0, 0)
    empty = await broker.fetch("t", 0, 15)
    assert (empty.data, empty.log_start_offset, empty.next_offset) == (b"", 15, 15)
    r = await broker.produce("t", 0, batch(b"after"))
    assert (r.base_offset, r.log_start_offset, r.high_watermark) == (15, 15, 16)
    assert values((await broker.fetch("t", 0, 15)).data) == [b"after"]
    with pytest.raises(UnknownTopic):
        await broker.purge_topic("nope")


async def test_long_poll_at_the_end_survives_a_purge(broker: Broker) -> None:
    await broker.create_topic("t", 1)
    await broker.produce("t", 0, batch(b"a", b"b"))
    waiting = asyncio.create_task(broker.fetch("t", 0, 2, max_wait_ms=5000))
    await asyncio.sleep(0.05)
    await broker.purge_topic("t")
    await asyncio.sleep(0.05)
    assert not waiting.done()  # woken, but its offset is still the end: it waits on
    await broker.produce("t", 0, batch(b"c"))
    assert values((await asyncio.wait_for(waiting, 2)).data) == [b"c"]


@pytest.mark.parametrize("clean", [True, False])
async def test_purge_survives_restart(tmp_path: Path, clean: bool) -> None:
    cfg = config(tmp_path, segment_bytes=1024)
    b = Broker(cfg)
    await b.start()
    for _ in range(20):
        await b.produce("t", 0, batch(b"x" * 200))
    await b.purge_topic("t")
    await (b.stop() if clean else crash(b))
    b = Broker(cfg)
    await b.start()
    try:
        part = b.partition("t", 0)
        assert (part.log.log_start_offset, part.log.next_offset, part.high_watermark) == (20, 20, 20)
        assert (await b.produce("t", 0, batch(b"y"))).base_offset == 20
    finally:
        await b.stop()


async def test_delete_segments(broker: Broker) -> None:
    await broker.create_topic("t", 1)
    for i in range(30):
        await broker.produce("t", 0, batch(b"v%02d" % i + b"x" * 200))
    part = broker.partition("t", 0)
    segments = len(part.log.segments)
    bases = list(part.log._bases)
    assert segments > 3
    assert await broker.delete_segments("t", 0, 0) == 0
    assert await broker.delete_segments("t", 0, 2) == 2
    info = broker.describe_topic("t").partitions[0]
    assert (info.log_start_offset, info.segments, info.log_end_offset) == (bases[2], segments - 2, 30)
    with pytest.raises(OffsetOutOfRange):
        await broker.fetch("t", 0, bases[2] - 1)
    first = values((await broker.fetch("t", 0, bases[2])).data, bases[2])[0]
    assert first == b"v%02d" % bases[2] + b"x" * 200
    assert await broker.delete_segments("t", 0, 1000) == segments - 3  # never the active one
    assert len(part.log.segments) == 1 and part.log.next_offset == 30
    assert await broker.delete_segments("t", 0, 1) == 0
    with pytest.raises(InvalidRequest):
        await broker.delete_segments("t", 0, -1)
    with pytest.raises(UnknownPartition):
        await broker.delete_segments("t", 1, 1)
    with pytest.raises(UnknownTopic):
        await broker.delete_segments("nope", 0, 1)
