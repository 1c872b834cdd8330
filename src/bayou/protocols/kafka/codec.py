"""Kafka request bodies in, response bodies out, through kio's generated schemas.

kio (Aiven, Apache-2.0) carries one frozen dataclass per API, version and direction, generated
from Kafka's own message definitions, with a native reader and a pure-Python writer that handle
flexible versions, compact strings and arrays and tagged fields. This module adds what a server
needs around it: the header version each request implies, the served-version check before any body
is parsed, one protocol error for every way a frame can be bad, the response header, and the
ApiVersions UNSUPPORTED_VERSION fallback.

Request and response bodies are kio's payload dataclasses; a ``records`` field is the raw bytes of
the record batches (``bayou.records.batch`` reads them: the v2 layout is the one bayou stores).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib
import io
import struct
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i16
from kio.static.protocol import RequestPayload, ResponsePayload

from bayou.protocols.kafka import fast
from bayou.protocols.kafka.codes import SUPPORTED, ApiKey, VersionRange
from bayou.protocols.kafka.framing import (
    KafkaError,
    RequestHeader,
    decode_header,
    encode_header,
    read_fixed_header,
    read_tagged_fields,
)
from bayou.protocols.kafka.guard import check_body

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
_SIZE_CORRELATION = struct.Struct(">ii")
_KEYS = frozenset(int(k) for k in ApiKey)

# What a malformed body can raise inside kio's reader besides its own errors: a bad enum value
# (an unknown error code in a response), an out-of-range phantom integer, a bad UTF-8 string.
_DECODE_ERRORS = (SerialError, ValueError, TypeError, OverflowError, IndexError, KeyError,
                  UnicodeDecodeError)


@dataclass(slots=True)  # not frozen: built per request, and a frozen one costs 4x to build
class Request:
    """One decoded request: its header and kio's body dataclass."""

    header: RequestHeader
    body: RequestPayload
    trailing: int = 0  # bytes after the body, ignored as Kafka ignores them


@functools.cache
def request_schema(api_key: int, api_version: int) -> type[RequestPayload]:
    return load_request_schema(api_key, api_version)


@functools.cache
def response_schema(api_key: int, api_version: int) -> type[ResponsePayload]:
    return load_response_schema(api_key, api_version)


@functools.cache
def _reader(schema: Any) -> Callable[[Any, int], tuple[Any, int]]:
    return cast(Callable[[Any, int], tuple[Any, int]], entity_reader(schema))


@functools.cache
def _writer(schema: Any) -> Callable[[io.BytesIO, Any], None]:
    return cast(Callable[[io.BytesIO, Any], None], entity_writer(schema))


def request_is_flexible(api_key: int, api_version: int) -> bool:
    """Whether the request uses header v2 (its version is a flexible one)."""
    return bool(request_schema(api_key, api_version).__flexible__)


def response_header_is_flexible(api_key: int, api_version: int) -> bool:
    """Whether the response uses header v1. ApiVersions never does: a client must read the
    response to a version it sent before knowing whether the broker understood it."""
    schema = response_schema(api_key, api_version)
    return schema.__header_schema__.__name__ == "ResponseHeader" and bool(
        schema.__header_schema__.__flexible__)


def decode_direct(frame: bytes | bytearray | memoryview,
                  supported: Mapping[ApiKey, VersionRange] = SUPPORTED) -> Request | None:
    """The requests producers and consumers send most, read without kio when they have the
    usual shape and at most ``fast.DIRECT_MAX_PARTITIONS`` partitions (fast.decode_produce,
    fast.decode_fetch; ``kio_body`` turns their bodies into kio's): cheap enough for the event
    loop whatever the frame's size. None for anything else (``decode_request`` reads it)."""
    api_key, api_version, _ = read_fixed_header(frame)
    direct = _DIRECT.get(api_key)
    if direct is None or api_version not in supported.get(ApiKey(api_key), ()):
        return None
    reader, first_flexible = direct
    header = decode_header(frame, flexible=api_version >= first_flexible)
    read = reader(frame, api_version, header.size)
    if read is None:
        return None
    return Request(header, cast(RequestPayload, read[0]), read[1])


