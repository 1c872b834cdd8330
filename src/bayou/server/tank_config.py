"""TANK's topic names and CreateTopic configuration text (tank.md §7, §12.1), and how the keys map
onto bayou's per-topic configuration.

The config is text, one ``key=value`` per line, ``#`` starting a comment. Unknown keys are
accepted (TANK only logs them); a known key with an out-of-range value, or any line whose value is
empty or 128 characters or longer, is invalid (CreateTopic error 4). Sizes take suffixes
(``1mb``), durations take ``s``/``m``/``h``/``d``/``w``.

Mapping: ``log.segment.bytes`` -> ``segment.bytes``, ``log.index.interval.bytes`` ->
``index.interval.bytes``, ``log.retention.bytes`` -> ``retention.bytes`` and
``log.retention.secs`` -> ``retention.ms`` (0, TANK's "keep", -> -1), ``log.roll.secs`` ->
``segment.ms``, ``retention.segments.count`` -> ``retention.segments``, ``flush.messages`` >= 1
-> ``fsync=always`` (bayou flushes per append, not per N
messages: the stronger promise), else ``flush.secs`` > 0 -> ``fsync=interval:<ms>``. The other
known keys are validated and have no bayou equivalent.
"""

from __future__ import annotations

import re

MAX_NAME = 64
MAX_VALUE = 128
_NAME = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
_SIZE = re.compile(r"\A(\d+)\s*(b|kb|k|mb|m|gb|g|tb|t)?\Z", re.IGNORECASE)
_DURATION = re.compile(r"\A(\d+)\s*(s|sec|secs|m|min|mins|h|hr|hrs|hour|hours|d|day|days|w|week|weeks)?\Z",
                       re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30,
               "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}
_DURATION_UNITS = {"": 1, "s": 1, "sec": 1, "secs": 1, "m": 60, "min": 60, "mins": 60, "h": 3600,
                   "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
                   "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}


class TankConfigError(ValueError):
    """An invalid CreateTopic configuration (TANK error 4)."""


def valid_topic_name(name: str) -> bool:
    """1-64 characters of ``A-Z a-z 0-9 - _``, not starting or ending with ``-`` or ``_``, with at
    least one letter or digit (always true once the ends are alphanumeric)."""
    return bool(_NAME.match(name)) and name[0] not in "-_" and name[-1] not in "-_"


def parse_size(text: str) -> int:
    m = _SIZE.match(text.strip())
    if m is None:
        raise TankConfigError(f"not a size: {text!r}")
    return int(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()]


def parse_duration(text: str) -> int:
    """Seconds."""
    m = _DURATION.match(text.strip())
    if m is None:
        raise TankConfigError(f"not a duration: {text!r}")
    return int(m.group(1)) * _DURATION_UNITS[(m.group(2) or "").lower()]


def parse_config(text: str) -> dict[str, str]:
    """``key -> value`` of a config text (last one wins), with the line rules above."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value or len(value) >= MAX_VALUE:
            raise TankConfigError(f"bad config line {raw!r}")
        out[key] = value
    return out


def _at_least(key: str, value: int, floor: int, *, zero_ok: bool = False) -> int:
    if value < floor and not (zero_ok and value == 0):
        raise TankConfigError(f"{key} must be {'0 or ' if zero_ok else ''}at least {floor}")
    return value


def to_bayou(config: dict[str, str]) -> dict[str, str]:
    """Validate the known keys (TANK's limits) and return bayou topic config for those that map."""
    out: dict[str, str] = {}
    for key, value in config.items():
        if key == "log.segment.bytes":
            out["segment.bytes"] = str(_at_least(key, parse_size(value), 64))
        elif key == "log.index.interval.bytes":
            out["index.interval.bytes"] = str(_at_least(key, parse_size(value), 128))
        elif key == "log.index.size.max.bytes":
            _at_least(key, parse_size(value), 128)
        elif key == "retention.segments.count":
            n = _at_least(key, _integer(value), 2, zero_ok=True)
            if n:
                out["retention.segments"] = str(n)
        elif key == "log.retention.bytes":
            n = _at_least(key, parse_size(value), 128, zero_ok=True)
            out["retention.bytes"] = str(n) if n else "-1"
        elif key == "log.retention.secs":
            secs = parse_duration(value)
            out["retention.ms"] = str(secs * 1000) if secs else "-1"
        elif key == "log.roll.secs":
            secs = parse_duration(value)
            if secs:
                out["segment.ms"] = str(secs * 1000)
        elif key == "log.roll.jitter.secs":
            parse_duration(value)
        elif key == "flush.messages":
            if _integer(value) >= 1:
                out["fsync"] = "always"
        elif key == "flush.secs":
            secs = parse_duration(value)
            if secs and out.get("fsync") != "always" and _integer(config.get("flush.messages", "0")) < 1:
                out["fsync"] = f"interval:{secs * 1000}"
        elif key == "log.cleanup.policy":
            if value not in ("delete", "cleanup"):
                raise TankConfigError("log.cleanup.policy must be delete or cleanup")
        elif key == "log.cleaner.min.cleanable.ratio":
            try:
                ratio = float(value)
            except ValueError:
                raise TankConfigError(f"not a ratio: {value!r}") from None
            if not 0 <= ratio <= 1:
                raise TankConfigError("log.cleaner.min.cleanable.ratio must be between 0 and 1")
    return out


def _integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise TankConfigError(f"not an integer: {text!r}") from None
