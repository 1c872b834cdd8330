"""Consumes of many small TANK bundles (issue 13): the bundles of a chunk are gathered from the
segment in large reads and sent as one piece, not one file range (and one sendfile) per bundle.
The bytes must be exactly those the per-bundle path sends, with the same boundaries: the fetch
size counted in bundle bytes, the high watermark, a batch stored by another protocol, a sparse
first bundle, a bundle too large to gather."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from bayou.protocols.tank import messages as m
from bayou.protocols.tank.bundles import TankMessage, decode_chunk, encode_bundle
from bayou.records.batch import HEADER_SIZE
from bayou.server.app import BayouServer
from bayou.server.tank_store import ZEROCOPY_MIN, FileRange, read_chunk
from bayou.storage import FsyncPolicy, LogConfig
from support.brokers import LineConn
from support.tank import TankConn, start_tank, tank_port

N = 20_000


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[BayouServer]:
    srv = await start_tank(tmp_path / "data", with_rtes=True)
    yield srv
    await srv.stop()


async def _produce(c: TankConn, topic: str, bundles: list[bytes]) -> None:
    for i in range(0, len(bundles), 250):
        resp = await c.call(m.Produce(i, (m.ProduceTopic(topic, tuple(
            m.ProduceEntry(0, b) for b in bundles[i:i + 250])),)))
        assert isinstance(resp, m.ProduceResponse) and all(e == 0 for e in resp.topics[0].errors)


async def _consume(c: TankConn, topic: str, seq: int, fetch: int) -> m.ConsumePartitionResult:
    resp = await c.call(m.Consume(7, (m.ConsumeTopic(topic, (m.ConsumePartition(0, seq, fetch),)),)))
    assert isinstance(resp, m.ConsumeResponse)
    t = resp.topics[0]
    assert isinstance(t, m.ConsumeTopicResult)
    return t.partitions[0]


def _one(i: int) -> bytes:
    return encode_bundle([TankMessage(0, 1_700_000_000_000 + i, None, b"m%d" % i)], compress=False)


def _per_bundle(server: BayouServer, topic: str, seq: int, fetch: int) -> bytes:
    """What the per-bundle path would send: each stored bundle's file range, in order."""
    import os

    log = server.broker.partition(topic, 0).log
    span = log.locate(seq - 1, fetch, max_offset=server.broker.partition(topic, 0).high_watermark,
                      payload_only=True)
    assert span is not None
    return b"".join(os.pread(span.fd, h.size - HEADER_SIZE, pos + HEADER_SIZE) for pos, h in span.batches)


