"""A producer's send future completes once its batch is acknowledged after the linger, without a
flush (as kafka-python's and aiokafka's do)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from bayou.client import AsyncProducer, Client, Consumer, Producer, TopicPartition
from support.brokers import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("future") / "data", fsync="never").start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def _boot(b: BrokerProcess) -> str:
    return f"127.0.0.1:{b.iggy_port}"


def _read(b: BrokerProcess, topic: str, partition: int) -> list[bytes]:
    with Consumer(_boot(b)) as c:
        c.assign([TopicPartition(topic, partition)])
        c.seek_to_beginning(TopicPartition(topic, partition))
        return [r.value for r in c.poll(timeout_ms=2000)]


def test_result_without_flush(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as admin:
        admin.create_topic("fut", 1)
    producer = Producer(_boot(broker), linger_ms=50)
    try:
        for round_ in range(3):  # the first send, and sends after the sender went idle again
            t0 = time.monotonic()
            meta = producer.send("fut", b"v%d" % round_, partition=0).result(timeout=10)
            assert (meta.topic, meta.partition) == ("fut", 0)
            assert time.monotonic() - t0 < 10
            # acknowledged means stored: another client reads it now
            assert _read(broker, "fut", 0)[-1] == b"v%d" % round_
        futures = [producer.send("fut", b"k%d" % i, key=b"key") for i in range(5)]
        for f in futures:
            f.result(timeout=10)
    finally:
        producer.close()


async def test_async_result_without_flush(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as admin:
        admin.create_topic("afut", 1)
    producer = AsyncProducer(_boot(broker), linger_ms=50)
    try:
        for round_ in range(3):
            fut = await producer.send("afut", b"a%d" % round_, partition=0)
            meta = await asyncio.wait_for(fut, 10)
            assert (meta.topic, meta.partition) == ("afut", 0)
    finally:
        await producer.close()
    assert _read(broker, "afut", 0) == [b"a0", b"a1", b"a2"]
