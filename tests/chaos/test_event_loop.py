"""The event loop never blocks (issue 13 item 5): gzip bombs on 8 connections beside a latency
probe, and V1 consumers converting TANK's stored Snappy bundles beside the same probe. Each bomb
is ~100 KB of gzip that inflates past Cursus's 64 MiB frame limit (answered ``decode_failed``);
inflating (of a client's batch, or of a stored one another protocol must convert) runs in the
server's inflate pool, so a V1 PING on another connection keeps being answered promptly.

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

from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, encode_bundle
from bayou.records.tank import CODEC_SNAPPY
from support.brokers import BrokerProcess, LineConn
from support.tank import TankConn

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


async def _probe_beside(probe: LineConn, flood: asyncio.Future[list[int]], what: str) -> None:
    """V1 PING round trips, one every 20 ms, until ``flood`` is done; prints p50/p99 and fails
    when the median shows a blocked loop (a blocked loop answers in seconds, a free one in ms)."""
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    i = 0
    while not flood.done():
        i += 1
        t0 = loop.time()
        assert await probe.ask(f"V1|{i}|PING|", timeout=60) == f"V1|{i}|OK"
        latencies.append(loop.time() - t0)
        await asyncio.sleep(0.02)
    await probe.close()
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(f"\nPING latency beside {what}: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"{len(latencies)} probes")
    assert len(latencies) >= 5
    assert p50 < 0.25, f"p50 {p50:.3f} s: the event loop was blocked"


async def test_gzip_bombs_do_not_stall_other_clients(broker: BrokerProcess) -> None:
    bomb = _gzip_bomb(96 << 20)  # ~100 KB on the wire, past the 64 MiB limit once inflated
    probe = await LineConn.open(broker.port)
    await _connect(broker.cursus_port)  # the Cursus listener is up
    assert await probe.ask("V1|0|PING|") == "V1|0|OK"
    flood = asyncio.gather(*(_bomber(broker.cursus_port, bomb) for _ in range(CONNECTIONS)))
    await _probe_beside(probe, flood, f"{CONNECTIONS}x{BOMBS_PER_CONNECTION} gzip bombs")
    assert await flood == [BOMBS_PER_CONNECTION] * CONNECTIONS


BUNDLES = 3
BUNDLE_MESSAGES = 800
VALUE = b"a" * (64 * 1024)  # 800 of them: ~50 MiB a bundle once inflated, ~2.5 MiB stored
CONSUMERS = 6
CONSUMES_EACH = 6


async def _store_compressed_bundles(port: int, topic: str) -> None:
    """TANK producers' Snappy bundles, stored as they came (TANK consumers get them as they are)."""
    tank = await TankConn.open(port)
    assert (await tank.call(tm.CreateTopic(1, topic, 1, ""))).error == 0  # type: ignore[attr-defined]
    for i in range(BUNDLES):
        bundle = encode_bundle([TankMessage(0, 0, None, VALUE)] * BUNDLE_MESSAGES, compress=True)
        assert bundle[0] & 0x03 == CODEC_SNAPPY
        reply = await tank.call(tm.Produce(2 + i, (tm.ProduceTopic(topic, (tm.ProduceEntry(0, bundle),)),)))
        assert isinstance(reply, tm.ProduceResponse) and all(e == 0 for t in reply.topics for e in t.errors)
    await tank.close()


async def _v1_consumer(port: int, topic: str) -> int:
    """V1 CONSUMEs of the TANK bundles: each one inflates and converts a stored bundle."""
    conn = await LineConn.open(port)
    for i in range(CONSUMES_EACH):
        reply = await conn.ask(f"V1|c{i}|CONSUME|{topic} 0 {(i % BUNDLES) * BUNDLE_MESSAGES}", timeout=120)
        first = (i % BUNDLES) * BUNDLE_MESSAGES
        assert reply.startswith(f"V1|c{i}|OK|messages={first}:aaaa"), reply[:100]
        assert len(reply) < 5 * 1024 * 1024  # CONSUME_MAX_BYTES (4 MiB) of values, not a whole bundle
    await conn.close()
    return CONSUMES_EACH


async def test_converting_stored_compressed_batches_does_not_stall_others(broker: BrokerProcess) -> None:
    await _store_compressed_bundles(broker.tank_port, "zipped")
    probe = await LineConn.open(broker.port)
    flood = asyncio.gather(*(_v1_consumer(broker.port, "zipped") for _ in range(CONSUMERS)))
    await _probe_beside(probe, flood, f"{CONSUMERS}x{CONSUMES_EACH} V1 consumes of Snappy TANK bundles")
    assert await flood == [CONSUMES_EACH] * CONSUMERS
