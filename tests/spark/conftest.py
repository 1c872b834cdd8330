"""One SparkSession for all Spark tests, and one real ``bayou serve`` subprocess per test module
(with a 200 ms retention check, so the failOnDataLoss tests see retention act)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from sparkutil import BROKER_CONFIG, Broker, wait_port

from support.brokers import BrokerProcess


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from bayou.spark import register

    session = (SparkSession.builder.master("local[2]").appName("bayou-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
               .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    root = tmp_path_factory.mktemp("broker")
    cfg = root / "bayou.toml"
    cfg.write_text(BROKER_CONFIG)
    proc = BrokerProcess(root / "data", "--config", str(cfg), fsync="never").start()
    wait_port(proc.iggy_port)
    b = Broker(proc)
    try:
        yield b
    finally:
        b.client.close()
        proc.stop()


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
