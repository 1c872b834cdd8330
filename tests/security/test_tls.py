"""Issue 14.6: TLS on every listener. Certificates come from ``trustme``; the brokers are real
``bayou serve`` subprocesses (uvloop) started with --tls-*; the clients are bayou's own (V1 client,
SDK, CLI), the published ones that have a TLS option (apache-iggy 0.8 and 0.9, cursus-client's
connection) and raw sockets wrapped in ssl for Cursus and TANK."""

from __future__ import annotations

import asyncio
import http.client
import os
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.client import Client, Producer, RtesClient, TlsConfig
from bayou.client.errors import BrokerConnectionError
from bayou.protocols.tank import messages as m
from bayou.protocols.tank.bundles import TankMessage, decode_chunk, encode_bundle
from support import iggy_sdk
from support.brokers import BrokerProcess
from support.cursus import FrameConn
from support.tank import PING, TankConn
from support.tls import Certs, make_certs

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Every listener on TLS; a client certificate is optional."""
    b = BrokerProcess(tmp_path_factory.mktemp("tls") / "data", *certs.serve_args("optional")).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def strict(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Client certificates required; the TANK listener left in plain text beside the TLS ones."""
    b = BrokerProcess(tmp_path_factory.mktemp("mtls") / "data", *certs.serve_args("required"),
                      "--tls-plain", "tank").start()
    try:
        yield b
    finally:
        b.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def tls_socket(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(sock, server_hostname="localhost")


def closed_without_reply(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the broker closes ``sock`` (EOF, reset or a TLS alert) without a byte of reply."""
    sock.settimeout(timeout)
    try:
        return sock.recv(4096) == b""
    except (ConnectionError, ssl.SSLError):
        return True


# -- every client, every protocol ------------------------------------------------------------------


def test_v1_client_over_tls(broker: BrokerProcess, certs: Certs) -> None:
    topic = unique("v1")
    with RtesClient("localhost", broker.port, tls=TlsConfig(ca=certs.ca)) as c:
        c.create_topic(topic, 1)
        assert c.produce(topic, "k", "over-tls").offset == 0
        assert c.consume(topic, 0, 0)[0] == [(0, "over-tls")]


def test_the_cli_speaks_tls(broker: BrokerProcess, certs: Certs) -> None:
    topic = unique("cli")
    env = dict(os.environ, BAYOU_TLS_CA=certs.ca)
    base = [sys.executable, "-m", "bayou"]
    bootstrap = ["--bootstrap", f"localhost:{broker.port}"]
    for args in (["topic", "create", topic, "-p", "1"], ["produce", topic, "hello-cli"]):
        subprocess.run([*base, *args, *bootstrap], env=env, check=True, capture_output=True, timeout=30)
    out = subprocess.run([*base, "consume", topic, "--iggy-bootstrap", f"localhost:{broker.iggy_port}",
                          *bootstrap], env=env, check=True, capture_output=True,
                         timeout=30)
    assert out.stdout.decode().strip() == "0:0\thello-cli"
    plain = subprocess.run([*base, "topic", "list", *bootstrap], capture_output=True, timeout=30, check=False)
    assert plain.returncode != 0  # without --tls-ca the broker closes the connection


def test_sdk_client_and_producer_over_tls(broker: BrokerProcess, certs: Certs) -> None:
    topic = unique("sdk")
    tls = TlsConfig(ca=certs.ca)
    bootstrap = f"localhost:{broker.iggy_port}"
    with Client(bootstrap, tls=tls) as c:
        c.create_topic(topic, 1)
        with Producer(bootstrap, tls=tls, linger_ms=1) as p:
            futures = [p.send(topic, f"v{i}".encode(), partition=0) for i in range(100)]
            p.flush()
        for f in futures:
            f.result(10)
        got = c.fetch_arrow(topic, 0, 0, 1000)
        assert got.column("value").to_pylist() == [f"v{i}".encode() for i in range(100)]
    with pytest.raises(BrokerConnectionError):  # the system CAs do not know this broker
        Client(bootstrap, tls=TlsConfig()).list_topics()
    with pytest.raises(BrokerConnectionError):  # a name the certificate does not carry
        Client(f"127.0.0.2:{broker.iggy_port}", tls=tls, timeout=5).list_topics()


def test_async_sdk_client_over_tls(broker: BrokerProcess, certs: Certs) -> None:
    from bayou.client import AsyncClient

    async def go() -> list[str]:
        async with AsyncClient(f"localhost:{broker.iggy_port}", tls=TlsConfig(ca=certs.ca)) as c:
            return await c.list_topics()

    assert isinstance(asyncio.run(go()), list)


@pytest.mark.parametrize("sdk", ["0.8", "0.9"])
def test_apache_iggy_over_tls(broker: BrokerProcess, certs: Certs, sdk: str) -> None:
    stream = unique(f"tls{sdk.replace('.', '')}")
    result = iggy_sdk.run(sdk, broker.iggy_port, "tls-sendpoll", certs.ca, stream)
    assert [iggy_sdk.decode(msg["payload"]) for msg in result["polled"]] == [b"tls-0", b"tls-1", b"tls-2"]


def test_cursus_over_tls(broker: BrokerProcess, certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = unique("cursus")

    async def go() -> tuple[str, str]:
        r, w = await asyncio.open_connection("127.0.0.1", broker.cursus_port, ssl=certs.client(),
                                             server_hostname="localhost", limit=1 << 24)
        conn = FrameConn(r, w)
        created = await conn.command(f"CREATE topic={topic} partitions=1", topic="admin")
        listed = await conn.command("LIST", topic="admin")
        w.close()
        return created, listed

    created, listed = asyncio.run(go())
    assert created.startswith(f"OK topic={topic}") and topic in listed
    # cursus-client 0.1.1: its connection takes a client certificate and trusts the system's CAs
    # (SSL_CERT_FILE); its Producer and Consumer never pass their tls_* settings on
    from cursus.connection.sync_conn import SyncConnection

    monkeypatch.setenv("SSL_CERT_FILE", certs.ca)
    conn = SyncConnection(f"localhost:{broker.cursus_port}", tls_cert_path=certs.alice_cert,
                          tls_key_path=certs.alice_key)
    conn.connect()
    try:
        conn.write_frame(b"\x00\x05adminLIST")
        assert topic in conn.read_frame().decode()
    finally:
        conn.close()


def bundle(i: int) -> bytes:  # ~100 KB: served from the segment file (sendfile) on a plain port
    return encode_bundle([TankMessage(0, 1_700_000_000_000, None, b"b%d-%d|" % (i, j) + os.urandom(1000))
                          for j in range(100)])


def test_tank_over_tls_with_bundles_that_sendfile_would_serve(broker: BrokerProcess, certs: Certs) -> None:
    topic = unique("tank")

    async def go() -> list[bytes]:
        r, w = await asyncio.open_connection("127.0.0.1", broker.tank_port, ssl=certs.client(),
                                             server_hostname="localhost")
        c = TankConn(r, w)
        assert await c.read_exactly(5) == PING
        resp = await c.call(m.CreateTopic(1, topic, 1, ""))
        assert isinstance(resp, m.CreateTopicResponse) and resp.error == 0
        for i in range(5):
            resp = await c.call(m.Produce(2, (m.ProduceTopic(topic, (m.ProduceEntry(0, bundle(i), 0),)),)))
            assert isinstance(resp, m.ProduceResponse)
        resp = await c.call(m.Consume(3, (m.ConsumeTopic(topic, (m.ConsumePartition(0, 0, 1 << 20),)),)))
        assert isinstance(resp, m.ConsumeResponse)
        result = resp.topics[0]
        assert isinstance(result, m.ConsumeTopicResult)
        p = result.partitions[0]
        await c.close()
        return [x.value for x in decode_chunk(p.chunk, p.base_seq, sparse_first=False)]

    values = asyncio.run(go())
    assert len(values) == 500
    assert values[0].startswith(b"b0-0|") and values[-1].startswith(b"b4-99|")


def test_kafka_over_tls_fetches_stored_batches_past_the_copy_threshold(broker: BrokerProcess,
                                                                      certs: Certs) -> None:
    """A Kafka fetch's stored batches are written as pieces of the bytes read (no copy) once they
    pass fast.COPY_BELOW; through the TLS transport they must arrive whole and in order."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = unique("kafka")
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.port}", "security.protocol": "SSL",
            "ssl.ca.location": certs.ca}
    p = Producer({**conf, "linger.ms": 20, "allow.auto.create.topics": True})
    values = [b"%05d|" % i + os.urandom(1000) for i in range(3000)]  # about 3 MB: many batches
    for v in values:
        p.produce(topic, v, key=v[:5], partition=0)
    assert p.flush(60) == 0
    c = Consumer({**conf, "group.id": unique("g"), "enable.auto.commit": False,
                  "max.partition.fetch.bytes": 4 << 20})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(values) and time.monotonic() < deadline:
        for msg in c.consume(1000, timeout=1.0):
            assert msg.error() is None, msg.error()
            assert msg.key() == msg.value()[:5]
            got.append(msg.value())
    c.close()
    assert got == values


