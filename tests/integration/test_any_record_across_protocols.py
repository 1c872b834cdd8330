"""Any Kafka record crosses bayou exactly: keys of 0 bytes to far past Iggy's 255, empty and null
values (tombstones), headers with empty, null or long values, written and read through the SDK
(whose Iggy transport carries what Iggy cannot as bayou's record envelope) and through V1, Cursus
and TANK. One in-process broker with all four listeners; the blocking SDK runs in threads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from bayou.broker import BrokerConfig
from bayou.client import Client, Consumer, ConsumerRecord, Producer, TopicPartition
from bayou.protocols.cursus.batch import decode_head, decode_messages
from bayou.protocols.iggy import messages as im
from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, decode_chunk, encode_bundle
from bayou.server.app import BayouServer, ServerConfig
from support.brokers import LineConn
from support.cursus import FrameConn, build_batch, envelope, message
from support.iggy import poll, vsr_login
from support.tank import TankConn

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

Headers = list[tuple[str, bytes | None]]
LONG = b"K" * 300
HUGE = bytes(range(256)) * 4000  # a 1 MB key
# (key, value, headers): every shape a Kafka producer may write
RECORDS: list[tuple[bytes | None, bytes | None, Headers]] = [
    (b"k", b"plain", [("h", b"v")]),  # fits Iggy as itself
    (None, b"no key", []),
    (b"", b"empty key", []),
    (LONG, b"long key", []),
    (HUGE, b"huge key", [("h", b"v")]),
    (b"k", None, []),  # tombstone
    (b"k", b"", []),
    (None, None, []),
    (b"k", b"empty header", [("e", b"")]),
    (b"k", b"null header", [("n", None)]),
    (b"k", b"long header", [("l", b"x" * 300), ("ok", b"y")]),
    (b"k", b"long name", [("n" * 300, b"v")]),
    (b"k", b"empty name", [("", b"v")]),
    (b"", b"", [("a", None), ("a", b""), ("a", b"1")]),
]


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


def boot(server: BayouServer) -> str:
    return f"127.0.0.1:{port(server, 'iggy')}"


def sdk_read(server: BayouServer, topic: str, count: int) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    with Consumer(boot(server)) as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        for _ in range(50):
            out += c.poll(timeout_ms=200)
            if len(out) >= count:
                break
    return out


def sdk_write(server: BayouServer, topic: str) -> None:
    with Client(boot(server)) as admin:
        admin.create_topic(topic, 1)
    with Producer(boot(server), linger_ms=5) as p:
        futures = [p.send(topic, v, key=k, headers=h, partition=0) for k, v, h in RECORDS]
        for f in futures:
            f.result(timeout=30)


async def test_sdk_writes_come_back_exactly(server: BayouServer) -> None:
    await asyncio.to_thread(sdk_write, server, "any")
    got = await asyncio.to_thread(sdk_read, server, "any", len(RECORDS))
    assert [(r.key, r.value, list(r.headers)) for r in got] == RECORDS
    assert [r.offset for r in got] == list(range(len(RECORDS)))
    # through the batch API (Arrow, what the Spark source reads) too
    with Client(boot(server)) as c:
        batch = await asyncio.to_thread(c.fetch_arrow, "any", 0, 0)
    assert batch.column("key").to_pylist() == [k for k, _v, _h in RECORDS]
    assert batch.column("value").to_pylist() == [v for _k, v, _h in RECORDS]
    assert [[(h["key"], h["value"]) for h in row] for row in batch.column("headers").to_pylist()] == [
        h for _k, _v, h in RECORDS]


async def test_sdk_writes_read_through_v1_cursus_and_tank(server: BayouServer) -> None:
    await asyncio.to_thread(sdk_write, server, "anyx")
    # Cursus: key and payload of every record (null is empty there: Cursus has no null; its key
    # field is u16-length, so a key is cut at 65,535 bytes)
    c = await FrameConn.open(port(server, "cursus"))
    body = await c.ask(envelope("CONSUME topic=anyx partition=0 offset=0 member=x group=xg batch=100"))
    msgs = decode_messages(body, decode_head(body))
    await c.close()
    assert [(x.key, x.payload) for x in msgs] == [((k or b"")[:0xFFFF], v or b"") for k, v, _h in RECORDS]
    # V1 shows values
    line = await LineConn.open(port(server, "rtes"))
    reply = await line.ask("V1|1|CONSUME|anyx 0 0")
    await line.close()
    assert reply.startswith("V1|1|OK|messages=0:plain,1:no%20key,2:empty%20key,3:long%20key,"), reply
    assert ",5:,6:,7:,8:empty%20header," in reply, reply
    # TANK: key and value (TANK's key is a str8: a longer key is cut at 255 bytes)
    t = await TankConn.open(port(server, "tank"))
    resp = await t.call(tm.Consume(2, (tm.ConsumeTopic("anyx", (tm.ConsumePartition(0, 0, 8 << 20),)),)))
    await t.close()
    assert isinstance(resp, tm.ConsumeResponse)
    part = resp.topics[0].partitions[0]  # type: ignore[union-attr]
    tank = decode_chunk(part.chunk, part.base_seq, sparse_first=part.flags == 0xFE)
    assert [x.value for x in tank] == [v or b"" for _k, v, _h in RECORDS]
    assert [x.key for x in tank] == [k[:255] if k else k for k, _v, _h in RECORDS]


async def test_other_protocols_keys_reach_the_sdk(server: BayouServer) -> None:
    line = await LineConn.open(port(server, "rtes"))
    assert (await line.ask("V1|1|ADMIN_CREATE_TOPIC|keys 1 1")).startswith("V1|1|OK")
    assert (await line.ask(f"V1|2|PRODUCE|keys {LONG.decode()}:v1-long")).startswith("V1|2|OK")
    assert (await line.ask("V1|3|PRODUCE|keys k:v1-short")).startswith("V1|3|OK")
    await line.close()
    c = await FrameConn.open(port(server, "cursus"))
    ack = await c.ask(build_batch("keys", 0, [message("cursus-long", 1, key=b"C" * 1000),
                                              message("cursus-short", 2, key=b"c")]))
    assert b'"OK"' in ack or b"OK" in ack, ack
    await c.close()
    t = await TankConn.open(port(server, "tank"))
    resp = await t.call(tm.Produce(1, (tm.ProduceTopic("keys", (tm.ProduceEntry(0, encode_bundle([
        TankMessage(0, 1_700_000_000_000, b"T" * 255, b"tank-255"),
        TankMessage(0, 1_700_000_000_001, None, b"tank-none")])),)),)))
    await t.close()
    assert isinstance(resp, tm.ProduceResponse) and resp.topics[0].errors == (0,)
    got = await asyncio.to_thread(sdk_read, server, "keys", 6)
    assert [(r.key, r.value) for r in got] == [
        (LONG, b"v1-long"), (b"k", b"v1-short"), (b"C" * 1000, b"cursus-long"), (b"c", b"cursus-short"),
        (b"T" * 255, b"tank-255"), (None, b"tank-none")]


async def test_records_iggy_can_carry_stay_native(server: BayouServer) -> None:
    """Only what Iggy cannot carry is enveloped: an Iggy client sees the rest as before."""
    await asyncio.to_thread(sdk_write, server, "native")
    iggy = await vsr_login(port(server, "iggy"))
    polled = await iggy.call(poll("default", "native", 0, kind=im.PollingKind.FIRST, count=2))
    await iggy.close()
    first, second = polled.messages[:2]
    assert first.payload == b"plain"
    assert {(h.key, h.value) for h in first.headers} == {(b"bayou.key", b"k"), (b"h", b"v")}
    assert second.payload == b"no key" and second.headers == ()
