"""Message de-duplication survives a SIGKILL: a ``bayou serve`` subprocess (``--fsync always``) is
killed while an Iggy producer sends numbered messages (id = producer << 64 | seq) to a topic with
``message.deduplication=true``; after the restart the producer resends everything it attempted,
acknowledged or not, as an idempotent producer does. Every message must then be stored exactly once,
in sequence order: the acknowledged ones were durable and the rebuilt table recognises them, the
unacknowledged ones are stored by the resend if the kill lost them.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from bayou.protocols.iggy import messages as m
from bayou.server.iggy.catalog import DEFAULT_STREAM_NAME
from support.brokers import BrokerProcess
from support.iggy import Closed, LegacyConn, legacy_login, poll, send

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "exactly-once"
PARTITIONS = 2
BATCH = 20
ROUNDS = 4


def message_ids(producer: int, first: int, last: int) -> list[int]:
    return [producer << 64 | seq for seq in range(first, last + 1)]


def batch(ids: list[int]) -> list[m.Message]:
    return [m.Message(b"%016x" % (i & 0xFFFF_FFFF_FFFF_FFFF), i) for i in ids]


async def start(broker: BrokerProcess) -> None:
    """Start the subprocess and wait for its Iggy listener too (``start`` waits for V1 only, and
    the listeners open one after the other)."""
    await asyncio.to_thread(broker.start)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        try:
            _r, w = await asyncio.open_connection("127.0.0.1", broker.iggy_port)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)
            continue
        w.close()
        return


async def read_all(conn: LegacyConn, partition: int) -> list[int]:
    out: list[int] = []
    while True:
        reply = await conn.call(poll(DEFAULT_STREAM_NAME, TOPIC, partition, value=len(out), count=1000))
        assert isinstance(reply, m.PolledMessages)
        if not reply.messages:
            return out
        assert [x.offset for x in reply.messages] == list(range(len(out), len(out) + len(reply.messages)))
        out += [x.id for x in reply.messages]


async def produce_until_killed(port: int, producer: int, partition: int, attempted: list[int],
                               acked: list[int]) -> None:
    try:
        conn = await legacy_login(port)
        seq = 1
        while True:
            ids = message_ids(producer, seq, seq + BATCH - 1)
            attempted[:] = ids[-1:]
            await conn.call(send(DEFAULT_STREAM_NAME, TOPIC, partition, batch(ids)))
            acked[:] = ids[-1:]
            seq += BATCH
    except (OSError, Closed):  # the broker was killed
        return


async def test_deduplication_state_survives_sigkill(tmp_path: Path) -> None:
    rng = random.Random(20250101)
    broker = BrokerProcess(tmp_path / "data", fsync="always")
    await start(broker)
    expected: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    try:
        conn = await legacy_login(broker.iggy_port)
        await conn.call(m.CreateTopic(m.Identifier(DEFAULT_STREAM_NAME), TOPIC, PARTITIONS, options=(
            m.UserHeader.of("message.deduplication", m.HeaderKind.STRING, "true"),)))
        await conn.close()
        for rnd in range(ROUNDS):
            producer = 1000 + rnd
            partition = rnd % PARTITIONS
            attempted: list[int] = []
            acked: list[int] = []
            task = asyncio.create_task(produce_until_killed(broker.iggy_port, producer, partition,
                                                            attempted, acked))
            deadline = time.monotonic() + 30  # production under way (a loaded machine is slow to start)
            while not acked:
                assert time.monotonic() < deadline and not task.done(), "nothing was acknowledged"
                await asyncio.sleep(0.01)
            await asyncio.sleep(rng.uniform(0.0, 0.5))  # then a random point of the production
            await asyncio.to_thread(broker.kill)  # SIGKILL mid-production
            await asyncio.wait_for(task, 15)
            assert acked, "nothing was acknowledged before the kill"
            assert not (tmp_path / "data" / ".clean_shutdown").exists()
            await start(broker)

            conn = await legacy_login(broker.iggy_port)
            stored = await read_all(conn, partition)
            last_acked = acked[0] & 0xFFFF_FFFF_FFFF_FFFF
            # everything acknowledged is there (and perhaps the in-flight batch)
            assert stored[: len(expected[partition]) + last_acked] == (
                expected[partition] + message_ids(producer, 1, last_acked))
            # the idempotent producer resends all it attempted: nothing is stored twice
            last = attempted[0] & 0xFFFF_FFFF_FFFF_FFFF
            for first in range(1, last + 1, BATCH):
                await conn.call(send(DEFAULT_STREAM_NAME, TOPIC, partition,
                                     batch(message_ids(producer, first, min(first + BATCH - 1, last)))))
            expected[partition] += message_ids(producer, 1, last)
            assert await read_all(conn, partition) == expected[partition]
            await conn.close()

        # a clean restart changes nothing either
        assert await asyncio.to_thread(broker.stop) == 0
        await start(broker)
        conn = await legacy_login(broker.iggy_port)
        for p in range(PARTITIONS):
            ids = expected[p]
            for i in range(0, len(ids), 100):
                await conn.call(send(DEFAULT_STREAM_NAME, TOPIC, p, batch(ids[i : i + 100])))
            assert await read_all(conn, p) == ids
        await conn.close()
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill()
    log = broker.log_path.read_text(errors="replace")
    assert log.count("rebuilt message de-duplication") >= ROUNDS
    print(f"{sum(len(v) for v in expected.values())} messages stored once over {ROUNDS} kills")
