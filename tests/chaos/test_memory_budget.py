"""Memory (issue 13 item 4): a broker-wide budget of request bytes in flight, and no large frame
from a connection that has not logged in.

A real broker subprocess with a 4 MiB budget. Frames are sent raw so that a frame can be left half
sent: what the broker holds for it is what the budget counts.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.protocols.iggy import messages as im
from bayou.protocols.iggy.codes import Command, Operation, Status
from bayou.protocols.iggy.framing import RequestHeader
from bayou.protocols.tank import codec as tank_codec
from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, encode_bundle
from support.brokers import BrokerProcess, LineConn
from support.iggy import LegacyConn, VsrConn, create_topic, legacy_login, send
from support.tank import TankConn

MiB = 1024 * 1024
BUDGET = 4 * MiB


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    conf = tmp_path / "bayou.toml"
    conf.write_text(f"max_inflight_bytes = {BUDGET}\n")
    b = BrokerProcess(tmp_path / "data", "--config", str(conf), fsync="never").start()
    try:
        yield b
    finally:
        b.stop()


async def _tank(port: int) -> TankConn:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        try:
            return await TankConn.open(port)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


def _produce_frame(request_id: int, topic: str, value_size: int) -> bytes:
    bundle = encode_bundle([TankMessage(0, 0, b"", b"v" * value_size)], compress=False)
    msg_id, payload = tank_codec.encode_request(
        tm.Produce(request_id, (tm.ProduceTopic(topic, (tm.ProduceEntry(0, bundle),)),)))
    return bytes([msg_id]) + struct.pack("<I", len(payload)) + payload


async def test_a_frame_larger_than_the_budget_is_refused_from_its_header(broker: BrokerProcess) -> None:
    tank = await _tank(broker.tank_port)
    await tank.send(b"\x01" + struct.pack("<I", BUDGET + 1))  # the header alone
    assert await tank.is_closed(timeout=5)  # TANK's answer to an oversized frame: close
    await tank.close()
    cursus = await asyncio.open_connection("127.0.0.1", broker.cursus_port)
    cursus[1].write(struct.pack(">I", BUDGET + 1))
    await cursus[1].drain()
    assert await asyncio.wait_for(cursus[0].read(), 5) == b""
    cursus[1].close()


async def test_reading_stops_while_the_budget_is_used_up(broker: BrokerProcess) -> None:
    first = await _tank(broker.tank_port)
    assert (await first.call(tm.CreateTopic(1, "mem", 1, ""))).error == 0  # type: ignore[attr-defined]
    # A holds 3 MiB of the 4: the header of a 3 MiB produce and a part of its body
    held = _produce_frame(2, "mem", 3 * MiB)
    await first.send(held[: MiB])
    # B's 3 MiB produce does not fit beside it: B's bytes stay in the kernel, no answer
    second = await _tank(broker.tank_port)
    await second.send(_produce_frame(3, "mem", 3 * MiB)[:16])  # its header is read, then it waits
    rest = asyncio.ensure_future(second.send(_produce_frame(3, "mem", 3 * MiB)[16:]))
    with pytest.raises(TimeoutError):
        await second.frame(timeout=1.5)
    # small requests still get through beside the held megabytes
    v1 = await LineConn.open(broker.port)
    assert await v1.ask("V1|p|PING|") == "V1|p|OK"
    await v1.close()
    # A finishes its frame: A is answered, its bytes are released, and B goes on
    await first.send(held[MiB:])
    msg_id, _payload = await first.frame(timeout=20)
    assert msg_id == 0x1
    await asyncio.wait_for(rest, 20)
    msg_id, payload = await second.frame(timeout=20)
    assert msg_id == 0x1
    resp = tank_codec.decode_response(msg_id, payload, request=tm.Produce(3, (tm.ProduceTopic(
        "mem", (tm.ProduceEntry(0, b""),)),)))
    assert isinstance(resp, tm.ProduceResponse) and all(e == 0 for t in resp.topics for e in t.errors)
    await first.close()
    await second.close()


async def test_a_connection_that_closes_mid_frame_gives_its_bytes_back(broker: BrokerProcess) -> None:
    first = await _tank(broker.tank_port)
    assert (await first.call(tm.CreateTopic(1, "mem2", 1, ""))).error == 0  # type: ignore[attr-defined]
    for i in range(4):  # each one holds 3 of the 4 MiB, then goes away
        conn = await _tank(broker.tank_port)
        await conn.send(_produce_frame(10 + i, "mem2", 3 * MiB)[: MiB])
        await conn.close()
    frame = _produce_frame(20, "mem2", 3 * MiB)
    await first.send(frame)
    assert (await first.frame(timeout=20))[0] == 0x1


async def test_iggy_refuses_a_large_frame_before_login_from_its_header(broker: BrokerProcess) -> None:
    legacy = await LegacyConn.open(broker.iggy_port)
    # SEND_MESSAGES declaring 100 MiB: only its 8 header bytes are sent
    await legacy.send_raw(struct.pack("<II", 100 * MiB + 4, Command.SEND_MESSAGES))
    status, length = struct.unpack("<II", await legacy._read(8, 5))
    assert (status, length) == (Status.UNAUTHENTICATED, 0)
    assert await legacy.is_closed(timeout=5)
    await legacy.close()

    vsr = await VsrConn.open(broker.iggy_port)
    header = RequestHeader(client=vsr.client, operation=Operation.NON_REPLICATED, request=1,
                           code=Command.SEND_MESSAGES).encode(100 * MiB)
    await vsr.send_raw(header)
    reply = await vsr.recv(timeout=5)
    assert reply.header is not None and reply.header.status == Status.UNAUTHENTICATED
    assert await vsr.is_closed(timeout=5)
    await vsr.close()

    # after a login, a frame above the login cap is only bound by the protocol's own cap
    logged = await legacy_login(broker.iggy_port)
    await logged.call(im.CreateStream("big"))
    await logged.call(create_topic("big", "t"))
    await logged.call(send("big", "t", 0, [b"x" * 200_000]))
    await logged.close()
