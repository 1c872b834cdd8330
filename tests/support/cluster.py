"""A real ZooKeeper (Debian's package, installed by the Makefile) and bayou brokers in cluster
mode, each a subprocess with its own data directory and ports: shared by tests/cluster/ and
tests/chaos/."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from support.brokers import BrokerProcess, free_port
from support.zookeeper import ZooKeeperServer

CLUSTER_CONFIG = """
[cluster]
session_timeout_ms = 3000

[broker]
replica_lag_timeout_ms = 2000
ack_all_timeout_ms = 3000
"""


def v1(port: int, line: str, timeout: float = 10.0) -> str:
    """One V1 request on a fresh connection; the reply line ("" if the connection failed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(line.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    return ""
                buf += chunk
            return buf.decode().strip()
    except OSError:
        return ""


def ready(broker: BrokerProcess) -> bool:
    """Whether the broker has logged "bayou ready": its start-up work done, which is when /ready
    turns 200 (read from the log, so that a test with TLS on the HTTP port needs no certificate)."""
    try:
        return '"msg": "bayou ready"' in broker.log_path.read_text(errors="replace")
    except OSError:
        return False


class Cluster:
    """Brokers 1..n joined to one ZooKeeper chroot; a killed broker restarts on its own ports and data."""

    def __init__(self, root: Path, zk: ZooKeeperServer, n: int, chroot: str,
                 config: str = CLUSTER_CONFIG) -> None:
        self.root = root
        self.zk = zk
        self.url = zk.url(chroot)
        self.chroot = "/" + chroot.strip("/")
        self.cfg = root / "cluster.toml"
        self.cfg.write_text(config)
        self.brokers: dict[int, BrokerProcess] = {i: self._process(i) for i in range(1, n + 1)}
        self.kazoo = KazooClient(hosts=zk.hosts + self.chroot, timeout=10.0)

    def _process(self, i: int) -> BrokerProcess:
        """Broker ``i`` on fresh free ports (its data directory stays the same)."""
        data = self.root / f"broker{i}" / "data"
        data.parent.mkdir(parents=True, exist_ok=True)
        return BrokerProcess(data, "--config", str(self.cfg), "--cluster", self.url, "--broker-id", str(i),
                             "--replication", f"127.0.0.1:{free_port()}", "--advertised-host", "127.0.0.1",
                             fsync="always")

    def start(self) -> Cluster:
        for i in self.brokers:
            try:
                self.brokers[i].start(timeout=60)
            except RuntimeError:  # exited at once: a free port taken meanwhile; try new ports once
                self.brokers[i] = self._process(i)
                self.brokers[i].start(timeout=60)
        self.kazoo.start(timeout=20)
        self.wait(lambda: len(self.live()) == len(self.brokers), 60, "every broker registered")
        # and every broker's start-up work done (ready): some holds a cluster-wide lock (the Iggy
        # catalog's), which a broker a test then pauses would keep for its whole ZooKeeper session
        for i, b in self.brokers.items():
            self.wait(lambda b=b: ready(b), 60, f"broker {i} ready")
        return self

    def live(self) -> list[int]:
        """Broker ids registered in ZooKeeper now."""
        try:
            return sorted(int(b) for b in self.kazoo.get_children("/brokers/ids"))
        except Exception:
            return []

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None:
                b.kill()
        self.kazoo.stop()
        self.kazoo.close()

    def state(self, topic: str, partition: int) -> dict[str, object]:
        """The partition's state node (no leader, empty ISR while it does not exist)."""
        try:
            data, _stat = self.kazoo.get(f"/topics/{topic}/partitions/{partition}/state")
        except NoNodeError:
            return {"leader": -1, "leader_epoch": -1, "isr": []}
        doc: dict[str, object] = json.loads(data)
        return doc

    def leader(self, topic: str, partition: int) -> int:
        return int(self.state(topic, partition)["leader"])  # type: ignore[call-overload]

    def isr(self, topic: str, partition: int) -> list[int]:
        return list(self.state(topic, partition)["isr"])  # type: ignore[call-overload]

    def wait(self, cond: object, timeout: float, what: str) -> float:
        """Poll ``cond()`` until true; the seconds it took."""
        t0 = time.monotonic()
        while not cond():  # type: ignore[operator]
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)
        return time.monotonic() - t0


def assert_replicates(cluster: Cluster, topic: str, value: str, timeout: float = 30.0) -> None:
    """A new topic with 3 replicas reaches a full ISR, and a record produced with acks=all reaches
    every replica."""
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3")
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, timeout, "a full ISR")
    leader = cluster.leader(topic, 0)
    assert "|OK|" in v1(cluster.brokers[leader].port, f"V1|2|PRODUCE|{topic} k:{value} acks=all")
    cluster.wait(lambda: all(f"0:{value}" in v1(b.port, f"V1|3|CONSUME|{topic} 0 0")
                             for b in cluster.brokers.values()), timeout, "every replica to hold the record")


OK = re.compile(r"^V1\|\d+\|OK\|partition=(\d+) offset=(\d+) hw=(-?\d+)$")


class Producer(threading.Thread):
    """Sends unique values with acks=all to whichever broker leads, one at a time; remembers the
    acknowledged ones (value, offset) in acknowledgement order."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.topic = topic
        self.acked: list[tuple[str, int]] = []
        self.acked_by: list[tuple[float, int]] = []  # (monotonic time, broker id) per acknowledgement
        self.attempts = 0
        self.stop_flag = threading.Event()
        self.target = 1

    def run(self) -> None:
        ids = sorted(self.cluster.brokers)
        while not self.stop_flag.is_set():
            value = f"r{self.attempts}"
            self.attempts += 1
            reply = v1(self.cluster.brokers[self.target].port,
                       f"V1|{self.attempts}|PRODUCE|{self.topic} k:{value} acks=all", timeout=5)
            m = OK.match(reply)
            if m:
                self.acked.append((value, int(m.group(2))))
                self.acked_by.append((time.monotonic(), self.target))
                continue
            self.target = ids[(ids.index(self.target) + 1) % len(ids)]  # NOT_LEADER, timeout, dead
            time.sleep(0.02)


def consume_all(port: int, topic: str, partition: int = 0) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    offset = 0
    while True:
        reply = v1(port, f"V1|1|CONSUME|{topic} {partition} {offset}")
        assert "|OK|" in reply, reply
        body = reply.split("|OK|", 1)[1]
        msgs = body.split(" hw=")[0].removeprefix("messages=")
        if not msgs:
            return out
        for item in msgs.split(","):
            off, _sep, value = item.partition(":")
            out.append((int(off), value))
        offset = out[-1][0] + 1


@contextlib.contextmanager
def running_zookeeper(root: Path) -> Iterator[ZooKeeperServer]:
    zk = ZooKeeperServer(root).start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture(scope="module", name="zookeeper")
def zookeeper_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One ZooKeeper per test module, for modules outside tests/cluster (whose conftest has its
    own): ``from support.cluster import zookeeper_fixture`` makes ``zookeeper`` available. (A
    second conftest.py would clash with tests/cluster's, which its modules import by name.)"""
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk


@contextlib.contextmanager
def running_cluster(zk: ZooKeeperServer, root: Path, name: str, n: int = 3,
                    config: str = CLUSTER_CONFIG) -> Iterator[Cluster]:
    """``n`` brokers in a fresh chroot named after ``name`` (a test's name)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:40]
    c = Cluster(root, zk, n, f"bayou-{name}-{time.monotonic_ns()}", config)
    try:  # a start that fails half-way must not leave brokers running
        yield c.start()
    finally:
        c.stop()
