"""Issue 14.7: a cluster whose replication listeners speak TLS and require a certificate signed by
the cluster's CA (mTLS) as well as the shared secret, and whose znodes only its ZooKeeper user may
change (``[cluster] zk_auth``). Three brokers replicate over mTLS; a client without a certificate,
with one from another CA, or with a good certificate but without the secret is refused; another
ZooKeeper session can read bayou's znodes but not change, add or delete them."""

from __future__ import annotations

import json
import socket
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl_credential

from bayou.protocols.replica.codec import Auth, Challenge, Fetch, FetchReply, auth_mac, decode, encode
from support.cluster import CLUSTER_CONFIG, Cluster, assert_replicates, running_cluster, running_zookeeper
from support.tls import Certs, make_certs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
SECRET = "brokers-only"
ZK_USER, ZK_PASSWORD = "bayou", "zk-digest-pass"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def cluster(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = CLUSTER_CONFIG.replace(
        "[cluster]\n", f'[cluster]\nsecret = "{SECRET}"\nzk_auth = "{ZK_USER}:{ZK_PASSWORD}"\n') + (
        f'\n[tls]\ncert = "{certs.cert}"\nkey = "{certs.key}"\nca = "{certs.ca}"\n'
        'plain = ["rtes", "cursus", "iggy", "tank"]\n')  # only replication on TLS: v1() is plain
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as zk, \
            running_cluster(zk, tmp_path_factory.mktemp("mtls"), "mtls", config=config) as c:
        yield c


def replication_port(cluster: Cluster, broker: int) -> int:
    return int(json.loads(cluster.kazoo.get(f"/brokers/ids/{broker}")[0])["endpoints"]["replication"])


def frame(s: socket.socket) -> bytes:
    """One replication frame, or b"" when the broker closed the connection (or a TLS alert)."""
    buf = b""
    try:
        while len(buf) < 5 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            more = s.recv(65536)
            if not more:
                return b""
            buf += more
    except (ConnectionError, ssl.SSLError):
        return b""
    return buf


def connect(port: int, ctx: ssl.SSLContext | None) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=20)
    return raw if ctx is None else ctx.wrap_socket(raw, server_hostname="127.0.0.1")


FETCH = Fetch("secured", 0, 2, 0, 0, -1, 1 << 20, 0)


def test_brokers_replicate_over_mtls(cluster: Cluster) -> None:
    assert_replicates(cluster, "secured", "over-mtls", timeout=60)


@pytest.mark.parametrize("client", ["plain", "no-certificate", "other-ca", "good-certificate-no-secret"])
def test_replication_clients_without_both_proofs_are_refused(cluster: Cluster, certs: Certs,
                                                             client: str) -> None:
    ctx = {"plain": None, "no-certificate": certs.client(), "other-ca": certs.client(mallory=True),
           "good-certificate-no-secret": certs.client(alice=True)}[client]
    broker = cluster.brokers[1]
    failures = broker.log().count("TLS handshake failed")
    try:
        with connect(replication_port(cluster, 1), ctx) as s:
            s.sendall(encode(FETCH))
            reply = frame(s)
            if client == "good-certificate-no-secret":  # past TLS, the secret's challenge; no FETCH answer
                decoded = decode(reply)
                assert decoded is not None and isinstance(decoded[0], Challenge)
                reply = frame(s)
            assert reply == b""
    except (ssl.SSLError, ConnectionError):
        pass  # refused in the handshake
    if client == "good-certificate-no-secret":
        cluster.wait(lambda: "refused a replication connection" in broker.log(), 15,
                     "the secret's refusal in the log")
    else:  # the TLS layer refused it (the listener logged why), not the secret
        cluster.wait(lambda: broker.log().count("TLS handshake failed") > failures, 15,
                     "the refusal in the log")


def test_a_certificate_and_the_secret_are_served(cluster: Cluster, certs: Certs) -> None:
    with connect(replication_port(cluster, cluster.leader("secured", 0)), certs.client(alice=True)) as s:
        decoded = decode(frame(s))
        assert decoded is not None and isinstance(decoded[0], Challenge)
        s.sendall(encode(Auth(2, auth_mac(SECRET, decoded[0].nonce, 2))) + encode(FETCH))
        reply = decode(frame(s))
        assert reply is not None and isinstance(reply[0], FetchReply)


def test_zookeeper_znodes_change_only_with_bayous_credentials(cluster: Cluster) -> None:
    kazoo = cluster.kazoo  # a session without bayou's credentials
    assert kazoo.get_children("/brokers/ids")  # reading is allowed
    for change in (lambda: kazoo.set("/topics/secured", b"{}"),
                   lambda: kazoo.delete("/brokers/ids/1"),
                   lambda: kazoo.create("/topics/evil", b"{}"),
                   lambda: kazoo.set("/", b"")):
        with pytest.raises(NoAuthError):
            change()
    acls, _stat = kazoo.get_acls("/topics/secured")  # ZooKeeper masks the digest for others
    assert {(acl.id.scheme, acl.id.id.split(":")[0], acl.perms) for acl in acls} == {
        ("digest", ZK_USER, 31), ("world", "anyone", 1)}  # ALL for bayou, READ for anyone
    owner = KazooClient(hosts=cluster.zk.hosts + cluster.chroot,
                        auth_data=[("digest", f"{ZK_USER}:{ZK_PASSWORD}")])
    owner.start(timeout=20)
    try:
        acls, _stat = owner.get_acls("/topics/secured")
        assert make_digest_acl_credential(ZK_USER, ZK_PASSWORD) in {acl.id.id for acl in acls}
        data, stat = owner.get("/topics/secured")
        owner.set("/topics/secured", data, version=stat.version)  # the owner may write
    finally:
        owner.stop()
        owner.close()


def test_zk_auth_is_in_the_schema(tmp_path: Path) -> None:
    from bayou.config import load_config
    from bayou.errors import InvalidConfig

    path = tmp_path / "c.toml"
    path.write_text('[cluster]\nzookeeper = "zk://127.0.0.1:2181/x"\nzk_auth = "bayou:pw"\n')
    assert load_config(path).cluster.zk_auth == "bayou:pw"  # type: ignore[union-attr]
    for text, message in (('zk_auth = "no-password"', "must be USER:PASSWORD"),
                          ("zk_auth = 5", r"\[cluster\] zk_auth must be a string")):
        path.write_text(f'[cluster]\nzookeeper = "zk://127.0.0.1:2181/x"\n{text}\n')
        with pytest.raises(InvalidConfig, match=message):
            load_config(path)
