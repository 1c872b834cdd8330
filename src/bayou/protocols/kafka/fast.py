"""Produce responses written directly, without kio's entities: the response to the request every
producer sends most, at every version bayou serves (3-12).

kio builds a frozen dataclass per partition and topic and walks its schema to write them; for a
one-partition Produce that is most of the response's cost. ``encode_produce_response`` writes the
same bytes from the handler's fields (tests/unit/protocols/test_kafka_fast.py compares it with kio
for every version), and answers None for what it does not write (record errors, a current leader,
node endpoints): the caller then goes through kio.

Layout (Kafka's ProduceResponse): responses [name, partition_responses [index i16-error base_offset
i64, log_append_time i64 (v2+), log_start_offset i64 (v5+), record_errors (v8+), error_message
(v8+), tagged fields (v9+)], tagged fields (v9+)], throttle_time_ms i32, tagged fields (v9+).
Arrays and strings are compact (unsigned varint of length + 1) from v9 on.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from bayou.records.varint import encode_uvarint

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PART = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">ii")  # size, correlation id
FIRST_FLEXIBLE = 9
KNOWN = frozenset({"index", "error_code", "base_offset", "log_append_time", "log_start_offset",
                   "error_message"})


def _uvarint(n: int) -> bytes:
    out = bytearray()
    encode_uvarint(n, out)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw if flexible else _I16.pack(len(raw)) + raw


def _nullable(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\0" if flexible else b"\xff\xff"
    return _string(s, flexible)


def _count(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def encode_produce_response(version: int, correlation_id: int,
                            responses: Sequence[dict[str, Any]]) -> bytes | None:
    """The whole response frame (size included), or None when ``responses`` hold a field this
    writer leaves to kio."""
    if not 3 <= version <= 12:
        return None
    flexible = version >= FIRST_FLEXIBLE
    out = bytearray(_HEAD.size)
    if flexible:
        out += b"\0"  # response header v1: no tagged fields
    out += _count(len(responses), flexible)
    for topic in responses:
        if topic.keys() != {"name", "partition_responses"}:
            return None
        out += _string(topic["name"], flexible)
        parts = topic["partition_responses"]
        out += _count(len(parts), flexible)
        for p in parts:
            if not p.keys() <= KNOWN:
                return None
            ts = p.get("log_append_time")
            out += _PART.pack(p["index"], int(p.get("error_code", 0)), p.get("base_offset", -1),
                              -1 if ts is None else int(ts.timestamp() * 1000))
            if version >= 5:
                out += _I64.pack(p.get("log_start_offset", -1))
            if version >= 8:
                out += _count(0, flexible)  # record_errors
                out += _nullable(p.get("error_message"), flexible)
            if flexible:
                out += b"\0"
        if flexible:
            out += b"\0"
    out += _I32.pack(0)  # throttle_time_ms
    if flexible:
        out += b"\0"
    _HEAD.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)


__all__ = ["encode_produce_response"]
