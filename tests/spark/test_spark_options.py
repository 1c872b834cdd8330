"""Option parsing, offset JSON, admission control and range splitting: no Spark, no broker."""

from __future__ import annotations

import pickle
import re

import pytest

pytest.importorskip("pyspark")

from bayou.spark.errors import BayouOptionError
from bayou.spark.offsets import OffsetRange, from_json, rate_limit, split_ranges, to_json
from bayou.spark.options import (
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    EARLIEST,
    LATEST,
    parse_sink_options,
    parse_source_options,
)
from bayou.spark.reader import BayouInputPartition

BASE = {"bayou.bootstrap.servers": "127.0.0.1:8090", "subscribe": "t"}


def src(streaming: bool = True, **kw: str) -> object:
    return parse_source_options({**BASE, **kw}, streaming=streaming)


def bad(option: str, options: dict[str, str], streaming: bool = True) -> None:
    with pytest.raises(BayouOptionError) as info:
        parse_source_options(options, streaming=streaming)
    assert f"'{option}'" in str(info.value), str(info.value)


def test_defaults_follow_kafka() -> None:
    stream = parse_source_options(BASE, streaming=True)
    assert stream.starting.default == LATEST and stream.ending is None
    assert stream.fail_on_data_loss and not stream.include_headers
    assert stream.max_records_per_partition == DEFAULT_MAX_RECORDS_PER_PARTITION
    assert (stream.conn.username, stream.conn.password) == ("iggy", "iggy")
    batch = parse_source_options(BASE, streaming=False)
    assert batch.starting.default == EARLIEST
    assert batch.ending is not None and batch.ending.default == LATEST


def test_keys_are_case_insensitive() -> None:
    opts = parse_source_options({"BAYOU.Bootstrap.Servers": "h:1", "SUBSCRIBE": "a, b,a",
                                 "startingoffsets": "earliest", "MAXOFFSETSPERTRIGGER": "7"},
                                streaming=True)
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting.default == EARLIEST and opts.max_offsets_per_trigger == 7


def test_offsets_json_and_assign() -> None:
    opts = parse_source_options({**BASE, "startingOffsets": '{"t": {"0": 23, "1": -2, "2": -1}}'},
                                streaming=True)
    assert dict(opts.starting.offsets) == {("t", 0): 23, ("t", 1): EARLIEST, ("t", 2): LATEST}
    a = parse_source_options({"bayou.bootstrap.servers": "h:1", "assign": '{"x": [1, 0], "y": [2]}'},
                             streaming=False)
    assert a.subscription.kind == "assign"
    assert a.subscription.assigned == (("x", 0), ("x", 1), ("y", 2))


def test_timestamps_take_precedence() -> None:
    opts = src(startingOffsets="earliest", startingOffsetsByTimestamp='{"t": {"0": 5}}',
               startingTimestamp="1000")
    assert opts.starting.timestamp == 1000 and opts.starting.option == "startingTimestamp"
    opts = src(startingOffsets="earliest", startingOffsetsByTimestamp='{"t": {"0": 5}}')
    assert dict(opts.starting.timestamps) == {("t", 0): 5}


@pytest.mark.parametrize("option,options,streaming", [
    ("bayou.bootstrap.servers", {"subscribe": "t"}, True),
    ("bayou.bootstrap.servers", {"bayou.bootstrap.servers": "nohostport", "subscribe": "t"}, True),
    ("subscribe", {"bayou.bootstrap.servers": "h:1"}, True),
    ("subscribe", {**BASE, "assign": '{"t": [0]}'}, True),
    ("subscribe", {**BASE, "subscribePattern": "t.*"}, False),
    ("subscribe", {"bayou.bootstrap.servers": "h:1", "subscribe": " , "}, True),
    ("subscribePattern", {"bayou.bootstrap.servers": "h:1", "subscribePattern": "(unclosed"}, True),
    ("assign", {"bayou.bootstrap.servers": "h:1", "assign": "{not json"}, True),
    ("assign", {"bayou.bootstrap.servers": "h:1", "assign": '{"t": 3}'}, True),
    ("startingOffsets", {**BASE, "startingOffsets": "{bad"}, True),
    ("startingOffsets", {**BASE, "startingOffsets": '{"t": {"0": "x"}}'}, True),
    ("startingOffsets", {**BASE, "startingOffsets": '{"t": {"0": -3}}'}, True),
    ("startingOffsets", {**BASE, "startingOffsets": '{"t": {"zero": 1}}'}, True),
    ("startingOffsets", {**BASE, "startingOffsets": "latest"}, False),
    ("startingOffsets", {**BASE, "startingOffsets": '{"t": {"0": -1}}'}, False),
    ("startingOffsets", {**BASE, "startingOffsets": "sometime"}, True),
    ("endingOffsets", {**BASE, "endingOffsets": "earliest"}, False),
    ("endingOffsets", {**BASE, "endingOffsets": '{"t": {"0": -2}}'}, False),
    ("endingOffsets", {**BASE, "endingOffsets": "latest"}, True),
    ("endingTimestamp", {**BASE, "endingTimestamp": "5"}, True),
    ("startingTimestamp", {**BASE, "startingTimestamp": "yesterday"}, True),
    ("maxOffsetsPerTrigger", {**BASE, "maxOffsetsPerTrigger": "ten"}, True),
    ("maxOffsetsPerTrigger", {**BASE, "maxOffsetsPerTrigger": "0"}, True),
    ("maxRecordsPerPartition", {**BASE, "maxRecordsPerPartition": "1.5"}, False),
    ("minPartitions", {**BASE, "minPartitions": "0"}, False),
    ("failOnDataLoss", {**BASE, "failOnDataLoss": "maybe"}, True),
    ("includeHeaders", {**BASE, "includeHeaders": "yes"}, True),
    ("startingOffsetsByTimestampStrategy", {**BASE, "startingOffsetsByTimestampStrategy": "x"}, True),
    ("bayou.usernme", {**BASE, "bayou.usernme": "x"}, True),
    ("kafka.bootstrap.servers", {**BASE, "kafka.bootstrap.servers": "h:9092"}, True),
    ("minOffsetsPerTrigger", {**BASE, "minOffsetsPerTrigger": "10"}, True),
])
def test_bad_options_name_the_option(option: str, options: dict[str, str], streaming: bool) -> None:
    bad(option, options, streaming)


