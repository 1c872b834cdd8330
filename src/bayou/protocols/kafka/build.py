"""Build kio entities from plain values: one call serves every version of an API.

A handler answers with the fields of its response by name (``build(schema, **fields)``); nested
entities are given as dicts (one) or lists of dicts (an array); fields the version does not have
are dropped and fields not given take their zero value (0, "", an empty array, None for a nullable
one, ``ErrorCode.none``, a zero timedelta, the epoch, the zero UUID). So a handler written against
the newest version answers every older one the client negotiated, as Kafka's own generated
``*ResponseData`` classes do.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import typing
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from bayou.protocols.kafka.guard import field_shape

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = ("timedelta_i32", "timedelta_i64")


@functools.cache
def _fields(cls: Any) -> tuple[tuple[Any, Any, bool, bool, bool], ...]:
    """(field, inner type, is an array, is optional, has a default) of each field of ``cls``."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        inner, is_array, optional = field_shape(hints[f.name])
        has_default = (f.default is not dataclasses.MISSING
                       or f.default_factory is not dataclasses.MISSING)
        out.append((f, inner, is_array, optional, has_default))
    return tuple(out)


def build(cls: Any, **values: Any) -> Any:
    """A kio entity of ``cls`` from ``values`` (see the module docstring). A timedelta field may
    be given as milliseconds."""
    kwargs: dict[str, Any] = {}
    for f, inner, is_array, optional, has_default in _fields(cls):
        if f.name in values:
            value = values[f.name]
            if value is None:  # a nullable field (an array of Metadata's topics: every topic)
                pass
            elif dataclasses.is_dataclass(inner):
                if is_array:
                    value = tuple(v if dataclasses.is_dataclass(v) else build(inner, **v) for v in value)
                elif isinstance(value, dict):
                    value = build(inner, **value)
            elif is_array:
                value = tuple(value)
            elif f.metadata.get("kafka_type") in _MS and isinstance(value, int):
                value = datetime.timedelta(milliseconds=value)
            kwargs[f.name] = value
        elif not has_default:
            kwargs[f.name] = _zero(f, inner, is_array, optional)
    return cls(**kwargs)


def _zero(field: Any, inner: Any, is_array: bool, optional: bool) -> Any:
    if is_array:
        return ()
    if optional:
        return None
    if dataclasses.is_dataclass(inner):
        return build(inner)
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type in _MS:
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return _EPOCH
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "bool":
        return False
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    return 0
