"""client.consumer.records_of: the column-wise conversion of a KAFKA_SCHEMA batch gives, row by
row, what a conversion of each row gives (keys and values with nulls, headers or none, timestamps
to the millisecond, floored), whether a column holds one value in every row (the topic and
partition of a fetched batch, all keys null: repeated) or several, and on a slice of a batch."""

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
    "topic": st.sampled_from(["t", "u", "été"]), "partition": st.integers(0, 2) | st.integers(0, 1000),
    "offset": st.integers(0, 1 << 62),
    "micros": st.none() | st.integers(-4_000_000_000_000, 4_000_000_000_000_000),
    "headers": st.none() | st.lists(header, max_size=3)})


def _batch(rows: list[dict[str, object]]) -> pa.RecordBatch:
    return pa.record_batch({
        "key": [r["key"] for r in rows], "value": [r["value"] for r in rows],
        "topic": [r["topic"] for r in rows], "partition": [r["partition"] for r in rows],
        "offset": [r["offset"] for r in rows],
        "timestamp": [None if r["micros"] is None else EPOCH + datetime.timedelta(microseconds=r["micros"])
                      for r in rows],
        "timestampType": [0] * len(rows),
        "headers": [None if r["headers"] is None else [{"key": k, "value": v} for k, v in r["headers"]]
                    for r in rows],
    }, schema=KAFKA_SCHEMA)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(row, max_size=20), with_headers=st.booleans(), one_topic=st.booleans(),
       one_partition=st.booleans(), skip=st.integers(0, 3))
def test_records_are_the_rows(rows: list[dict[str, object]], with_headers: bool, one_topic: bool,
                              one_partition: bool, skip: int) -> None:
    for r in rows:
        if not with_headers:
            r["headers"] = None if r["headers"] is None else []
        if one_topic:
            r["topic"] = rows[0]["topic"]
        if one_partition:
            r["partition"] = rows[0]["partition"]
    got = records_of(_batch(rows).slice(min(skip, len(rows))))
    assert got == [ConsumerRecord(r["topic"], r["partition"], r["offset"],  # type: ignore[arg-type]
                                  0 if r["micros"] is None else r["micros"] // 1000,  # type: ignore[operator]
                                  r["key"], r["value"],  # type: ignore[arg-type]
                                  tuple(r["headers"] or ()))  # type: ignore[arg-type]
                   for r in rows[skip:]]
