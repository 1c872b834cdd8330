"""The event loop never blocks (issue 13 item 5): gzip bombs on 8 connections beside a latency
probe. Each bomb is ~100 KB of gzip that inflates past Cursus's 64 MiB frame limit (answered
``decode_failed``); inflating runs in the server's inflate pool, so a V1 PING on another
connection keeps being answered promptly.

The probe's p50/p99 are printed (``-s``); the bound asserted is loose (a blocked loop answers in
seconds, a free one in milliseconds) so a busy CI machine does not fail it.
"""

from __future__ import annotations

import asyncio
import statistics
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.brokers import BrokerProcess, LineConn

CONNECTIONS = 8
BOMBS_PER_CONNECTION = 4


def _gzip_bomb(inflated: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    out = [c.compress(chunk) for _ in range(inflated >> 20)]
    return b"".join(out) + c.flush()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", fsync="never").start()
    try:
        yield b
    finally:
        b.stop()


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _bomber(port: int, bomb: bytes) -> int:
    reader, writer = await _connect(port)
    answered = 0
    try:
        for _ in range(BOMBS_PER_CONNECTION):
            writer.write(struct.pack(">I", len(bomb)) + bomb)
            await writer.drain()
            (length,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 120))
            reply = await asyncio.wait_for(reader.readexactly(length), 120)
            assert b"decode_failed" in reply, reply[:200]
            answered += 1
    finally:
        writer.close()
    return answered


async def test_gzip_bombs_do_not_stall_other_clients(broker: BrokerProcess) -> None:
    bomb = _gzip_bomb(96 << 20)  # ~100 KB on the wire, past the 64 MiB limit once inflated
    probe = await LineConn.open(broker.port)
    await _connect(broker.cursus_port)  # the Cursus listener is up
    assert await probe.ask("V1|0|PING|") == "V1|0|OK"
    flood = asyncio.gather(*(_bomber(broker.cursus_port, bomb) for _ in range(CONNECTIONS)))
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    i = 0
    while not flood.done():
        i += 1
        t0 = loop.time()
        assert await probe.ask(f"V1|{i}|PING|", timeout=60) == f"V1|{i}|OK"
        latencies.append(loop.time() - t0)
        await asyncio.sleep(0.02)
    assert await flood == [BOMBS_PER_CONNECTION] * CONNECTIONS
    await probe.close()
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(f"\nPING latency beside {CONNECTIONS}x{BOMBS_PER_CONNECTION} gzip bombs: "
          f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, {len(latencies)} probes")
    assert len(latencies) >= 5
    assert p50 < 0.25, f"p50 {p50:.3f} s: the event loop was blocked"
