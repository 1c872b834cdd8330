"""Records flow TANK <-> V1 <-> Cursus <-> Iggy through one log (issue 5): keys, values and
timestamps intact. One in-process broker with all four listeners on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.support.brokers import LineConn
from tests.support.cursus import FrameConn, build_batch, envelope, message
from tests.support.iggy import poll, send, vsr_login
from tests.support.tank import TankConn

from bayou.broker import BrokerConfig
from bayou.protocols.cursus.batch import decode_head, decode_messages
from bayou.protocols.iggy import messages as im
from bayou.protocols.tank import messages as m
from bayou.protocols.tank.bundles import TankMessage, decode_chunk, encode_bundle
from bayou.server.app import BayouServer, ServerConfig

pytestmark = pytest.mark.asyncio
TS = 1_650_000_000_123


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[BayouServer]:
    cfg = ServerConfig(broker=BrokerConfig(data_dir=tmp_path / "data"),
                       listeners={name: ("127.0.0.1", 0) for name in ("rtes", "cursus", "iggy", "tank")},
                       advertised_host="127.0.0.1", shutdown_grace_s=2.0)
    srv = BayouServer(cfg)
    await srv.start()
    yield srv
    await srv.stop()


def port(server: BayouServer, name: str) -> int:
    return server.listeners[name].port


async def tank_produce(server: BayouServer, topic: str, msgs: list[TankMessage]) -> None:
    c = await TankConn.open(port(server, "tank"))
    resp = await c.call(m.Produce(1, (m.ProduceTopic(topic, (m.ProduceEntry(0, encode_bundle(msgs)),)),)))
    assert isinstance(resp, m.ProduceResponse) and resp.topics[0].errors == (0,)
    await c.close()


async def tank_read(server: BayouServer, topic: str) -> list[TankMessage]:
    c = await TankConn.open(port(server, "tank"))
    out: list[TankMessage] = []
    seq = 0
    while True:
        resp = await c.call(m.Consume(2, (m.ConsumeTopic(topic, (m.ConsumePartition(0, seq, 1 << 20),)),)))
        assert isinstance(resp, m.ConsumeResponse)
        t = resp.topics[0]
        assert isinstance(t, m.ConsumeTopicResult)
        p = t.partitions[0]
        assert p.flags in (0, 0xFE), p
        if not p.chunk:
            break
        got = [x for x in decode_chunk(p.chunk, p.base_seq, sparse_first=p.flags == 0xFE) if x.seq >= seq]
        out += got
        seq = got[-1].seq + 1
    await c.close()
    return out


async def test_tank_to_v1_cursus_and_iggy(server: BayouServer) -> None:
    line = await LineConn.open(port(server, "rtes"))
    assert (await line.ask("V1|1|ADMIN_CREATE_TOPIC|orders 1 1")).startswith("V1|1|OK")
    await tank_produce(server, "orders", [TankMessage(0, TS, b"user1", b"created"),
                                         TankMessage(0, TS + 5, None, b"paid")])
    assert (await line.ask("V1|2|CONSUME|orders 0 0")).startswith("V1|2|OK|messages=0:created,1:paid")
    await line.close()
    c = await FrameConn.open(port(server, "cursus"))
    body = await c.ask(envelope("CONSUME topic=orders partition=0 offset=0 member=x group=xg batch=100"))
    msgs = decode_messages(body, decode_head(body))
    assert [(x.offset, x.key, x.payload) for x in msgs] == [(0, b"user1", b"created"), (1, b"", b"paid")]
    await c.close()
    iggy = await vsr_login(port(server, "iggy"))
    polled = await iggy.call(poll("default", "orders", 0, kind=im.PollingKind.FIRST))
    assert [(x.offset, x.payload, x.timestamp) for x in polled.messages] == [
        (0, b"created", TS * 1000), (1, b"paid", (TS + 5) * 1000)]
    await iggy.close()


async def test_v1_cursus_and_iggy_to_tank(server: BayouServer) -> None:
    line = await LineConn.open(port(server, "rtes"))
    assert (await line.ask("V1|1|ADMIN_CREATE_TOPIC|mixed 1 1")).startswith("V1|1|OK")
    assert (await line.ask("V1|2|PRODUCE|mixed k1:from-v1 acks=1")).startswith("V1|2|OK")
    await line.close()
    c = await FrameConn.open(port(server, "cursus"))
    await c.send(build_batch("mixed", 0, [message("from-cursus", key="k2")]))
    assert b"ERROR" not in await c.recv()
    await c.close()
    iggy = await vsr_login(port(server, "iggy"))
    await iggy.call(im.CreateStream("shop"))
    await iggy.call(im.CreateTopic(im.Identifier("shop"), "events", 1))
    await iggy.call(send("shop", "events", 0, [b"from-iggy"]))
    await iggy.close()
    got = await tank_read(server, "mixed")
    assert [(x.seq, x.key, x.value) for x in got] == [(1, b"k1", b"from-v1"), (2, b"k2", b"from-cursus")]
    assert all(x.timestamp > 1_600_000_000_000 for x in got)
    iggy_topic = await tank_read(server, "shop.events")  # Iggy's topic, by its bayou name
    assert [(x.seq, x.value) for x in iggy_topic] == [(1, b"from-iggy")]
