"""The TANK listener over real sockets: produce and consume semantics (sparse seqs, boundaries,
long polls), zero-copy serving of stored bundles, records crossing to and from the V1 protocol,
bad input (error codes, closed connections, nothing stored changes) and restarts."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.support.brokers import LineConn
from tests.support.tank import PING, TankConn, start_tank, tank_port

import bayou.server.tank as tank_server
from bayou.protocols.tank import codec
from bayou.protocols.tank import messages as m
from bayou.protocols.tank.bundles import TankMessage, decode_chunk, encode_bundle
from bayou.records.batch import encode_batch
from bayou.records.compression import Compression
from bayou.records.model import Record
from bayou.server import zerocopy
from bayou.server.app import BayouServer
from bayou.server.tank_store import FileRange, read_chunk

pytestmark = pytest.mark.asyncio
U64 = 2**64 - 1


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[BayouServer]:
    srv = await start_tank(tmp_path / "data", with_rtes=True)
    yield srv
    await srv.stop()


async def conn(server: BayouServer) -> TankConn:
    return await TankConn.open(tank_port(server))


def bundle(*values: bytes, ts: int = 1_700_000_000_000, keys: tuple[bytes | None, ...] = ()) -> bytes:
    msgs = [TankMessage(0, ts, keys[i] if i < len(keys) else None, v) for i, v in enumerate(values)]
    return encode_bundle(msgs)


def sparse(*seqs: int) -> bytes:
    return encode_bundle([TankMessage(s, 1, None, b"s%d" % s) for s in seqs], sparse=True)


async def produce(c: TankConn, topic: str, part: int, b: bytes, *, seq: int = 0) -> int:
    resp = await c.call(m.Produce(1, (m.ProduceTopic(topic, (m.ProduceEntry(part, b, seq),)),),
                                  with_seqnum=bool(seq)))
    assert isinstance(resp, m.ProduceResponse)
    group = resp.topics[0]
    return group.topic_error if group.topic_error is not None else group.errors[0]


async def consume(c: TankConn, topic: str, part: int, seq: int, *, fetch: int = 1 << 20, max_wait: int = 0,
                  min_bytes: int = 0) -> m.ConsumePartitionResult:
    resp = await c.call(m.Consume(7, (m.ConsumeTopic(topic, (m.ConsumePartition(part, seq, fetch),)),),
                                  max_wait=max_wait, min_bytes=min_bytes))
    assert isinstance(resp, m.ConsumeResponse)
    topic_result = resp.topics[0]
    assert isinstance(topic_result, m.ConsumeTopicResult)
    return topic_result.partitions[0]


def messages(p: m.ConsumePartitionResult) -> list[tuple[int, bytes]]:
    return [(x.seq, x.value) for x in decode_chunk(p.chunk, p.base_seq, sparse_first=p.flags == 0xFE)]


async def create(c: TankConn, topic: str, partitions: int = 1, config: str = "") -> int:
    resp = await c.call(m.CreateTopic(1, topic, partitions, config))
    assert isinstance(resp, m.CreateTopicResponse)
    return resp.error


async def test_ping_on_accept_and_a_full_round_trip(server: BayouServer) -> None:
    c = await conn(server)
    assert await c.read_exactly(5) == PING
    assert await create(c, "events", 2) == 0
    assert await produce(c, "events", 0, bundle(b"a", b"b", b"c")) == 0
    assert await produce(c, "events", 0, bundle(b"d")) == 0
    p = await consume(c, "events", 0, 0)
    assert (p.flags, p.base_seq, p.hwmark) == (0, 1, 4)
    assert messages(p) == [(1, b"a"), (2, b"b"), (3, b"c"), (4, b"d")]
    p = await consume(c, "events", 0, 3)  # starts at the bundle holding seq 3
    assert p.base_seq == 1 and messages(p)[0] == (1, b"a")
    await c.close()


async def test_sparse_bundles_and_seq_rules(server: BayouServer) -> None:
    c = await conn(server)
    await create(c, "sp")
    assert await produce(c, "sp", 0, sparse(100, 101, 102, 103), seq=100) == 0
    assert await produce(c, "sp", 0, sparse(200, 203, 206, 209)) == 0  # sparse through plain 0x1
    assert await produce(c, "sp", 0, sparse(150)) == 0xA  # at or below the high water mark
    assert await produce(c, "sp", 0, bundle(b"plain")) == 0  # continues at 210
    p = await consume(c, "sp", 0, 0)
    assert p.flags == 0xFE and p.hwmark == 210
    assert messages(p) == [(100, b"s100"), (101, b"s101"), (102, b"s102"), (103, b"s103"), (200, b"s200"),
                           (203, b"s203"), (206, b"s206"), (209, b"s209"), (210, b"plain")]
    p = await consume(c, "sp", 0, 150)  # in a gap: the next bundle
    assert messages(p)[0] == (200, b"s200")
    p = await consume(c, "sp", 0, 5)  # below the first available
    assert (p.flags, p.base_seq, p.hwmark, p.first_available) == (1, 0, 210, 100)
    p = await consume(c, "sp", 0, 500)  # past the end
    assert (p.flags, p.first_available) == (1, 100)
    resp = await c.call(m.DiscoverPartitions(3, "sp"))
    assert isinstance(resp, m.DiscoverPartitionsResponse)
    assert [(d.first_available, d.hwmark) for d in resp.partitions] == [(100, 210)]
    await c.close()


async def test_tank_bundles_are_served_from_the_file(server: BayouServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    c = await conn(server)
    await create(c, "zc")
    for i in range(5):  # ~100 KB bundles are sent from the file (small ones are gathered in memory)
        values = (b"v%d-%d" % (i, j) + os.urandom(1000) for j in range(100))
        assert await produce(c, "zc", 0, bundle(*values)) == 0
    chunk = await read_chunk(server.broker, "zc", 0, 1, 1 << 20)
    assert chunk.pieces and all(isinstance(p, FileRange) for p in chunk.pieces)
    sent: list[int] = []
    real = zerocopy.send_ranges

    async def counting(writer, fd, ranges, executor=None):  # type: ignore[no-untyped-def]
        sent.append(sum(n for _o, n in ranges))
        return await real(writer, fd, ranges, executor)

    monkeypatch.setattr(zerocopy, "send_ranges", counting)
    p = await consume(c, "zc", 0, 1)
    assert len(messages(p)) == 500 and sum(sent) == len(p.chunk)
    await c.close()


async def test_records_cross_between_tank_and_v1(server: BayouServer) -> None:
    c = await conn(server)
    line = await LineConn.open(server.listeners["rtes"].port)
    assert (await line.ask("V1|1|ADMIN_CREATE_TOPIC|mixed 1 1")).startswith("V1|1|OK")
    assert (await line.ask("V1|2|PRODUCE|mixed user1:hello acks=1")).startswith("V1|2|OK")
    assert await produce(c, "mixed", 0, bundle(b"from-tank", keys=(b"k9",), ts=1_600_000_000_123)) == 0
    p = await consume(c, "mixed", 0, 0)
    got = decode_chunk(p.chunk, p.base_seq, sparse_first=False)
    assert [(x.seq, x.key, x.value) for x in got] == [(1, b"user1", b"hello"), (2, b"k9", b"from-tank")]
    assert got[1].timestamp == 1_600_000_000_123
    reply = await line.ask("V1|3|CONSUME|mixed 0 0")
    assert reply.startswith("V1|3|OK|messages=0:hello") and "1:from-tank" in reply, reply
    await line.close()
    await c.close()


async def test_long_poll_wakes_on_data_and_times_out(server: BayouServer) -> None:
    c = await conn(server)
    await create(c, "lp")
    t0 = time.monotonic()
    p = await consume(c, "lp", 0, U64, max_wait=100)
    elapsed = time.monotonic() - t0
    assert (p.flags, p.base_seq, p.hwmark, len(p.chunk)) == (0, 0, 0, 0)
    assert 0.3 <= elapsed < 2.0  # 100 ms becomes at least 320 ms (§5.6)
    waiter = asyncio.create_task(consume(c, "lp", 0, U64, max_wait=10_000, min_bytes=100))
    other = await conn(server)
    await asyncio.sleep(0.2)
    assert await produce(other, "lp", 0, bundle(b"small")) == 0  # below min bytes: still waiting
    await asyncio.sleep(0.3)
    assert not waiter.done()
    assert await produce(other, "lp", 0, bundle(b"x" * 200)) == 0
    p = await asyncio.wait_for(waiter, 5)
    assert p.base_seq == 1 and messages(p) == [(1, b"small"), (2, b"x" * 200)]
    await other.close()
    await c.close()


async def test_bad_bundles_get_error_10_and_store_nothing(server: BayouServer) -> None:
    c = await conn(server)
    await create(c, "bad")
    assert await produce(c, "bad", 0, bundle(b"good")) == 0
    good = bundle(b"one", b"two", b"three")
    cases = [
        good[:-2],  # truncated message set
        b"\x0c" + good[1:8],  # counts more messages than the payload holds
        b"\x00\xff\xff\xff\xff\xff\x01",  # invalid varint count
        b"\x05\x10garbage that is not snappy",  # Snappy garbage
        b"\x00\x00",  # count 0
        b"\x84" + good[1:],  # flag bit 7
        good + b"\x00",  # bytes after the last message
    ]
    for b in cases:
        assert await produce(c, "bad", 0, b) == 0xA, b
    assert await produce(c, "nosuch", 0, good) == 0xFF
    assert await produce(c, "bad", 3, good) == 0x1
    p = await consume(c, "bad", 0, 0)
    assert messages(p) == [(1, b"good")] and p.hwmark == 1
    await c.close()


@pytest.mark.parametrize("frame", [
    b"\x04\x02\x00\x00\x00\x01\x00",  # obsolete RegReplica
    b"\x42\x00\x00\x00\x00",  # unknown message id
    b"\x01\x03\x00\x00\x00\x02\x00\x01",  # truncated produce
    b"\x02\x00\x00\x00\x20",  # declared payload over 256 MiB
    # DiscoverPartitions listing 65,536 ids: its reply counts in a u16 (the work was done, then
    # its reply failed to encode)
    b"\x06" + (9 + 2 * 65_536).to_bytes(4, "little") + b"\x00" * 4 + b"\x04keep" + b"\x00\x00" * 65_536,
])
async def test_malformed_frames_close_only_that_connection(server: BayouServer, frame: bytes) -> None:
    c = await conn(server)
    await create(c, "keep")
    assert await produce(c, "keep", 0, bundle(b"kept")) == 0
    bad = await conn(server)
    await bad.send(frame)
    assert await bad.is_closed()
    p = await consume(c, "keep", 0, 0)
    assert messages(p) == [(1, b"kept")]
    await c.close()


async def test_names_config_status_and_topology(server: BayouServer) -> None:
    c = await conn(server)
    assert await create(c, "bad.name") == 10
    assert await create(c, "zero", 0) == 10
    assert await create(c, "cfg", 2, "log.segment.bytes=1\n") == 4
    assert await create(c, "cfg", 2, "log.retention.secs=1h\nretention.segments.count=3\n") == 0
    assert await create(c, "cfg", 2) == 1
    assert server.broker.describe_topic("cfg").config["retention.ms"] == "3600000"
    status = await c.call(m.Status(5))
    assert isinstance(status, m.StatusResponse)
    assert (status.topics, status.partitions, status.version) == (1, 2, 400)
    topics = await c.call(m.DiscoverTopics(6))
    assert isinstance(topics, m.DiscoverTopicsResponse)
    assert [(t.name, t.partitions) for t in topics.topics] == [("cfg", 2)]
    topo = await c.call(m.DiscoverTopology(7))
    assert isinstance(topo, m.DiscoverTopologyResponse) and topo.cluster_name is None
    await c.close()


async def test_sparse_data_survives_a_restart(tmp_path: Path) -> None:
    srv = await start_tank(tmp_path / "data")
    c = await TankConn.open(tank_port(srv))
    await create(c, "keep")
    assert await produce(c, "keep", 0, sparse(1000, 1005)) == 0
    await c.close()
    await srv.stop()
    srv = await start_tank(tmp_path / "data")
    c = await TankConn.open(tank_port(srv))
    p = await consume(c, "keep", 0, 0)
    assert messages(p) == [(1000, b"s1000"), (1005, b"s1005")] and p.hwmark == 1005
    assert await produce(c, "keep", 0, bundle(b"next")) == 0
    assert messages(await consume(c, "keep", 0, 1006)) == [(1006, b"next")]
    await c.close()
    await srv.stop()


async def test_a_connection_that_never_sends_is_closed(server: BayouServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server.listeners["tank"].limits, "idle_timeout_s", 0.3)  # TANK: about 16 s
    idle = await conn(server)
    busy = await conn(server)
    await create(busy, "idle")
    assert await idle.is_closed(timeout=3)
    await asyncio.sleep(0.5)
    assert await create(busy, "idle") == 1  # a connection that has sent a request stays open
    await busy.close()


# -- the bound on one consume answer (server/tank.py CONSUME_MAX_BYTES) ------------------------

CAP = 4096


def kafka_batch(i: int) -> bytes:
    """A batch stored in Kafka's format (as a Kafka, V1 or Cursus producer stores it): a TANK
    consumer is sent it converted, bytes built in memory."""
    return encode_batch([Record(b"%05d" % i + b"k" * 995, None, 1_700_000_000_000)])


def inflating(i: int) -> bytes:
    """A gzip batch of 10 records of 2,000 zero bytes: a few hundred bytes stored, about 20 KB
    sent to a TANK consumer."""
    return encode_batch([Record(b"%05d" % (i * 10 + j) + bytes(1995), None, 1_700_000_000_000)
                         for j in range(10)], compression=Compression.GZIP)


def seqs(p: m.ConsumePartitionResult) -> list[int]:
    return [x.seq for x in decode_chunk(p.chunk, p.base_seq, sparse_first=p.flags == 0xFE)]


async def test_a_consume_listing_a_partition_many_times_is_answered_within_the_bound(
        server: BayouServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """One Consume may list 65,025 entries, each asking for 64 MiB, and chunks converted from other
    protocols' records are held in memory: 200 entries of one partition got its whole 40 KB each
    (8 MB for one request). Past the bound the entries get an empty chunk, with the hwmark above the
    seq they asked for, and the client asks again: it reads every record once, in order."""
    monkeypatch.setattr(tank_server, "CONSUME_MAX_BYTES", CAP)
    await server.broker.create_topic("conv", 1)
    for i in range(40):
        await server.broker.produce("conv", 0, kafka_batch(i))
    c = await conn(server)
    resp = await c.call(m.Consume(7, (m.ConsumeTopic("conv", tuple(m.ConsumePartition(0, 1, 1 << 20)
                                                                   for _ in range(200))),)))
    assert isinstance(resp, m.ConsumeResponse)
    (topic,) = resp.topics
    assert isinstance(topic, m.ConsumeTopicResult)
    first, *rest = topic.partitions
    assert CAP <= len(first.chunk) < CAP + 1100  # up to the first bundle boundary past the bound
    assert seqs(first) == list(range(1, len(seqs(first)) + 1))
    assert all((p.flags, p.base_seq, p.hwmark, p.chunk) == (0, 1, 40, b"") for p in rest)
    seq, seen, answers = 1, [], 0
    while seq <= 40:  # a consumer going on from where each answer stopped
        p = await consume(c, "conv", 0, seq)
        got = messages(p)
        assert got and got[0][0] == seq and len(p.chunk) < CAP + 1100
        seen += [int(v[:5]) for _s, v in got]
        seq = got[-1][0] + 1
        answers += 1
    assert seen == list(range(40)) and answers >= 40 * 1000 // (CAP + 1100)
    await c.close()


async def test_a_converted_chunk_ends_at_the_fetch_size_in_bytes_sent(server: BayouServer) -> None:
    """A fetch size bounded the stored bytes read, not the bytes converted from them: compressed
    batches of another protocol, under 4 KiB stored, were all sent decompressed (20 KB each)."""
    await server.broker.create_topic("gz", 1)
    for i in range(30):
        await server.broker.produce("gz", 0, inflating(i))
    chunk = await read_chunk(server.broker, "gz", 0, 1, CAP)
    try:
        assert chunk.next_seq == 11 and CAP <= chunk.length < 21_000  # one batch: it passes the size
        data = b"".join(p for p in chunk.pieces if isinstance(p, bytes))
        assert [x.seq for x in decode_chunk(data, chunk.base_seq, sparse_first=False)] == list(range(1, 11))
    finally:
        chunk.release()
    c = await conn(server)
    seq = 1
    while seq <= 300:
        got = messages(await consume(c, "gz", 0, seq, fetch=CAP))
        assert [s for s, _v in got] == list(range(seq, seq + 10))
        seq += 10
    await c.close()


async def test_a_long_poll_woken_past_the_bound_sends_the_rest_on_the_next_consume(
        server: BayouServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long poll woken by appends to many partitions read each one's new bytes whole (up to 64
    MiB each). Past the bound the others say "nothing new" with the hwmark of when the wait began,
    so a tail consumer (it goes on at hwmark + 1) asks for them again and misses nothing."""
    monkeypatch.setattr(tank_server, "CONSUME_MAX_BYTES", CAP)
    c = await conn(server)
    assert await create(c, "lpb", 2) == 0
    assert await produce(c, "lpb", 1, bundle(b"old")) == 0  # partition 1 at hwmark 1
    poll = m.Consume(9, (m.ConsumeTopic("lpb", (m.ConsumePartition(0, U64, 1 << 20),
                                                 m.ConsumePartition(1, U64, 1 << 20))),),
                     max_wait=10_000, min_bytes=1 << 30)
    small = m.Produce(2, (m.ProduceTopic("lpb", (m.ProduceEntry(1, bundle(b"p1-new")),)),))
    value = os.urandom(CAP)  # incompressible: the bundle is as large as its value
    big = m.Produce(3, (m.ProduceTopic("lpb", (m.ProduceEntry(0, bundle(value)),)),))
    # one write: the consume waits at both ends, then the small append (below min bytes) and the
    # large one (past the bound) arrive
    await c.send(b"".join(bytes([rid]) + len(body).to_bytes(4, "little") + body
                          for rid, body in map(codec.encode_request, (poll, small, big))))
    frames = [await c.frame(timeout=5.0) for _ in range(3)]
    (answer,) = [codec.decode_response(rid, body, request=poll) for rid, body in frames if rid == 0x2]
    assert isinstance(answer, m.ConsumeResponse)
    (topic,) = answer.topics
    assert isinstance(topic, m.ConsumeTopicResult)
    p0, p1 = topic.partitions
    assert messages(p0) == [(1, value)] and p0.hwmark == 1
    assert (p1.chunk, p1.hwmark) == (b"", 1)  # not sent: the hwmark of when the wait began
    p = await consume(c, "lpb", 1, p1.hwmark + 1)  # what a tail consumer asks next
    assert messages(p) == [(2, b"p1-new")]
    await c.close()


