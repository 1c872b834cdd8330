"""client.consumer.records_of: the column-wise conversion of a KAFKA_SCHEMA batch gives, row by
row, what a conversion of each row gives (keys and values with nulls, headers or none, timestamps
to the millisecond)."""

from __future__ import annotations

import datetime

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.client.consumer import ConsumerRecord, records_of
from bayou.client.wire import KAFKA_SCHEMA

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

header = st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5))
row = st.fixed_dictionaries({
    "key": st.none() | st.binary(max_size=8), "value": st.none() | st.binary(max_size=8),
    "partition": st.integers(0, 1000), "offset": st.integers(0, 1 << 62),
    "micros": st.none() | st.integers(0, 4_000_000_000_000_000),
    "headers": st.none() | st.lists(header, max_size=3)})


def _batch(rows: list[dict[str, object]]) -> pa.RecordBatch:
    return pa.record_batch({
        "key": [r["key"] for r in rows], "value": [r["value"] for r in rows],
        "topic": ["t"] * len(rows), "partition": [r["partition"] for r in rows],
        "offset": [r["offset"] for r in rows],
        "timestamp": [None if r["micros"] is None else EPOCH + datetime.timedelta(microseconds=r["micros"])
                      for r in rows],
        "timestampType": [0] * len(rows),
        "headers": [None if r["headers"] is None else [{"key": k, "value": v} for k, v in r["headers"]]
                    for r in rows],
    }, schema=KAFKA_SCHEMA)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(row, max_size=20), with_headers=st.booleans())
def test_records_are_the_rows(rows: list[dict[str, object]], with_headers: bool) -> None:
    if not with_headers:
        for r in rows:
            r["headers"] = None if r["headers"] is None else []
    got = records_of(_batch(rows))
    assert got == [ConsumerRecord("t", r["partition"], r["offset"],  # type: ignore[arg-type]
                                  0 if r["micros"] is None else r["micros"] // 1000,  # type: ignore[operator]
                                  r["key"], r["value"],  # type: ignore[arg-type]
                                  tuple(r["headers"] or ()))  # type: ignore[arg-type]
                   for r in rows]
