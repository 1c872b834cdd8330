"""The Apache Iggy binary transport bound to the broker (iggy.md), three framings on one port.

A connection's framing is detected from its first bytes (D.2): the 256-byte-header framing of
apache-iggy 0.9 (V) or the legacy framing (u32 length + u32 code) shared by apache-iggy 0.8 (L)
and the design document (D), which are told apart by whether the client logs in (D.3). Requests
are decoded by the sans-IO codec (``bayou.protocols.iggy``) and dispatched through one table of
handlers keyed by command code (``IggyService.handlers``). The handlers are grouped by concern,
one module each, and call only the broker API, the stream catalog and the user store:

- ``auth``: logins, the per-request login check, users and personal access tokens;
- ``streams``: streams, topics, partitions and segments (the catalog, ``catalog``);
- ``produce``: SEND_MESSAGES and FLUSH_UNSAVED_BUFFER;
- ``fetch``: POLL_MESSAGES (and bayou's POLL_BATCHES, POLL_PARTITIONS and WAIT_FOR_MESSAGES);
- ``groups``: consumer groups and consumer offsets;
- ``system``: ping, stats, cluster metadata, clients.

What they share is ``context`` (the session, permission checks, resolution of ids and names);
the catalog and users, their files and their cluster copies are ``state``.

bayou's extensions, which an Iggy client may use and an unaware one never meets: the user header
``bayou.key`` (string key, RAW value) is the record key (``records.iggy``, ``convert``); a topic
created in the ``default`` stream is the bayou topic of exactly that name, and CREATE_TOPIC /
UPDATE_TOPIC options named like bayou topic config keys set that config (``streams``); on a topic
with ``message.deduplication=true`` every send path stores only the messages whose ids are not
replays (``produce``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from bayou.broker import Broker
from bayou.broker.authz import Permissions, Principal
from bayou.errors import BayouError, InvalidConfig, StorageError
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codec import check_vsr_header, decode_frame, encode_reply
from bayou.protocols.iggy.codes import Command, EvictionReason, Operation, Status, status_for
from bayou.protocols.iggy.framing import (
    LOGIN_CAP,
    MAX_LEGACY_PAYLOAD,
    MAX_SEND_PAYLOAD,
    MAX_VSR_FRAME,
    Dialect,
    IggyError,
    LegacyFrame,
    LegacyFrameReader,
    RequestHeader,
    VsrFrame,
    VsrFrameReader,
    detect_dialect,
    encode_eviction,
    encode_legacy_error,
    encode_legacy_reply,
    encode_vsr_error,
    encode_vsr_ok,
    resolve_legacy_dialect,
)
from bayou.server.base import Connection, Listener
from bayou.server.frames import Framing, serve_frames
from bayou.server.iggy.auth import AuthHandlers
from bayou.server.iggy.context import PROTOCOL_VERSION, Context, Handler, Session
from bayou.server.iggy.fetch import FetchHandlers
from bayou.server.iggy.groups import GroupHandlers
from bayou.server.iggy.produce import ProduceHandlers
from bayou.server.iggy.state import IggyState
from bayou.server.iggy.streams import StreamHandlers
from bayou.server.iggy.system import SystemHandlers
from bayou.server.iggy.users import UserStoreError, check_root_credentials
from bayou.server.metering import UNKNOWN, RequestMeter
from bayou.server.workers import OFF_LOOP_BYTES, parse_pool, run_in

log = logging.getLogger("bayou.iggy")

# Cluster mode: the commands that change the shared catalog or users (run under the cluster lock),
# and the answers that may mean "made through another broker a moment ago" (asked again after
# taking the cluster's copies).
SHARED_CHANGES = frozenset({
    Command.CREATE_STREAM, Command.DELETE_STREAM, Command.UPDATE_STREAM, Command.PURGE_STREAM,
    Command.CREATE_TOPIC, Command.DELETE_TOPIC, Command.UPDATE_TOPIC, Command.PURGE_TOPIC,
    Command.CREATE_PARTITIONS, Command.DELETE_PARTITIONS,
    Command.CREATE_CONSUMER_GROUP, Command.DELETE_CONSUMER_GROUP,
    Command.CREATE_USER, Command.DELETE_USER, Command.UPDATE_USER, Command.UPDATE_PERMISSIONS,
    Command.CHANGE_PASSWORD, Command.CREATE_PERSONAL_ACCESS_TOKEN, Command.DELETE_PERSONAL_ACCESS_TOKEN,
})
MAYBE_ELSEWHERE = frozenset({
    Status.STREAM_ID_NOT_FOUND, Status.STREAM_NAME_NOT_FOUND, Status.TOPIC_ID_NOT_FOUND,
    Status.TOPIC_NAME_NOT_FOUND, Status.CONSUMER_GROUP_ID_NOT_FOUND, Status.CONSUMER_GROUP_NAME_NOT_FOUND,
    Status.INVALID_CREDENTIALS, Status.RESOURCE_NOT_FOUND,
})
WIDE_REPLY = 256  # entries of a reply (streams, topics, partitions, a user's grants) encoded off the loop


def _wide(reply: bytes | m.Reply | None) -> bool:
    """Whether a reply lists WIDE_REPLY entries or more (its encoding is then done off the loop)."""
    return reply is not None and not isinstance(reply, bytes) and _entries(reply) >= WIDE_REPLY


def _entries(reply: m.Reply) -> int:
    """How many entries a reply lists: as many as the broker's lists, or a user's grants."""
    if isinstance(reply, tuple):
        return len(reply)
    if isinstance(reply, m.UserDetails):
        p = reply.permissions
        return 0 if p is None else len(p.streams) + sum(len(x.topics) for x in p.streams)
    if isinstance(reply, m.StreamDetails):
        return len(reply.topics)
    if isinstance(reply, m.TopicDetails):
        return len(reply.partitions)
    if isinstance(reply, m.ConsumerGroupDetails):
        return len(reply.members)
    return 0


IDLE_MEMBER_TIMEOUT_S = 36.0  # the current server: 1.2 x 30 s without a request, members only (E.5)

T = TypeVar("T")


class IggyService:
    def __init__(self, broker: Broker, *, port: int, host: str = "127.0.0.1",
                 root_username: str = "iggy", root_password: str = "iggy",
                 seed_dialect: bool = False) -> None:
        self.broker = broker
        self.seed_dialect = seed_dialect
        self.meter = RequestMeter("iggy")
        self.state = IggyState(broker, broker.config.data_dir / "iggy", root_username, root_password)
        try:  # the root user: checked, and made on first start, before any client connects
            check_root_credentials(root_username, root_password)
            self.state.users.load()
        except UserStoreError as exc:
            raise InvalidConfig(f"Iggy root user {root_username!r}: {exc} (set IGGY_ROOT_USERNAME and "
                                "IGGY_ROOT_PASSWORD, or [iggy] root_username and root_password)") from None
        except ValueError as exc:
            raise StorageError(f"cannot read the Iggy users file: {exc}") from None
        self.ctx = Context(broker, self.state, seed_dialect=seed_dialect)
        self.catalog, self.users = self.ctx.catalog, self.ctx.users
        self.groups = GroupHandlers(self.ctx)
        self.auth = AuthHandlers(self.ctx, self.groups.leave_all)
        self.streams = StreamHandlers(self.ctx)
        self.produce = ProduceHandlers(self.ctx)
        self.fetch = FetchHandlers(self.ctx, self.groups)
        self.system = SystemHandlers(self.ctx, host=host, port=port)
        self.handlers: dict[Command, Handler] = self._handler_table()
        self._next_client = 1
        self._starting: asyncio.Task[None] | None = None
        self._reaper: asyncio.Task[None] | None = None

    @property
    def sessions(self) -> dict[int, Session]:
        return self.ctx.sessions

    @property
    def port(self) -> int:
        """The Iggy port the cluster metadata advertises standalone (app.py sets the bound one)."""
        return self.system.port

    @port.setter
    def port(self, value: int) -> None:
        self.system.port = value

    def _handler_table(self) -> dict[Command, Handler]:
        c = Command
        auth, streams, groups, system = self.auth, self.streams, self.groups, self.system
        return {
            c.PING: system.ping, c.GET_STATS: system.get_stats, c.GET_CLUSTER_METADATA: system.cluster,
            c.GET_ME: system.get_me, c.GET_CLIENT: system.get_client, c.GET_CLIENTS: system.get_clients,
            c.LOGIN_USER: auth.login_user, c.LOGIN_WITH_PERSONAL_ACCESS_TOKEN: auth.login_token,
            c.LOGIN_REGISTER: auth.unreachable, c.LOGIN_REGISTER_WITH_PAT: auth.unreachable,
            c.LOGOUT_USER: auth.logout,
            c.GET_USER: auth.get_user, c.GET_USERS: auth.get_users, c.CREATE_USER: auth.create_user,
            c.DELETE_USER: auth.delete_user, c.UPDATE_USER: auth.update_user,
            c.UPDATE_PERMISSIONS: auth.update_permissions, c.CHANGE_PASSWORD: auth.change_password,
            c.GET_PERSONAL_ACCESS_TOKENS: auth.get_tokens,
            c.CREATE_PERSONAL_ACCESS_TOKEN: auth.create_token,
            c.DELETE_PERSONAL_ACCESS_TOKEN: auth.delete_token,
            c.POLL_MESSAGES: self.fetch.poll, c.POLL_BATCHES: self.fetch.poll,
            c.WAIT_FOR_MESSAGES: self.fetch.wait, c.POLL_PARTITIONS: self.fetch.poll_partitions,
            c.SEND_MESSAGES: self.produce.send_decoded,
            c.FLUSH_UNSAVED_BUFFER: self.produce.flush,
            c.GET_CONSUMER_OFFSET: groups.get_offset, c.STORE_CONSUMER_OFFSET: groups.store_offset,
            c.DELETE_CONSUMER_OFFSET: groups.delete_offset,
            c.GET_STREAM: streams.get_stream, c.GET_STREAMS: streams.get_streams,
            c.CREATE_STREAM: streams.create_stream, c.DELETE_STREAM: streams.delete_stream,
            c.UPDATE_STREAM: streams.update_stream, c.PURGE_STREAM: streams.purge_stream,
            c.GET_TOPIC: streams.get_topic, c.GET_TOPICS: streams.get_topics,
            c.CREATE_TOPIC: streams.create_topic, c.DELETE_TOPIC: streams.delete_topic,
            c.UPDATE_TOPIC: streams.update_topic, c.PURGE_TOPIC: streams.purge_topic,
            c.CREATE_PARTITIONS: streams.create_partitions, c.DELETE_PARTITIONS: streams.delete_partitions,
            c.DELETE_SEGMENTS: streams.delete_segments,
            c.GET_CONSUMER_GROUP: groups.get_group, c.GET_CONSUMER_GROUPS: groups.get_groups,
            c.CREATE_CONSUMER_GROUP: groups.create_group, c.DELETE_CONSUMER_GROUP: groups.delete_group,
            c.JOIN_CONSUMER_GROUP: groups.join_group, c.LEAVE_CONSUMER_GROUP: groups.leave_group,
            c.SYNC_CONSUMER_GROUP: groups.sync_group,
        }

    # -- what the broker's authorizer and the HTTP port ask of the Iggy users ------------------

    def serve_authorizer(self) -> None:
        """Make Iggy's users and streams the broker's principals and permission scopes."""
        self.auth.serve_authorizer()

    def resolve_topic(self, topic: str) -> tuple[int, int | None]:
        return self.auth.resolve_topic(topic)

    def user_permissions(self, principal: Principal) -> Permissions | None:
        return self.auth.user_permissions(principal)

    async def credentials_principal(self, address: str, username: str | None, secret: str,
                                    via: str = "http") -> Principal:
        return await self.auth.credentials_principal(address, username, secret, via)

    async def scram_principal(self, address: str, username: str, verify: Callable[[], T]
                              ) -> tuple[Principal, T]:
        return await self.auth.scram_principal(address, username, verify)

    async def change_users(self, change: Callable[[], Any]) -> Any:
        return await self.auth.change_users(change)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the catalog and users (once; every connection awaits the same start)."""
        if self._starting is None or (self._starting.done() and (
                self._starting.cancelled() or self._starting.exception() is not None)):
            # bayou's own work, not the first client's (whose connection's principal it would
            # otherwise inherit): a fresh context runs it as the system principal
            self._starting = asyncio.get_running_loop().create_task(
                self._start(), context=contextvars.Context())  # (again)
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        shared = self.state.shared
        if shared is not None:  # listeners open before the broker joins the cluster
            await shared.started.wait()
        await loop.run_in_executor(None, self.state.load)
        self.state.rewrite_later()
        ids = self.broker.connection_ids()
        if ids is not None:
            # Client ids (= group member ids) carry the broker id, so that the cluster can drop
            # the members of a dead or restarted broker (Broker.connection_ids).
            self._next_client = max(self._next_client, ids.start)
        if shared is not None:
            await self.state.seed_shared()
        else:
            # Members are connections: nobody is connected after a restart.
            for _s, t in self.catalog.all_topics():
                for g in t.groups.values():
                    await self.broker.reset_group_members(t.broker_group(g))
        self._reaper = loop.create_task(self._reap_idle(), name="iggy-idle-members")

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(5)
            cutoff = time.monotonic() - IDLE_MEMBER_TIMEOUT_S
            for s in list(self.sessions.values()):
                if s.groups and s.last_seen < cutoff and s.conn is not None:
                    log.info("closing idle Iggy group member", extra={"client": s.client_id})
                    s.conn.writer.close()

    def open_session(self, conn: Connection) -> Session:
        client_id = self._next_client
        ids = self.broker.connection_ids()
        if ids is not None:  # stay in this broker's id range, skipping live ids
            while client_id in self.sessions or client_id not in ids:
                client_id = ids.start + (client_id + 1 - ids.start) % len(ids)
        s = Session(client_id, conn.peer, conn=conn)
        self._next_client = client_id + 1
        self.sessions[s.client_id] = s
        return s

    async def close_session(self, s: Session) -> None:
        self.sessions.pop(s.client_id, None)
        await self.groups.leave_closed(s)

    # -- the request path ----------------------------------------------------------------------

    async def handle_legacy(self, s: Session, frame: LegacyFrame) -> bytes:
        """One legacy-framed request -> its reply frame (D and L share the reply framing)."""
        s.last_seen = time.monotonic()
        try:
            if s.dialect is None:
                kind = resolve_legacy_dialect(frame.code, authenticated=s.user is not None)
                if kind is Dialect.SEED and not self.seed_dialect:
                    raise IggyError(Status.UNAUTHENTICATED, "log in first")
                s.dialect = kind
            dialect = s.dialect or Dialect.LEGACY
            if frame.code == Command.SEND_MESSAGES and dialect is Dialect.LEGACY:
                self.auth.require_login(s, Command.SEND_MESSAGES)
                return encode_legacy_reply(await self.produce.send_legacy(s, frame.payload))
            if len(frame.payload) > OFF_LOOP_BYTES:
                req = await run_in(parse_pool(), decode_frame, dialect, frame)
            else:  # inline: every poll comes this way
                req = decode_frame(dialect, frame)
            reply = await self._dispatch(s, req)
            if _wide(reply):
                return encode_legacy_reply(await run_in(parse_pool(), self._encode, reply, dialect))
            return encode_legacy_reply(self._encode(reply, dialect))
        except IggyError as exc:
            return self._legacy_error(exc)
        except BayouError as exc:
            return encode_legacy_error(status_for(exc))

    @staticmethod
    def _legacy_error(exc: IggyError) -> bytes:
        log.debug("iggy request refused: %s", exc)
        return encode_legacy_error(exc.status)

    async def handle_vsr(self, s: Session, frame: VsrFrame) -> bytes:
        s.last_seen = time.monotonic()
        header = frame.header
        try:
            if header.operation == Operation.NON_REPLICATED or header.operation == Operation.REGISTER:
                pass
            elif s.session and header.session != s.session:
                raise IggyError(Status.INVALID_SESSION, "unknown session",
                                eviction=EvictionReason.SESSION_ERROR)
            if header.operation == Operation.SEND_MESSAGES:
                check_vsr_header(header)
                self.auth.require_login(s, Command.SEND_MESSAGES)
                return encode_vsr_ok(header, await self.produce.send_vsr(s, frame.body))
            if len(frame.body) > OFF_LOOP_BYTES:
                req = await run_in(parse_pool(), decode_frame, Dialect.VSR, frame)
            else:
                req = decode_frame(Dialect.VSR, frame)
            reply = await self._dispatch(s, req, header)
            if _wide(reply):
                return encode_vsr_ok(header, await run_in(parse_pool(), self._encode, reply, Dialect.VSR))
            return encode_vsr_ok(header, self._encode(reply, Dialect.VSR))
        except IggyError as exc:
            if exc.eviction is not None:
                s.close_after_reply = True
                if exc.eviction != EvictionReason.INCOMPATIBLE_PROTOCOL:  # the window is for 14 only (C.4)
                    return encode_eviction(header.client, exc.eviction)
                return encode_eviction(header.client, exc.eviction, server_version=PROTOCOL_VERSION,
                                       server_version_min=PROTOCOL_VERSION & ~0x3FF)
            return encode_vsr_error(header, exc.status)
        except BayouError as exc:
            return encode_vsr_error(header, status_for(exc))

    @staticmethod
    def _encode(reply: bytes | m.Reply | None, dialect: Dialect) -> bytes:
        if reply is None:
            return b""
        if isinstance(reply, bytes):
            return reply
        return encode_reply(reply, dialect)

    async def _dispatch(self, s: Session, req: Any, header: RequestHeader | None = None
                        ) -> bytes | m.Reply | None:
        command = req.command
        self.auth.require_login(s, command)
        handler = self.handlers.get(command)
        if handler is None:
            raise IggyError(Status.FEATURE_UNAVAILABLE, f"{command.name} is not available")
        if self.state.shared is None:
            return await self._run_handler(s, req, handler, header)
        await self.state.refresh_shared()
        try:
            if command in SHARED_CHANGES:
                async with self.state.shared_change():
                    return await self._run_handler(s, req, handler, header)
            return await self._run_handler(s, req, handler, header)
        except IggyError as exc:
            # a stream, topic, group or user made through another broker a moment ago, whose
            # change this broker has not been told of yet: read the shared copies and try again
            if exc.status not in MAYBE_ELSEWHERE or not await self.state.refresh_shared(force=True):
                raise
        if command in SHARED_CHANGES:
            async with self.state.shared_change():
                return await self._run_handler(s, req, handler, header)
        return await self._run_handler(s, req, handler, header)

    async def _run_handler(self, s: Session, req: Any, handler: Handler,
                           header: RequestHeader | None) -> bytes | m.Reply | None:
        if header is not None and req.command in (Command.LOGIN_REGISTER, Command.LOGIN_REGISTER_WITH_PAT):
            return await self.auth.login_register(s, req, header)
        return await handler(s, req)


