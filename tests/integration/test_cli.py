"""The ``bayou`` command line, run as a real subprocess (``python -m bayou ...``)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.client.rtes import RtesClient
from support.brokers import BrokerProcess, free_port
from support.oracles import fnv1a_32


def bayou(*args: str, stdin: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bayou", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)



@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("cli") / "data", fsync="never").start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def addr(b: BrokerProcess) -> str:
    return f"127.0.0.1:{b.port}"


# -- help --------------------------------------------------------------------------------------

def test_help() -> None:
    r = bayou("--help")
    assert r.returncode == 0, r.stderr
    for word in ("serve", "topic", "produce", "consume"):
        assert word in r.stdout
    assert bayou("-h").stdout == r.stdout
    v = bayou("--version")
    assert v.returncode == 0 and v.stdout.startswith("bayou")


def test_serve_help() -> None:
    r = bayou("serve", "--help")
    assert r.returncode == 0, r.stderr
    for option in ("--data-dir", "--rtes", "--fsync", "--config"):
        assert option in r.stdout, option
    assert "always" in r.stdout and "interval" in r.stdout


@pytest.mark.parametrize("args", [("topic", "--help"), ("topic", "create", "--help"), ("produce", "--help"),
                                  ("consume", "--help")])
def test_subcommand_help(args: tuple[str, ...]) -> None:
    r = bayou(*args)
    assert r.returncode == 0, r.stderr
    assert "--bootstrap" in r.stdout or "create" in r.stdout


def test_unknown_command() -> None:
    r = bayou("frobnicate")
    assert r.returncode != 0
    assert "frobnicate" in r.stderr


# -- topics, produce, consume against a running broker ----------------------------------------

def test_topic_lifecycle(broker: BrokerProcess) -> None:
    b = addr(broker)
    r = bayou("topic", "create", "cli-orders", "--partitions", "4", "-b", b)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "created topic cli-orders (4 partitions)"
    r = bayou("topic", "create", "cli-cfg", "-p", "2", "-c", "retention.ms=3600000", "--bootstrap", b)
    assert r.returncode == 0, r.stderr

    r = bayou("topic", "list", "-b", b)
    assert r.returncode == 0, r.stderr
    names = r.stdout.split()
    assert "cli-orders" in names and "cli-cfg" in names
    assert names == sorted(names)

    r = bayou("topic", "describe", "cli-orders", "-b", b)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "topic: cli-orders" in lines[0] and "partitions: 4" in lines[0]
    assert lines[1] == "config: (defaults)"
    rows = [ln.split() for ln in lines[3:]]
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    assert all(row[1] == "leader" for row in rows)
    r = bayou("topic", "describe", "cli-cfg", "-b", b)
    assert "retention.ms=3600000" in r.stdout

    r = bayou("topic", "delete", "cli-cfg", "-b", b)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "deleted topic cli-cfg"
    assert "cli-cfg" not in bayou("topic", "list", "-b", b).stdout.split()

    r = bayou("topic", "describe", "cli-cfg", "-b", b)
    assert r.returncode != 0
    assert "topic not found: cli-cfg" in r.stderr
    r = bayou("topic", "delete", "cli-cfg", "-b", b)
    assert r.returncode != 0 and "topic not found" in r.stderr
    r = bayou("topic", "create", "bad/name", "-b", b)
    assert r.returncode != 0 and "invalid topic name" in r.stderr
    r = bayou("topic", "create", "x", "-c", "novalue", "-b", b)
    assert r.returncode != 0 and "KEY=VALUE" in r.stderr


def test_produce_and_consume(broker: BrokerProcess) -> None:
    b = addr(broker)
    assert bayou("topic", "create", "cli-events", "-p", "4", "-b", b).returncode == 0
    p_user1 = fnv1a_32(b"user1") % 4
    p_empty = fnv1a_32(b"") % 4
    assert p_user1 == p_empty == 1  # both land in partition 1 (rtes.md 6.1 table)

    r = bayou("produce", "cli-events", "created", "paid", "shipped", "--key", "user1", "-b", b)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"partition={p_user1} offset={i}" for i in range(3)]

    r = bayou("produce", "cli-events", "-b", b, stdin="from-stdin-1\nfrom-stdin-2\r\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"partition={p_empty} offset=3", f"partition={p_empty} offset=4"]

    r = bayou("produce", "cli-events", "other", "-k", "alice", "--acks", "0", "-b", b)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"partition={fnv1a_32(b'alice') % 4} offset=0"

    r = bayou("consume", "cli-events", "-b", b, "--iggy-bootstrap", f"127.0.0.1:{broker.iggy_port}")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert sorted(lines) == sorted([
        "1:0\tcreated", "1:1\tpaid", "1:2\tshipped", "1:3\tfrom-stdin-1", "1:4\tfrom-stdin-2",
        f"{fnv1a_32(b'alice') % 4}:0\tother"])

    r = bayou("consume", "cli-events", "--partition", "1", "--offset", "3", "-b", b,
              "--iggy-bootstrap", f"127.0.0.1:{broker.iggy_port}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["1:3\tfrom-stdin-1", "1:4\tfrom-stdin-2"]

    # What the CLI wrote is what the protocol serves.
    with RtesClient("127.0.0.1", broker.port) as c:
        records, hw = c.consume("cli-events", 1, 0)
    assert hw == 4
    assert [v for _o, v in records] == ["created", "paid", "shipped", "from-stdin-1", "from-stdin-2"]


def test_produce_errors(broker: BrokerProcess) -> None:
    b = addr(broker)
    r = bayou("produce", "cli-errors", "a,b", "-b", b)
    assert r.returncode != 0
    assert "value must not contain ','" in r.stderr
    r = bayou("produce", "cli-errors", "v", "--acks", "2", "-b", b)
    assert r.returncode != 0 and "--acks" in r.stderr


def test_client_commands_without_broker() -> None:
    port = free_port()
    for args in (("topic", "list"), ("produce", "t", "v"), ("consume", "t", "--iggy-bootstrap", f":{port}")):
        r = bayou(*args, "-b", f"127.0.0.1:{port}")
        assert r.returncode == 1, args
        via = "Iggy" if "consume" in args else "V1"
        assert r.stderr.splitlines() == [f"Error: cannot reach the broker ({via}) at 127.0.0.1:{port}: "
                                         "connection refused"], r.stderr


# -- serve -------------------------------------------------------------------------------------

def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"broker exited with {proc.returncode}: {log.read_text()}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(log.read_text())


def test_serve_with_config_file(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "cfgdata"
    config = tmp_path / "bayou.toml"
    config.write_text(f"""
