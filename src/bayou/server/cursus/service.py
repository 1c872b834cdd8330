"""The Cursus protocol bound to the broker (cursus.md; replies in the current broker's style).

Frames are classified by the sans-IO codec (protocols/cursus) into a binary batch or a text command;
a text command is decoded into a typed request (``protocols/cursus/requests.py``) and dispatched on
its type through one table (``CursusService.table``). Registry errors become replies in one place
(``protocols/cursus/codes``). The handlers are grouped by concern, one module each, and call only
the broker API:

- ``topics``: CREATE, DELETE, LIST, HELP, METADATA, FIND_COORDINATOR, DESCRIBE, LIST_OFFSETS;
- ``produce``: binary batches and PUBLISH;
- ``consume``: CONSUME and STREAM;
- ``groups``: consumer groups and their offsets;
- ``events``: event sourcing and snapshots (the store: ``eventstore``).

What they share is ``context`` (the connection's state, the advertised address, the error replies).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bayou.broker import Broker
from bayou.broker.views import THIS_BROKER
from bayou.errors import BayouError
from bayou.protocols.cursus import batch as cb
from bayou.protocols.cursus import replies
from bayou.protocols.cursus import requests as rq
from bayou.protocols.cursus.codes import error_reply
from bayou.protocols.cursus.commands import Command, classify, only_appends
from bayou.protocols.cursus.compression import GZIP_MAGIC, LZ4_MAGIC, XERIAL_MAGIC, maybe_decompress
from bayou.protocols.cursus.framing import MAX_FRAME, CursusError, FrameReader, encode_frame
from bayou.protocols.cursus.requests import ErrorReply
from bayou.server.base import Connection, Listener
from bayou.server.cursus.consume import ConsumeHandlers
from bayou.server.cursus.context import Advertised, Body, ConnState, Context, Handler, err
from bayou.server.cursus.events import EventHandlers
from bayou.server.cursus.groups import GroupHandlers
from bayou.server.cursus.produce import ProduceHandlers
from bayou.server.cursus.topics import TopicHandlers
from bayou.server.frames import serve_frames
from bayou.server.metering import UNKNOWN, RequestMeter
from bayou.server.workers import OFF_LOOP_BYTES, inflate_pool, parse_pool, run_in

log = logging.getLogger("bayou.cursus")

COMPRESSED_MAGICS = (GZIP_MAGIC, XERIAL_MAGIC, LZ4_MAGIC)  # what maybe_decompress inflates

# Commands whose state lives on the group's coordinator (cluster mode checks who that is).
GROUP_COMMANDS = frozenset({"JOIN_GROUP", "SYNC_GROUP", "HEARTBEAT", "LEAVE_GROUP", "COMMIT_OFFSET", "COMMIT",
                            "BATCH_COMMIT", "REGISTER_GROUP", "GROUP_STATUS"})


class CursusService:
    def __init__(self, broker: Broker, advertised: Advertised) -> None:
        self.broker = broker
        self.meter = RequestMeter("cursus")
        self.ctx = Context(broker, advertised)
        self.events = EventHandlers(self.ctx)
        self.topics = TopicHandlers(self.ctx, forget=self.events.store.forget)
        self.produce = ProduceHandlers(self.ctx)
        self.consume = ConsumeHandlers(self.ctx)
        self.groups = GroupHandlers(self.ctx)
        self.table: dict[type[Any], Handler] = self._handler_table()

    @property
    def advertised(self) -> Advertised:
        return self.ctx.advertised

    @advertised.setter
    def advertised(self, value: Advertised) -> None:
        self.ctx.advertised = value

    def _handler_table(self) -> dict[type[Any], Handler]:
        topics, groups, events = self.topics, self.groups, self.events
        return {
            rq.CreateTopic: topics.create, rq.DeleteTopic: topics.delete, rq.ListTopics: topics.list_topics,
            rq.Help: topics.help, rq.Metadata: topics.metadata, rq.FindCoordinator: topics.find_coordinator,
            rq.Describe: topics.describe, rq.ListOffsets: topics.list_offsets,
            rq.Publish: self.produce.publish,
            rq.Consume: self.consume.consume, rq.Stream: self.consume.stream,
            rq.JoinGroup: groups.join_group, rq.SyncGroup: groups.sync_group, rq.Heartbeat: groups.heartbeat,
            rq.LeaveGroup: groups.leave_group, rq.FetchOffset: groups.fetch_offset,
            rq.CommitOffset: groups.commit_offset, rq.BatchCommit: groups.batch_commit,
            rq.Subscribe: groups.subscribe, rq.RegisterGroup: groups.register_group,
            rq.GroupStatus: groups.group_status, rq.ListGroups: groups.list_groups,
            rq.AppendStream: events.append_stream, rq.StreamVersion: events.stream_version,
            rq.SaveSnapshot: events.save_snapshot, rq.ReadSnapshot: events.read_snapshot,
            rq.ReadStream: events.read_stream,
        }

    # -- dispatch ------------------------------------------------------------------------------

    async def handle(self, body: bytes, state: ConnState, conn: Connection | None = None) -> Body:
        """One frame body -> the reply body or bodies (None: no reply). Raises CursusError to close."""
        started = time.perf_counter()
        command, failed = UNKNOWN, True
        try:
            if body.startswith(COMPRESSED_MAGICS):  # inflating is CPU work: off the loop (gzip bombs)
                body = await run_in(inflate_pool(), maybe_decompress, body)
            if len(body) > OFF_LOOP_BYTES and not cb.is_batch(body):  # a long text command (BATCH_COMMIT
                item = await run_in(parse_pool(), classify, body)  # of a million entries): off the loop
            else:
                item = classify(body)
            command = "BATCH" if isinstance(item, cb.BatchHead) else item.name if item.name in rq.DECODERS \
                else UNKNOWN
            reply = await self._dispatch(body, item, state, conn)
            first = (reply[0] if reply else None) if isinstance(reply, list) else reply
            failed = first is not None and first.startswith(b"ERROR")
            return reply
        finally:
            self.meter.record(command, started, failed, timed=not state.streaming)

    async def _dispatch(self, body: bytes, item: cb.BatchHead | Command, state: ConnState,
                        conn: Connection | None) -> Body:
        try:
            if isinstance(item, cb.BatchHead):
                return await self.produce.produce_batch(body, item)
            if not rq.served(item):
                return rq.unknown(item)
            if item.name in GROUP_COMMANDS:
                self._check_coordinator(item)
            if len(body) > OFF_LOOP_BYTES:
                request = await run_in(parse_pool(), rq.decode, item)
            else:  # inline: a coroutine per command would be 1 % of a PUBLISH
                request = rq.decode(item)
            return await self.table[type(request)](request, state, conn)
        except ErrorReply as r:
            return r.reply
        except CursusError:
            raise
        except BayouError as exc:
            return error_reply(exc)
        except Exception:
            log.exception("Cursus request failed")
            return replies.error("internal_error", ("reason", "internal error"))

    # -- group coordination (a cluster's groups each live on one broker) -------------------------

    def _check_coordinator(self, cmd: Command) -> None:
        """A group's membership lives on its coordinator (standalone: this broker); elsewhere the
        distributed Cursus broker's ``ERROR: NOT_COORDINATOR host=<h> port=<p>``, on which
        clients find the coordinator again and rejoin there."""
        positional = rq.positional(cmd)  # the seeds' forms: topic, group, ...
        group = cmd.args.get("group") or (positional[1] if len(positional) > 1 else None)
        if not group:
            return
        where = self.broker.group_coordinator(group, ("cursus",))
        if where is None:  # the cluster state has not arrived yet
            raise err("coordinator_not_available", ("group", group))
        if where is THIS_BROKER or where.broker_id == self.broker.config.broker_id:
            return
        raise err(replies.ErrorCode.NOT_COORDINATOR, ("host", where.hostname), ("port", where.port))


def cursus_handler(service: CursusService) -> Callable[[Connection, Listener], Awaitable[None]]:
    async def serve(conn: Connection, listener: Listener) -> None:
        state = ConnState()

        async def handle(body: bytes) -> Body:
            try:
                reply = await service.handle(body, state, conn)
            except CursusError as exc:
                if exc.close:
                    raise
                return None if exc.reply is None else encode_frame(exc.reply)
            if reply is None or state.streaming:  # a stream owned the connection until it ended
                return None
            return [encode_frame(r) for r in reply] if isinstance(reply, list) else encode_frame(reply)

        async def refuse(exc: CursusError) -> None:
            if exc.reply is not None:
                conn.writer.write(encode_frame(exc.reply))
                await conn.writer.drain()

        await serve_frames(conn, listener, FrameReader(listener.limits.frame_cap(MAX_FRAME)), handle,
                           error=CursusError, refuse=refuse, done=lambda: state.streaming,
                           pipeline=only_appends if service.broker.produce_waits() else None)
    return serve


__all__ = ["Advertised", "CursusService", "cursus_handler"]
