"""The replication listener under the shared connection limits (issue 13 item 3 and 4): it reads
through ``Connection.read`` like every client listener, so a peer that never completes a frame is
closed at the idle and request deadlines, and a frame larger than the byte budget is refused from
its header instead of being buffered.

A one-broker cluster (ZooKeeper from Debian's package) with short deadlines and a 4 MiB budget;
the peer speaks the replication framing by hand.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.protocols.replica.codec import Fetch, FetchReply, decode, encode
from support.cluster import (
    CLUSTER_CONFIG,
    Cluster,
    running_cluster,
    zookeeper_fixture,  # noqa: F401 - the zookeeper fixture
)
from support.sockets import closed_within, connect, slowloris
from support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

IDLE_S = 1.0
REQUEST_S = 1.5
BUDGET = 4 * 1024 * 1024
LIMITS = f"idle_timeout_s = {IDLE_S}\nrequest_timeout_s = {REQUEST_S}\nmax_inflight_bytes = {BUDGET}\n"
FETCH = encode(Fetch("nothing", 0, 7, 0, 0, -1, 1024, 0))


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One broker with short deadlines and a small budget."""
    yield from _one_broker(zookeeper, tmp_path, request.node.name)


def _one_broker(zk: ZooKeeperServer, root: Path, name: str) -> Iterator[Cluster]:
    with running_cluster(zk, root, name, n=1, config=LIMITS + CLUSTER_CONFIG) as c:
        yield c


def _replication_port(cluster: Cluster) -> int:
    extra = cluster.brokers[1].extra
    return int(extra[extra.index("--replication") + 1].rsplit(":", 1)[1])


async def _fetch(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One complete request and its answer: the connection is past its idle deadline."""
    writer.write(FETCH)
    await writer.drain()
    buf = b""
    while (decoded := decode(buf)) is None:
        data = await asyncio.wait_for(reader.read(1 << 16), 10)
        assert data, "closed instead of answering a FETCH"
        buf += data
    assert isinstance(decoded[0], FetchReply)


async def test_slowloris_on_the_replication_listener_is_closed(cluster: Cluster) -> None:
    port = _replication_port(cluster)
    reader, writer = await connect(port)  # never a complete frame: the idle deadline
    assert await slowloris(reader, writer, FETCH[:40] * 5, IDLE_S + 10)
    writer.close()
    reader, writer = await connect(port)  # a frame begun after a request: the request deadline
    await _fetch(reader, writer)
    assert await slowloris(reader, writer, FETCH[:40] * 5, REQUEST_S + 10)
    writer.close()


async def test_a_replication_frame_over_the_budget_is_refused_from_its_header(cluster: Cluster) -> None:
    reader, writer = await connect(_replication_port(cluster))
    await _fetch(reader, writer)
    writer.write(struct.pack(">IB", BUDGET + 1, 1))  # a FETCH header declaring 4 MiB + 1: nothing more
    await writer.drain()
    assert await closed_within(reader, 10)
    writer.close()
    log = cluster.brokers[1].log()
    assert f"a frame of {BUDGET + 1} bytes" in log, log
