"""Advertised ports (issue 17: "advertised listeners ... are what Metadata returns"): behind a port
mapping (NAT, a container's published port) clients reach a listener at another port than the one
it is bound to. With ``--advertised-port kafka=P`` Metadata, FindCoordinator and DescribeCluster
name P, so confluent-kafka, which bootstraps through the mapping and then connects where Metadata
points, keeps going through it. Here the mapping is a TCP forwarder on loopback that counts the
connections it carries."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from bayou.protocols.kafka.codes import ApiKey
from support.brokers import BrokerProcess, free_port
from support.kafka import KafkaConn, running_broker

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev dependency")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(120)


class Forwarder:
    """127.0.0.1:``port`` -> 127.0.0.1:``target``, in a thread of its own; ``connections`` counts
    the client connections it carried."""

    def __init__(self, port: int, target: int) -> None:
        self.port, self.target = port, target
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Forwarder:
        self.thread.start()
        assert self.ready.wait(10), "the forwarder did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _close(self) -> None:
        self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await r.read(1 << 16):
                    w.write(data)
                    await w.drain()
            w.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))


Mapped = tuple[BrokerProcess, Forwarder]


@pytest.fixture(scope="module")
def mapped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapped]:
    kafka_port, public = free_port(), free_port()
    with running_broker(tmp_path_factory.mktemp("kafka-adv"), "--kafka", f"127.0.0.1:{kafka_port}",
                        "--advertised-host", "127.0.0.1", "--advertised-port", f"kafka={public}") as b, \
            Forwarder(public, kafka_port) as fwd:
        yield b, fwd


def test_metadata_names_the_advertised_port_not_the_bound_one(mapped: Mapped) -> None:
    b, fwd = mapped

    async def ask(port: int) -> tuple[list[tuple[str, int]], list[tuple[str, int]], tuple[str, int]]:
        c = await KafkaConn.open(port)
        try:
            meta = await c.call(ApiKey.METADATA, topics=[])
            cluster = await c.call(ApiKey.DESCRIBE_CLUSTER)
            coord = await c.call(ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0)
        finally:
            await c.close()
        return ([(x.host, x.port) for x in meta.brokers], [(x.host, x.port) for x in cluster.brokers],
                (coord.host, coord.port))

    through_mapping = asyncio.run(ask(fwd.port))
    assert through_mapping == ([("127.0.0.1", fwd.port)], [("127.0.0.1", fwd.port)], ("127.0.0.1", fwd.port))
    # the V1 port serves Kafka too, and has no advertised port of its own: its bound port
    assert asyncio.run(ask(b.port))[0] == [("127.0.0.1", b.port)]


def test_confluent_kafka_keeps_to_the_mapping(mapped: Mapped) -> None:
    _b, fwd = mapped
    before = fwd.connections
    servers = f"127.0.0.1:{fwd.port}"
    topic = f"adv-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": servers})  # kept: its futures need the handle
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": servers, "linger.ms": 0})
    for i in range(3):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": servers, "group.id": f"g-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 3:
            assert time.monotonic() < deadline, f"read {len(got)} of 3"
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        c.close()
    assert got == [b"v0", b"v1", b"v2"]
    # bootstrap and the broker Metadata named, for the admin client, the producer and the consumer
    assert fwd.connections - before >= 4
