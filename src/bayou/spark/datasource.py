"""``BayouDataSource``: the ``bayou`` format for ``spark.read``, ``readStream``, ``write`` and
``writeStream``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from bayou.spark.errors import BayouOptionError
from bayou.spark.options import Options, parse_sink_options, parse_source_options
from bayou.spark.reader import BayouBatchReader, BayouStreamReader, schema_ddl
from bayou.spark.writer import BayouBatchWriter, BayouStreamWriter, plan_sink


class BayouDataSource(DataSource):
    """Spark's Kafka connector, for bayou: the same row schema, the same option names, with
    ``bayou.bootstrap.servers`` (a broker's Iggy listener) in place of ``kafka.bootstrap.servers``."""

    @classmethod
    def name(cls) -> str:
        return "bayou"

    def schema(self) -> str:
        return schema_ddl(Options(self.options).boolean("includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return BayouBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return BayouStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> BayouBatchWriter:
        _append_only(overwrite)
        return BayouBatchWriter(plan_sink(schema, parse_sink_options(self.options)))

    def streamWriter(self, schema: StructType, overwrite: bool) -> BayouStreamWriter:
        _append_only(overwrite)
        return BayouStreamWriter(plan_sink(schema, parse_sink_options(self.options)))


def _append_only(overwrite: bool) -> None:
    """Spark lets a Python data source see only Append and Overwrite (it rejects the default
    ErrorIfExists, and Ignore, itself with UNSUPPORTED_DATA_SOURCE_SAVE_MODE, naming both): the
    error for Overwrite is where a user learns the one mode that works."""
    if overwrite:
        raise BayouOptionError(
            "mode", 'a bayou topic is an append-only log, it cannot be overwritten: write with '
            '.mode("append") (df.write.format("bayou").mode("append")...save(); a plain .save() '
            "means ErrorIfExists, which Spark does not allow for Python data sources); streams "
            'use outputMode("append") or "update"')
