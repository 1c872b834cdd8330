"""tank-cli ``bm p2c``: a tail Consume and a Produce in one write on one connection (issue 13).

The consume's waiter used to be registered a loop turn after it checked the log end, so the
pipelined produce landed in between and the consume slept its whole max_wait (10 s). The broker
is a real subprocess (uvloop) with fsync=never, where the append wakes waiters at once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bayou.protocols.tank import messages as m
from support.brokers import BrokerProcess
from support.tank import TankConn

VECTOR = Path(__file__).parents[1] / "conformance" / "vectors" / "tank" / "bm_p2c_default.json"


async def _open(port: int) -> TankConn:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        try:
            return await TankConn.open(port)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


@pytest.mark.asyncio
@pytest.mark.parametrize("fsync", ["never", "always"])
async def test_bm_p2c_consume_woken_by_pipelined_produce(tmp_path: Path, fsync: str) -> None:
    request = bytes.fromhex(json.loads(VECTOR.read_text())["request_hex"])  # consume max_wait 10 s
    broker = BrokerProcess(tmp_path / "data", fsync=fsync).start()
    try:
        conn = await _open(broker.tank_port)
        created = await conn.call(m.CreateTopic(1, "bench", 1, ""))
        assert isinstance(created, m.CreateTopicResponse) and created.error == 0
        for _ in range(10):
            await conn.send(request)
            # a consume that missed the append would answer only after its 10 s max_wait
            first = await conn.frame(timeout=5.0)
            second = await conn.frame(timeout=5.0)
            assert (first[0], second[0]) == (0x2, 0x1), "the woken consume is answered before the produce"
            assert first[1][4:] != b"" and len(first[1]) > 40  # it carries the new bundle
        await conn.close()
    finally:
        broker.stop()
