"""The Iggy root user is checked and created when the broker starts: a root password or name that
breaks Iggy's rules (``IGGY_ROOT_PASSWORD=a``) stops ``bayou serve`` with one clear line, not a
traceback on every later Iggy connection; a good one is on disk before any client connects."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bayou.broker import BrokerConfig
from bayou.client import Client
from bayou.client.errors import AuthenticationError
from bayou.errors import InvalidConfig
from bayou.server.app import BayouServer, IggyOptions, ServerConfig
from support.brokers import BrokerProcess, free_port


def serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bayou", "serve", "--data-dir", str(tmp_path / "data"),
         "--rtes", f"127.0.0.1:{free_port()}", "--cursus", "off", "--tank", "off",
         "--iggy", f"127.0.0.1:{free_port()}"],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("env", "message"), [
    ({"IGGY_ROOT_PASSWORD": "a"}, "passwords are 3..100 bytes"),
    ({"IGGY_ROOT_PASSWORD": "x" * 101}, "passwords are 3..100 bytes"),
    ({"IGGY_ROOT_USERNAME": "ab"}, "usernames are 3..50 bytes"),
])
def test_bad_root_user_refuses_to_start(tmp_path: Path, env: dict[str, str], message: str) -> None:
    r = serve(tmp_path, **env)
    assert r.returncode != 0
    assert message in r.stderr and "IGGY_ROOT_PASSWORD" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "data").exists()


def test_root_user_not_checked_without_iggy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an Iggy listener there is no root user to make: the setting is not in use."""
    from bayou.config import load_config

    monkeypatch.setenv("IGGY_ROOT_PASSWORD", "a")
    with pytest.raises(InvalidConfig, match=r"passwords are 3\.\.100 bytes"):
        load_config(None)
    assert load_config(None, listeners={"iggy": "off"}).listeners["iggy"] is None


async def test_server_refuses_bad_root_password_in_process(tmp_path: Path) -> None:
    """The service checks too (a ServerConfig built without load_config)."""
    cfg = ServerConfig(broker=BrokerConfig(data_dir=tmp_path / "data"),
                       listeners={"iggy": ("127.0.0.1", 0)}, iggy=IggyOptions(root_password="a"))
    server = BayouServer(cfg)
    with pytest.raises(InvalidConfig, match=r"passwords are 3\.\.100 bytes"):
        await server.start()
    assert not server.listeners


def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_root_user_made_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IGGY_ROOT_PASSWORD", "s3cret-root")
    b = BrokerProcess(tmp_path / "data", fsync="never").start()
    try:
        # the users file exists once the broker listens, before any Iggy client has connected
        _wait_port(b.iggy_port)
        users = tmp_path / "data" / "iggy" / "users.json"
        assert users.exists()
        assert b"s3cret-root" not in users.read_bytes()
        with Client(f"127.0.0.1:{b.iggy_port}", password="s3cret-root") as c:
            assert c.list_topics() == []
        with pytest.raises(AuthenticationError):
            Client(f"127.0.0.1:{b.iggy_port}", password="iggy").list_topics()
    finally:
        assert b.stop() == 0, b.log()
