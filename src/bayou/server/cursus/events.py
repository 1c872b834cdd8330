"""Cursus's event sourcing commands (cursus.md 4.19): APPEND_STREAM, STREAM_VERSION, SAVE_SNAPSHOT,
READ_SNAPSHOT and READ_STREAM, on an ``event_sourcing=true`` topic, answered from the event
store (``eventstore``)."""

from __future__ import annotations

from bayou.protocols.cursus import batch as cb
from bayou.protocols.cursus import replies
from bayou.protocols.cursus import requests as rq
from bayou.protocols.cursus.requests import ErrorReply
from bayou.records.cursus import encode_message
from bayou.server.base import Connection
from bayou.server.cursus.context import ConnState, Context, err, refuse
from bayou.server.cursus.eventstore import EventStore, SnapshotAhead, VersionConflict


class EventHandlers:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.store = EventStore(ctx.broker)

    def _event_topic(self, topic: str) -> None:
        if not self.broker.topic_exists(topic):
            raise err("topic_not_found", ("topic", topic))
        if not self.broker.topic_flag(topic, "event.sourcing"):
            raise err("event_sourcing_not_enabled", ("topic", topic))

    async def append_stream(self, req: rq.AppendStream, state: ConnState, conn: Connection | None) -> bytes:
        self._event_topic(req.topic)
        refuse(req.invalid)
        try:
            offset, p = await self.store.append(
                req.topic, req.key, req.version, req.message.encode(), req.event_type.encode(),
                req.schema_version, req.metadata.encode(), req.producer_id.encode())
        except VersionConflict as exc:
            raise err("version_conflict", ("current", exc.current), ("expected", exc.expected)) from None
        return replies.ok(("version", req.version), ("offset", offset), ("partition", p))

    async def stream_version(self, req: rq.StreamVersion, state: ConnState, conn: Connection | None) -> bytes:
        self._event_topic(req.topic)
        return replies.ok(("version", await self.store.version(req.topic, req.key)))

    async def save_snapshot(self, req: rq.SaveSnapshot, state: ConnState, conn: Connection | None) -> bytes:
        self._event_topic(req.topic)
        refuse(req.invalid)
        try:
            p = await self.store.save_snapshot(req.topic, req.key, req.version, req.message)
        except SnapshotAhead as exc:
            raise err("snapshot_version_exceeds_stream", ("version", exc.version),
                      ("current", exc.current)) from None
        return replies.ok(("version", req.version), ("partition", p))

    async def read_snapshot(self, req: rq.ReadSnapshot, state: ConnState, conn: Connection | None) -> bytes:
        self._event_topic(req.topic)
        snap = self.store.snapshot(req.topic, req.key)
        if snap is None:
            return replies.ok(("snapshot", replies.Raw("null")))
        body = replies.json_body({"version": snap.version, "payload": snap.payload}).decode()
        return replies.ok(("snapshot", replies.Raw(body)))

    async def read_stream(self, req: rq.ReadStream, state: ConnState, conn: Connection | None) -> list[bytes]:
        topic, key, from_version = req.topic, req.key, req.from_version
        try:  # READ_STREAM errors are a single JSON frame
            self._event_topic(topic)
        except ErrorReply as r:
            assert isinstance(r.reply, bytes)
            return [rq.json_error(r.reply)]
        if req.invalid is not None:
            return [req.invalid]
        p = self.store.partition_of(topic, key)
        head: dict[str, object] = {"status": "OK", "topic": topic, "key": key.decode(errors="replace"),
                                   "partition": p}
        snap = self.store.snapshot(topic, key)
        start = from_version
        if snap is not None and snap.version >= from_version:
            start = snap.version + 1
        events = await self.store.events(topic, key, start)
        head["count"] = len(events)
        if snap is not None and snap.version >= from_version:
            head["snapshot"] = {"version": snap.version, "payload": snap.payload}
        out = bytearray()
        for m in events:
            encode_message(m, out)
        first = events[0].seq_num if events else 0
        last = events[-1].seq_num if events else 0
        return [replies.json_body(head), cb.encode_batch(topic, p, bytes(out), len(events), first, last)]
