"""The HTTP port under the same principals and authorizer as every protocol (issues 14 and 16).

A ``bayou serve`` subprocess with ``[security] anonymous = "none"``: the probes stay open, and
/metrics needs the Iggy user of a Basic header or a Bearer personal access token (Prometheus'
``basic_auth`` / ``authorization`` scrape settings) allowed ``read_servers``. Wrong credentials
get 401 with a challenge and a WARNING naming the address and user, never the password; a user
without the permission gets 403.
"""

from __future__ import annotations

import base64
import http.client
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from bayou.protocols.iggy import messages as im
from support.brokers import BrokerProcess
from support.iggy import legacy_login

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

SECRET = "pw-prom-7f3a"


@dataclass
class Setup:
    broker: BrokerProcess
    token: str


def _get(port: int, path: str, authorization: str | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.request("GET", path, headers={} if authorization is None else {"Authorization": authorization})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture(scope="module")
def process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp: Path = tmp_path_factory.mktemp("http-auth")
    config = tmp / "bayou.toml"
    config.write_text('[security]\nanonymous = "none"\n')
    b = BrokerProcess(tmp / "data", "--config", str(config)).start()
    try:
        yield b
    finally:
        b.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def setup(process: BrokerProcess) -> AsyncIterator[Setup]:
    root = await legacy_login(process.iggy_port)
    scraper = im.Permissions(im.GlobalPermissions(read_servers=True))
    await root.call(im.CreateUser("prom", SECRET, permissions=scraper))
    await root.call(im.CreateUser("nobody", "pw-nobody-1"))
    await root.close()
    prom = await legacy_login(process.iggy_port, "prom", SECRET)
    token = (await prom.call(im.CreatePersonalAccessToken("scrape", 0))).token
    await prom.close()
    yield Setup(process, token)


async def test_probes_stay_open(setup: Setup) -> None:
    assert _get(setup.broker.http_port, "/health")[0] == 200
    assert _get(setup.broker.http_port, "/ready")[0] == 200


async def test_metrics_need_a_principal_allowed_read_servers(setup: Setup) -> None:
    port = setup.broker.http_port
    status, headers, _ = _get(port, "/metrics")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic realm="), headers
    for authorization in (_basic("iggy", "iggy"), _basic("prom", SECRET), f"Bearer {setup.token}"):
        status, _, body = _get(port, "/metrics", authorization)
        assert status == 200 and b"bayou_" in body, (authorization, status)
    assert _get(port, "/metrics", _basic("nobody", "pw-nobody-1"))[0] == 403


@pytest.mark.parametrize("authorization", [
    _basic("prom", "wrong-password"), "Bearer not-a-token", "Basic !!!not-base64", "Basic " +
    base64.b64encode(b"no-colon").decode(), "Digest username=prom", "Bearer"])
async def test_bad_credentials_get_401_and_nothing_else(setup: Setup, authorization: str) -> None:
    status, headers, body = _get(setup.broker.http_port, "/metrics", authorization)
    assert status == 401 and "WWW-Authenticate" in headers, (status, body)
    assert b"bayou_" not in body


async def test_a_failed_login_is_logged_without_the_password(setup: Setup) -> None:
    _get(setup.broker.http_port, "/metrics", _basic("prom", "guess-4711"))
    log = setup.broker.log()
    assert "http login failed" in log and '"user": "prom"' in log, log[-2000:]
    assert "guess-4711" not in log and SECRET not in log
