"""Connection floods (issue 13 item 3): idle and slowloris connections are closed, one client
address cannot take every slot, and a flood on one protocol does not lock out the others.

A real broker subprocess on loopback, with small limits from its config file so the floods stay
small; other loopback addresses (127.0.0.2...) stand for other clients.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bayou.protocols.tank import messages as tm
from support.brokers import BrokerProcess, LineConn
from support.iggy import legacy_login
from support.sockets import closed_within as _closed_within
from support.sockets import connect as _connect
from support.sockets import slowloris
from support.tank import TankConn

IDLE_S = 1.0
REQUEST_S = 1.5


def _broker(tmp_path: Path, **limits: int | float) -> Iterator[BrokerProcess]:
    conf = tmp_path / "bayou.toml"
    conf.write_text("".join(f"{k} = {v}\n" for k, v in limits.items()))
    broker = BrokerProcess(tmp_path / "data", "--config", str(conf), fsync="never").start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path, idle_timeout_s=IDLE_S, request_timeout_s=REQUEST_S)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[BrokerProcess]:
    """Few slots, and idle connections kept long enough to hold them."""
    yield from _broker(tmp_path, max_connections=60, listener_reserve=8, max_connections_per_ip=10)


@contextlib.asynccontextmanager
async def _flood(port: int, n: int, sources: int = 1) -> AsyncIterator[list[asyncio.StreamWriter]]:
    writers: list[asyncio.StreamWriter] = []
    try:
        for i in range(n):
            _r, w = await _connect(port, f"127.0.0.{2 + i % sources}")
            writers.append(w)
        yield writers
    finally:
        for w in writers:
            w.close()


def _ports(b: BrokerProcess) -> dict[str, int]:
    return {"rtes": b.port, "cursus": b.cursus_port, "iggy": b.iggy_port, "tank": b.tank_port}


@pytest.mark.parametrize("protocol", ["rtes", "cursus", "iggy", "tank"])
async def test_a_connection_that_sends_nothing_is_closed(broker: BrokerProcess, protocol: str) -> None:
    reader, writer = await _connect(_ports(broker)[protocol])
    assert await _closed_within(reader, IDLE_S + 5)
    writer.close()


SLOW_PREFIX = {  # the start of a valid request of each protocol, never completed
    "rtes": b"V1|1|PRODUCE|t|k|" + b"v" * 100,
    "cursus": (1000).to_bytes(4, "big") + b"x" * 200,
    "iggy": (1000).to_bytes(4, "little") + (38).to_bytes(4, "little") + b"x" * 200,
    "tank": b"\x01" + (1000).to_bytes(4, "little") + b"x" * 200,
}


@pytest.mark.parametrize("protocol", ["rtes", "cursus", "iggy", "tank"])
async def test_slowloris_first_request_is_closed(broker: BrokerProcess, protocol: str) -> None:
    """One byte every 0.5 s: never a complete request, so the idle deadline closes it."""
    reader, writer = await _connect(_ports(broker)[protocol])
    assert await slowloris(reader, writer, SLOW_PREFIX[protocol], IDLE_S + 10)
    writer.close()


async def test_slowloris_after_a_request_is_closed_and_an_idle_client_kept(broker: BrokerProcess) -> None:
    slow = await LineConn.open(broker.port)
    idle = await LineConn.open(broker.port)
    assert await slow.ask("V1|a|PING|") == "V1|a|OK"
    assert await idle.ask("V1|b|PING|") == "V1|b|OK"
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await slowloris(slow.reader, slow.writer, b"V1|c|PRODUCE|t|k|" + b"v" * 100, REQUEST_S + 10)
    # the other one sat idle between requests all along (past both deadlines): still served
    assert loop.time() - start > max(IDLE_S, REQUEST_S)
    assert await idle.ask("V1|d|PING|") == "V1|d|OK"
    await slow.close()
    await idle.close()


async def test_a_large_request_on_a_moving_link_is_not_cut(broker: BrokerProcess) -> None:
    """Progress earns time: 40 KB at ~20 KB/s takes longer than request_timeout_s."""
    conn = await LineConn.open(broker.port)
    assert await conn.ask("V1|a|PING|") == "V1|a|OK"
    line = b"V1|b|PRODUCE|slow k:" + b"v" * 40_000 + b"\n"
    for i in range(0, len(line), 2_000):
        conn.writer.write(line[i:i + 2_000])
        await conn.writer.drain()
        await asyncio.sleep(0.1)
    reply = (await conn.recv()).decode()
    assert reply.startswith("V1|b|OK"), reply
    await conn.close()


async def test_per_address_limit(small: BrokerProcess) -> None:
    broker = small
    async with _flood(broker.port, 10):  # every one from 127.0.0.2: its whole allowance
        r, w = await _connect(broker.port, "127.0.0.2")
        assert await _closed_within(r, 5), "an 11th connection from one address is refused"
        w.close()
        other = await LineConn.open(broker.port)  # 127.0.0.1 is another client
        assert await other.ask("V1|x|PING|") == "V1|x|OK"
        await other.close()


async def test_a_flood_on_one_protocol_leaves_room_for_the_others(small: BrokerProcess) -> None:
    """60 slots, 8 kept for each of the 4 other listeners (HTTP too): a V1 flood gets 28 and no more."""
    broker = small
    async with _flood(broker.port, 45, sources=6):
        for _ in range(3):  # the V1 listener itself is full
            r, w = await _connect(broker.port, "127.0.0.9")
            assert await _closed_within(r, 5)
            w.close()
        iggy = await legacy_login(broker.iggy_port)  # logged-in Iggy users are not locked out
        await iggy.ping()
        await iggy.close()
        tank = TankConn(*await _connect(broker.tank_port))
        reply = await tank.call(tm.CreateTopic(1, "room", 1, ""))
        assert isinstance(reply, tm.CreateTopicResponse) and reply.error == 0
        await tank.close()
