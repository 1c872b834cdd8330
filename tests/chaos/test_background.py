"""Background tasks never die silently (issue 13 item 9): faults injected into the flush, the
retention pass and the group expiry sweep are logged and retried; the tasks keep running."""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bayou.broker import BrokerConfig
from bayou.broker.background import run_forever
from bayou.broker.broker import Broker
from bayou.records.batch import encode_batch
from bayou.records.model import Record
from bayou.storage.config import FsyncPolicy, LogConfig
from bayou.storage.segment import Segment


async def until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def fast_config(tmp_path: Path, **kw: object) -> BrokerConfig:
    return BrokerConfig(data_dir=tmp_path, log=LogConfig(fsync=FsyncPolicy.parse("interval:10")),
                        background_retry_ms=10, background_retry_max_ms=40,
                        **kw)  # type: ignore[arg-type]


async def test_flush_loop_survives_fsync_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """One EIO used to end the interval flush loop (sync_to raises StorageError, the loop caught
    only OSError): nothing was fsynced again until shutdown."""
    b = Broker(fast_config(tmp_path))
    await b.start()
    try:
        await b.create_topic("t", 1)
        real_sync = Segment.sync
        calls = {"n": 0}

        def failing_sync(self: Segment, *, indexes: bool = True) -> None:
            calls["n"] += 1
            if calls["n"] <= 3:
                raise OSError(errno.EIO, "injected I/O error")
            real_sync(self, indexes=indexes)

        monkeypatch.setattr(Segment, "sync", failing_sync)
        with caplog.at_level(logging.ERROR, logger="bayou.broker"):
            await b.produce("t", 0, encode_batch([Record(b"v", key=b"k")]))
            part = b.partition("t", 0)
            await until(lambda: part.log.durable_offset == part.log.next_offset == 1)
        assert calls["n"] > 3
        assert any("flush failed" in r.getMessage() for r in caplog.records)
        # and it goes on flushing later appends
        await b.produce("t", 0, encode_batch([Record(b"w", key=b"k")]))
        await until(lambda: part.log.durable_offset == 2)
        assert all(not t.done() for t in b._tasks)
    finally:
        await b.stop()


async def test_retention_and_expiry_survive_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = Broker(fast_config(tmp_path, retention_check_interval_ms=10, group_expiry_check_ms=10))
    await b.start()
    try:
        await b.create_topic("t", 1)
        part = b.partition("t", 0)
        real_retention = part.log.apply_retention
        retention_calls = {"n": 0}

        def failing_retention(now: int | None = None) -> int:
            retention_calls["n"] += 1
            if retention_calls["n"] <= 2:
                raise OSError(errno.EIO, "injected")
            if retention_calls["n"] == 3:
                raise RuntimeError("injected bug")
            return real_retention(now)

        sweeps = {"n": 0}

        def failing_sweep(active_only: bool = False) -> bool:
            sweeps["n"] += 1
            if sweeps["n"] <= 3:
                raise RuntimeError("injected bug in the sweep")
            return False

        monkeypatch.setattr(part.log, "apply_retention", failing_retention)
        monkeypatch.setattr(b.groups, "sweep_all", failing_sweep)
        await until(lambda: retention_calls["n"] >= 6 and sweeps["n"] >= 6)
        assert all(not t.done() for t in b._tasks)
    finally:
        await b.stop()


async def test_run_forever_backs_off_and_logs_recovery(caplog: pytest.LogCaptureFixture) -> None:
    stamps: list[float] = []

    async def step() -> None:
        stamps.append(time.monotonic())
        if len(stamps) <= 4:
            raise ValueError("boom")

    with caplog.at_level(logging.WARNING, logger="bayou.test"):
        task = asyncio.create_task(run_forever("probe", step, 0.0, retry_s=0.02, retry_max_s=0.05,
                                               logger=logging.getLogger("bayou.test")))
        await until(lambda: len(stamps) >= 6)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert gaps[0] >= 0.019 and gaps[1] >= 0.039 and gaps[3] >= 0.049  # 20, 40, 50 (capped) ms
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed" in m for m in messages) == 4
    assert any("recovered after 4 failures" in m for m in messages)