def iggy_handler(service: IggyService) -> Callable[[Connection, Listener], Awaitable[None]]:
    async def serve(conn: Connection, listener: Listener) -> None:
        await service.start()
        s = service.open_session(conn)
        try:
            await _serve(service, s, conn, listener)
        finally:
            await service.close_session(s)

    return serve


def _sends(frame: LegacyFrame | VsrFrame) -> bool:
    """SEND_MESSAGES: the one command a pipelining connection serves before those ahead of it
    are answered (server/frames.py)."""
    code = frame.code if isinstance(frame, LegacyFrame) else frame.command
    return code == Command.SEND_MESSAGES


def _metered(frame: LegacyFrame | VsrFrame, reply: bytes) -> tuple[str, bool]:
    """The command's name and whether the reply is an error: the status is a reply's first u32 in
    the legacy framing, at offset 216 of a VSR reply header."""
    if isinstance(frame, VsrFrame):
        code, status = frame.command, reply[216:220]
    else:
        code, status = frame.code, reply[:4]
    try:
        name = Command(code).name if code is not None else UNKNOWN
    except ValueError:
        name = UNKNOWN
    return name, status != b"\0\0\0\0"


async def _serve(service: IggyService, s: Session, conn: Connection, listener: Listener) -> None:
    first = b""
    framing: Dialect | None = None
    while framing is None:
        data = await conn.read(len(first))
        if not data:
            return
        first += data
        try:
            framing = detect_dialect(first)
        except IggyError:
            return  # neither framing (D.2 step 3): close
    s.framing = framing
    if framing is Dialect.VSR:
        s.dialect = Dialect.VSR
    cap = listener.limits.frame_cap
    reader: LegacyFrameReader | VsrFrameReader = (
        VsrFrameReader(cap(MAX_VSR_FRAME)) if framing is Dialect.VSR
        else LegacyFrameReader(cap(MAX_LEGACY_PAYLOAD), cap(MAX_SEND_PAYLOAD)))

    def guard() -> None:
        # Until a login, a frame larger than any login is refused from its header (design-document
        # clients, served with seed_dialect, have no login). Only serving a frame changes s.user.
        reader.login_cap = None if s.user is not None or service.seed_dialect else LOGIN_CAP

    async def handle(frame: LegacyFrame | VsrFrame) -> bytes:
        started = time.perf_counter()
        if isinstance(frame, VsrFrame):
            reply = await service.handle_vsr(s, frame)
        else:
            reply = await service.handle_legacy(s, frame)
        command, failed = _metered(frame, reply)
        service.meter.record(command, started, failed)
        guard()
        return reply

    async def refuse(exc: IggyError) -> None:
        if framing is not Dialect.VSR:
            conn.writer.write(encode_legacy_error(exc.status))
            await conn.writer.drain()
        elif exc.request is not None:
            conn.writer.write(encode_vsr_error(exc.request, exc.status))
            await conn.writer.drain()

    guard()
    frames: Framing[LegacyFrame | VsrFrame] = reader
    await serve_frames(conn, listener, frames, handle, error=IggyError, refuse=refuse,
                       done=lambda: s.close_after_reply, first=first,
                       pipeline=_sends if service.broker.produce_waits() else None)


__all__ = ["IggyService", "Session", "iggy_handler"]
