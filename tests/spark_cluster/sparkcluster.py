"""A Spark standalone cluster on loopback, started from the installed pyspark, and spark-submit
runs against it, for the cluster tests.

Every process is started with the environment of an activated virtualenv (its ``bin`` first on
PATH, as ``. .venv/bin/activate`` gives: pyspark's launch scripts find SPARK_HOME through the
``python3`` on PATH) plus ``SPARK_LOCAL_IP=127.0.0.1``, and without the ``PYTHONPATH`` the test
suite sets for broker subprocesses (it would put bayou's sources in front of every Spark Python
worker and hide a shipping mistake).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VENV_BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# JVM settings for a 2-core machine: less JIT and GC work for short jobs (same as tests/spark).
JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def spark_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.update(extra)
    return env


def wait_for(cond: Callable[[], Any], timeout: float, what: str,
             alive: Callable[[], str | None] | None = None) -> Any:
    """``cond()``'s first truthy value, polled until ``timeout``; ``alive()`` returning a message
    means a process it watches has died and waiting further is pointless."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if alive is not None and (dead := alive()) is not None:
            raise RuntimeError(f"while waiting for {what}: {dead}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.25)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM by PID, then SIGKILL if it has not exited within ``timeout``."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def dead(self) -> str | None:
        code = self.proc.poll()
        return None if code is None else f"{self.name} exited with {code}: {self.tail()}"


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each), all on 127.0.0.1."""

    root: Path
    master_port: int
    ui_port: int
    worker_ui_ports: list[int]
    cores: int = 1
    memory: str = "1g"
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def work_dir(self, i: int) -> Path:
        return self.root / f"worker{i + 1}"

    def start(self, timeout: float = 240.0) -> StandaloneCluster:
        spark_class = str(spark_home() / "bin" / "spark-class")
        # No REST submission server (it would take the fixed port 6066); small daemon heaps.
        env = spark_env(SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                        SPARK_DAEMON_JAVA_OPTS=JAVA_OPTS, SPARK_DAEMON_MEMORY="256m")
        self.daemons.append(self._spawn("master", [
            spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.master_port), "--webui-port", str(self.ui_port)], env))
        for i, ui in enumerate(self.worker_ui_ports):
            self.work_dir(i).mkdir(parents=True, exist_ok=True)
            self.daemons.append(self._spawn(f"worker{i + 1}", [
                spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", str(self.work_dir(i)), "--webui-port", str(ui), self.url], env))
        wait_for(lambda: self.alive_workers() == len(self.worker_ui_ports), timeout,
                 f"the master listing {len(self.worker_ui_ports)} ALIVE workers", self.dead)
        return self

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> Daemon:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=self.root, start_new_session=True)
        return Daemon(name, proc, log)

    def dead(self) -> str | None:
        for d in self.daemons:
            if (msg := d.dead()) is not None:
                return msg
        return None

    def stop(self) -> None:
        for d in reversed(self.daemons):  # workers first: they stop their executors
            stop_process(d.proc)

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (workers, active and completed applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            data: dict[str, Any] = json.load(r)
            return data

    def alive_workers(self) -> int:
        try:
            return sum(w["state"] == "ALIVE" for w in self.status()["workers"])
        except OSError:
            return 0

    def completed_app(self, app_id: str) -> dict[str, Any] | None:
        for app in self.status()["completedapps"]:
            if app["id"] == app_id:
                return dict(app)
        return None

    def tasks_run(self, app_id: str) -> list[int]:
        """Per worker: tasks its executors of ``app_id`` started (from the executors' logs in the
        worker's work directory, ``<work-dir>/<app id>/<executor id>/stderr``)."""
        counts = []
        for i in range(len(self.worker_ui_ports)):
            n = 0
            for stderr in (self.work_dir(i) / app_id).glob("*/stderr"):
                n += len(re.findall(r"Running task ", stderr.read_text(errors="replace")))
            counts.append(n)
        return counts


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class Submission:
    """One spark-submit run: its command, exit code and output (stdout + the driver's log)."""

    cmd: list[str]
    returncode: int
    out: str
    log: Path

    @property
    def app_id(self) -> str:
        m = re.search(r"Connected to Spark cluster with app ID (app-\S+)", self.out)
        if m is None:
            raise AssertionError(f"no standalone application id in the driver log {self.log}")
        return m.group(1)


def submit_cmd(cluster: StandaloneCluster, package: Path, python: Path, script: str,
               *args: str) -> list[str]:
    """The README's spark-submit command line, plus the JVM options of a 2-core machine."""
    return [str(VENV_BIN / "spark-submit"), "--master", cluster.url,
            "--py-files", str(package),
            "--conf", f"spark.pyspark.python={python}",
            "--driver-java-options", JAVA_OPTS,
            "--conf", f"spark.executor.extraJavaOptions={JAVA_OPTS}",
            str(EXAMPLES / script), *args]


def start_submit(cmd: list[str], package: Path, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """spark-submit with ``PYTHONPATH=<package>`` in its environment, as the README runs it, in a
    process group of its own (so that a test can kill the driver JVM and its Python together)."""
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                env=spark_env(PYTHONPATH=str(package)), start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the process group ``start_submit`` made (the driver JVM and its Python)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def run_submit(cmd: list[str], package: Path, cwd: Path, log: Path, timeout: float) -> Submission:
    proc = start_submit(cmd, package, cwd, log)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"spark-submit ran over {timeout:.0f} s: {log.read_text()[-3000:]}") from None
    finally:
        kill_group(proc)  # also when the test is interrupted: nothing outlives it
    return Submission(cmd, code, log.read_text(errors="replace"), log)
