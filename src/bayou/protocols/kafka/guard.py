"""A bounds check of a Kafka body against its schema, before kio's native reader sees it.

kio's native reader trusts declared lengths: an array that declares two billion elements makes it
reserve their room before reading any (``Vec::with_capacity``), and an allocation that fails aborts
the whole process (Rust's out-of-memory handler), so a 30-byte frame from anyone could stop the
broker. This walk reads the same layout without building anything: every length must fit in the
bytes that remain, every nested struct and tagged field inside its bounds, every varint within 5
bytes. A body that passes has no count kio could over-reserve for (each element takes at least a
byte); one that fails raises ``KafkaError`` like any other malformed request.

The walk is compiled once per schema into closures, from the same dataclass metadata kio's own
reader and writer use (``kafka_type``, ``tag``, the tuple and optional shapes of the fields).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, cast, get_args, get_origin, get_type_hints

from bayou.protocols.kafka.framing import KafkaError, read_tagged_fields, read_uvarint

Buffer = bytes | bytearray | memoryview
Skip = Callable[[Buffer, int, int], int]  # (buf, pos, end) -> position after the value

_FIXED: dict[str, int] = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _need(pos: int, size: int, end: int) -> int:
    if size < 0 or pos + size > end:
        raise KafkaError(f"{size} bytes at {pos} run past the end ({end})")
    return pos + size


def _compact_length(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """A compact length (N + 1, 0 = null) as N (-1 = null) and the position after it."""
    value, pos = read_uvarint(buf, pos)
    if pos > end:
        raise KafkaError("length runs past its bounds")
    return value - 1, pos


def _legacy_length(buf: Buffer, pos: int, end: int, width: struct.Struct) -> tuple[int, int]:
    after = _need(pos, width.size, end)
    (value,) = width.unpack_from(buf, pos)
    if value < -1:
        raise KafkaError(f"length {value}")
    return int(value), after


def _fixed(size: int) -> Skip:
    def skip(buf: Buffer, pos: int, end: int) -> int:
        return _need(pos, size, end)
    return skip


def _sized(flexible: bool, width: struct.Struct) -> Skip:
    """A string or bytes value: compact (flexible) or with an i16 / i32 length."""
    def skip(buf: Buffer, pos: int, end: int) -> int:
        if flexible:
            n, pos = _compact_length(buf, pos, end)
        else:
            n, pos = _legacy_length(buf, pos, end, width)
        return pos if n < 0 else _need(pos, n, end)
    return skip


def _primitive(kafka_type: str, flexible: bool) -> Skip:
    if kafka_type in _FIXED:
        return _fixed(_FIXED[kafka_type])
    if kafka_type == "string":
        return _sized(flexible, _I16)
    if kafka_type in ("bytes", "records"):
        return _sized(flexible, _I32)
    raise KafkaError(f"no layout for kafka_type {kafka_type!r}")


def _array(item: Skip, flexible: bool, item_size: int | None) -> Skip:
    def skip(buf: Buffer, pos: int, end: int) -> int:
        if flexible:
            n, pos = _compact_length(buf, pos, end)
        else:
            n, pos = _legacy_length(buf, pos, end, _I32)
        if n <= 0:
            return pos
        if n > end - pos:  # every element takes at least one byte
            raise KafkaError(f"array of {n} in {end - pos} bytes")
        if item_size is not None:
            return _need(pos, n * item_size, end)
        for _ in range(n):
            pos = item(buf, pos, end)
        return pos
    return skip


def _nullable_struct(inner: Skip) -> Skip:
    """KIP-893: an int8 marker (-1 null, 1 present) before an optional struct."""
    def skip(buf: Buffer, pos: int, end: int) -> int:
        after = _need(pos, 1, end)
        marker = buf[pos]
        if marker == 0xFF:
            return after
        if marker != 1:
            raise KafkaError(f"nullable struct marker {marker}")
        return inner(buf, after, end)
    return skip


def _tags(known: dict[int, Skip]) -> Skip:
    """A tagged-field section; the tags the schema knows must fill their bytes exactly."""
    def skip(buf: Buffer, pos: int, end: int) -> int:
        tags, pos = read_tagged_fields(buf, pos, end)
        if pos > end:
            raise KafkaError("tagged fields run past their bounds")
        for tag, value in tags:
            field = known.get(tag)
            if field is not None and field(value, 0, len(value)) != len(value):
                raise KafkaError(f"tagged field {tag} does not fill its {len(value)} bytes")
        return pos
    return skip


def field_shape(annotation: Any) -> tuple[Any, bool, bool]:
    """(inner type, is an array, is optional) of a field's annotation."""
    optional = False
    if get_origin(annotation) is UnionType:
        args = [a for a in get_args(annotation) if a is not NoneType]
        optional, annotation = True, args[0]
    if get_origin(annotation) is tuple:
        inner = get_args(annotation)[0]
        if get_origin(inner) is UnionType:
            inner = next(a for a in get_args(inner) if a is not NoneType)
        return inner, True, optional
    return annotation, False, optional


@functools.cache
def entity_skip(schema: Any) -> Skip:
    """The bounds walk of one kio entity (a request body or a nested struct)."""
    flexible = bool(schema.__flexible__)
    hints = get_type_hints(schema)
    steps: list[Skip] = []
    tagged: dict[int, Skip] = {}
    for field in fields(schema):
        inner, is_array, optional = field_shape(hints[field.name])
        if is_dataclass(inner):
            item = entity_skip(cast(Any, inner))
            item_size = None
        else:
            kafka_type = field.metadata["kafka_type"]
            item = _primitive(kafka_type, flexible)
            item_size = _FIXED.get(kafka_type)
        tag = field.metadata.get("tag")
        if is_array:
            step = _array(item, flexible, item_size)
        elif is_dataclass(inner) and optional and tag is None:  # a tag's presence is its null
            step = _nullable_struct(item)
        else:
            step = item
        if tag is None:
            steps.append(step)
        else:
            tagged[int(tag)] = step
    if flexible:
        steps.append(_tags(tagged))

    def skip(buf: Buffer, pos: int, end: int) -> int:
        for step in steps:
            pos = step(buf, pos, end)
        return pos
    return skip


def check_body(schema: Any, buf: Buffer, pos: int) -> int:
    """Walk one body of ``schema`` from ``pos``; the position after it, or ``KafkaError``."""
    try:
        return entity_skip(schema)(buf, pos, len(buf))
    except (struct.error, IndexError) as exc:  # a bound this walk missed is still a bad request
        raise KafkaError(f"{schema.__name__} does not decode: {exc}") from None
