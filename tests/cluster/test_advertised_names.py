"""A broker advertising a host name in cluster mode: Kafka and Cursus clients, which resolve names
(and check them against a TLS certificate), are told the name; Iggy's cluster metadata and TANK's
redirects, which carry an IP address, get the name resolved. The registration in ZooKeeper holds
both. Before, every broker read back from the registration was named by its IP address."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from bayou.protocols.kafka.codes import ApiKey
from support.cluster import Cluster
from support.kafka import KafkaConn
from support.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_kafka_metadata_names_the_advertised_host_name(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    c = Cluster(tmp_path, zookeeper, 2, f"bayou-names-{time.monotonic_ns()}")
    for b in c.brokers.values():
        b.extra += ["--advertised-host", "localhost"]  # the last --advertised-host wins
    try:
        c.start()
        for i in c.brokers:
            doc = json.loads(c.kazoo.get(f"/brokers/ids/{i}")[0])
            assert (doc["host"], doc["name"]) == ("127.0.0.1", "localhost"), doc

        async def brokers(port: int) -> list[tuple[int, str, int]]:
            conn = await KafkaConn.open(port)
            try:
                meta = await conn.call(ApiKey.METADATA, topics=[])
            finally:
                await conn.close()
            return sorted((b.node_id, b.host, b.port) for b in meta.brokers)

        want = sorted((i, "localhost", b.port) for i, b in c.brokers.items())
        for b in c.brokers.values():  # both brokers, each named as registered (read back from ZooKeeper)
            c.wait(lambda b=b: asyncio.run(brokers(b.port)) == want, 30, "Metadata naming each broker")
    finally:
        c.stop()
