"""The TLS handshake in the shared listener (server/base.py), in process: the verified client
certificate's CN lands on the connection (``peer_cn``), a certificate from another CA is refused
even when certificates are optional, and handshakes are admitted and timed like any connection (a
flood of silent sockets meets the per-address limit, a stalled handshake the idle deadline)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from bayou.broker import BrokerConfig
from bayou.server.app import BayouServer, ServerConfig
from bayou.server.tls import TlsOptions
from support.tls import Certs, make_certs

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]
IDLE_S = 1.0
PER_IP = 3


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest_asyncio.fixture
async def server(tmp_path: Path, certs: Certs) -> AsyncIterator[BayouServer]:
    cfg = ServerConfig(broker=BrokerConfig(data_dir=tmp_path / "data"), listeners={"rtes": ("127.0.0.1", 0)},
                       tls=TlsOptions(certs.cert, certs.key, certs.ca, "optional"), idle_timeout_s=IDLE_S,
                       max_connections_per_ip=PER_IP, shutdown_grace_s=1.0)
    srv = BayouServer(cfg)
    await srv.start()
    yield srv
    await srv.stop()


async def ping(port: int, certs: Certs, **who: bool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=certs.client(**who),
                                         server_hostname="localhost")
    w.write(b"V1|1|PING|\n")
    await w.drain()
    assert (await asyncio.wait_for(r.readline(), 10)).startswith(b"V1|1|OK")
    return r, w


async def closed(r: asyncio.StreamReader, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(r.read(100), timeout) == b""
    except (ConnectionError, OSError):
        return True


async def test_peer_cn_is_the_verified_certificates_cn(server: BayouServer, certs: Certs) -> None:
    listener = server.listeners["rtes"]
    _r1, w1 = await ping(listener.port, certs, alice=True)
    _r2, w2 = await ping(listener.port, certs)
    assert sorted(str(c.peer_cn) for c in listener.connections) == ["None", "alice"]
    for w in (w1, w2):
        w.close()


async def test_a_certificate_from_another_ca_is_refused(server: BayouServer, certs: Certs,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "bayou.server")
    with pytest.raises((ConnectionError, OSError, AssertionError, asyncio.IncompleteReadError)):
        await ping(server.listeners["rtes"].port, certs, mallory=True)
    assert any("TLS handshake failed" in r.getMessage() for r in caplog.records)


async def test_handshakes_are_admitted_and_timed_like_connections(server: BayouServer, certs: Certs,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "bayou.server")
    port = server.listeners["rtes"].port
    loop = asyncio.get_running_loop()
    silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(PER_IP)]  # no ClientHello
    try:
        deadline = loop.time() + 5
        while server.admission is not None and server.admission.total < PER_IP and loop.time() < deadline:
            await asyncio.sleep(0.01)
        r, _w = await asyncio.open_connection("127.0.0.1", port)
        t0 = loop.time()
        assert await closed(r, IDLE_S / 2)  # over the per-address limit: closed before the idle deadline
        assert loop.time() - t0 < IDLE_S / 2
        for sr, _sw in silent:  # stalled handshakes end at the idle deadline
            assert await closed(sr, IDLE_S + 5)
        assert loop.time() - t0 >= IDLE_S / 2
        assert sum("TLS handshake not completed in time" in r.getMessage() for r in caplog.records) == PER_IP
        assert any(r.getMessage() == "refusing connection" for r in caplog.records)
        _r, w = await ping(port, certs)  # the slots are free again
        w.close()
    finally:
        for _sr, sw in silent:
            with contextlib.suppress(Exception):
                sw.close()