data_dir = "{data}"
fsync = "interval:50"
max_connections = 100

[listeners]
rtes = "127.0.0.1:{port}"
cursus = "off"
iggy = "off"
tank = "off"
http = "off"

[broker]
default_partitions = 5
min_insync_replicas = 1
""")
    log = tmp_path / "serve.log"
    with log.open("wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "bayou", "serve", "--config", str(config)],
                                stdout=logf, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        _wait_listening(proc, port, log)
        with RtesClient("127.0.0.1", port) as c:
            r = c.produce("conf", "alice", "v", acks="all")  # min ISR 1: acks=all succeeds at once
            assert (r.partition, r.offset) == (fnv1a_32(b"alice") % 5, 0)
            assert c.describe_topic("conf")["partitions"] == "5"
        assert (data / "topics" / "conf").is_dir()
        assert not (tmp_path / "data").exists(), "the default data dir must not be used"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (data / ".clean_shutdown").exists()
    ready = [json.loads(line) for line in log.read_text().splitlines()
             if line.startswith("{") and '"bayou ready"' in line]
    assert ready and ready[0]["fsync"] == "interval:50", log.read_text()
    assert ready[0]["listeners"] == {"rtes": f"127.0.0.1:{port}"}


def test_flags_override_config_file(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "bayou.toml"
    config.write_text('data_dir = "ignored"\nfsync = "never"\n[listeners]\nrtes = "127.0.0.1:1"\n')
    b = BrokerProcess(tmp_path / "flagdata", "--config", str(config), port=port, fsync="always").start()
    try:
        with RtesClient("127.0.0.1", port) as c:
            c.produce("t", "k", "v")
        assert (tmp_path / "flagdata" / "topics" / "t").is_dir()
        assert not (tmp_path / "ignored").exists()
    finally:
        assert b.stop() == 0
    assert '"fsync": "always"' in b.log()


@pytest.mark.parametrize("value", ["sometimes", "interval", "interval:0", "interval:-5", "interval:x", ""])
def test_invalid_fsync(tmp_path: Path, value: str) -> None:
    data = tmp_path / "data"
    r = bayou("serve", "--data-dir", str(data), "--rtes", f"127.0.0.1:{free_port()}", "--iggy", "off",
              "--cursus", "off", "--tank", "off", "--fsync", value)
    assert r.returncode != 0
    assert "fsync must be always, never or interval:<ms>" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not data.exists(), "nothing is created before the configuration is valid"


@pytest.mark.parametrize(("args", "message"), [
    (("--rtes", "localhost:http"), "expects HOST:PORT or off"),
    (("--rtes", "127.0.0.1:70000"), "out of range"),
])
def test_invalid_listener(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    r = bayou("serve", "--data-dir", str(tmp_path / "data"), "--cursus", "off", "--iggy", "off",
              "--tank", "off", *args)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


@pytest.mark.parametrize(("toml", "message"), [
    ("colour = 'blue'\n", "unknown config keys: colour"),
    ("[broker]\nspeed = 3\n", "unknown [broker] keys: speed"),
    ("[log]\nsize = 3\n", "unknown [log] keys: size"),
    ("[listeners]\nkafka2 = '127.0.0.1:9093'\n", "unknown listener"),
    ("data_dir = \n", "cannot read config"),
])
def test_invalid_config_file(tmp_path: Path, toml: str, message: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    r = bayou("serve", "--config", str(config), "--data-dir", str(tmp_path / "data"))
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_missing_config_file(tmp_path: Path) -> None:
    r = bayou("serve", "--config", str(tmp_path / "nope.toml"))
    assert r.returncode != 0
    assert "nope.toml" in r.stderr


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = bayou("serve", "--data-dir", str(tmp_path / "data"), "--rtes", f"127.0.0.1:{port}",
                  "--cursus", "off")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr
    assert "cannot start" in r.stderr or "in use" in r.stderr, r.stderr
