"""An Iggy poll racing retention: the poll takes the partition's bounds, then reads. When
retention moves the log start past the high watermark it took meanwhile (small segments, a
producer writing on), the read clamps to the new start and returns records above that stale
high watermark; the poll must answer them, not an empty reply (found by
tests/behaviour/test_behaviour_retention_races.py under load, about 1 run in 20)."""

from __future__ import annotations

import time
from pathlib import Path

from bayou.broker import Broker, BrokerConfig
from bayou.protocols.iggy.framing import Dialect
from bayou.records.batch import encode_batch
from bayou.records.model import Record
from bayou.server.iggy import IggyService
from bayou.storage import FsyncPolicy, LogConfig


def batch(value: bytes) -> bytes:
    return encode_batch([Record(value, None, int(time.time() * 1000))])


async def test_a_poll_whose_high_watermark_retention_passed_reads_from_the_new_start(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=1024, retention_bytes=2048, fsync=FsyncPolicy("never"))
    broker = Broker(BrokerConfig(data_dir=tmp_path / "d", log=cfg))
    await broker.start()
    try:
        iggy = IggyService(broker, port=0)
        for i in range(5):
            await broker.produce("t", 0, batch(b"old-%03d" % i + b"x" * 200))
        start, hw = broker.partition_bounds("t", 0)  # what the poll saw before it read
        for i in range(40):
            await broker.produce("t", 0, batch(b"new-%03d" % i + b"x" * 200))
        assert await broker.run_retention() > 0
        new_start, new_hw = broker.partition_bounds("t", 0)
        assert new_start > hw  # the race: everything the poll may still read lies past its hw

        parts, count, last = await iggy.fetch._read("t", 0, 0, start, 1000, hw, Dialect.SEED, 0)

        assert count > 0 and count == len(parts)
        assert [int(p.offset) for p in parts] == list(range(new_start, new_start + count))
        assert last == new_start + count - 1 < new_hw
        assert parts[0].payload.startswith(b"new-")
    finally:
        await broker.stop()