async def test_a_long_poll_listing_a_partition_again_gets_its_chunk_once(server: BayouServer) -> None:
    """A woken long poll keyed its new chunks by partition and sent the same chunk in every entry
    that listed it: 40 entries of one partition made a 160 MiB answer of 4 MiB appended."""
    c = await conn(server)
    assert await create(c, "dup") == 0
    entries = tuple(m.ConsumePartition(0, U64, 1 << 20) for _ in range(5))
    poll = m.Consume(5, (m.ConsumeTopic("dup", entries),), max_wait=10_000)
    new = m.Produce(6, (m.ProduceTopic("dup", (m.ProduceEntry(0, bundle(b"once")),)),))
    await c.send(b"".join(bytes([rid]) + len(body).to_bytes(4, "little") + body
                          for rid, body in map(codec.encode_request, (poll, new))))
    frames = [await c.frame(timeout=5.0) for _ in range(2)]
    (answer,) = [codec.decode_response(rid, body, request=poll) for rid, body in frames if rid == 0x2]
    assert isinstance(answer, m.ConsumeResponse)
    (topic,) = answer.topics
    assert isinstance(topic, m.ConsumeTopicResult)
    first, *again = topic.partitions
    assert messages(first) == [(1, b"once")]
    assert all((p.chunk, p.hwmark) == (b"", 0) for p in again)  # asked again from the same place
    await c.close()
