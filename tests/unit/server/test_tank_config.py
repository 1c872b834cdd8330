"""server.tank_config: TANK topic names and CreateTopic config text (tank.md §7, §12.1)."""

from __future__ import annotations

import pytest

from bayou.server.tank_config import (
    TankConfigError,
    parse_config,
    parse_duration,
    parse_size,
    to_bayou,
    valid_topic_name,
)


@pytest.mark.parametrize("name", ["vec", "a", "Events_2024", "a-b_c", "x" * 64, "9"])
def test_valid_names(name: str) -> None:
    assert valid_topic_name(name)


@pytest.mark.parametrize("name", ["", "bad.name", "-a", "a-", "_a", "a_", "x" * 65, "a b", "é", "--", "a/b"])
def test_invalid_names(name: str) -> None:
    assert not valid_topic_name(name)


def test_sizes_and_durations() -> None:
    assert parse_size("1mb") == 1 << 20
    assert parse_size("64") == 64
    assert parse_size("2KB") == 2048
    assert parse_duration("3600") == 3600
    assert parse_duration("2h") == 7200
    assert parse_duration("1w") == 604800
    for bad in ("", "mb", "1.5mb", "-1"):
        with pytest.raises(TankConfigError):
            parse_size(bad)


def test_the_vector_config_maps_onto_bayou() -> None:
    cfg = parse_config("log.segment.bytes=1mb\nretention.segments.count=4\n")
    assert cfg == {"log.segment.bytes": "1mb", "retention.segments.count": "4"}
    assert to_bayou(cfg) == {"segment.bytes": str(1 << 20), "retention.segments": "4"}


def test_mapping_of_every_key() -> None:
    cfg = parse_config("# comment\n log.retention.secs = 1h \nlog.retention.bytes=0\nlog.roll.secs=1d\n"
                       "log.index.interval.bytes=256\nflush.secs=2\nunknown.key=whatever\n")
    assert to_bayou(cfg) == {"retention.ms": "3600000", "retention.bytes": "-1", "segment.ms": "86400000",
                             "index.interval.bytes": "256", "fsync": "interval:2000"}
    assert to_bayou(parse_config("flush.messages=1\nflush.secs=5\n")) == {"fsync": "always"}


@pytest.mark.parametrize("text", [
    "log.segment.bytes=1",  # the captured bad config: below 64
    "log.index.interval.bytes=100",
    "retention.segments.count=1",
    "log.retention.bytes=100",
    "log.cleanup.policy=compact",
    "log.cleaner.min.cleanable.ratio=2",
    "flush.messages=often",
    "key=",
    "novalue",
    "k=" + "x" * 128,
])
def test_invalid_configs(text: str) -> None:
    with pytest.raises(TankConfigError):
        to_bayou(parse_config(text))