# -- what is refused -------------------------------------------------------------------------------

PLAIN_HELLO = {"rtes": b"V1|1|PING|\n", "cursus": b"\x00\x00\x00\x09\x00\x05adminLIST",
               "iggy": b"\x04\x00\x00\x00\x01\x00\x00\x00", "tank": b"\x03\x00\x00\x00\x00"}


def test_plain_text_clients_on_tls_ports_are_closed_without_a_traceback(broker: BrokerProcess) -> None:
    ports = {"rtes": broker.port, "cursus": broker.cursus_port, "iggy": broker.iggy_port,
             "tank": broker.tank_port}
    for name, port in ports.items():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(PLAIN_HELLO[name])
            assert closed_without_reply(s), name
    deadline = time.monotonic() + 10
    while broker.log().count("TLS handshake failed") < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    log = broker.log()
    assert log.count("TLS handshake failed") >= 4, log
    assert "Traceback" not in log and "Exception" not in log and '"level": "ERROR"' not in log, log


def test_required_client_certificate(strict: BrokerProcess, certs: Certs) -> None:
    for ctx in (certs.client(), certs.client(mallory=True)):  # none, and one from another CA
        try:
            s = tls_socket(strict.port, ctx)
        except (ssl.SSLError, ConnectionError):
            continue  # refused during the handshake (TLS 1.2)
        with s:  # TLS 1.3: the client finishes first; the broker's alert arrives on the first read
            try:
                s.sendall(b"V1|1|PING|\n")
            except (ssl.SSLError, ConnectionError):
                continue
            assert closed_without_reply(s)
    with RtesClient("localhost", strict.port, tls=TlsConfig(ca=certs.ca, cert=certs.alice_cert,
                                                             key=certs.alice_key)) as c:
        assert c.raw(b"V1|1|PING|").startswith(b"V1|1|OK")
    with RtesClient("localhost", strict.port, tls=TlsConfig(ca=certs.ca, cert=certs.alice_pem)) as c:
        assert c.raw(b"V1|2|PING|").startswith(b"V1|2|OK")  # key and certificate in one file
    assert "certificate" in strict.log()


