"""Issue 14.8: listeners bind loopback unless an address is given, and a broker started with a
listener that other hosts can reach and that lets anyone in says so at start."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bayou.config import load_config
from bayou.server.app import ServerConfig, is_loopback
from support.brokers import free_port


def test_every_default_listener_is_loopback() -> None:
    defaults = ServerConfig().listeners
    # Kafka is served on the V1 port by the first byte; its own listener (--kafka) is off by default
    assert defaults["kafka"] is None
    assert all(addr is not None and addr[0] == "127.0.0.1"
               for name, addr in defaults.items() if name != "kafka")
    cfg = load_config(None, cluster="zk://127.0.0.1:2181/b", broker_id=1,
                      listeners={"rtes": "19092", "cursus": ":19000"})
    assert cfg.listeners["rtes"] == ("127.0.0.1", 19092) and cfg.listeners["cursus"] == ("127.0.0.1", 19000)
    assert cfg.listeners["iggy"] == ("127.0.0.1", 8090) and cfg.listeners["tank"] == ("127.0.0.1", 11011)
    assert cfg.cluster is not None and cfg.cluster.replication == ("127.0.0.1", 9093)
    assert load_config(None, listeners={"rtes": "0.0.0.0:19092"}).listeners["rtes"] == ("0.0.0.0", 19092)


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.1.2.3") and is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.0.0.1")
    assert not is_loopback("broker.example")


def _serve_until_ready(tmp_path: Path, *args: str) -> list[dict[str, object]]:
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "bayou", "serve", "--data-dir", str(tmp_path / "d"),
                                 "--fsync", "never", "--http", "off", *args],
                                stdout=logf, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while b'"bayou ready"' not in log_path.read_bytes():
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(20)
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]


def test_an_exposed_listener_without_login_is_warned_about(tmp_path: Path) -> None:
    rtes, iggy, tank = free_port(), free_port(), free_port()
    logs = _serve_until_ready(tmp_path, "--rtes", f"0.0.0.0:{rtes}", "--cursus", "off",
                              "--iggy", f"0.0.0.0:{iggy}", "--tank", str(tank))
    warned = {r.get("protocol") for r in logs if r["level"] == "warning"
              and "without authentication" in str(r["msg"])}
    assert warned == {"rtes"}, logs  # Iggy logs in; TANK's bare port bound loopback
    ready = next(r for r in logs if r["msg"] == "bayou ready")
    assert ready["listeners"] == {"rtes": f"0.0.0.0:{rtes}", "iggy": f"0.0.0.0:{iggy}",
                                  "tank": f"127.0.0.1:{tank}"}
