"""The broker-wide answer budget (server/answers.py) over real sockets: clients that ask for large
answers and never read them used to make the broker build and hold every answer (a few hundred
connections asking 64 MiB each held tens of gigabytes). Now an answer is built only within
``max_answer_bytes``, the others wait holding nothing, a client that does not read is cut off by
the write deadline, and a client that reads is served once they are gone."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from bayou.broker import BrokerConfig
from bayou.protocols.kafka import codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import ApiKey
from bayou.protocols.kafka.framing import RequestHeader
from bayou.protocols.tank import codec as tank_codec
from bayou.protocols.tank import messages as tank
from bayou.records.batch import encode_batch, iter_batches
from bayou.records.model import Record
from bayou.server.app import BayouServer, ServerConfig
from bayou.storage import FsyncPolicy, LogConfig
from support.tank import TankConn

pytestmark = pytest.mark.asyncio
MIB = 1 << 20
BUDGET = 8 * MIB
ASK = 6 * MIB  # each fetch's max_bytes: one answer fits in the budget, two do not
BATCHES = 16  # of 1 MiB


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[BayouServer]:
    log = LogConfig(fsync=FsyncPolicy("never"))
    cfg = ServerConfig(broker=BrokerConfig(data_dir=tmp_path / "d", log=log),
                       listeners={"kafka": ("127.0.0.1", 0), "tank": ("127.0.0.1", 0)},
                       max_answer_bytes=BUDGET,
                       request_timeout_s=1.0, shutdown_grace_s=1.0)
    srv = BayouServer(cfg)
    await srv.start()
    await srv.broker.create_topic("big", 1)
    for _ in range(BATCHES):
        await srv.broker.produce("big", 0, encode_batch([Record(os.urandom(MIB - 100), None, 1)]))
    yield srv
    await srv.stop()


def tank_consume(request_id: int) -> bytes:
    """A TANK Consume of 6 MiB from seq 1: the records are Kafka batches, converted in memory."""
    msg_id, payload = tank_codec.encode_request(
        tank.Consume(request_id, (tank.ConsumeTopic("big", (tank.ConsumePartition(0, 1, ASK),)),)))
    return bytes([msg_id]) + len(payload).to_bytes(4, "little") + payload


def fetch_frame(correlation: int, offset: int = 0) -> bytes:
    body = build(codec.request_schema(ApiKey.FETCH, 11), replica_id=-1, max_wait=0, min_bytes=1,
                 max_bytes=ASK, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                 topics=[{"topic": "big", "partitions": [
                     {"partition": 0, "fetch_offset": offset, "current_leader_epoch": -1,
                      "log_start_offset": -1, "partition_max_bytes": ASK}]}])
    return codec.encode_request(RequestHeader(ApiKey.FETCH, 11, correlation, "hog", False, 0), body)


async def until(check: object, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("protocol", ["kafka", "tank"])
async def test_answers_are_built_within_the_budget_and_clients_that_do_not_read_are_cut_off(
        server: BayouServer, protocol: str) -> None:
    port = server.listeners[protocol].port
    ask = fetch_frame if protocol == "kafka" else tank_consume
    answers = server.admission.answers
    part = server.broker.ctx.partition("big", 0)
    loop = asyncio.get_running_loop()
    hogs = []
    for i in range(4):  # each asks for 6 MiB and reads nothing (a small receive buffer)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, ask(i + 1))
        hogs.append(sock)
    # one answer is built and stuck in its connection's buffers; the others wait for the budget
    await until(lambda: answers.waiting == 3)
    assert answers.used <= BUDGET
    assert part.bytes_out <= ASK + MIB  # read for one answer only (before: 4 answers, 24 MiB)
    # the write deadline (request_timeout_s, 500 B/s) closes each in turn, freeing the next
    await until(lambda: not server.listeners[protocol].connections)
    assert answers.used == 0 and answers.waiting == 0
    for sock in hogs:
        sock.close()
    if protocol == "tank":
        assert await tank_reader_served(port)
        return
    # a client that reads is served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(fetch_frame(99))
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 20))
    response = await asyncio.wait_for(reader.readexactly(size), 20)
    _header, body = codec.decode_response(response, ApiKey.FETCH, 11)
    records = body.responses[0].partitions[0].records
    assert len(list(iter_batches(records))) >= ASK // MIB
    writer.close()


async def tank_reader_served(port: int) -> bool:
    c = await TankConn.open(port)
    resp = await c.call(tank.Consume(9, (tank.ConsumeTopic("big", (tank.ConsumePartition(0, 1, ASK),)),)))
    await c.close()
    assert isinstance(resp, tank.ConsumeResponse)
    (topic,) = resp.topics
    assert isinstance(topic, tank.ConsumeTopicResult)
    return len(topic.partitions[0].chunk) >= ASK


async def test_a_tank_long_poll_whose_answer_is_not_read_closes_the_connection(server: BayouServer) -> None:
    """The answer of a woken TANK long poll is written by the poll's own task: a reader too slow
    for the write deadline was logged as a task error and the connection kept, its transport
    holding the bytes of every answer after it; it is closed now, as for the other requests."""
    listener = server.listeners["tank"]
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", listener.port))
    msg_id, payload = tank_codec.encode_request(tank.Consume(
        1, (tank.ConsumeTopic("big", (tank.ConsumePartition(0, 2**64 - 1, ASK),)),), max_wait=10_000))
    await loop.sock_sendall(sock, bytes([msg_id]) + len(payload).to_bytes(4, "little") + payload)
    await until(lambda: len(listener.connections) == 1)
    for _ in range(8):  # 8 MiB appended: the woken poll's answer, never read
        await server.broker.produce("big", 0, encode_batch([Record(os.urandom(MIB - 100), None, 1)]))
    await until(lambda: not listener.connections)  # the write deadline (request_timeout_s: 1 s)
    assert server.admission.answers.used == 0
    sock.close()