def test_sink_options() -> None:
    opts = parse_sink_options({"bayou.bootstrap.servers": "h:1,g:2", "topic": "out",
                               "bayou.sink.partitions": "3"})
    assert opts.topic == "out" and opts.new_topic_partitions == 3
    assert opts.conn.bootstrap == "h:1,g:2"
    with pytest.raises(BayouOptionError, match=re.escape("'bayou.sink.partitions'")):
        parse_sink_options({"bayou.bootstrap.servers": "h:1", "bayou.sink.partitions": "many"})
    with pytest.raises(BayouOptionError, match="'topic'"):
        parse_sink_options({"bayou.bootstrap.servers": "h:1", "topic": ""})
    assert opts.compression == "none"
    assert parse_sink_options({"bayou.bootstrap.servers": "h:1", "bayou.compression.type": "ZSTD"}
                              ).compression == "zstd"
    with pytest.raises(BayouOptionError, match=re.escape("'bayou.compression.type'")):
        parse_sink_options({"bayou.bootstrap.servers": "h:1", "bayou.compression.type": "brotli"})


def test_offsets_json_round_trip_has_string_keys() -> None:
    offsets = {("b", 10): 5, ("a", 2): 7, ("a", 0): 1}
    doc = to_json(offsets)
    assert doc == {"a": {"0": 1, "2": 7}, "b": {"10": 5}}
    assert from_json(doc) == offsets


def test_rate_limit_is_proportional_and_exact() -> None:
    begin = {("t", 0): 0, ("t", 1): 100, ("t", 2): 0}
    latest = {("t", 0): 600, ("t", 1): 400, ("t", 2): 100}  # backlogs 600, 300, 100
    end = rate_limit(begin, latest, 100)
    assert end == {("t", 0): 60, ("t", 1): 130, ("t", 2): 10}
    # a limit that does not divide evenly: exactly the limit, the remainders filled first
    end = rate_limit(begin, latest, 7)
    taken = {tp: end[tp] - begin[tp] for tp in begin}
    assert sum(taken.values()) == 7 and taken[("t", 0)] >= taken[("t", 1)] >= taken[("t", 2)]
    # less backlog than the limit: everything
    assert rate_limit(begin, latest, 5000) == latest


def test_rate_limit_never_starves_a_partition() -> None:
    begin = {("t", p): 0 for p in range(3)}
    latest = {("t", p): 1000 for p in range(3)}
    seen: set[tuple[str, int]] = set()
    for _ in range(3):
        end = rate_limit(begin, latest, 1)
        moved = [tp for tp in begin if end[tp] > begin[tp]]
        assert len(moved) == 1
        seen.update(moved)
        begin = end
    assert len(seen) == 3


def test_split_ranges() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 0, 3)]
    assert split_ranges(ranges, 4, None) == [
        OffsetRange("t", 0, 0, 4), OffsetRange("t", 0, 4, 7), OffsetRange("t", 0, 7, 10),
        OffsetRange("t", 2, 0, 3)]
    # minPartitions: the big range takes most of the extra splits
    parts = split_ranges([OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 0, 10)], 1000, 10)
    assert len([r for r in parts if r.partition == 0]) == 9
    assert sum(r.size for r in parts) == 100
    assert split_ranges([OffsetRange("t", 0, 0, 2)], 1000, 10) == [
        OffsetRange("t", 0, 0, 1), OffsetRange("t", 0, 1, 2)]


def test_input_partition_pickles() -> None:
    opts = parse_source_options(BASE, streaming=True)
    p = BayouInputPartition(opts.conn, "t", 1, 5, 9, True, False, 100)
    assert pickle.loads(pickle.dumps(p)) == p
