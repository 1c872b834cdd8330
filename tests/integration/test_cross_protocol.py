"""One log, two protocols: what Cursus produces V1 reads, what V1 produces Cursus reads, and the
Cursus-only message fields survive storage (as ``cursus.*`` record headers, records/cursus.py).

The broker runs in the test's event loop with both listeners; the blocking clients (the published
``cursus`` client and bayou's V1 ``RtesClient``) run in worker threads.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cursus import Consumer, Producer
from cursus.config import ConsumerConfig, ProducerConfig
from cursus.types import Acks, ConsumerMode, Message

from bayou.broker import BrokerConfig
from bayou.client.rtes import RtesClient
from bayou.protocols.cursus.batch import decode_head, decode_messages, encode_batch, encode_messages
from bayou.records.batch import Record, decode_records, iter_batches
from bayou.records.cursus import CursusMessage
from bayou.server.app import BayouServer, ServerConfig
from support.cursus import FrameConn, envelope
from support.oracles import fnv1a_32

pytestmark = pytest.mark.timeout(120)



@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[BayouServer]:
    cfg = ServerConfig(broker=BrokerConfig(data_dir=tmp_path / "data"),
                       listeners={"rtes": ("127.0.0.1", 0), "cursus": ("127.0.0.1", 0)},
                       advertised_host="127.0.0.1", shutdown_grace_s=2.0)
    srv = BayouServer(cfg)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


def ports(server: BayouServer) -> tuple[int, int]:
    return server.listeners["rtes"].port, server.listeners["cursus"].port


async def cursus_command(port: int, text: str) -> str:
    c = await FrameConn.open(port)
    try:
        return await c.command(text)
    finally:
        await c.close()


async def cursus_read(port: int, topic: str, partition: int) -> list[CursusMessage]:
    """Every record of a partition through Cursus CONSUME (a group that never commits)."""
    c = await FrameConn.open(port)
    out: list[CursusMessage] = []
    try:
        while True:
            body = await c.ask(envelope(f"CONSUME topic={topic} partition={partition} offset={len(out)} "
                                        f"member=xp group=xp-reader batch=100000"))
            assert body[:2] == b"\xba\x7c", f"CONSUME answered {body[:200]!r}"
            head = decode_head(body)
            msgs = decode_messages(body, head)
            if not msgs:
                return out
            out += msgs
    finally:
        await c.close()


def v1_read(port: int, topic: str, partition: int) -> list[tuple[int, str]]:
    """Every record of a partition through V1 CONSUME: (offset, value)."""
    out: list[tuple[int, str]] = []
    with RtesClient("127.0.0.1", port) as c:
        while True:
            records, hw = c.consume(topic, partition, len(out))
            if not records:
                return out
            out += records
            if len(out) > hw:
                return out


async def stored_records(server: BayouServer, topic: str, partition: int) -> list[Record]:
    """The partition's records decoded from the broker's own fetch with decode_records."""
    res = await server.broker.fetch(topic, partition, 0, max_bytes=64 << 20, upto_log_end=True)
    return [r for pos, _h in iter_batches(res.data) for r in decode_records(res.data, pos)]


def segment_records(data_dir: Path, topic: str, partition: int) -> list[Record]:
    """The same, straight from the segment files on disk."""
    files = sorted((data_dir / "topics" / topic / str(partition)).glob("*.log"))
    assert files, f"no segment files for {topic}/{partition} under {data_dir}"
    out: list[Record] = []
    for f in files:
        data = f.read_bytes()
        out += [r for pos, _h in iter_batches(data) for r in decode_records(data, pos)]
    return out


# -- Cursus -> V1 ------------------------------------------------------------------------------


async def test_published_client_batches_are_readable_through_v1(server: BayouServer) -> None:
    v1, cursus = ports(server)
    topic, n = "xp-client", 3
    keys = [f"user-{i}" for i in range(9)]
    values = {f"cx-{i}-héllo-✓": (keys[i % 9] if i < 60 else "") for i in range(90)}

    def produce() -> int:
        with Producer(ProducerConfig(topic=topic, brokers=[f"127.0.0.1:{cursus}"], partitions=n,
                                     acks=Acks.ONE, linger_ms=5)) as p:
            for value, key in values.items():
                p.send(value, key=key)
            p.flush()
            return p.unique_ack_count

    assert await asyncio.to_thread(produce) == 90
    seen: dict[str, int] = {}
    for part in range(n):
        through_v1 = await asyncio.to_thread(v1_read, v1, topic, part)
        through_cursus = await cursus_read(cursus, topic, part)
        assert through_v1 == [(m.offset, m.payload.decode()) for m in through_cursus], \
            f"partition {part}: V1 and Cursus disagree"
        for _off, value in through_v1:
            assert value not in seen, f"{value} stored twice"
            seen[value] = part
            if values[value]:
                assert part == fnv1a_32(values[value].encode()) % n
    assert set(seen) == set(values)

    # V1 routes a key with the same FNV-1a 32 hash as the Cursus client: one key, one partition
    def v1_produce() -> int:
        with RtesClient("127.0.0.1", v1) as c:
            return c.produce(topic, "user-4", "from-v1").partition
    assert await asyncio.to_thread(v1_produce) == next(p for v, p in seen.items() if values[v] == "user-4")


async def test_publish_is_readable_through_v1(server: BayouServer) -> None:
    v1, cursus = ports(server)
    topic = "xp-publish"
    assert (await cursus_command(cursus, f"CREATE topic={topic} partitions=3")).startswith("OK ")
    acks = []
    for i in range(6):
        reply = await cursus_command(
            cursus, f"PUBLISH topic={topic} acks=1 producerId=pub seqNum={i + 1} epoch=9 message=plain-{i}")
        acks.append(json.loads(reply))
    assert [a["status"] for a in acks] == ["OK"] * 6
    keyed = json.loads(await cursus_command(
        cursus, f"PUBLISH topic={topic} acks=all producerId=pub key=alice message=keyed:alice"))
    pinned = json.loads(await cursus_command(
        cursus, f"PUBLISH topic={topic} acks=-1 producerId=pub partition=2 message=pinned"))
    assert keyed["status"] == pinned["status"] == "OK", (keyed, pinned)

    by_part = {p: await asyncio.to_thread(v1_read, v1, topic, p) for p in range(3)}
    values = {v: p for p, recs in by_part.items() for _o, v in recs}
    assert sorted(values) == sorted([f"plain-{i}" for i in range(6)] + ["keyed:alice", "pinned"])
    assert [values[f"plain-{i}"] for i in range(6)] == [0, 1, 2, 0, 1, 2], \
        "unkeyed PUBLISH is not round robin"
    assert values["keyed:alice"] == fnv1a_32(b"alice") % 3
    assert values["pinned"] == 2
    # the Cursus fields of PUBLISH are kept for Cursus readers
    msgs = [m for p in range(3) for m in await cursus_read(cursus, topic, p)]
    plain0 = next(m for m in msgs if m.payload == b"plain-0")
    assert (plain0.producer_id, plain0.seq_num, plain0.epoch) == (b"pub", 1, 9)
    assert next(m for m in msgs if m.payload == b"keyed:alice").key == b"alice"


# -- V1 -> Cursus ------------------------------------------------------------------------------


async def test_v1_records_are_readable_through_cursus(server: BayouServer) -> None:
    v1, cursus = ports(server)
    topic, n = "xp-v1", 3
    sent = [(f"k{i % 7}", f"v1-{i}-ünïcode:colon") for i in range(40)]

    def produce() -> list[tuple[int, int]]:
        with RtesClient("127.0.0.1", v1) as c:
            c.create_topic(topic, n)
            return [(r.partition, r.offset) for r in (c.produce(topic, k, v) for k, v in sent)]

    placed = await asyncio.to_thread(produce)
    expected = {(p, off): kv for (p, off), kv in zip(placed, sent, strict=True)}
    got = {}
    for part in range(n):
        for m in await cursus_read(cursus, topic, part):
            got[(part, m.offset)] = (m.key.decode(), m.payload.decode())
            assert (m.producer_id, m.seq_num, m.epoch, m.event_type, m.metadata) == (b"", 0, 0, b"", b""), m
    assert got == expected

    # STREAM pushes the same records (converted from the V1 format) without a request
    c = await FrameConn.open(cursus)
    try:
        await c.send(envelope(f"STREAM topic={topic} partition={placed[0][0]} group=xp-stream offset=0"))
        body = await c.recv(timeout=5)
        while not body:  # skip keepalives
            body = await c.recv(timeout=6)
        head = decode_head(body)
        streamed = decode_messages(body, head)
        assert [(head.partition, m.offset, (m.key.decode(), m.payload.decode())) for m in streamed] == [
            (head.partition, off, expected[(head.partition, off)])
            for p, off in sorted(expected) if p == head.partition]
    finally:
        await c.close()

    # the published consumer sees key and payload as V1 wrote them
    def consume() -> list[Message]:
        cons = Consumer(ConsumerConfig(topic=topic, brokers=[f"127.0.0.1:{cursus}"], group_id="xp-group",
                                       mode=ConsumerMode.POLLING))
        out: list[Message] = []
        watchdog = threading.Timer(20, cons.close)
        watchdog.start()
        try:
            deadline = time.monotonic() + 20
            for m in cons:
                out.append(m)
                if len({(x.partition, x.offset) for x in out}) >= len(sent) or time.monotonic() > deadline:
                    break
        finally:
            cons.close()
            watchdog.cancel()
        return out

    msgs = await asyncio.to_thread(consume)
    assert {(m.partition, m.offset): (m.key, m.payload) for m in msgs} == expected


# -- Cursus fields through storage -------------------------------------------------------------


def full_messages() -> list[CursusMessage]:
    return [
        CursusMessage(b"order-created", 0, 11, b"py-7f00", b"order-1", 1_700_000_123, b"OrderCreated", 3, 1,
                      b'{"trace":"a1"}'),
        CursusMessage(b"\x00\xffbinary\n", 0, 12, b"py-7f00", b"", 1_700_000_123, b"", 0, 0, b""),
        CursusMessage("ünïcode ✓ with spaces".encode(), 0, 13, b"py-7f00", "ключ".encode(), -5,
                      b"Evt", 4_294_967_295, 2**64 - 1, b"m" * 300),
    ]


async def test_cursus_fields_survive_storage_and_appear_as_headers(server: BayouServer,
                                                                  tmp_path: Path) -> None:
    _v1, cursus = ports(server)
    topic = "xp-fields"
    msgs = full_messages()
    c = await FrameConn.open(cursus)
    try:
        assert (await c.command(f"CREATE topic={topic} partitions=2", topic="admin")).startswith("OK ")
        ack = json.loads(await c.ask(encode_batch(topic, 1, encode_messages(msgs), 3, 11, 13, "1")))
        assert ack == {"status": "OK", "last_offset": 2, "producer_epoch": -5, "producer_id": "py-7f00",
                       "seq_start": 11, "seq_end": 13}
    finally:
        await c.close()

    # Cursus -> storage -> Cursus: every field back, offsets assigned
    back = await cursus_read(cursus, topic, 1)
    want = [CursusMessage(m.payload, i, m.seq_num, m.producer_id, m.key, m.epoch, m.event_type,
                          m.schema_version, m.aggregate_version, m.metadata) for i, m in enumerate(msgs)]
    assert back == want

    # storage: the common record model carries them as cursus.* headers
    for records in (await stored_records(server, topic, 1), segment_records(tmp_path / "data", topic, 1)):
        assert [(r.offset, r.key, r.value) for r in records] == [
            (0, b"order-1", b"order-created"), (1, None, b"\x00\xffbinary\n"),
            (2, "ключ".encode(), "ünïcode ✓ with spaces".encode())]
        assert [dict(r.headers) for r in records] == [
            {"cursus.producer_id": b"py-7f00", "cursus.seq": b"11", "cursus.epoch": b"1700000123",
             "cursus.event_type": b"OrderCreated", "cursus.schema_version": b"3",
             "cursus.aggregate_version": b"1", "cursus.metadata": b'{"trace":"a1"}'},
            {"cursus.producer_id": b"py-7f00", "cursus.seq": b"12", "cursus.epoch": b"1700000123"},
            {"cursus.producer_id": b"py-7f00", "cursus.seq": b"13", "cursus.epoch": b"-5",
             "cursus.event_type": b"Evt", "cursus.schema_version": b"4294967295",
             "cursus.aggregate_version": b"18446744073709551615", "cursus.metadata": b"m" * 300},
        ]


async def test_cursus_fields_survive_a_restart(tmp_path: Path) -> None:
    """Written through Cursus, read back through Cursus by a fresh broker on the same data."""
    data = tmp_path / "data"
    msgs = full_messages()
    for round_ in range(2):
        cfg = ServerConfig(broker=BrokerConfig(data_dir=data), listeners={"cursus": ("127.0.0.1", 0)},
                           advertised_host="127.0.0.1", shutdown_grace_s=2.0)
        srv = BayouServer(cfg)
        await srv.start()
        try:
            port = srv.listeners["cursus"].port
            if round_ == 0:
                assert (await cursus_command(port, "CREATE topic=xp-restart partitions=1")).startswith("OK ")
                c = await FrameConn.open(port)
                try:
                    body = encode_batch("xp-restart", 0, encode_messages(msgs), 3, 11, 13, "-1")
                    assert json.loads(await c.ask(body))["status"] == "OK"
                finally:
                    await c.close()
            back = await cursus_read(port, "xp-restart", 0)
            assert [(m.seq_num, m.producer_id, m.key, m.epoch, m.event_type, m.schema_version,
                     m.aggregate_version, m.metadata, m.payload) for m in back] == [
                (m.seq_num, m.producer_id, m.key, m.epoch, m.event_type, m.schema_version,
                 m.aggregate_version, m.metadata, m.payload) for m in msgs], f"round {round_}"
        finally:
            await srv.stop()