def test_a_plain_listener_beside_tls_ones(strict: BrokerProcess, certs: Certs) -> None:
    with socket.create_connection(("127.0.0.1", strict.tank_port), timeout=10) as s:  # --tls-plain tank
        assert s.recv(5) == PING
    with socket.create_connection(("127.0.0.1", strict.port), timeout=10) as s:
        s.sendall(b"V1|1|PING|\n")
        assert closed_without_reply(s)


# -- the configuration -----------------------------------------------------------------------------


def serve_fails(tmp_path: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "bayou", "serve", "--data-dir", str(tmp_path / "d"),
                           "--rtes", "127.0.0.1:0", "--cursus", "off", "--iggy", "off", "--tank", "off",
                           *args],
                          capture_output=True, timeout=30, check=False)
    out = (proc.stdout + proc.stderr).decode()
    assert proc.returncode == 2, out
    assert "Traceback" not in out, out
    return out


def test_bad_tls_settings_stop_the_start_with_a_message(tmp_path: Path, certs: Certs) -> None:
    missing = str(tmp_path / "nope.pem")
    assert "no such file" in serve_fails(tmp_path, "--tls-cert", missing, "--tls-key", certs.key)
    assert "cannot load certificate" in serve_fails(tmp_path, "--tls-cert", certs.cert, "--tls-key",
                                                    certs.alice_key)  # not its key
    assert "needs both" in serve_fails(tmp_path, "--tls-cert", certs.cert)
    assert "needs [tls] ca" in serve_fails(tmp_path, "--tls-cert", certs.cert, "--tls-key", certs.key,
                                           "--tls-client-auth", "required")
    assert "cannot load ca" in serve_fails(tmp_path, "--tls-cert", certs.cert, "--tls-key", certs.key,
                                           "--tls-ca", certs.key)
    cfg = tmp_path / "c.toml"
    for text, expected in ((f'[tls]\ncert = "{certs.cert}"\nkey = "{certs.key}"\nplain = "tank"\n',
                            "must be an array"),
                           (f'[tls]\ncert = "{certs.cert}"\nkey = "{certs.key}"\nplain = ["kafka2"]\n',
                            "unknown listener 'kafka2'"),
                           (f'[tls]\ncert = "{certs.cert}"\nkey = "{certs.key}"\nverify = true\n',
                            "unknown [tls] keys: verify"),
                           ('[tls]\ncert = 5\n', "[tls] cert must be a string")):
        cfg.write_text(text)
        assert expected in serve_fails(tmp_path, "--config", str(cfg))


def test_tls_table_in_the_config_file(tmp_path: Path, certs: Certs) -> None:
    from bayou.config import load_config

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[tls]\ncert = "{certs.cert}"\nkey = "{certs.key}"\nca = "{certs.ca}"\n'
                   f'client_auth = "required"\nplain = ["tank", "replication"]\n')
    config = load_config(cfg)
    assert config.tls is not None and config.tls.plain == ("tank", "replication")
    assert config.tls_context("tank") is None
    ctx = config.tls_context("rtes")
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED
    flags = load_config(cfg, tls={"client_auth": "optional", "plain": ()})  # flags override the file
    assert flags.tls is not None and flags.tls.client_auth == "optional"


def test_the_http_port_serves_https_with_the_same_certificate(broker: BrokerProcess, certs: Certs) -> None:
    conn = http.client.HTTPSConnection("localhost", broker.http_port, timeout=10, context=certs.client())
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        assert resp.status == 200
        resp.read()
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200 and b"bayou_" in resp.read()
    finally:
        conn.close()
    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=10) as s:  # plain HTTP
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert closed_without_reply(s)
