"""Topics and their messages in the admin API.

``/api/v1/topics`` lists, describes (partitions with leader, replicas, ISR, offsets, size, segment
count; config), creates, deletes, alters the config of and adds partitions to topics; the broker
checks describe / manage_topics per topic as for every protocol. ``.../partitions/{p}/messages``
browses a partition (through ``Broker.fetch``: poll rights) and produces a test message (send).

Rendering of keys, values and header values (``format``): ``text`` is UTF-8 (bytes that are not
valid UTF-8 fall back to hex), ``json`` embeds a value that parses as JSON as JSON (else as text),
``hex`` is lowercase hex. Each record says what each field became (``key_format``,
``value_format``), so a client never guesses.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bayou.broker import admin
from bayou.records.model import Record
from bayou.server.http.api import (
    PREFIX,
    BadInput,
    body_object,
    endpoint,
    int_field,
    ok,
    path_int,
    query_int,
    str_field,
)

if TYPE_CHECKING:
    from bayou.broker.broker import Broker
    from bayou.server.app import BayouServer

FORMATS = ("text", "json", "hex")
DEFAULT_LIMIT = 50
MAX_PARTITIONS = 10_000


# -- rendering ----------------------------------------------------------------------------------


def render(data: bytes | None, fmt: str) -> tuple[Any, str | None]:
    """(the rendered field, what it was rendered as); (None, None) for an absent key."""
    if data is None:
        return None, None
    if fmt == "hex":
        return data.hex(), "hex"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex(), "hex"
    if fmt == "json":
        try:
            return json.loads(text), "json"
        except ValueError:
            pass
    return text, "text"


def record_doc(rec: Record, fmt: str) -> dict[str, Any]:
    key, key_format = render(rec.key, fmt)
    value, value_format = render(rec.value, fmt)
    headers = []
    for name, raw in rec.headers:
        hv, hf = render(raw, "hex" if fmt == "hex" else "text")
        headers.append({"key": name, "value": hv, "format": hf})
    return {"offset": rec.offset, "timestamp": rec.timestamp, "key": key, "key_format": key_format,
            "value": value, "value_format": value_format, "headers": headers,
            "size": len(rec.value) + len(rec.key or b"")}


# -- topics -------------------------------------------------------------------------------------


def _rf(broker: Broker, name: str) -> int:
    """Replicas of the topic's first partition as placed (a single node holds one copy whatever
    ``replication.factor`` says, unless V1 followers joined it)."""
    return len(admin.placement(broker, name, 0).replicas)


def topic_summary(broker: Broker, name: str) -> dict[str, Any]:
    t = broker.topics[name]
    parts = list(t.partitions)
    under = sum(1 for p in parts if admin.placement(broker, name, p.index).under_replicated)
    return {"name": name, "partitions": len(parts), "replication_factor": _rf(broker, name),
            "records": sum(max(0, p.high_watermark - p.log.log_start_offset) for p in parts),
            "size_bytes": sum(p.log.size_bytes for p in parts), "under_replicated_partitions": under}


def topic_doc(broker: Broker, name: str) -> dict[str, Any]:
    info = broker.describe_topic(name)
    partitions = []
    for p in info.partitions:
        place = admin.placement(broker, name, p.partition)
        partitions.append({
            "partition": p.partition, "leader": place.leader, "replicas": list(place.replicas),
            "isr": list(place.isr), "under_replicated": place.under_replicated,
            "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset,
            "high_watermark": p.high_watermark, "size_bytes": p.size_bytes, "segments": p.segments,
            "offline": p.offline})
    return {"name": name, "replication_factor": _rf(broker, name), "partitions": partitions,
            "config": dict(sorted(info.config.items()))}


def _config(doc: dict[str, Any], name: str, *, allow_null: bool) -> dict[str, str | None]:
    raw = doc.get(name, {}) if name else doc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadInput(f"{name or 'the body'} must be an object of config keys")
    out: dict[str, str | None] = {}
    for k, v in raw.items():
        if v is None and allow_null:
            out[k] = None
        elif isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, int | float | str):
            out[k] = str(v)
        else:
            raise BadInput(f"config {k} must be a string, number or boolean"
                           + (" (or null to remove it)" if allow_null else ""))
    return out


def routes(server: BayouServer) -> Iterable[web.RouteDef]:
    broker = server.broker

    @endpoint(server, "broker")
    async def list_topics(_request: web.Request) -> web.StreamResponse:
        names = [n for n in broker.visible_topics() if n in broker.topics]
        return ok({"topics": [topic_summary(broker, n) for n in names]})

    @endpoint(server, "broker")
    async def describe(request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        broker.check_describe(name)  # a hidden topic is 403 whether or not it exists
        await broker.ready_topic(name)
        return ok(topic_doc(broker, name))

    @endpoint(server, "broker")
    async def create(request: web.Request) -> web.StreamResponse:
        doc = await body_object(request)
        name = str_field(doc, "name")
        assert name is not None
        partitions = int_field(doc, "partitions", required=False, low=1, high=MAX_PARTITIONS)
        config = {k: v for k, v in _config(doc, "config", allow_null=False).items() if v is not None}
        rf = int_field(doc, "replication_factor", required=False, low=1, high=1000)
        if rf is not None:
            config["replication.factor"] = str(rf)
        await broker.create_topic(name, partitions, config)
        await broker.ready_topic(name)
        return ok(topic_doc(broker, name), status=201)

    @endpoint(server, "broker")
    async def delete(request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        broker.check_describe(name)  # a hidden topic is 403 whether or not it exists
        await broker.ready_topic(name)
        await broker.delete_topic(name)
        return ok({"deleted": name})

    @endpoint(server, "broker")
    async def alter_config(request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        changes = _config(await body_object(request), "", allow_null=True)
        broker.check_describe(name)
        await broker.ready_topic(name)
        config = await broker.alter_topic_config(name, changes)
        return ok({"name": name, "config": dict(sorted(config.items()))})

    @endpoint(server, "broker")
    async def add_partitions(request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        count = int_field(await body_object(request), "count", low=1, high=MAX_PARTITIONS)
        assert count is not None
        broker.check_describe(name)
        await broker.ready_topic(name)
        topic = await broker.grow_partitions(name, count)
        await broker.ready_topic(name, len(topic.partitions) - 1)
        return ok(topic_doc(broker, name))

    @endpoint(server, "broker")
    async def browse(request: web.Request) -> web.StreamResponse:
        topic, p = request.match_info["topic"], path_int(request, "partition")
        fmt = request.query.get("format", "text")
        if fmt not in FORMATS:
            raise BadInput(f"format must be one of {', '.join(FORMATS)}")
        offset = query_int(request, "offset", low=0)
        timestamp = query_int(request, "timestamp", low=0)
        if offset is not None and timestamp is not None:
            raise BadInput("give offset or timestamp, not both")
        limit = query_int(request, "limit", low=1, high=admin.MAX_BROWSE) or DEFAULT_LIMIT
        page = await admin.browse(broker, topic, p, offset=offset, timestamp=timestamp, limit=limit)

        def render() -> bytes:  # up to 500 records of any size: hex/JSON and the dump off the loop
            return json.dumps({
                "topic": topic, "partition": p, "log_start_offset": page.log_start_offset,
                "high_watermark": page.high_watermark, "next_offset": page.next_offset,
                "format": fmt, "records": [record_doc(r, fmt) for r in page.records]},
                separators=(",", ":")).encode()

        return web.Response(body=await asyncio.to_thread(render), content_type="application/json")

    @endpoint(server, "broker")
    async def produce(request: web.Request) -> web.StreamResponse:
        topic, p = request.match_info["topic"], path_int(request, "partition")
        doc = await body_object(request)
        value = _payload(doc, "value", required=True)
        assert value is not None
        key = _payload(doc, "key", required=False)
        raw_headers = doc.get("headers") or {}
        if not isinstance(raw_headers, dict) or not all(isinstance(v, str) for v in raw_headers.values()):
            raise BadInput("headers must be an object of string values")
        headers = tuple((str(k), v.encode()) for k, v in raw_headers.items())
        result = await admin.produce_one(broker, topic, p, value, key, headers)
        return ok({"topic": topic, "partition": result.partition, "offset": result.base_offset,
                   "high_watermark": result.high_watermark}, status=201)

    base = f"{PREFIX}/topics"
    messages = base + "/{topic}/partitions/{partition}/messages"
    return [
        web.get(base, list_topics), web.post(base, create),
        web.get(base + "/{topic}", describe), web.delete(base + "/{topic}", delete),
        web.patch(base + "/{topic}/config", alter_config),
        web.post(base + "/{topic}/partitions", add_partitions),
        web.get(messages, browse), web.post(messages, produce),
    ]


def _payload(doc: dict[str, Any], name: str, *, required: bool) -> bytes | None:
    """A key or value: a string is sent as its UTF-8, anything else JSON as its JSON text."""
    if name not in doc or doc[name] is None:
        if required:
            raise BadInput(f"{name} is required")
        return None
    value = doc[name]
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


__all__ = ["FORMATS", "record_doc", "render", "routes", "topic_doc", "topic_summary"]
