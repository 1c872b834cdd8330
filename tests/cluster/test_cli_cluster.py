"""``bayou cluster describe`` against three brokers and a ZooKeeper (issue 16 item 6): the brokers,
the controller and every partition's leader, replicas and ISR it prints (as a table and as JSON)
are ZooKeeper's, also after a broker is paused past its session (``--under-replicated``) and
after it comes back."""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

from support.cli import bayou
from support.cluster import Cluster

TOPIC = "cli-rf3"
PARTITIONS = 3


def zk_view(cluster: Cluster) -> dict[str, Any]:
    """The brokers, controller and partitions (leader, replicas, ISR) as ZooKeeper has them."""
    controller = json.loads(cluster.kazoo.get("/controller")[0])["broker_id"]
    assignment = json.loads(cluster.kazoo.get(f"/topics/{TOPIC}")[0])["partitions"]
    partitions = {}
    for p in range(PARTITIONS):
        state = cluster.state(TOPIC, p)
        partitions[p] = {"leader": state["leader"], "replicas": sorted(assignment[str(p)]),
                         "isr": sorted(state["isr"])}  # type: ignore[call-overload]
    return {"brokers": cluster.live(), "controller": controller, "partitions": partitions}


def cli_view(doc: dict[str, Any]) -> dict[str, Any]:
    """The same, from ``bayou cluster describe --format json``."""
    info = doc["cluster"]
    return {"brokers": [b["id"] for b in info["brokers"]], "controller": info["controller"],
            "partitions": {p["partition"]: {"leader": p["leader"], "replicas": sorted(p["replicas"]),
                                            "isr": sorted(p["isr"])}
                           for p in doc["partitions"] if p["topic"] == TOPIC}}


def describe(cluster: Cluster, via: int, *args: str) -> subprocess.CompletedProcess[str]:
    b = cluster.brokers[via]
    return bayou("cluster", "describe", "-b", f"127.0.0.1:{b.port}", "--admin", f"127.0.0.1:{b.http_port}",
                 *args)


def describe_json(cluster: Cluster, via: int, *args: str) -> dict[str, Any]:
    r = describe(cluster, via, "--format", "json", *args)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def wait_agrees(cluster: Cluster, via: int, what: str) -> dict[str, Any]:
    """Wait until the CLI (through broker ``via``, whose view follows ZooKeeper's watches) shows
    what ZooKeeper holds, ZooKeeper's view being settled; the JSON document it printed."""
    seen: dict[str, Any] = {}

    def agrees() -> bool:
        nonlocal seen
        before = zk_view(cluster)
        seen = describe_json(cluster, via)
        return cli_view(seen) == before == zk_view(cluster)

    try:
        cluster.wait(agrees, 45, what)
    except TimeoutError:
        raise AssertionError(f"{what}: the CLI shows {cli_view(seen)}, "
                             f"ZooKeeper {zk_view(cluster)}") from None
    return seen


def ids(cell: str) -> list[int]:
    """A table cell of broker ids (``2,1,3``), sorted."""
    return sorted(int(x) for x in cell.split(","))


def table_rows(out: str, title: str) -> list[list[str]]:
    lines = out.splitlines()
    start = lines.index(title) + 2  # the title, the column header, then the rows
    rows = []
    for line in lines[start:]:
        if line in ("brokers", "partitions"):  # the next table's title
            break
        rows.append(line.split())
    return rows


