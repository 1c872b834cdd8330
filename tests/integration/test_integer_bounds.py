"""Integer fields past what storage can represent (issue 13 item 10), over real sockets against a
broker subprocess, reproduced as reported:

- TANK ProduceWithSeqnum of a sparse bundle whose first seq is >= 2^63 used to leave an empty
  segment named 18446744073709551613 and make every later produce fail with struct.error, for
  every protocol and across restarts (Iggy GET_STATS dropped its connection). Now it is answered
  with produce error 10 (invalid sequence numbers, tank.md §4.3) and nothing changes.
- TANK Consume of partition 65535 raised an unhandled ValueError per request (its answer cannot be
  encoded: first in a topic, ``ffff`` is the unknown-topic mark). No partition has that id: the
  request is malformed, and the connection is closed without a reply, as TANK does (§1).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.brokers import BrokerProcess, LineConn
from tests.support.cursus import FrameConn, build_batch, envelope, message
from tests.support.iggy import poll, send, vsr_login
from tests.support.tank import TankConn

from bayou.protocols.cursus.batch import decode_head, decode_messages
from bayou.protocols.iggy import messages as im
from bayou.protocols.tank import codec
from bayou.protocols.tank import messages as m
from bayou.protocols.tank.bundles import TankMessage, decode_chunk, encode_bundle

pytestmark = pytest.mark.asyncio

TOPIC = "bounds"
SEQ_INVALID = 0x0A
# the first seq past what the log stores (offset = seq - 1 <= 2^63 - 2), the reported 2^63, and u64's top
BAD_FIRST_SEQS = [(1 << 63), (1 << 63) + 5, (1 << 64) - 2, (1 << 64) - 1]


def start(b: BrokerProcess) -> BrokerProcess:
    """Start ``b`` and wait until every listener accepts (``start`` waits for V1 only)."""
    b.start()
    deadline = time.monotonic() + 20
    for port in (b.cursus_port, b.iggy_port, b.tank_port):
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nothing listens on {port}: {b.log()}") from None
                time.sleep(0.05)
    return b


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = start(BrokerProcess(tmp_path / "data", "--advertised-host", "127.0.0.1", fsync="never"))
    yield b
    b.stop()


async def tank_call(port: int, req: object) -> object:
    c = await TankConn.open(port)
    try:
        return await c.call(req)
    finally:
        await c.close()


async def tank_produce(port: int, bundle: bytes, *, with_seqnum: bool = False) -> int:
    resp = await tank_call(port, m.Produce(7, (m.ProduceTopic(TOPIC, (m.ProduceEntry(0, bundle),)),),
                                           with_seqnum=with_seqnum))
    assert isinstance(resp, m.ProduceResponse)
    return resp.topics[0].errors[0]


async def tank_values(port: int) -> list[tuple[int, bytes]]:
    c = await TankConn.open(port)
    out: list[tuple[int, bytes]] = []
    seq = 0
    try:
        while True:
            part = m.ConsumePartition(0, seq, 1 << 20)
            resp = await c.call(m.Consume(2, (m.ConsumeTopic(TOPIC, (part,)),)))
            assert isinstance(resp, m.ConsumeResponse)
            t = resp.topics[0]
            assert isinstance(t, m.ConsumeTopicResult)
            p = t.partitions[0]
            assert p.flags in (0, 0xFE), p
            if not p.chunk:
                return out
            got = [x for x in decode_chunk(p.chunk, p.base_seq, sparse_first=p.flags == 0xFE) if x.seq >= seq]
            out += [(x.seq, x.value) for x in got]
            seq = got[-1].seq + 1
    finally:
        await c.close()


async def healthy_everywhere(b: BrokerProcess, tag: str, expected: list[bytes]) -> list[bytes]:
    """Produce one record through each of V1, Cursus, Iggy and TANK, then read the partition back
    through every one of them; Iggy GET_STATS answers. Returns the values now expected."""
    line = await LineConn.open(b.port)
    assert (await line.ask(f"V1|1|PRODUCE|{TOPIC} k:{tag}-v1 acks=1")).startswith("V1|1|OK|partition=0")
    cur = await FrameConn.open(b.cursus_port)
    await cur.send(build_batch(TOPIC, 0, [message(f"{tag}-cursus")]))
    assert b"ERROR" not in await cur.recv()
    iggy = await vsr_login(b.iggy_port)
    await iggy.call(send("default", TOPIC, 0, [f"{tag}-iggy".encode()]))
    bundle = encode_bundle([TankMessage(0, 1, None, f"{tag}-tank".encode())])
    assert await tank_produce(b.tank_port, bundle) == 0
    expected = [*expected, *(f"{tag}-{p}".encode() for p in ("v1", "cursus", "iggy", "tank"))]

    assert [v for _s, v in await tank_values(b.tank_port)] == expected
    reply = await line.ask("V1|2|CONSUME|bounds 0 0")
    assert reply.startswith("V1|2|OK|messages="), reply
    assert reply.count(":") == len(expected)
    body = await cur.ask(envelope(f"CONSUME topic={TOPIC} partition=0 offset=0 member=x group=xg batch=100"))
    assert [x.payload for x in decode_messages(body, decode_head(body))] == expected
    polled = await iggy.call(poll("default", TOPIC, 0, kind=im.PollingKind.FIRST, count=100))
    assert [x.payload for x in polled.messages] == expected
    stats = await iggy.call(im.GetStats())
    assert isinstance(stats, im.Stats) and stats.messages_count >= len(expected)
    for conn in (line, cur, iggy):
        await conn.close()
    return expected


def segment_names(b: BrokerProcess) -> list[str]:
    return sorted(p.name for p in b.data_dir.rglob("*.log") if TOPIC in str(p))


async def test_seq_past_the_log_is_refused_and_the_partition_stays_healthy(broker: BrokerProcess) -> None:
    created = await tank_call(broker.tank_port, m.CreateTopic(1, TOPIC, 1, ""))
    assert isinstance(created, m.CreateTopicResponse) and created.error == 0
    expected = await healthy_everywhere(broker, "a", [])
    before = segment_names(broker)
    for first in BAD_FIRST_SEQS:
        msgs = [TankMessage(first, 5, None, b"poison")]
        if first < (1 << 64) - 1:
            msgs.append(TankMessage(first + 1, 5, None, b"poison2"))
        bundle = encode_bundle(msgs, sparse=True)
        assert await tank_produce(broker.tank_port, bundle, with_seqnum=True) == SEQ_INVALID, first
        assert await tank_produce(broker.tank_port, bundle) == SEQ_INVALID, first
    assert segment_names(broker) == before
    expected = await healthy_everywhere(broker, "b", expected)
    assert broker.stop() == 0
    start(broker)
    assert segment_names(broker) == before
    expected = await healthy_everywhere(broker, "c", expected)
    assert "Traceback" not in broker.log() and "struct.error" not in broker.log(), broker.log()


async def test_consume_of_partition_65535_closes_without_a_traceback(broker: BrokerProcess) -> None:
    created = await tank_call(broker.tank_port, m.CreateTopic(1, TOPIC, 1, ""))
    assert isinstance(created, m.CreateTopicResponse) and created.error == 0
    for parts in ((0xFFFF,), (0, 0xFFFF), (0xFFFF, 0)):
        req = m.Consume(3, (m.ConsumeTopic(TOPIC, tuple(m.ConsumePartition(p, 0, 1000) for p in parts)),))
        msg_id, payload = codec.encode_request(req)
        c = await TankConn.open(broker.tank_port)
        await c.send(bytes([msg_id]) + len(payload).to_bytes(4, "little") + payload)
        assert await c.is_closed(), parts
        await c.close()
    assert len(await healthy_everywhere(broker, "a", [])) == 4
    assert "Traceback" not in broker.log() and "ValueError" not in broker.log(), broker.log()


async def test_a_full_partition_answers_each_protocols_error(broker: BrokerProcess) -> None:
    """A sparse bundle at the largest storable seq (2^63 - 1) is stored; the partition is then full
    (its log end is the largest int64) and every protocol's produce is refused with its error,
    while reads keep working, also after a restart."""
    created = await tank_call(broker.tank_port, m.CreateTopic(1, TOPIC, 1, ""))
    assert isinstance(created, m.CreateTopicResponse) and created.error == 0
    top = (1 << 63) - 1
    assert await tank_produce(broker.tank_port, encode_bundle([TankMessage(top, 5, None, b"last")],
                                                              sparse=True)) == 0
    for _round in range(2):
        dense = encode_bundle([TankMessage(0, 1, None, b"x")])
        assert await tank_produce(broker.tank_port, dense) == SEQ_INVALID
        line = await LineConn.open(broker.port)
        assert (await line.ask(f"V1|1|PRODUCE|{TOPIC} k:v acks=1")).startswith("V1|1|ERR|")
        reply = await line.ask(f"V1|2|CONSUME|{TOPIC} 0 {top - 1}")
        assert reply.startswith("V1|2|OK|messages=") and "last" in reply, reply
        await line.close()
        cur = await FrameConn.open(broker.cursus_port)
        await cur.send(build_batch(TOPIC, 0, [message("x")]))
        assert (await cur.recv()).startswith(b"ERROR")
        await cur.close()
        iggy = await vsr_login(broker.iggy_port)
        reply = await iggy.ask(send("default", TOPIC, 0, [b"x"]))
        assert reply.result()[0] != 0
        stats = await iggy.call(im.GetStats())
        assert isinstance(stats, im.Stats)
        await iggy.close()
        assert broker.stop() == 0
        start(broker)
    assert "Traceback" not in broker.log(), broker.log()


@pytest.mark.parametrize("ts", [(1 << 64) - 1, 1 << 63, 1 << 55, 1_700_000_000_000])
async def test_any_tank_timestamp_reads_through_every_protocol(broker: BrokerProcess, ts: int) -> None:
    """A TANK message may carry any u64 of milliseconds; Iggy's origin timestamp is a u64 of
    microseconds. Past it the time saturates; the poll used to drop the connection with
    struct.error, for every later poll of the partition."""
    created = await tank_call(broker.tank_port, m.CreateTopic(1, TOPIC, 1, ""))
    assert isinstance(created, m.CreateTopicResponse) and created.error == 0
    assert await tank_produce(broker.tank_port, encode_bundle([TankMessage(0, ts, b"k", b"late")])) == 0
    assert [v for _s, v in await tank_values(broker.tank_port)] == [b"late"]
    line = await LineConn.open(broker.port)
    assert (await line.ask(f"V1|1|CONSUME|{TOPIC} 0 0")).startswith("V1|1|OK|messages=0:late")
    await line.close()
    cur = await FrameConn.open(broker.cursus_port)
    body = await cur.ask(envelope(f"CONSUME topic={TOPIC} partition=0 offset=0 member=x group=xg batch=10"))
    assert [x.payload for x in decode_messages(body, decode_head(body))] == [b"late"]
    await cur.close()
    iggy = await vsr_login(broker.iggy_port)
    for kind, value in ((im.PollingKind.FIRST, 0), (im.PollingKind.TIMESTAMP, 0), (im.PollingKind.OFFSET, 0)):
        polled = await iggy.call(poll("default", TOPIC, 0, kind=kind, value=value))
        expected = min(ts * 1000, (1 << 64) - 1)
        assert [(x.payload, x.origin_timestamp) for x in polled.messages] == [(b"late", expected)]
    await iggy.close()
    assert "Traceback" not in broker.log(), broker.log()


async def test_iggy_origin_timestamp_past_int64_is_refused(broker: BrokerProcess) -> None:
    """An Iggy send's origin timestamp is kept in an int64 batch field: 2^63 us and above get
    INVALID_FORMAT (4) and nothing is stored (it used to drop the connection with struct.error)."""
    iggy = await vsr_login(broker.iggy_port)
    await iggy.call(im.CreateStream("ts"))
    await iggy.call(im.CreateTopic(im.Identifier("ts"), "t", 1))
    for origin in ((1 << 64) - 1, 1 << 63):
        reply = await iggy.ask(send("ts", "t", 0, [im.Message(b"x", 0, (), origin)]))
        assert reply.result()[0] == 4
    await iggy.call(send("ts", "t", 0, [im.Message(b"ok", 0, (), (1 << 63) - 1)]))
    polled = await iggy.call(poll("ts", "t", 0, kind=im.PollingKind.FIRST))
    assert [(x.offset, x.payload, x.origin_timestamp) for x in polled.messages] == [(0, b"ok", (1 << 63) - 1)]
    stats = await iggy.call(im.GetStats())
    assert isinstance(stats, im.Stats)
    await iggy.close()
    assert "Traceback" not in broker.log(), broker.log()