def decode_request(frame: bytes | bytearray | memoryview,
                   supported: Mapping[ApiKey, VersionRange] = SUPPORTED) -> Request:
    """Decode one request frame (the bytes after the size prefix).

    Raises ``KafkaError``: with ``close`` for an unknown API, an unserved version or a body that
    does not decode; an ApiVersions request at a version bayou does not serve is answered instead
    (``reply`` holds the UNSUPPORTED_VERSION response, Kafka's fallback) and the connection stays.
    """
    request = decode_direct(frame, supported)
    if request is not None:
        return request
    api_key, api_version, correlation_id = read_fixed_header(frame)
    served = supported.get(ApiKey(api_key)) if api_key in _KEYS else None
    schema = None
    if served is not None and api_version in served:
        with contextlib.suppress(KioIndexError):
            schema = request_schema(api_key, api_version)
    if schema is None:
        if api_key == ApiKey.API_VERSIONS:
            reply = unsupported_api_versions_reply(correlation_id, supported)
            raise KafkaError(f"ApiVersions v{api_version} is not served: answered with v0",
                             close=False, reply=reply)
        raise KafkaError(f"api_key {api_key} v{api_version} is not served")
    header = decode_header(frame, flexible=bool(schema.__flexible__))
    try:
        body, trailing = _read_body(schema, frame, header.size)
    except KafkaError as exc:
        exc.header = header
        raise
    return Request(header, cast(RequestPayload, body), trailing)


def _read_body(schema: Any, frame: bytes | bytearray | memoryview, pos: int) -> tuple[Any, int]:
    """kio's dataclass for the body at ``pos`` and the bytes the frame holds after it.

    ``check_body`` walks it first: kio's native reader must never see a length it could
    over-reserve for (``guard``). Bytes after the body are left alone, as Kafka's own parser
    leaves them: librdkafka 2.16 sends three after an all-topics Metadata v13 body (vector
    ``confluent-kafka-apiversions-fallback``), and a Kafka broker answers it.
    """
    end = check_body(schema, frame, pos)
    try:
        body, size = _reader(schema)(frame, pos)
    except _DECODE_ERRORS as exc:
        raise KafkaError(f"{schema.__name__} v{schema.__version__} does not decode: {exc!r}") from None
    if pos + size != end:
        raise KafkaError(f"{schema.__name__} read {size} bytes, the layout {end - pos}")
    return body, len(frame) - end


def kio_body(header: RequestHeader, body: Any) -> RequestPayload:
    """``body`` as kio's entity: a Produce body read by ``fast.decode_produce`` becomes kio's
    ProduceRequest of the header's version (same fields; the timeout a timedelta), a Fetch body
    read by ``fast.decode_fetch`` kio's FetchRequest; anything else is kio's already."""
    if isinstance(body, fast.FetchRequest):
        return _kio_fetch(header.api_version, body)
    if not isinstance(body, fast.ProduceRequest):
        return cast(RequestPayload, body)
    schema: Any = request_schema(ApiKey.PRODUCE, header.api_version)
    module = sys.modules[schema.__module__]
    topics = tuple(module.TopicProduceData(
        name=t.name, partition_data=tuple(module.PartitionProduceData(index=p.index, records=p.records)
                                          for p in t.partition_data)) for t in body.topic_data)
    timeout = datetime.timedelta(milliseconds=body.timeout_ms)
    return cast(RequestPayload, schema(transactional_id=body.transactional_id, acks=body.acks,
                                       timeout=timeout, topic_data=topics))


def _kio_fetch(version: int, body: fast.FetchRequest) -> RequestPayload:
    schema: Any = request_schema(ApiKey.FETCH, version)
    module = sys.modules[schema.__module__]

    def partition(p: fast.FetchPartition) -> Any:
        kw = {"partition": p.partition, "fetch_offset": p.fetch_offset,
              "partition_max_bytes": p.partition_max_bytes}
        if version >= 5:
            kw["log_start_offset"] = p.log_start_offset
        if version >= 9:
            kw["current_leader_epoch"] = p.current_leader_epoch
        if version >= 12:
            kw["last_fetched_epoch"] = p.last_fetched_epoch
        return module.FetchPartition(**kw)

    fields: dict[str, Any] = {
        "replica_id": body.replica_id, "max_wait": body.max_wait, "min_bytes": body.min_bytes,
        "max_bytes": body.max_bytes, "isolation_level": body.isolation_level,
        "topics": tuple(module.FetchTopic(topic=t.topic, partitions=tuple(map(partition, t.partitions)))
                        for t in body.topics)}
    if version >= 7:
        forgotten = tuple(module.ForgottenTopic(topic=f.topic, partitions=f.partitions)
                          for f in body.forgotten_topics_data)
        fields.update(session_id=body.session_id, session_epoch=body.session_epoch,
                      forgotten_topics_data=forgotten)
    if version >= 11:
        fields["rack_id"] = body.rack_id
    return cast(RequestPayload, schema(**fields))


