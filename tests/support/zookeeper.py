"""A real Apache ZooKeeper server for the cluster tests: Debian's ``zookeeper`` package (the
Makefile installs it), started standalone on a free loopback port with its own data directory."""

from __future__ import annotations

import contextlib
import glob
import shutil
import subprocess
import time
from pathlib import Path

from support.brokers import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


def zookeeper_classpath() -> str:
    if not ZOOKEEPER_JAR.exists():
        raise RuntimeError(f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper package "
                           "(make test does: apt-get install zookeeper)")
    return ":".join([str(ZOOKEEPER_JAR), *sorted(glob.glob("/usr/share/java/*.jar"))])


class ZooKeeperServer:
    def __init__(self, root: Path, *, tick_ms: int = 500, min_session_ms: int | None = 1000) -> None:
        """``min_session_ms=None`` keeps ZooKeeper's own floor of two ticks (Debian's defaults:
        tickTime 2000, so no session shorter than 4 s)."""
        self.root = root
        self.port = free_port()
        self.tick_ms = tick_ms
        self.min_session_ms = min_session_ms
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str) -> str:
        return f"zk://{self.hosts}/{chroot.strip('/')}"

    def start(self, timeout: float = 30.0, attempts: int = 3) -> ZooKeeperServer:
        """Start it; an exit at startup (its free port taken meanwhile) is retried on a new port."""
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except RuntimeError:
                if attempt == attempts - 1:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> ZooKeeperServer:
        data = self.root / "zk-data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.root / "zoo.cfg"
        cfg.write_text(f"tickTime={self.tick_ms}\ninitLimit=10\nsyncLimit=5\ndataDir={data}\n"
                       f"clientPort={self.port}\nclientPortAddress=127.0.0.1\n"
                       "admin.enableServer=false\nmaxSessionTimeout=60000\n"
                       + (f"minSessionTimeout={self.min_session_ms}\n" if self.min_session_ms else "")
                       + "4lw.commands.whitelist=ruok,srvr\n")
        java = shutil.which("java") or "java"
        log = open(self.root / "zookeeper.log", "ab")  # noqa: SIM115 - kept for the child's lifetime
        self.proc = subprocess.Popen(
            [java, "-Xmx256m", "-XX:+UseSerialGC", "-cp", zookeeper_classpath(),
             f"-Dzookeeper.log.dir={self.root}", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
             str(cfg)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        from kazoo.client import KazooClient

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited: {(self.root / 'zookeeper.log').read_text()[-2000:]}")
            client = KazooClient(hosts=self.hosts, timeout=5.0)
            try:
                client.start(timeout=2.0)
                client.stop()
                return self
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
            finally:
                client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
