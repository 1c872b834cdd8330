"""One log, three protocols, with the published Iggy SDKs (apache-iggy 0.9.0 and 0.8.0).

- Messages sent with Iggy (0.9 with user headers and a messages key, 0.8 plain) are read back
  through V1 and Cursus from the bayou topic ``<stream>.<topic>``, with the same offsets and
  payloads; an Iggy group's stored offset is the committed offset V1 reports for
  ``iggy.<topic>.<group>``. (Neither SDK puts a messages key on the wire: 0.9 resolves it to a
  partition itself, so Iggy-sent records have no key.)
- Records produced with V1 and Cursus appear in Iggy's ``default`` stream and poll back with the
  same offsets and payloads; the Cursus fields (``cursus.*`` record headers) arrive as string-keyed
  raw user headers, and a record key as the user header ``bayou.key`` (string key, raw value).

One broker subprocess serves all three listeners for the module; the SDK drivers run as
subprocesses (``support.iggy_sdk``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import xxhash

from bayou.client.rtes import RtesClient
from bayou.protocols.cursus.batch import decode_head, decode_messages, encode_batch, encode_messages
from bayou.records.cursus import CursusMessage
from bayou.server.iggy.catalog import DEFAULT_STREAM_ID, DEFAULT_STREAM_NAME
from support.brokers import BrokerProcess
from support.cursus import FrameConn, envelope
from support.iggy_sdk import Msg, messages, run, start_broker

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("iggy-xp") / "data")
    try:
        yield b
    finally:
        b.stop()


def v1_read(port: int, topic: str, partition: int) -> list[tuple[int, str]]:
    """Every record of a partition through V1 CONSUME: (offset, value)."""
    out: list[tuple[int, str]] = []
    with RtesClient("127.0.0.1", port) as c:
        while True:
            records, _hw = c.consume(topic, partition, len(out))
            if not records:
                return out
            out += records


async def cursus_read(port: int, topic: str, partition: int) -> list[CursusMessage]:
    """Every record of a partition through Cursus CONSUME."""
    c = await FrameConn.open(port)
    out: list[CursusMessage] = []
    try:
        while True:
            body = await c.ask(envelope(f"CONSUME topic={topic} partition={partition} offset={len(out)} "
                                        f"member=xp group=xp-iggy-reader batch=100000"))
            assert body[:2] == b"\xba\x7c", f"CONSUME answered {body[:200]!r}"
            msgs = decode_messages(body, decode_head(body))
            if not msgs:
                return out
            out += msgs
    finally:
        await c.close()


# -- Iggy -> V1 and Cursus ---------------------------------------------------------------------------


async def test_iggy_messages_are_read_through_v1_and_cursus(broker: BrokerProcess) -> None:
    r = run("0.9", broker.iggy_port, "xp-send", "xs", "orders")
    keyed = xxhash.xxh32_intdigest(b"cust-1") % 2  # the 0.9 client routes a messages key (C.10)
    sid = r["stream"]["id"]
    assert r["sent"] == [[sid, 0, 0, 0], [sid, 0, keyed, 4 if keyed == 0 else 0]]
    # the 0.9 client turns a messages key into a partition id itself (C.10): the key never reaches
    # the server, so no record has one
    expected: dict[int, list[tuple[int, str, bytes]]] = {0: [(i, f"iggy-{i}", b"") for i in range(4)], 1: []}
    expected[keyed] += [(len(expected[keyed]) + i, f"keyed-{i}", b"") for i in range(2)]

    for p in (0, 1):
        want = expected[p]
        assert await asyncio.to_thread(v1_read, broker.port, "xs.orders", p) == [(o, v) for o, v, _k in want]
        through_cursus = await cursus_read(broker.cursus_port, "xs.orders", p)
        assert [(m.offset, m.payload.decode(), m.key) for m in through_cursus] == want

    # the group gx consumed offsets 0 and 1 of partition 0 with auto-commit: V1 sees the commit
    assert [(m.partition, m.offset) for m in messages(r["group_polled"])] == [(0, 0), (0, 1)]
    with RtesClient("127.0.0.1", broker.port) as v1:
        assert v1.offset("iggy.xs.orders.gx", "xs.orders", 0) == 2

    # apache-iggy 0.8.0 (legacy framing) too
    r8 = run("0.8", broker.iggy_port, "xp-send", "xs8", "t")
    assert r8["stream"]["messages_count"] == 5
    assert await asyncio.to_thread(v1_read, broker.port, "xs8.t", 0) == [(i, f"l8-{i}") for i in range(3)]
    assert await asyncio.to_thread(v1_read, broker.port, "xs8.t", 1) == [(i, f"l8-p1-{i}") for i in range(2)]
    assert [(m.offset, m.payload) for m in await cursus_read(broker.cursus_port, "xs8.t", 1)] == [
        (0, b"l8-p1-0"), (1, b"l8-p1-1")]

    # and Iggy still reads its own messages back intact (headers included) after all that
    back = run("0.9", broker.iggy_port, "read", "xs", "orders")
    p0 = messages(back["partitions"][0])
    assert [(m.offset, m.id, m.text) for m in p0[:4]] == [(i, 1000 + i, f"iggy-{i}") for i in range(4)]
    assert p0[1].headers == {("String", "trace"): ("String", "t1"), ("String", "n"): ("UnsignedInt8", 1)}


# -- V1 and Cursus -> Iggy ---------------------------------------------------------------------------


def cursus_fields() -> list[CursusMessage]:
    return [
        CursusMessage(b"order-created", 0, 11, b"py-7f00", b"order-1", 1_700_000_123, b"OrderCreated", 3, 1,
                      b'{"trace":"a1"}'),
        CursusMessage(b"\x00\xffbinary", 0, 12, b"py-7f00", b"", 1_700_000_123, b"", 0, 0, b""),
    ]


def assert_same_records(got: list[Msg], want: list[tuple[int, bytes]], where: str) -> None:
    assert [(m.offset, m.payload) for m in got] == want, where


async def test_v1_and_cursus_records_poll_back_through_iggy(broker: BrokerProcess) -> None:
    # V1: a 2-partition topic, keyed records
    sent = [(f"k{i % 3}", f"v1-{i}") for i in range(10)]

    def produce() -> list[tuple[int, int]]:
        with RtesClient("127.0.0.1", broker.port) as c:
            c.create_topic("xp-v1", 2)
            return [(rec.partition, rec.offset) for rec in (c.produce("xp-v1", k, v) for k, v in sent)]

    placed = await asyncio.to_thread(produce)
    v1_want = {p: sorted((off, v.encode()) for (pp, off), (_k, v) in zip(placed, sent, strict=True)
                         if pp == p)
               for p in (0, 1)}

    # Cursus: a batch whose messages carry every Cursus field
    c = await FrameConn.open(broker.cursus_port)
    try:
        assert (await c.command("CREATE topic=xp-cursus partitions=1", topic="admin")).startswith("OK ")
        msgs = cursus_fields()
        ack = json.loads(await c.ask(encode_batch("xp-cursus", 0, encode_messages(msgs), 2, 11, 12, "1")))
        assert ack["status"] == "OK", ack
    finally:
        await c.close()

    for sdk in ("0.9", "0.8"):
        r = run(sdk, broker.iggy_port, "read", DEFAULT_STREAM_NAME, "xp-v1")
        assert r["stream"]["id"] == DEFAULT_STREAM_ID and r["stream"]["name"] == DEFAULT_STREAM_NAME
        assert r["stream"]["topics_count"] >= 2
        assert r["topic"]["partitions_count"] == 2 and r["topic"]["messages_count"] == 10
        for p in (0, 1):
            assert_same_records(messages(r["partitions"][p]), v1_want[p], f"{sdk} xp-v1/{p}")
        assert messages(r["by_ids"]) == messages(r["partitions"][0]), "numeric ids address the same topic"
        if sdk == "0.9":
            got = messages(r["partitions"][0]) + messages(r["partitions"][1])
            keys = {(pp, off): k for (pp, off), (k, _v) in zip(placed, sent, strict=True)}
            for p in (0, 1):  # V1 records carry no headers; their key arrives as bayou.key
                for m in messages(r["partitions"][p]):
                    assert m.headers == {("String", "bayou.key"): ("Raw", keys[p, m.offset].encode())}
            assert messages(r["timestamp_zero"]) == messages(r["partitions"][0])
            for m in got:
                assert m.origin_timestamp is not None and m.origin_timestamp > 0

        r = run(sdk, broker.iggy_port, "read", DEFAULT_STREAM_NAME, "xp-cursus")
        assert r["topic"]["partitions_count"] == 1 and r["topic"]["messages_count"] == 2
        got = messages(r["partitions"][0])
        assert_same_records(got, [(0, b"order-created"), (1, b"\x00\xffbinary")], f"{sdk} xp-cursus")
        if sdk == "0.9":
            raw = "Raw"
            assert got[0].headers == {
                ("String", "bayou.key"): (raw, b"order-1"),
                ("String", "cursus.producer_id"): (raw, b"py-7f00"), ("String", "cursus.seq"): (raw, b"11"),
                ("String", "cursus.epoch"): (raw, b"1700000123"),
                ("String", "cursus.event_type"): (raw, b"OrderCreated"),
                ("String", "cursus.schema_version"): (raw, b"3"),
                ("String", "cursus.aggregate_version"): (raw, b"1"),
                ("String", "cursus.metadata"): (raw, b'{"trace":"a1"}')}
            assert got[1].headers == {
                ("String", "cursus.producer_id"): (raw, b"py-7f00"), ("String", "cursus.seq"): (raw, b"12"),
                ("String", "cursus.epoch"): (raw, b"1700000123")}
