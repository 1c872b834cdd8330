"""A SparkSession for a bayou job that runs unchanged under ``python`` and under ``spark-submit``.

Under spark-submit the JVM already exists when the script starts and holds the master, the
Python interpreters and every ``--conf``: the script must not override them. A PySpark
``SparkConf()`` created before the session cannot tell (it reads the JVM's settings only once
the gateway is up, so ``SparkConf().contains("spark.master")`` is always false there); what
does tell is ``PYSPARK_GATEWAY_PORT``, which spark-submit (and the ``pyspark`` shell) sets for the
driver's Python and plain ``python`` does not.
"""

from __future__ import annotations

import os
import sys
from typing import Any

LOCAL_MASTER = "local[2]"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def launched_by_spark_submit() -> bool:
    """True when this Python process is the driver of a spark-submit (or ``pyspark``) launch."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_session(app_name: str, master: str | None = None,
                config: dict[str, str] | None = None) -> Any:
    """The active SparkSession (created if needed) with the ``bayou`` format registered.

    ``master``: used when given; otherwise spark-submit's (``--master``, spark-defaults.conf) when
    launched by it, and ``local[2]`` under plain ``python``.

    Only a local master gets ``PYSPARK_PYTHON`` defaulted to this interpreter: its Python workers
    run on this host. On a cluster the interpreter path is the submitter's choice
    (``spark.pyspark.python`` or ``PYSPARK_PYTHON``), since it must exist on every host.

    ``spark.sql.shuffle.partitions``: unless set (``--conf``, spark-defaults.conf, ``config``),
    it becomes ``spark.default.parallelism`` (the cores of a local master; on a cluster the
    executor cores registered so far, at least 2) instead of Spark's 200, which for small
    stateful streams costs hundreds of near-empty tasks per micro-batch.
    """
    from pyspark.sql import SparkSession

    submitted = launched_by_spark_submit()
    if master is None and not submitted:
        master = LOCAL_MASTER
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    if not sc.getConf().contains(SHUFFLE_PARTITIONS):
        spark.conf.set(SHUFFLE_PARTITIONS, str(sc.defaultParallelism))

    from bayou.spark import register

    register(spark)
    return spark
