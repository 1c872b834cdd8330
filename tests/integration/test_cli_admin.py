"""The CLI's admin-API commands over a real broker subprocess: ``bayou group list|describe|
reset-offsets|delete``, ``bayou topic alter|add-partitions``, ``bayou cluster describe``, their
errors (unknown group or topic, a group with members, bad options), and Basic auth against a
broker that refuses anonymous requests."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.client import Client, Consumer
from bayou.protocols.iggy import messages as m
from support.brokers import BrokerProcess
from support.cli import bayou, module_broker, sdk_client


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from module_broker(tmp_path_factory, "cli-admin")


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[Client]:
    yield from sdk_client(broker)


def admin(b: BrokerProcess) -> list[str]:
    return ["-b", f"127.0.0.1:{b.port}", "--admin", f"127.0.0.1:{b.http_port}"]


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return r.stdout


def one_line_error(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    for w in words:
        assert w in lines[0], r.stderr


@pytest.fixture(scope="module")
def billing(broker: BrokerProcess, client: Client) -> str:
    """Group ``billing`` committed 2 of partition 0's 5 records and all 3 of partition 1's on
    topic ``a-orders``; it has no members."""
    client.create_topic("a-orders", 2)
    client.send("a-orders", 0, [b"p0-%d" % i for i in range(5)])
    client.send("a-orders", 1, [b"p1-%d" % i for i in range(3)])
    client.commit("billing", "a-orders", {0: 2, 1: 3})
    groups = json.loads(ok(bayou("group", "list", "--format", "json", *admin(broker))))
    return str(next(g["name"] for g in groups if g["name"].endswith(".billing") or g["name"] == "billing"))


def describe(b: BrokerProcess, group: str) -> dict[str, dict[str, object]]:
    doc = json.loads(ok(bayou("group", "describe", group, "--format", "json", *admin(b))))
    return {f"{p['topic']}/{p['partition']}": p for p in doc["partitions"]}


def committed(b: BrokerProcess, group: str) -> list[object]:
    parts = describe(b, group)
    return [parts[f"a-orders/{p}"]["committed_offset"] for p in (0, 1)]


def test_group_list_and_describe(broker: BrokerProcess, billing: str) -> None:
    out = ok(bayou("group", "list", *admin(broker)))
    header, *rows = out.splitlines()
    assert header.split() == ["group", "state", "protocol", "members", "topics", "lag"]
    mine = [r.split() for r in rows if r.split()[0] == billing]
    assert len(mine) == 1 and mine[0][-2:] == ["a-orders", "3"], out  # 5 - 2 + 3 - 3
    assert ok(bayou("group", "list", "--topic", "a-orders", *admin(broker))).count("\n") == 2
    assert ok(bayou("group", "list", "--topic", "nothing-here", *admin(broker))).count("\n") == 1

    out = ok(bayou("group", "describe", billing, *admin(broker)))
    assert out.splitlines()[0].startswith(f"group: {billing}") and "lag: 3" in out.splitlines()[0]
    table = [line.split() for line in out.splitlines() if line.startswith("a-orders")]
    assert [row[1:] for row in table] == [["0", "-", "2", "0", "5", "3"], ["1", "-", "3", "0", "3", "0"]]
    parts = describe(broker, billing)
    assert parts["a-orders/0"]["committed_offset"] == 2 and parts["a-orders/0"]["lag"] == 3


def test_reset_offsets_dry_run_changes_nothing(broker: BrokerProcess, billing: str, client: Client) -> None:
    out = ok(bayou("group", "reset-offsets", billing, "--topic", "a-orders", "--to-earliest", "--dry-run",
                   *admin(broker)))
    assert "would move (dry run, nothing changed)" in out.splitlines()[0]
    assert [line.split() for line in out.splitlines()[2:]] == [["0", "2", "0"], ["1", "3", "0"]]
    assert client.committed("billing", "a-orders") == {0: 2, 1: 3}
    parts = describe(broker, billing)
    assert [parts[k]["committed_offset"] for k in ("a-orders/0", "a-orders/1")] == [2, 3]

    doc = json.loads(ok(bayou("group", "reset-offsets", billing, "--topic", "a-orders", "--to-offset", "4",
                              "--partition", "0", "--format", "json", *admin(broker))))
    assert doc["dry_run"] is False and doc["partitions"] == [{"partition": 0, "before": 2, "after": 4}]
    assert describe(broker, billing)["a-orders/0"]["committed_offset"] == 4
    ok(bayou("group", "reset-offsets", billing, "--topic", "a-orders", "--to-earliest", *admin(broker)))
    assert committed(broker, billing) == [0, 0]
    ok(bayou("group", "reset-offsets", billing, "--topic", "a-orders", "--to-latest", *admin(broker)))
    assert committed(broker, billing) == [5, 3]
    future = str(int(time.time() * 1000) + 3_600_000)
    out = ok(bayou("group", "reset-offsets", billing, "--topic", "a-orders", "--to-time", "-1d",
                   *admin(broker)))
    assert committed(broker, billing) == [0, 0], out  # every record is newer than a day
    ok(bayou("group", "reset-offsets", billing, "--topic", "a-orders", "--to-time", future, *admin(broker)))
    assert committed(broker, billing) == [5, 3]  # nothing that late: the high watermark
    client.commit("billing", "a-orders", {0: 2, 1: 3})


def test_reset_offsets_usage_errors(broker: BrokerProcess, billing: str) -> None:
    r = bayou("group", "reset-offsets", billing, "--topic", "a-orders", *admin(broker))
    assert r.returncode == 2 and "exactly one of --to-earliest" in r.stderr
    r = bayou("group", "reset-offsets", billing, "--topic", "a-orders", "--to-earliest", "--to-latest",
              *admin(broker))
    assert r.returncode == 2 and "exactly one of" in r.stderr
    r = bayou("group", "reset-offsets", billing, "--to-earliest", *admin(broker))
    assert r.returncode == 2 and "--topic" in r.stderr
    one_line_error(bayou("group", "reset-offsets", billing, "--topic", "a-nope", "--to-earliest",
                         *admin(broker)),
                   "a-nope")
    one_line_error(bayou("group", "reset-offsets", billing, "--topic", "a-orders", "--to-earliest",
                         "--partition", "7", *admin(broker)), "no partition 7")


def test_a_group_with_members_is_not_reset_or_deleted(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("a-live", 1)
    client.send("a-live", 0, [b"x"])
    with Consumer(f"127.0.0.1:{broker.iggy_port}", group_id="live") as member:
        member.subscribe(["a-live"])
        name = "iggy.a-live.live"
        before = describe(broker, name)
        one_line_error(bayou("group", "reset-offsets", name, "--topic", "a-live", "--to-latest",
                             *admin(broker)),
                       "active members", "GROUP_NOT_EMPTY")
        one_line_error(bayou("group", "delete", name, *admin(broker)), "active members")
        assert describe(broker, name) == before


def test_unknown_group(broker: BrokerProcess) -> None:
    for args in (("describe", "no-such-group"), ("delete", "no-such-group")):
        one_line_error(bayou("group", *args, *admin(broker)), "no group no-such-group", "GROUP_NOT_FOUND")


def test_sdk_group_names_are_suggested(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("a-sdk", 1)
    client.send("a-sdk", 0, [b"1", b"2"])
    r = bayou("consume", "a-sdk", "--group", "reports", "-b", f"127.0.0.1:{broker.port}",
              "--iggy-bootstrap", f"127.0.0.1:{broker.iggy_port}")
    assert r.stdout.splitlines() == ["0:0\t1", "0:1\t2"], r.stderr
    one_line_error(bayou("group", "describe", "reports", *admin(broker)), "iggy.a-sdk.reports")
    assert describe(broker, "iggy.a-sdk.reports")["a-sdk/0"]["committed_offset"] == 2


def test_group_delete(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("a-gone", 1)
    client.commit("doomed", "a-gone", {0: 0})
    name = next(g["name"] for g in json.loads(ok(bayou("group", "list", "--format", "json", *admin(broker))))
                if g["name"].endswith("doomed"))
    assert ok(bayou("group", "delete", name, *admin(broker))).strip() == f"deleted group {name}"
    names = [g["name"] for g in json.loads(ok(bayou("group", "list", "--format", "json", *admin(broker))))]
    assert name not in names
    one_line_error(bayou("group", "delete", name, *admin(broker)), "GROUP_NOT_FOUND")


# -- topics ---------------------------------------------------------------------------------------

def config_of(b: BrokerProcess, topic: str) -> dict[str, str]:
    doc = json.loads(ok(bayou("topic", "describe", topic, "--format", "json", "-b", f"127.0.0.1:{b.port}")))
    return dict(doc["config"])


def test_topic_alter(broker: BrokerProcess) -> None:
    ok(bayou("topic", "create", "a-cfg", "-p", "1", "-b", f"127.0.0.1:{broker.port}"))
    out = ok(bayou("topic", "alter", "a-cfg", "-c", "retention.ms=3600000", "-c", "segment.bytes=1048576",
                   *admin(broker)))
    assert out.strip() == "altered topic a-cfg; config: retention.ms=3600000 segment.bytes=1048576"
    assert config_of(broker, "a-cfg") == {"retention.ms": "3600000", "segment.bytes": "1048576"}
    ok(bayou("topic", "alter", "a-cfg", "--delete-config", "segment.bytes", *admin(broker)))
    assert config_of(broker, "a-cfg") == {"retention.ms": "3600000"}
    r = bayou("topic", "alter", "a-cfg", *admin(broker))
    assert r.returncode == 2 and "at least one --config" in r.stderr
    r = bayou("topic", "alter", "a-cfg", "-c", "novalue", *admin(broker))
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    one_line_error(bayou("topic", "alter", "a-cfg", "-c", "retention.ms=soon", *admin(broker)),
                   "retention.ms")
    assert config_of(broker, "a-cfg") == {"retention.ms": "3600000"}
    one_line_error(bayou("topic", "alter", "a-missing", "-c", "retention.ms=1", *admin(broker)), "a-missing")


def test_topic_add_partitions(broker: BrokerProcess) -> None:
    ok(bayou("topic", "create", "a-grow", "-p", "2", "-b", f"127.0.0.1:{broker.port}"))
    out = ok(bayou("topic", "add-partitions", "a-grow", "--count", "3", *admin(broker)))
    assert out.strip() == "topic a-grow now has 5 partitions (3 added)"
    doc = json.loads(ok(bayou("topic", "describe", "a-grow", "--format", "json",
                              "-b", f"127.0.0.1:{broker.port}")))
    assert doc["partition_count"] == 5
    r = bayou("topic", "add-partitions", "a-grow", "--count", "0", *admin(broker))
    assert r.returncode == 2
    one_line_error(bayou("topic", "add-partitions", "a-missing", "--count", "1", *admin(broker)), "a-missing")


# -- the cluster ----------------------------------------------------------------------------------

def test_cluster_describe(broker: BrokerProcess) -> None:
    ok(bayou("topic", "create", "a-clu", "-p", "2", "--if-not-exists", "-b", f"127.0.0.1:{broker.port}"))
    out = ok(bayou("cluster", "describe", *admin(broker)))
    lines = out.splitlines()
    assert lines[0].startswith("mode: single  controller: 0  brokers: 1")
    assert "under-replicated: 0  offline: 0" in lines[0]
    broker_row = lines[lines.index("brokers") + 2].split()
    assert broker_row[:2] == ["0", "127.0.0.1"] and f"rtes={broker.port}" in broker_row
    assert "controller,this" in out
    rows = [line.split() for line in lines[lines.index("partitions") + 2:]]
    assert ["a-clu", "0", "0", "0", "0", "ok"] in rows and ["a-clu", "1", "0", "0", "0", "ok"] in rows
    doc = json.loads(ok(bayou("cluster", "describe", "--format", "json", *admin(broker))))
    assert doc["cluster"]["mode"] == "single"
    assert doc["cluster"]["brokers"][0]["endpoints"]["iggy"] == broker.iggy_port
    mine = [p for p in doc["partitions"] if p["topic"] == "a-clu"]
    assert mine == [{"topic": "a-clu", "partition": p, "leader": 0, "replicas": [0], "isr": [0],
                     "under_replicated": False, "offline": False, "status": "ok"} for p in (0, 1)]
    doc = json.loads(ok(bayou("cluster", "describe", "--under-replicated", "--format", "json",
                              *admin(broker))))
    assert doc["partitions"] == []


def test_admin_address_from_the_environment(broker: BrokerProcess) -> None:
    out = ok(bayou("cluster", "describe", "--format", "json", env={"BAYOU_ADMIN": f"http://127.0.0.1:{broker.http_port}"}))
    assert json.loads(out)["cluster"]["mode"] == "single"
    r = bayou("cluster", "describe", "--admin", "ftp://x")
    assert r.returncode == 2 and "'ftp://x' is not an http(s) URL" in r.stderr, r.stderr


# -- authentication -------------------------------------------------------------------------------

def test_basic_auth_and_tokens(tmp_path: Path) -> None:
    config = tmp_path / "bayou.toml"
    config.write_text('[security]\nanonymous = "none"\n')
    b = BrokerProcess(tmp_path / "data", "--config", str(config), fsync="never").start()
    try:
        one_line_error(bayou("cluster", "describe", *admin(b)), "UNAUTHORIZED",
                       "--user/--password or --token")
        one_line_error(bayou("cluster", "describe", "--user", "iggy", "--password", "wrong", *admin(b)),
                       "UNAUTHORIZED")
        assert json.loads(ok(bayou("cluster", "describe", "--format", "json", "--user", "iggy", "--password",
                                   "iggy", *admin(b))))["cluster"]["mode"] == "single"
        env = {"BAYOU_USER": "iggy", "BAYOU_PASSWORD": "iggy"}
        header = ["group", "state", "protocol", "members", "topics", "lag"]
        assert ok(bayou("group", "list", *admin(b), env=env)).split() == header
        with Client(f"127.0.0.1:{b.iggy_port}") as c:  # a personal access token of the root user
            token = c.conn.call(m.CreatePersonalAccessToken("cli-test", 0)).token
        assert ok(bayou("group", "list", "--token", token, *admin(b))).split() == header
        assert ok(bayou("group", "list", *admin(b), env={"BAYOU_TOKEN": token})).split() == header
        one_line_error(bayou("group", "list", "--token", token + "x", *admin(b)), "UNAUTHORIZED")
    finally:
        assert b.stop() == 0, b.log()
