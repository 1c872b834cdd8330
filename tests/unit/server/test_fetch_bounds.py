"""A fetch answer is held in memory until it is sent, so its size has a bound whatever the client
asks (broker/fetch.py FETCH_MAX_BYTES, as Kafka's fetch.max.bytes): a Kafka Fetch asking for 2 GB
over many partitions, or an Iggy poll asking for four billion messages, used to make the broker
read everything up to it. The bound is set small here; the client then fetches on from where the
answer stopped and gets every record once, in order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TypeVar

import pytest

import bayou.broker.fetch as broker_fetch
import bayou.server.iggy.fetch as iggy_fetch
import bayou.server.kafka as kafka_server
from bayou.broker import YIELD_EVERY, Broker, BrokerConfig
from bayou.client.wire import partition_replies
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codec import encode_request_frame
from bayou.protocols.iggy.framing import Dialect, LegacyFrameReader
from bayou.protocols.kafka import codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import ApiKey
from bayou.protocols.kafka.framing import RequestHeader
from bayou.records.batch import decode_records, encode_batch, iter_batches
from bayou.records.compression import Compression
from bayou.records.model import Record
from bayou.server.iggy import IggyService
from bayou.server.kafka import KafkaService
from bayou.server.kafka_context import Advertised, Session
from bayou.storage import FsyncPolicy, LogConfig
from support.loop import turns_during

T = TypeVar("T")
CAP = 4096
VALUE = 300  # bytes per record, one record per batch: about 370 bytes a batch


def batch(i: int) -> bytes:
    return encode_batch([Record(b"%05d" % i + b"x" * (VALUE - 5), None, int(time.time() * 1000))])


RECORDS = 60


@pytest.fixture
async def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(broker_fetch, "FETCH_MAX_BYTES", CAP)
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(fsync=FsyncPolicy("never"))))
    await b.start()
    try:
        await b.create_topic("t", 2)
        for p in (0, 1):
            for i in range(RECORDS):
                await b.produce("t", p, batch(i))
        yield b
    finally:
        await b.stop()


def values(data: bytes) -> list[int]:
    return [int(r.value[:5]) for pos, _h in iter_batches(data) for r in decode_records(data, pos)]


async def test_a_broker_fetch_stops_at_the_bound(broker: Broker) -> None:
    r = await broker.fetch("t", 0, 0, max_bytes=1 << 30)
    assert 0 < len(r.data) <= CAP
    assert values(r.data) == list(range(r.next_offset))
    one = await broker.fetch("t", 0, 0, max_bytes=1)  # one batch always, past any bound
    assert values(one.data) == [0]


async def test_a_kafka_fetch_asking_for_gigabytes_gets_the_bound_and_the_rest_after(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_server, "FETCH_MAX_BYTES", CAP)
    svc = KafkaService(broker)
    session, where = Session("127.0.0.1:1"), Advertised(0, "localhost", 9092)
    offsets = {0: 0, 1: 0}
    seen: dict[int, list[int]] = {0: [], 1: []}
    for cid in range(1, 100):
        body = build(codec.request_schema(ApiKey.FETCH, 11), replica_id=-1, max_wait=0, min_bytes=1,
                     max_bytes=(1 << 31) - 1, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                     topics=[{"topic": "t", "partitions": [
                         {"partition": p, "fetch_offset": offsets[p], "current_leader_epoch": -1,
                          "log_start_offset": -1, "partition_max_bytes": (1 << 31) - 1} for p in (0, 1)]}])
        frame = codec.encode_request(RequestHeader(ApiKey.FETCH, 11, cid, "c", False, 0), body)[4:]
        reply = await svc.answer(frame, session, where)
        assert reply is not None
        raw = reply if isinstance(reply, bytes | bytearray) else b"".join(reply)
        response = codec.decode_response(bytes(raw[4:]), ApiKey.FETCH, 11)[1]
        got = 0
        for part in response.responses[0].partitions:
            data = part.records or b""
            got += len(data)
            seen[part.partition_index] += values(data)
            offsets[part.partition_index] += len(values(data))
        assert got <= CAP + len(batch(0))  # the answer over both partitions (and a batch begun under it)
        if all(o == RECORDS for o in offsets.values()):
            break
    assert seen == {0: list(range(RECORDS)), 1: list(range(RECORDS))}
    assert cid > 2 * RECORDS * (VALUE + 61) // CAP  # it took many answers, each within the bound


async def test_an_iggy_poll_of_a_huge_count_stops_at_the_bound_and_polls_on(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(iggy_fetch, "POLL_MAX_BYTES", CAP)
    iggy = IggyService(broker, port=0)
    start, hw = broker.partition_bounds("t", 0)
    got: list[int] = []
    polls = 0
    while start < hw:
        parts, count, last = await iggy.fetch._read("t", 0, 0, start, (1 << 32) - 1, hw, Dialect.SEED, 0)
        polls += 1
        assert 0 < count <= CAP // VALUE + 1
        got += [int(part.payload[:5]) for part in parts]
        start = last + 1
    assert got == list(range(RECORDS)) and polls > 3


def inflating(i: int) -> bytes:
    """A gzip batch of 10 records of 2,000 zero bytes (about 20 KB decompressed, a few hundred
    bytes stored), with message ids, so a Kafka client is sent it converted (decompressed) too."""
    return encode_batch([Record(b"%05d" % (i * 10 + j) + bytes(1995), None, int(time.time() * 1000),
                                message_id=i * 10 + j + 1) for j in range(10)], compression=Compression.GZIP)


async def test_records_converted_from_compressed_batches_count_against_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is on the answer, not on the stored bytes read: 30 batches read in one go
    (under 4 KiB each stored) decompress to 20 KB each; an answer stops after the batch that
    passes the bound, and the client polls or fetches on to read every record once."""
    monkeypatch.setattr(iggy_fetch, "POLL_MAX_BYTES", CAP)
    monkeypatch.setattr(kafka_server, "FETCH_MAX_BYTES", CAP)
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(fsync=FsyncPolicy("never"))))
    await b.start()
    try:
        await b.create_topic("z", 1)
        for i in range(30):
            await b.produce("z", 0, inflating(i))
        stored = b.partition_bounds("z", 0)[1]
        assert stored == 300
        iggy = IggyService(b, port=0)
        start, got = 0, []
        while start < stored:
            parts, count, last = await iggy.fetch._read("z", 0, 0, start, (1 << 32) - 1, stored,
                                                        Dialect.LEGACY, 0)
            assert count == 10  # one batch: the first already passes the bound
            assert sum(map(len, parts)) < CAP + 11 * 2100
            got.append(count)
            start = last + 1
        assert sum(got) == 300
        svc = KafkaService(b)
        session, where = Session("127.0.0.1:1"), Advertised(0, "localhost", 9092)
        offset, seen = 0, []
        while offset < stored:
            body = build(codec.request_schema(ApiKey.FETCH, 11), replica_id=-1, max_wait=0, min_bytes=1,
                         max_bytes=(1 << 31) - 1, isolation_level=0, session_id=0, session_epoch=-1,
                         rack_id="", topics=[{"topic": "z", "partitions": [
                             {"partition": 0, "fetch_offset": offset, "current_leader_epoch": -1,
                              "log_start_offset": -1, "partition_max_bytes": (1 << 31) - 1}]}])
            frame = codec.encode_request(RequestHeader(ApiKey.FETCH, 11, 1, "c", False, 0), body)[4:]
            reply = await svc.answer(frame, session, where)
            assert reply is not None
            raw = reply if isinstance(reply, bytes | bytearray) else b"".join(reply)
            assert len(raw) < CAP + 22_000  # one converted batch past the bound at most
            response = codec.decode_response(bytes(raw[4:]), ApiKey.FETCH, 11)[1]
            data = response.responses[0].partitions[0].records
            got_now = values(data)
            assert got_now and got_now[0] == offset
            seen += got_now
            offset += len(got_now)
        assert seen == list(range(300))
    finally:
        await b.stop()


