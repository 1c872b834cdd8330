"""``bayou topic create NAME`` without ``-r`` gets the broker's replication factor (V1
ADMIN_CREATE_TOPIC carries -1 for "the broker's default", bayou's extension after Kafka's KIP-464);
``-r N`` still sets N, and 0 or -2 stay errors."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from bayou.client.rtes import RtesClient, RtesClientError
from bayou.protocols.rtes import messages as m
from bayou.protocols.rtes.codec import RtesError, decode_request
from support.brokers import BrokerProcess


def bayou(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bayou", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("rf")
    config = root / "bayou.toml"
    # a default that is neither the old CLI default (1) nor the built-in one (3)
    config.write_text("[broker]\nreplication_factor = 2\nmin_insync_replicas = 1\n")
    b = BrokerProcess(root / "data", "--config", str(config), fsync="never").start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def test_cli_create_without_r_uses_the_broker_default(broker: BrokerProcess) -> None:
    r = bayou("topic", "create", "dflt", "-p", "2", "-b", f"127.0.0.1:{broker.port}")
    assert r.returncode == 0, r.stderr
    d = bayou("topic", "describe", "dflt", "-b", f"127.0.0.1:{broker.port}")
    assert d.returncode == 0, d.stderr
    assert "replication factor: 2" in d.stdout, d.stdout


def test_cli_create_with_r(broker: BrokerProcess) -> None:
    r = bayou("topic", "create", "one", "-r", "1", "-b", f"127.0.0.1:{broker.port}")
    assert r.returncode == 0, r.stderr
    d = bayou("topic", "describe", "one", "-b", f"127.0.0.1:{broker.port}")
    assert "replication factor: 1" in d.stdout, d.stdout


def test_v1_minus_one_means_broker_default(broker: BrokerProcess) -> None:
    with RtesClient("127.0.0.1", broker.port) as c:
        reply = c.request("ADMIN_CREATE_TOPIC", "raw", "1", "-1")
        assert "replication_factor=2" in reply, reply
        assert c.describe_topic("raw")["replication_factor"] == "2"
        assert "replication_factor=1" in c.request("ADMIN_CREATE_TOPIC", "raw1", "1", "1")
        for bad in ("0", "-2"):
            with pytest.raises(RtesClientError, match="replication factor must be > 0"):
                c.request("ADMIN_CREATE_TOPIC", "bad", "1", bad)


def test_codec() -> None:
    assert decode_request(b"V1|1|ADMIN_CREATE_TOPIC|t 2 -1") == (
        "1", m.AdminCreateTopic("t", 2, m.DEFAULT_REPLICATION_FACTOR))
    with pytest.raises(RtesError, match="replication factor must be > 0"):
        decode_request(b"V1|1|ADMIN_CREATE_TOPIC|t 2 -3")