def test_cluster_describe_matches_zookeeper(cluster: Cluster) -> None:
    r = bayou("topic", "create", TOPIC, "-p", str(PARTITIONS), "-r", "3", "-b",
              f"127.0.0.1:{cluster.brokers[1].port}")
    assert r.returncode == 0, r.stderr
    for p in range(PARTITIONS):
        cluster.wait(lambda p=p: len(cluster.isr(TOPIC, p)) == 3, 30, f"a full ISR of partition {p}")

    # the whole cluster, as JSON and as a table, through every broker
    for via in (1, 2, 3):
        doc = wait_agrees(cluster, via, f"broker {via}'s view of the full cluster")
        assert doc["cluster"]["mode"] == "cluster"
        info = doc["cluster"]
        assert info["under_replicated_partitions"] == 0 and info["offline_partitions"] == 0
        assert [p["status"] for p in doc["partitions"] if p["topic"] == TOPIC] == ["ok"] * PARTITIONS
        assert describe_json(cluster, via, "--under-replicated")["partitions"] == []
    zk = zk_view(cluster)
    assert zk["brokers"] == [1, 2, 3] and all(p["replicas"] == [1, 2, 3] for p in zk["partitions"].values())
    r = describe(cluster, 1)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    head = r.stdout.splitlines()[0]
    assert head.startswith(f"mode: cluster  controller: {zk['controller']}  brokers: 3  "), head
    assert "under-replicated: 0  offline: 0" in head, head
    brokers = table_rows(r.stdout, "brokers")
    assert [int(row[0]) for row in brokers] == [1, 2, 3], r.stdout
    for row in brokers:
        b = cluster.brokers[int(row[0])]
        assert f"rtes={b.port}" in row and f"http={b.http_port}" in row, row
        role = " ".join(row[row.index(f"tank={b.tank_port}") + 1:])  # after the endpoints (sorted)
        assert ("controller" in role) == (int(row[0]) == zk["controller"]), row
        assert ("this broker" in role) == (int(row[0]) == 1), row  # the one -b named
    rows = {int(row[1]): row for row in table_rows(r.stdout, "partitions") if row[0] == TOPIC}
    assert sorted(rows) == list(range(PARTITIONS)), r.stdout
    for p, state in zk["partitions"].items():
        assert int(rows[p][2]) == state["leader"], rows[p]
        assert ids(rows[p][3]) == state["replicas"] and ids(rows[p][4]) == state["isr"] == [1, 2, 3], rows[p]
        assert rows[p][5] == "ok", rows[p]

    # pause broker 3 past its ZooKeeper session: it leaves every ISR (and leads nothing)
    proc = cluster.brokers[3].proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)
    try:
        cluster.wait(lambda: 3 not in cluster.live()
                     and all(3 not in cluster.isr(TOPIC, p) and cluster.leader(TOPIC, p) in (1, 2)
                             for p in range(PARTITIONS)), 30, "broker 3 out of the cluster's state")
        wait_agrees(cluster, 1, "broker 1's view without broker 3")
        zk = zk_view(cluster)
        assert zk["brokers"] == [1, 2]
        doc = describe_json(cluster, 1, "--under-replicated")
        assert cli_view(doc) == zk, (cli_view(doc), zk)  # every partition of the topic is under-replicated
        statuses = [p["status"] for p in doc["partitions"] if p["topic"] == TOPIC]
        assert statuses == ["under-replicated"] * PARTITIONS, doc
        under = doc["cluster"]["under_replicated_partitions"]
        assert under >= PARTITIONS, doc
        r = describe(cluster, 2, "--under-replicated")
        assert r.returncode == 0 and r.stderr == "", r.stderr
        counts = f"brokers: 2  topics: 1  partitions: {PARTITIONS}  under-replicated: {under}"
        assert counts in r.stdout, r.stdout
        rows = {int(row[1]): row for row in table_rows(r.stdout, "partitions") if row[0] == TOPIC}
        assert sorted(rows) == list(range(PARTITIONS)), r.stdout
        for p, state in zk["partitions"].items():
            assert int(rows[p][2]) == state["leader"], rows[p]
            assert ids(rows[p][3]) == state["replicas"] == [1, 2, 3], rows[p]
            assert ids(rows[p][4]) == state["isr"] == [1, 2], rows[p]
            assert rows[p][5] == "under-replicated", rows[p]
    finally:
        proc.send_signal(signal.SIGCONT)

    # back: it registers again, catches up and rejoins every ISR; nothing is under-replicated
    cluster.wait(lambda: cluster.live() == [1, 2, 3]
                 and all(len(cluster.isr(TOPIC, p)) == 3 for p in range(PARTITIONS)), 60,
                 "broker 3 back in every ISR")
    for via in (3, 1):
        doc = wait_agrees(cluster, via, f"broker {via}'s view after broker 3 came back")
        assert [p["status"] for p in doc["partitions"] if p["topic"] == TOPIC] == ["ok"] * PARTITIONS
        assert describe_json(cluster, via, "--under-replicated")["partitions"] == []
