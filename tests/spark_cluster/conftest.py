"""Fixtures of the Spark standalone cluster tests: one cluster (a master and two workers, 1 core and
1 GiB each, on 127.0.0.1, from the installed pyspark's spark-class) for the whole module, a broker
subprocess, ``dist/bayou.zip`` as ``make spark-package`` builds it, and the executors' Python: an
interpreter with bayou's dependencies but not bayou, so bayou reaches every Python worker only the
way the README says."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from sparkcluster import StandaloneCluster, spark_env, stop_process, wait_for

from bayou.client import Client
from support.brokers import BrokerProcess, free_port

DEPENDENCIES = "pyarrow, numpy, xxhash, crc32c, cramjam, lz4, zstandard"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), free_port(), free_port(),
                          [free_port(), free_port()])
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv that sees this one's site-packages through a .pth line (which does not run the
    .pth files there, so the editable install of bayou stays out): bayou's dependencies, no bayou.

    The line puts those site-packages first on sys.path, ahead of the pyspark.zip Spark gives its
    Python workers: the same PySpark 4.3, but compiled once instead of at every worker start.
    Importing the streaming source runner from the zip took 5-7 s on this 2-core machine under
    load (1.5 s from site-packages), and Spark gives a new driver-side worker a fixed 10 s to
    connect back ("Python worker failed to connect back")."""
    venv = tmp_path_factory.mktemp("executor-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    Path(purelib, "site-packages-of-the-test-venv.pth").write_text(
        f"import sys; sys.path.insert(0, {sysconfig.get_paths()['purelib']!r})\n")
    probe = subprocess.run([str(python), "-c", f"import {DEPENDENCIES}\nimport bayou"],
                           capture_output=True, text=True, timeout=60, cwd=venv, env=spark_env())
    assert "No module named 'bayou'" in probe.stderr, probe.stderr  # dependencies yes, bayou no
    return python


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make spark-package``'s command, writing to a temporary dist/."""
    out = tmp_path_factory.mktemp("dist") / "bayou.zip"
    subprocess.run([sys.executable, "-m", "bayou.spark.package", str(out)], check=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker subprocess (every listener on 127.0.0.1); yields its Iggy address."""
    root = tmp_path_factory.mktemp("broker")
    proc = BrokerProcess(root / "data", fsync="never").start()
    bootstrap = f"127.0.0.1:{proc.iggy_port}"

    def answers() -> bool:
        try:
            with Client(bootstrap, timeout=2) as c:
                c.ping()
            return True
        except Exception:
            return False

    try:
        wait_for(answers, 30, "the broker's Iggy listener")
        yield bootstrap
    finally:
        assert proc.proc is not None
        stop_process(proc.proc)