_DIRECT: dict[int, tuple[Callable[[Any, int, int], Any], int]] = {
    ApiKey.PRODUCE: (fast.decode_produce, fast.FIRST_FLEXIBLE),
    ApiKey.FETCH: (fast.decode_fetch, fast.FETCH_FIRST_FLEXIBLE),
}


def encode_request(header: RequestHeader, body: RequestPayload) -> bytes:
    """A whole request frame with its size prefix: what a client sends (tests, tools). A body
    read by ``decode_request`` is written back as it was read (``kio_body``)."""
    body = kio_body(header, body)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(encode_header(header))
    _writer(type(body))(out, body)
    return _sized(out)


def encode_response(header: RequestHeader, body: ResponsePayload) -> bytes:
    """The whole response frame to ``header``'s request: size, response header, body."""
    if body.__api_key__ != header.api_key or body.__version__ != header.api_version:
        raise ValueError(f"{type(body).__name__} v{body.__version__} does not answer "
                         f"api_key {header.api_key} v{header.api_version}")
    out = io.BytesIO()
    out.write(_SIZE_CORRELATION.pack(0, header.correlation_id))
    if response_header_is_flexible(header.api_key, header.api_version):
        out.write(b"\0")  # no tagged fields
    _writer(type(body))(out, body)
    return _sized(out)


def decode_response(frame: bytes | bytearray | memoryview, api_key: int,
                    api_version: int) -> tuple[int, ResponsePayload]:
    """(correlation_id, body) of a response frame without its size: what a client reads."""
    if len(frame) < 4:
        raise KafkaError("response without a header")
    (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
    pos = 4
    try:
        schema = response_schema(api_key, api_version)
    except KioIndexError:
        raise KafkaError(f"no response schema for api_key {api_key} v{api_version}") from None
    if response_header_is_flexible(api_key, api_version):
        _tags, pos = read_tagged_fields(frame, pos)
    body, _trailing = _read_body(schema, frame, pos)
    return correlation_id, cast(ResponsePayload, body)


def api_versions(supported: Mapping[ApiKey, VersionRange] = SUPPORTED) -> list[tuple[int, int, int]]:
    """(api_key, min, max) for every served API, in key order: ApiVersions' list."""
    return [(int(k), r.min, r.max) for k, r in sorted(supported.items())]


def api_versions_response(api_version: int,
                          supported: Mapping[ApiKey, VersionRange] = SUPPORTED, *,
                          error: ErrorCode = ErrorCode.none) -> ResponsePayload:
    """The ApiVersions response body at ``api_version`` listing ``supported``."""
    schema = cast(Any, response_schema(ApiKey.API_VERSIONS, api_version))
    module = importlib.import_module(schema.__module__)
    keys = tuple(module.ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                 for k, lo, hi in api_versions(supported))
    kwargs: dict[str, Any] = {"error_code": error, "api_keys": keys}
    if api_version >= 1:
        kwargs["throttle_time"] = datetime.timedelta(0)
    return cast(ResponsePayload, schema(**kwargs))


def unsupported_api_versions_reply(correlation_id: int,
                                   supported: Mapping[ApiKey, VersionRange] = SUPPORTED) -> bytes:
    """Kafka's answer to an ApiVersions request newer than the broker knows: a v0 response (any
    client can read it) with UNSUPPORTED_VERSION and the served list, from which the client picks
    the highest ApiVersions version both know and asks again (KIP-511)."""
    body = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(ApiVersionV0(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                       for k, lo, hi in api_versions(supported)))
    out = io.BytesIO()
    out.write(_SIZE_CORRELATION.pack(0, correlation_id))
    _writer(ApiVersionsResponseV0)(out, body)
    return _sized(out)


def _sized(out: io.BytesIO) -> bytes:
    """The frame in ``out`` (written after four placeholder bytes) with its size filled in."""
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    del data
    return out.getvalue()
