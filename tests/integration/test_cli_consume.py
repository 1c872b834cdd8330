"""The operator CLI's data side over a real broker subprocess: consume flags (groups, seeks, limits,
fields, JSON), ``| head`` exiting quietly, bare hosts meaning default ports, one-line connection
errors, progress bars and tables only on a terminal (a real pty), ``topic create --if-not-exists``."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.client import Client
from support.brokers import BrokerProcess, free_port
from support.cli import BAYOU, bayou, module_broker, on_terminal, sdk_client


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from module_broker(tmp_path_factory, "cli-consume")


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[Client]:
    yield from sdk_client(broker)


def addrs(b: BrokerProcess) -> list[str]:
    return ["-b", f"127.0.0.1:{b.port}", "--iggy-bootstrap", f"127.0.0.1:{b.iggy_port}"]


# -- consume -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def events(client: Client) -> str:
    """Topic ``c-events``: partition 0 holds v0..v9 (keys k0..k9, a header on even ones),
    partition 1 holds w0..w4."""
    client.create_topic("c-events", 2)
    client.send("c-events", 0, [b"v%d" % i for i in range(10)], keys=[b"k%d" % i for i in range(10)],
                headers=[[("h", b"%d" % i)] if i % 2 == 0 else [] for i in range(10)])
    client.send("c-events", 1, [b"w%d" % i for i in range(5)])
    return "c-events"


def test_consume_everything_by_default(broker: BrokerProcess, events: str) -> None:
    r = bayou("consume", events, *addrs(broker))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert sorted(lines) == sorted([f"0:{i}\tv{i}" for i in range(10)] + [f"1:{i}\tw{i}" for i in range(5)])
    assert r.stderr == ""  # no progress bar without a terminal


def test_consume_start_positions_and_limits(broker: BrokerProcess, events: str) -> None:
    r = bayou("consume", events, "-p", "0", "--offset", "7", *addrs(broker))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0:7\tv7", "0:8\tv8", "0:9\tv9"]
    r = bayou("consume", events, "-p", "0", "--from-beginning", "--max-messages", "3", *addrs(broker))
    assert r.stdout.splitlines() == ["0:0\tv0", "0:1\tv1", "0:2\tv2"]
    r = bayou("consume", events, "--offset", "3", "-n", "100", *addrs(broker))
    assert sorted(r.stdout.splitlines()) == sorted([f"0:{i}\tv{i}" for i in range(3, 10)]
                                                   + ["1:3\tw3", "1:4\tw4"])
    r = bayou("consume", events, "-p", "1", "--offset", "99", *addrs(broker))
    assert r.returncode == 0 and r.stdout == ""
    r = bayou("consume", events, "-p", "5", *addrs(broker))
    assert r.returncode == 1 and r.stderr.strip() == "Error: topic c-events has no partition 5 (2 partitions)"
    r = bayou("consume", events, "--from-beginning", "--offset", "2", *addrs(broker))
    assert r.returncode == 2 and "--from-beginning and --offset exclude each other" in r.stderr
    r = bayou("consume", "c-nope", *addrs(broker))
    assert r.returncode == 1 and "Traceback" not in r.stderr and "c-nope" in r.stderr, r.stderr


def test_consume_from_time(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("c-time", 1)
    client.send("c-time", 0, [b"old1", b"old2"])
    cut = int(time.time() * 1000) + 1
    deadline = time.monotonic() + 5
    while int(time.time() * 1000) <= cut:  # the next record is stamped after ``cut``
        assert time.monotonic() < deadline
        time.sleep(0.001)
    client.send("c-time", 0, [b"new1", b"new2"])
    r = bayou("consume", "c-time", "--from-time", str(cut), *addrs(broker))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0:2\tnew1", "0:3\tnew2"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(cut / 1000 - 3600)) + "Z"
    assert len(bayou("consume", "c-time", "--from-time", iso, *addrs(broker)).stdout.splitlines()) == 4
    assert len(bayou("consume", "c-time", "--from-time", "-1h", *addrs(broker)).stdout.splitlines()) == 4
    r = bayou("consume", "c-time", "--from-time", "yesterday", *addrs(broker))
    assert r.returncode == 2 and "is not a time" in r.stderr


def test_consume_print_fields(broker: BrokerProcess, events: str) -> None:
    r = bayou("consume", events, "-p", "0", "-n", "2", "--print", "key,headers,timestamp,partition,offset",
              *addrs(broker))
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    assert [row[:2] for row in rows] == [["k0", "h=0"], ["k1", "NO_HEADERS"]]
    assert [row[3:] for row in rows] == [["0", "0", "v0"], ["0", "1", "v1"]]
    assert all(row[2].endswith("Z") and row[2][:2] == "20" for row in rows)
    r = bayou("consume", events, "-p", "1", "-n", "1", "--print", "offset,key", *addrs(broker))
    assert r.stdout.splitlines() == ["0\tnull\tw0"]
    r = bayou("consume", events, "--print", "colour", *addrs(broker))
    assert r.returncode == 2 and "unknown field 'colour'" in r.stderr


def test_consume_json(broker: BrokerProcess, client: Client, events: str) -> None:
    r = bayou("consume", events, "-p", "0", "-n", "3", "--format", "json", *addrs(broker))
    assert r.returncode == 0, r.stderr
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(d["partition"], d["offset"], d["key"], d["value"]) for d in docs] == [
        (0, 0, "k0", "v0"), (0, 1, "k1", "v1"), (0, 2, "k2", "v2")]
    assert docs[0]["headers"] == [["h", "0"]] and docs[1]["headers"] == []
    assert docs[0]["topic"] == events and abs(docs[0]["timestamp"] - time.time() * 1000) < 3_600_000
    client.create_topic("c-binary", 1)
    client.send("c-binary", 0, [b"\xff\x00binary", None])
    docs = [json.loads(line) for line in bayou("consume", "c-binary", "--format", "json",
                                               *addrs(broker)).stdout.splitlines()]
    assert docs[0]["value"] == "/wBiaW5hcnk=" and docs[0]["value_encoding"] == "base64"
    assert docs[1]["value"] is None and docs[1]["key"] is None


def test_consume_in_a_group_commits_what_it_printed(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("c-group", 2)
    client.send("c-group", 0, [b"a%d" % i for i in range(6)])
    client.send("c-group", 1, [b"b%d" % i for i in range(4)])
    first = bayou("consume", "c-group", "--group", "billing", "-n", "4", *addrs(broker))
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == 4
    committed = client.committed("billing", "c-group")
    assert sum(committed.values()) == 4  # exactly what was printed, Kafka's next-offset convention
    rest = bayou("consume", "c-group", "--group", "billing", *addrs(broker))
    assert rest.returncode == 0, rest.stderr
    seen = first.stdout.splitlines() + rest.stdout.splitlines()
    assert sorted(seen) == sorted([f"0:{i}\ta{i}" for i in range(6)] + [f"1:{i}\tb{i}" for i in range(4)])
    assert client.committed("billing", "c-group") == {0: 6, 1: 4}
    again = bayou("consume", "c-group", "--group", "billing", *addrs(broker))
    assert again.returncode == 0 and again.stdout == ""
    replay = bayou("consume", "c-group", "--group", "billing", "--from-beginning", "-n", "10", *addrs(broker))
    assert len(replay.stdout.splitlines()) == 10
    r = bayou("consume", "c-group", "--group", "billing", "-p", "0", *addrs(broker))
    assert r.returncode == 2 and "--partition and --group exclude each other" in r.stderr


def test_consume_into_head_exits_quietly(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("c-pipe", 1)
    for n in range(4):  # 4,000 records of 200 B: far more than a pipe buffer holds
        client.send("c-pipe", 0, [b"%05d-" % (n * 1000 + i) + b"x" * 194 for i in range(1000)])
    consume = subprocess.Popen([*BAYOU, "consume", "c-pipe", "--group", "piped", *addrs(broker)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    head = subprocess.Popen(["head", "-n", "1"], stdin=consume.stdout, stdout=subprocess.PIPE)
    assert consume.stdout is not None and consume.stderr is not None
    consume.stdout.close()  # head alone reads the pipe now
    out, _ = head.communicate(timeout=60)
    err = consume.stderr.read().decode()
    assert consume.wait(60) == 0, err
    assert out.decode().startswith("0:0\t00000-xxx") and out.count(b"\n") == 1
    assert err == ""
    done = client.committed("piped", "c-pipe").get(0)
    assert done is None or done < 4000  # only batches that reached the pipe whole count as delivered


# -- addresses and errors ------------------------------------------------------------------------

def test_bare_host_means_the_default_ports(tmp_path: Path) -> None:
    """A broker on the default V1, Iggy and HTTP ports of a loopback address of its own (Linux
    routes all of 127/8 to lo), so no other test's broker owns them; ``-b HOST`` finds all three."""
    host = f"127.{random.randrange(1, 255)}.{random.randrange(1, 255)}.{random.randrange(2, 255)}"
    log = tmp_path / "serve.log"
    with log.open("wb") as logf:
        proc = subprocess.Popen([*BAYOU, "serve", "--data-dir", str(tmp_path / "data"), "--fsync", "never",
                                 "--rtes", f"{host}:9092", "--iggy", f"{host}:8090", "--http", f"{host}:9080",
                                 "--cursus", "off", "--tank", "off"], stdout=logf, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        for port in (9092, 8090, 9080):
            while True:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                try:
                    socket.create_connection((host, port), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.05)
        r = bayou("topic", "create", "bare", "-p", "1", "-b", host)
        assert r.returncode == 0, r.stderr
        assert bayou("produce", "bare", "v", "-b", host).returncode == 0
        r = bayou("consume", "bare", "-b", host)  # the Iggy listener: -b's host, port 8090
        assert r.returncode == 0 and r.stdout == "0:0\tv\n", r.stderr
        r = bayou("cluster", "describe", "--format", "json", "-b", host)  # the admin API: port 9080
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["cluster"]["brokers"][0]["endpoints"]["rtes"] == 9092
    finally:
        proc.terminate()
        proc.wait(30)


def test_connection_errors_name_the_address() -> None:
    port = free_port()
    cases = [(["topic", "list", "-b", f"127.0.0.1:{port}"], f"the broker (V1) at 127.0.0.1:{port}"),
             (["topic", "describe", "t", "-b", f"127.0.0.1:{port}"], f"the broker (V1) at 127.0.0.1:{port}"),
             (["consume", "t", "--iggy-bootstrap", f"127.0.0.1:{port}"],
              f"the broker (Iggy) at 127.0.0.1:{port}"),
             (["topic", "alter", "t", "-c", "retention.ms=1", "--admin", f"127.0.0.1:{port}"],
              f"the admin API at http://127.0.0.1:{port}")]
    for args, where in cases:
        r = bayou(*args)
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.splitlines() == [f"Error: cannot reach {where}: connection refused"], r.stderr


@pytest.mark.parametrize("bad", ["127.0.0.1:x", "127.0.0.1:70000", "[::1"])
def test_bad_bootstrap(bad: str) -> None:
    r = bayou("topic", "list", "-b", bad)
    assert r.returncode == 2
    assert "Invalid value for '--bootstrap'" in r.stderr and "Traceback" not in r.stderr, r.stderr


# -- create --if-not-exists, list/describe as JSON ------------------------------------------------

def test_create_if_not_exists(broker: BrokerProcess) -> None:
    b = ["-b", f"127.0.0.1:{broker.port}"]
    assert bayou("topic", "create", "c-once", "-p", "2", *b).returncode == 0
    r = bayou("topic", "create", "c-once", "-p", "2", *b)
    assert r.returncode == 1 and r.stderr.strip() == \
        "Error: topic already exists: c-once (--if-not-exists accepts that)"
    r = bayou("topic", "create", "c-once", "-p", "5", "--if-not-exists", *b)
    assert r.returncode == 0 and r.stdout.strip() == "topic c-once exists; nothing changed", r.stderr
    doc = json.loads(bayou("topic", "describe", "c-once", "--format", "json", *b).stdout)
    assert doc["partition_count"] == 2  # unchanged
    r = bayou("topic", "create", "c-twice", "--if-not-exists", *b)
    assert r.returncode == 0 and r.stdout.strip() == "created topic c-twice (3 partitions)"


def test_list_and_describe_as_json(broker: BrokerProcess, client: Client) -> None:
    b = ["-b", f"127.0.0.1:{broker.port}"]
    assert bayou("topic", "create", "c-json", "-p", "2", "-c", "retention.ms=60000", *b).returncode == 0
    client.send("c-json", 1, [b"x", b"y"])
    names = json.loads(bayou("topic", "list", "--format", "json", *b).stdout)
    assert "c-json" in names and names == sorted(names)
    doc = json.loads(bayou("topic", "describe", "c-json", "--format", "json", *b).stdout)
    assert doc["topic"] == "c-json" and doc["partition_count"] == 2
    assert doc["config"] == {"retention.ms": "60000"}
    assert [(p["partition"], p["log_start"], p["log_end"], p["status"]) for p in doc["partitions"]] == [
        (0, 0, 0, "ok"), (1, 0, 2, "ok")]


# -- a terminal: tables and progress bars; a pipe: neither ----------------------------------------

def test_describe_is_a_table_on_a_terminal(broker: BrokerProcess) -> None:
    b = ["-b", f"127.0.0.1:{broker.port}"]
    assert bayou("topic", "create", "c-table", "-p", "2", "--if-not-exists", *b).returncode == 0
    code, shown, _err = on_terminal(["topic", "describe", "c-table", *b], "stdout")
    assert code == 0, shown
    assert "┃" in shown or "│" in shown, shown  # rich's box drawing
    assert "log end" in shown and "c-table" in shown
    plain = bayou("topic", "describe", "c-table", *b).stdout
    assert "│" not in plain and "┃" not in plain


def test_produce_file_draws_progress_only_on_a_terminal(broker: BrokerProcess, tmp_path: Path) -> None:
    b = ["-b", f"127.0.0.1:{broker.port}"]
    data = tmp_path / "lines.txt"
    data.write_text("".join(f"line-{i}\n" for i in range(300)))
    code, shown, out = on_terminal(["produce", "c-file", "-f", str(data), *b], "stderr")
    assert code == 0, shown
    assert out.strip() == "produced 300 records to c-file"
    assert "producing to c-file" in shown and "300/300" in shown, shown
    r = bayou("produce", "c-file", "-f", str(data), *b)
    assert r.returncode == 0 and r.stderr == "" and r.stdout.strip() == "produced 300 records to c-file"
    r = bayou("consume", "c-file", "--iggy-bootstrap", f"127.0.0.1:{broker.iggy_port}", "--format", "json")
    assert sorted(json.loads(x)["value"] for x in r.stdout.splitlines()) == sorted(
        [f"line-{i}" for i in range(300)] * 2)


def test_large_consume_draws_progress_on_a_terminal(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("c-large", 1)
    client.send("c-large", 0, [b"r%d" % i for i in range(1500)])
    code, shown, out = on_terminal(["consume", "c-large", *addrs(broker)], "stderr")
    assert code == 0, shown
    assert len(out.splitlines()) == 1500
    assert "consuming" in shown and "1500/1500" in shown, shown


def test_verify_draws_progress_only_on_a_terminal(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", fsync="always").start()
    try:
        with Client(f"127.0.0.1:{b.iggy_port}") as c:
            c.create_topic("v-one", 3)
            for p in range(3):
                c.send("v-one", p, [b"x"])
    finally:
        assert b.stop() == 0
    code, shown, out = on_terminal(["verify", "--data-dir", str(tmp_path / "data")], "stderr")
    assert code == 0, shown + out
    assert "checking" in shown, shown
    r = bayou("verify", "--data-dir", str(tmp_path / "data"))
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == out
