"""Issue 14.7: with ``[cluster] secret`` the replication listener admits only brokers that prove
they know it (HMAC of a fresh nonce, before any other frame): a 3-broker cluster replicates, while
a client without the secret, with a wrong one, or that sends a fetch or a large frame first, is
closed without being served."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.protocols.replica.codec import (
    NONCE_SIZE,
    Auth,
    Challenge,
    Fetch,
    auth_mac,
    decode,
    encode,
)
from support.cluster import CLUSTER_CONFIG, Cluster, assert_replicates, running_cluster, running_zookeeper
from support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow
SECRET = "s3cret-shared-by-the-brokers"


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = CLUSTER_CONFIG.replace("[cluster]\n", f'[cluster]\nsecret = "{SECRET}"\n')
    with running_cluster(zookeeper, tmp_path_factory.mktemp("secret"), "secret", config=config) as c:
        yield c


def replication_port(cluster: Cluster, broker: int) -> int:
    reg = json.loads(cluster.kazoo.get(f"/brokers/ids/{broker}")[0])
    return int(reg["endpoints"]["replication"])


def read_frame(s: socket.socket) -> bytes:
    """One whole frame, or b"" when the broker closed the connection."""
    buf = b""
    while len(buf) < 5 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
        chunk = s.recv(65536)
        if not chunk:
            return b""
        buf += chunk
    return buf


def challenge(port: int) -> tuple[socket.socket, bytes]:
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    decoded = decode(read_frame(s))
    assert decoded is not None and isinstance(decoded[0], Challenge)
    assert len(decoded[0].nonce) == NONCE_SIZE
    return s, decoded[0].nonce


FETCH = Fetch("guarded", 0, 2, 0, 0, -1, 1 << 20, 0)


def test_brokers_that_know_the_secret_replicate(cluster: Cluster) -> None:
    assert_replicates(cluster, "guarded", "v")


@pytest.mark.parametrize("attack", ["fetch-first", "wrong-secret", "other-broker-id", "large-frame",
                                    "silence"])
def test_other_clients_are_refused(cluster: Cluster, attack: str) -> None:
    port = replication_port(cluster, 1)
    s, nonce = challenge(port)
    with s:
        if attack == "fetch-first":
            s.sendall(encode(FETCH))
        elif attack == "wrong-secret":
            s.sendall(encode(Auth(2, auth_mac("guess", nonce, 2))) + encode(FETCH))
        elif attack == "other-broker-id":  # a MAC made for broker 3 presented as broker 2
            s.sendall(encode(Auth(2, auth_mac(SECRET, nonce, 3))) + encode(FETCH))
        elif attack == "large-frame":  # refused from the header alone, the body never read
            s.sendall(struct.pack(">IB", 200 << 20, 1) + b"x" * 1024)
        s.settimeout(20)  # "silence": the broker gives up on its own (10 s)
        assert read_frame(s) == b""  # closed, nothing served
    log = "".join(b.log() for b in cluster.brokers.values())
    assert "refused a replication connection" in log


def test_the_right_answer_is_served(cluster: Cluster) -> None:
    port = replication_port(cluster, cluster.leader("guarded", 0))
    s, nonce = challenge(port)
    with s:
        s.sendall(encode(Auth(2, auth_mac(SECRET, nonce, 2))) + encode(FETCH))
        decoded = decode(read_frame(s))
        assert decoded is not None and type(decoded[0]).__name__ == "FetchReply"


def test_the_secret_is_in_the_schema(tmp_path: Path) -> None:
    from bayou.config import load_config
    from bayou.errors import InvalidConfig

    path = tmp_path / "c.toml"
    path.write_text('[cluster]\nzookeeper = "zk://127.0.0.1:2181/x"\nsecret = "abc"\n')
    assert load_config(path).cluster.secret == "abc"  # type: ignore[union-attr]
    path.write_text('[cluster]\nzookeeper = "zk://127.0.0.1:2181/x"\nsecret = 5\n')
    with pytest.raises(InvalidConfig, match=r"\[cluster\] secret must be a string"):
        load_config(path)