async def test_a_poll_of_many_partitions_lets_the_event_loop_run(tmp_path: Path) -> None:
    """Polls of partitions at their log end read nothing and never suspend: a POLL_PARTITIONS of
    thousands of them yields to the loop every YIELD_EVERY partitions instead of holding it for
    the whole request (0.4 s for 10,000 in the review's measurement)."""
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(fsync=FsyncPolicy("never"))))
    await b.start()
    try:
        await b.create_topic("many", 50)
        iggy = IggyService(b, port=0)
        iggy.serve_authorizer()  # as server/app.py does
        await iggy.start()
        session = iggy.open_session(_Conn())  # type: ignore[arg-type]

        async def ask(req: m.Request) -> bytes:
            (frame,) = LegacyFrameReader().feed(encode_request_frame(req, Dialect.LEGACY))
            reply = await iggy.handle_legacy(session, frame)
            assert reply[:4] == b"\0\0\0\0", reply[:64]
            return reply[8:]

        await ask(m.LoginUser("iggy", "iggy"))
        req = m.PollPartitions(0, (m.PollTopic(m.Identifier("default"), m.Identifier("many"),
                                               tuple((p % 50, 0, 100) for p in range(2_000))),))
        reply, during = await turns_during(ask(req))
        assert len(partition_replies(reply)) == 2_000
        assert during >= 2_000 // YIELD_EVERY - 1
        await iggy.close_session(session)
    finally:
        await b.stop()


class _Conn:
    """What the Iggy service reads of a connection (its peer, its writer)."""

    peer = "127.0.0.1:40000"
    writer = None
    busy = 0


async def test_a_kafka_fetch_of_many_partitions_lets_the_event_loop_run(tmp_path: Path) -> None:
    """As POLL_PARTITIONS: a Fetch listing thousands of partitions at their log end (any client
    may list 100,000 in a 2.8 MB request, which took 0.7 s) yields to the loop every
    YIELD_EVERY partitions (broker/pace.py)."""
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(fsync=FsyncPolicy("never"))))
    await b.start()
    try:
        await b.create_topic("many", 50)
        svc = KafkaService(b)
        body = build(codec.request_schema(ApiKey.FETCH, 11), replica_id=-1, max_wait=0, min_bytes=1,
                     max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                     topics=[{"topic": "many", "partitions": [
                         {"partition": i % 50, "fetch_offset": 0, "current_leader_epoch": -1,
                          "log_start_offset": -1, "partition_max_bytes": 1 << 20} for i in range(2_000)]}])
        frame = codec.encode_request(RequestHeader(ApiKey.FETCH, 11, 1, "c", False, 0), body)[4:]
        reply, during = await turns_during(svc.answer(frame, Session("127.0.0.1:1"),
                                                      Advertised(0, "localhost", 9092)))
        assert reply is not None
        assert during >= 2_000 // YIELD_EVERY - 1
    finally:
        await b.stop()
