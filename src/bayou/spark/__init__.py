"""``bayou.spark``: a PySpark (4.3) Python data source, format ``"bayou"``, modelled on Spark's
Kafka connector: batch and streaming reads that return Arrow record batches, and a batch and
streaming sink that is exactly-once per (query, micro-batch) on deduplicating topics.

    from bayou.spark import register
    register(spark)
    df = (spark.readStream.format("bayou")
          .option("bayou.bootstrap.servers", "127.0.0.1:8090")
          .option("subscribe", "events").load())

Executors import this package, so bayou must be installed where they run (or shipped with
``--py-files``, see ``bayou.spark.package``), and they must reach the broker's Iggy listener
themselves. ``get_session`` builds a session that takes its master from spark-submit when launched
by it.
"""

from __future__ import annotations

from typing import Any

from bayou.spark.datasource import BayouDataSource
from bayou.spark.errors import BayouDataLossError, BayouOptionError
from bayou.spark.session import get_session

__all__ = ["BayouDataLossError", "BayouDataSource", "BayouOptionError", "get_session", "register"]


def register(spark: Any) -> None:
    """Make ``format("bayou")`` available in ``spark`` (once per session)."""
    spark.dataSource.register(BayouDataSource)