async def test_twenty_thousand_one_message_bundles_in_one_piece(server: BayouServer) -> None:
    c = await TankConn.open(tank_port(server))
    assert (await c.call(m.CreateTopic(1, "small", 1, ""))).error == 0  # type: ignore[attr-defined]
    await _produce(c, "small", [_one(i) for i in range(N)])
    chunk = await read_chunk(server.broker, "small", 0, 1, 64 << 20)
    assert len(chunk.pieces) == 1 and not isinstance(chunk.pieces[0], FileRange)
    assert chunk.pieces[0] == _per_bundle(server, "small", 1, 64 << 20)
    assert (chunk.base_seq, chunk.next_seq) == (1, N + 1)
    p = await _consume(c, "small", 1, 64 << 20)
    got = decode_chunk(p.chunk, p.base_seq, sparse_first=False)
    assert [(x.seq, x.value) for x in got] == [(i + 1, b"m%d" % i) for i in range(N)]
    # the fetch size counts bundle bytes; bundles are added until it is reached or passed
    size = len(_one(0)) + 1  # varint length + bundle
    for fetch in (1, size - 1, size, size + 1, 10 * size):
        chunk = await read_chunk(server.broker, "small", 0, 5, fetch)
        assert chunk.pieces[0] == _per_bundle(server, "small", 5, fetch), fetch
        assert chunk.next_seq == 5 + max(1, -(-fetch // size))
    await c.close()


async def test_gathering_stops_at_another_format_and_at_a_large_bundle(server: BayouServer) -> None:
    c = await TankConn.open(tank_port(server))
    assert (await c.call(m.CreateTopic(1, "mixed", 1, ""))).error == 0  # type: ignore[attr-defined]
    await _produce(c, "mixed", [_one(i) for i in range(10)])
    v1 = await LineConn.open(server.listeners["rtes"].port)
    assert (await v1.ask("V1|p|PRODUCE|mixed k:from-v1")).startswith("V1|p|OK|partition=0 offset=10 ")
    big = encode_bundle([TankMessage(0, 5, None, b"B" * (ZEROCOPY_MIN + 10))], compress=False)
    await _produce(c, "mixed", [_one(11), big, _one(13)])
    seen: list[tuple[int, bytes]] = []
    seq = 1
    while seq <= 14:
        p = await _consume(c, "mixed", seq, 1 << 20)
        got = [(x.seq, x.value) for x in decode_chunk(p.chunk, p.base_seq, sparse_first=p.flags == 0xFE)]
        assert got, seq
        seen += got
        seq = got[-1][0] + 1
    assert [s for s, _v in seen] == list(range(1, 15))
    assert seen[10] == (11, b"from-v1") and seen[12][1] == b"B" * (ZEROCOPY_MIN + 10)
    await v1.close()
    await c.close()


async def test_a_sparse_first_bundle_is_gathered_as_sparse(server: BayouServer) -> None:
    c = await TankConn.open(tank_port(server))
    assert (await c.call(m.CreateTopic(1, "sp", 1, ""))).error == 0  # type: ignore[attr-defined]
    sparse = encode_bundle([TankMessage(s, 1, None, b"s%d" % s) for s in (100, 105)], sparse=True)
    resp = await c.call(m.Produce(1, (m.ProduceTopic("sp", (m.ProduceEntry(0, sparse),)),)))
    assert isinstance(resp, m.ProduceResponse) and resp.topics[0].errors == (0,)
    await _produce(c, "sp", [_one(1)])
    p = await _consume(c, "sp", 100, 1 << 20)
    assert p.flags == 0xFE
    got = [(x.seq, x.value) for x in decode_chunk(p.chunk, p.base_seq, sparse_first=True)]
    assert got == [(100, b"s100"), (105, b"s105"), (106, b"m1")]
    await c.close()


@pytest.mark.parametrize("fsync", ["never", "always"])
async def test_a_request_of_86_entries_appends_them_in_order(tmp_path: Path, fsync: str) -> None:
    """bm p2b's requests: 86 entries of one partition. Where nothing waits after an append
    (fsync=never) they are awaited in turn, else together (their fsyncs shared); either way each
    is appended in request order and answered on its own, a refused one among them too."""
    server = await start_tank(tmp_path / "data", log=LogConfig(fsync=FsyncPolicy(fsync)))
    try:
        c = await TankConn.open(tank_port(server))
        assert (await c.call(m.CreateTopic(1, "p2b", 1, ""))).error == 0  # type: ignore[attr-defined]
        entries = tuple(m.ProduceEntry(7 if i == 40 else 0, _one(i)) for i in range(86))  # no partition 7
        resp = await c.call(m.Produce(3, (m.ProduceTopic("p2b", entries),)))
        assert isinstance(resp, m.ProduceResponse)
        errors = resp.topics[0].errors
        assert len(errors) == 86 and errors[40] != 0 and all(e == 0 for i, e in enumerate(errors) if i != 40)
        p = await _consume(c, "p2b", 1, 64 << 20)
        got = decode_chunk(p.chunk, p.base_seq, sparse_first=False)
        assert [(x.seq, x.value) for x in got] == [
            (s + 1, b"m%d" % i) for s, i in enumerate(i for i in range(86) if i != 40)]
        await c.close()
    finally:
        await server.stop()


async def test_the_entries_of_one_produce_keep_their_order_whatever_their_checks_cost(
        server: BayouServer) -> None:
    """Under fsync=always (the default) a produce's entries append together so that they share
    an fsync: each must append before any waits. A Snappy bundle is inflated, and a large bundle
    of uneven messages walked, in a worker pool: such an entry used to wait there while the
    entries after it appended first, so one producer's messages were stored out of order."""
    c = await TankConn.open(tank_port(server))
    assert (await c.call(m.CreateTopic(1, "ordered", 1, ""))).error == 0  # type: ignore[attr-defined]
    snappy = encode_bundle([TankMessage(0, 5, None, b"s" * 200) for _ in range(20)], compress=True)
    uneven = encode_bundle([TankMessage(0, 5 + i, None, b"u" * (i % 50)) for i in range(5_000)],
                           compress=False)
    assert snappy[0] & 0x03 and len(uneven) > 64 * 1024  # Snappy-compressed; past OFF_LOOP_BYTES
    await _produce(c, "ordered", [_one(0), snappy, _one(1), uneven, _one(2)])
    values: list[bytes] = []
    seq = 1
    while seq <= 5_023:
        p = await _consume(c, "ordered", seq, 1 << 20)
        got = decode_chunk(p.chunk, p.base_seq, sparse_first=False)
        assert got, seq
        values += [x.value for x in got]
        seq = got[-1].seq + 1
    assert values == [b"m0", *[b"s" * 200] * 20, b"m1", *[b"u" * (i % 50) for i in range(5_000)], b"m2"]
    await c.close()
