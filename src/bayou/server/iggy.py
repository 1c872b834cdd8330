"""The Apache Iggy binary transport bound to the broker (iggy.md), three framings on one port.

A connection's framing is detected from its first bytes (D.2): the 256-byte-header framing of
apache-iggy 0.9 (V) or the legacy framing (u32 length + u32 code) shared by apache-iggy 0.8 (L)
and the design document (D), which are told apart by whether the client logs in (D.3). Requests
are decoded by the sans-IO codec (``bayou.protocols.iggy``) and dispatched through one table of
handlers keyed by command code; every handler calls only the broker API, the stream catalog
(``iggy_catalog``) and the user store (``iggy_users``).

Messages sent through Iggy are stored as the producer's frames (``bayou.records.iggy``) and polled
back from the stored bytes; records produced through other protocols are converted when an Iggy
client polls them. Iggy's "stored consumer offset" is the offset of the last consumed message,
bayou's committed offset the next one to read: stored = committed - 1 at this boundary, so a V1 or
Cursus consumer of the same group resumes where an Iggy one stopped.

bayou's extensions, which an Iggy client may use and an unaware one never meets: the user header
``bayou.key`` (string key, RAW value) is the record key (``records.iggy``, ``convert``); a topic
created in the ``default`` stream is the bayou topic of exactly that name, and CREATE_TOPIC /
UPDATE_TOPIC options named like bayou topic config keys set that config (``_bayou_config``; in L
the options block follows the name); on a topic with ``message.deduplication=true`` every send
path stores only the messages whose ids are not replays (``Broker.produce_unique``,
``broker/idempotence.py``): a wholly replayed send succeeds and stores nothing (V confirmation: the
partition's log end as base offset).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import os
import platform
import secrets
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import xxhash

from bayou import __version__
from bayou.broker import Acks, Broker
from bayou.broker.authz import ANONYMOUS, Action, Permissions, Principal, current_caller
from bayou.broker.background import run_forever
from bayou.broker.broker import TOPIC_KEYS
from bayou.broker.cluster.state import MEMBER_BROKER_SHIFT, connection_member_base
from bayou.broker.groups.coordinator import IGGY_POLICY
from bayou.broker.idempotence import IdRun
from bayou.broker.window import Stored, window
from bayou.errors import (
    BayouError,
    GroupNotFound,
    InvalidConfig,
    NotLeader,
    StorageError,
    TopicAlreadyExists,
    UnknownMember,
)
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import POLL_PREFIX, decode_legacy_send, decode_vsr_send, read_send_metadata
from bayou.protocols.iggy.codec import check_vsr_header, decode_frame, encode_reply
from bayou.protocols.iggy.codes import (
    Command,
    EvictionReason,
    Operation,
    Status,
    not_found_status,
    status_for,
)
from bayou.protocols.iggy.compressed import expand as expand_compressed
from bayou.protocols.iggy.convert import ENVELOPE_CLIENT, micros, record_to_polled, send_to_records
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
from bayou.protocols.iggy.stored import (
    frames_from_messages,
    id_run,
    legacy_messages,
    legacy_messages_uniform,
    legacy_send_frames,
    mint_uuid4,
    select_frames,
    vsr_record,
    vsr_send_frames,
)
from bayou.protocols.iggy.wire import option
from bayou.records.batch import HEADER_SIZE, BatchHeader, assemble_batch, encode_batch, iter_batches
from bayou.records.iggy import (
    FORMAT_IGGY,
    append_time_us,
    frame_ids,
    frame_positions,
    frame_stride,
    split_append_time,
)
from bayou.records.model import Record
from bayou.server.base import Connection, Listener
from bayou.server.frames import Framing, serve_frames
from bayou.server.iggy_catalog import Catalog, GroupEntry, StreamEntry, TopicEntry
from bayou.server.iggy_users import (
    AuthFailure,
    User,
    UserStore,
    UserStoreError,
    check_root_credentials,
    from_iggy,
    hash_token,
    permissions_of,
)
from bayou.server.login_guard import LoginGuard, client_ip
from bayou.server.metering import UNKNOWN, RequestMeter
from bayou.server.workers import decode_stored, hash_pool, inflate_pool, run_in
from bayou.storage import validate_topic_name

log = logging.getLogger("bayou.iggy")
MAX_ORIGIN_BASE = (1 << 63) - 1  # a send's origin timestamp (us) is kept in an int64 batch field

# Cluster mode: the Iggy catalog (streams, topics, consumer groups) and users are JSON documents in
# ZooKeeper that every broker serves; the commands that change them run under a cluster lock.
CATALOG_DOC = "iggy/catalog"
SHARED_LOCK = "iggy"
USERS_DOC = "iggy/users"
CATALOG_FILE = "catalog"  # what a failed write names (logs, errors)
USERS_FILE = "users file"
OFFLINE_LOG_S = 60.0  # how often a described offline partition is named in the log
REWRITE_INTERVAL_S = 1.0  # how soon a write that failed (a full disk) is tried again
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
_HOLDING_SHARED: contextvars.ContextVar[bool] = contextvars.ContextVar("iggy_shared", default=False)

PROTOCOL_VERSION = m.pack_version(0, 11, 0)  # the V protocol apache-iggy 0.9.0 speaks (C.7)
SERVER_NAME = f"bayou-{__version__}"
MAX_PARTITIONS = 1000
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
NO_USER = 0xFFFF_FFFF
POLL_MAX_BYTES = 64 * 1024 * 1024
IDLE_MEMBER_TIMEOUT_S = 36.0  # the current server: 1.2 x 30 s without a request, members only (E.5)
TRANSPORT_TCP = 1

# What a command needs before it runs: nothing (None) or a permission (see broker/authz.py).
PUBLIC = frozenset({Command.PING, Command.LOGIN_USER, Command.LOGIN_REGISTER,
                    Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN, Command.LOGIN_REGISTER_WITH_PAT})


def now_us() -> int:
    return time.time_ns() // 1000


def _ident(value: int | str) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


@dataclass(slots=True)
class Session:
    """One connection's state."""

    client_id: int
    address: str
    framing: Dialect | None = None  # VSR or LEGACY (D and L share the legacy framing)
    dialect: Dialect | None = None  # SEED / LEGACY / VSR once known
    user: User | None = None
    session: int = 0  # V session number handed out at login
    groups: set[tuple[int, int, int]] = field(default_factory=set)  # (stream, topic, group) ids
    cursor: dict[tuple[int, int, int], int] = field(default_factory=dict)  # L group-poll round robin
    last_seen: float = field(default_factory=time.monotonic)
    close_after_reply: bool = False
    conn: Connection | None = None
    login_failures: int = 0
    token_hash: str | None = None  # the personal access token it logged in with, if any
    envelopes: bool = False  # bayou's SDK (its login version): served record envelopes

    @property
    def member(self) -> str:
        return str(self.client_id)


Handler = Callable[[Session, Any], Awaitable[bytes | m.Reply | None]]


class IggyService:
    def __init__(self, broker: Broker, *, port: int, host: str = "127.0.0.1",
                 root_username: str = "iggy", root_password: str = "iggy",
                 seed_dialect: bool = False) -> None:
        self.broker = broker
        self.port = port
        self.host = host
        self.seed_dialect = seed_dialect
        self.meter = RequestMeter("iggy")
        data = broker.config.data_dir / "iggy"
        self.catalog = Catalog(data / "catalog.json")
        self.users = UserStore(data / "users.json", root_username, root_password)
        self.login_guard = LoginGuard()
        try:  # the root user: checked, and made on first start, before any client connects
            check_root_credentials(root_username, root_password)
            self.users.load()
        except UserStoreError as exc:
            raise InvalidConfig(f"Iggy root user {root_username!r}: {exc} (set IGGY_ROOT_USERNAME and "
                                "IGGY_ROOT_PASSWORD, or [iggy] root_username and root_password)") from None
        except ValueError as exc:
            raise StorageError(f"cannot read the Iggy users file: {exc}") from None
        self.sessions: dict[int, Session] = {}
        self._next_client = 1
        self._leaving: set[asyncio.Task[None]] = set()  # memberships still to remove
        self._doc_seen: dict[str, int] = {}  # cluster mode: shared documents' change counts taken
        self._doc_version: dict[str, int] = {}  # and their znode versions
        self._balanced: dict[str, int] = {}
        self._started = time.time()
        self._cpu = (time.monotonic(), sum(os.times()[:2]))
        self._starting: asyncio.Task[None] | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._offline_told: dict[tuple[str, int], float] = {}  # when an offline partition was logged
        self._unsaved: set[str] = set()  # files whose last write failed (ENOSPC, EIO): kept in memory
        self._rewriter: asyncio.Task[None] | None = None
        self.handlers: dict[Command, Handler] = self._handler_table()
        self._unknown_cns: set[str] = set()  # certificate CNs naming no user, logged once each

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
        if self.broker.cluster is not None:  # listeners open before the broker joins the cluster
            await self.broker.cluster.started.wait()
        await loop.run_in_executor(None, self._load)
        self._rewrite_later()
        if self.broker.cluster is not None:
            # Client ids (= group member ids) carry the broker id, so that the cluster can drop
            # the members of a dead or restarted broker (broker/cluster/controller.py, reap_members).
            base = connection_member_base(self.broker.config.broker_id)
            self._next_client = max(self._next_client, base + 1)
            # The first broker's catalog and users seed the cluster's; the others take those.
            async with self._shared_change():
                for name, target in ((CATALOG_DOC, self.catalog), (USERS_DOC, self.users)):
                    data, version = await self.broker.cluster.read_doc(name)
                    if not data:
                        await self.broker.cluster.write_doc(name, target.snapshot(), version)
                    await self._refresh_shared(force=True)
        else:
            # Members are connections: nobody is connected after a restart.
            for _s, t in self.catalog.all_topics():
                for g in t.groups.values():
                    await self.broker.reset_group_members(t.broker_group(g))
        self._reaper = loop.create_task(self._reap_idle(), name="iggy-idle-members")

    def _load(self) -> None:
        """Read the catalog and the users. A write that fails here (a full disk) does not stop
        the listener: the state stays in memory and is written later (``_rewrite_later``)."""
        self.catalog.load()
        self.users.load()
        if self.users.unsaved:
            self._unsaved.add(USERS_FILE)
        if self.catalog.sync(self.broker.list_topics(), now_us()):
            try:
                self.catalog.save()
            except OSError as exc:
                self._write_failed(CATALOG_FILE, exc)

    def _write(self, what: str) -> None:
        (self.catalog.save if what == CATALOG_FILE else self.users.save_copy)()

    def _write_failed(self, what: str, exc: OSError) -> None:
        self._unsaved.add(what)
        log.warning("cannot write the Iggy %s, kept in memory and retried: %s", what, exc)

    async def _save(self, what: str) -> None:
        """Write the catalog or the users file; a failure is the request's StorageError (Iggy's
        generic error), the change stays in memory and is written once the disk allows."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._write, what)
        except OSError as exc:
            self._write_failed(what, exc)
            self._rewrite_later()
            raise StorageError(f"cannot write the Iggy {what}: {exc.strerror or exc}") from None
        self._unsaved.discard(what)

    def _rewrite_later(self) -> None:
        if self._unsaved and (self._rewriter is None or self._rewriter.done()):
            self._rewriter = asyncio.get_running_loop().create_task(run_forever(
                "iggy-unsaved-writes", self._rewrite, REWRITE_INTERVAL_S, retry_max_s=10.0, logger=log),
                name="iggy-unsaved-writes")

    async def _rewrite(self) -> None:
        """One retry of every write that failed; stops the task once all are written."""
        for what in sorted(self._unsaved):
            await asyncio.get_running_loop().run_in_executor(None, self._write, what)
            self._unsaved.discard(what)
            log.info("wrote the Iggy %s after earlier failures", what)
        if not self._unsaved and self._rewriter is not None:
            self._rewriter.cancel()

    async def _save_catalog(self) -> None:
        await self._save(CATALOG_FILE)

    async def _sync(self) -> None:
        cluster = self.broker.cluster
        if cluster is not None:  # the cluster's topics, and the default stream's ids are shared
            if self.catalog.in_sync(await cluster.topic_names()):
                return
            async with self._shared_change():
                if self.catalog.sync(await cluster.topic_names(), now_us()):
                    await self._save_catalog()
            return
        if self.catalog.sync(self.broker.list_topics(), now_us()):
            await self._save_catalog()

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
        if self.broker.cluster is not None:
            # stay in this broker's id range (see connection_member_base), skipping live ids
            base = connection_member_base(self.broker.config.broker_id)
            span = 1 << MEMBER_BROKER_SHIFT
            while client_id in self.sessions or not base < client_id < base + span:
                client_id = base + 1 + (client_id - base) % (span - 1)
        s = Session(client_id, conn.peer, conn=conn)
        self._next_client = client_id + 1
        self.sessions[s.client_id] = s
        return s

    async def close_session(self, s: Session) -> None:
        self.sessions.pop(s.client_id, None)
        for key in list(s.groups):
            try:
                await self._leave(s, key)
            except StorageError:  # cluster mode, ZooKeeper unreachable: leave once it is back
                task = asyncio.get_running_loop().create_task(self._leave_later(s, key))
                self._leaving.add(task)
                task.add_done_callback(self._leaving.discard)
            except (BayouError, IggyError):
                pass

    async def _leave_later(self, s: Session, key: tuple[int, int, int], attempts: int = 60) -> None:
        """A closed connection's membership whose removal failed: retried every second for a
        minute (else the controller drops it with its broker, or a restart does)."""
        for _ in range(attempts):
            await asyncio.sleep(1)
            try:
                await self._leave(s, key)
                return
            except StorageError:
                continue
            except (BayouError, IggyError):
                return

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
                self._require_login(s, Command.SEND_MESSAGES)
                return encode_legacy_reply(await self._send_legacy(s, frame.payload))
            req = decode_frame(dialect, frame)
            reply = await self._dispatch(s, req)
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
                self._require_login(s, Command.SEND_MESSAGES)
                return encode_vsr_ok(header, await self._send_vsr(s, frame.body))
            req = decode_frame(Dialect.VSR, frame)
            reply = await self._dispatch(s, req, header)
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
        self._require_login(s, command)
        handler = self.handlers.get(command)
        if handler is None:
            raise IggyError(Status.FEATURE_UNAVAILABLE, f"{command.name} is not available")
        if self.broker.cluster is None:
            return await self._run_handler(s, req, handler, header)
        await self._refresh_shared()
        try:
            if command in SHARED_CHANGES:
                async with self._shared_change():
                    return await self._run_handler(s, req, handler, header)
            return await self._run_handler(s, req, handler, header)
        except IggyError as exc:
            # a stream, topic, group or user made through another broker a moment ago, whose
            # change this broker has not been told of yet: read the shared copies and try again
            if exc.status not in MAYBE_ELSEWHERE or not await self._refresh_shared(force=True):
                raise
        if command in SHARED_CHANGES:
            async with self._shared_change():
                return await self._run_handler(s, req, handler, header)
        return await self._run_handler(s, req, handler, header)

    async def _run_handler(self, s: Session, req: Any, handler: Handler,
                           header: RequestHeader | None) -> bytes | m.Reply | None:
        if header is not None and req.command in (Command.LOGIN_REGISTER, Command.LOGIN_REGISTER_WITH_PAT):
            return await self._login_register(s, req, header)
        return await handler(s, req)

    # -- cluster mode: the catalog and the users are shared by every broker ---------------------

    async def _refresh_shared(self, force: bool = False) -> bool:
        """Take the cluster's copies of the catalog and the users when they changed (a watch
        counts the changes; ``force`` reads them anyway). Whether anything changed here."""
        cluster = self.broker.cluster
        assert cluster is not None
        changed = False
        if not _HOLDING_SHARED.get() and cluster.is_locked(SHARED_LOCK):
            return False  # a change is being made here: it writes the copies (replacing them now
            # would leave it changing orphaned objects)
        for name, target in ((CATALOG_DOC, self.catalog), (USERS_DOC, self.users)):
            seen = cluster.doc_changes(name)
            if not force and self._doc_seen.get(name) == seen:
                continue
            data, version = await cluster.read_doc(name)
            self._doc_seen[name] = seen
            self._doc_version[name] = version
            if data and data != target.snapshot():
                target.replace(data)
                changed = True
                with contextlib.suppress(StorageError):  # this broker's copy: retried (_save)
                    await self._save(CATALOG_FILE if target is self.catalog else USERS_FILE)
        return changed

    @contextlib.asynccontextmanager
    async def _shared_change(self) -> AsyncIterator[None]:
        """Change the catalog or the users cluster-wide: under the cluster lock, from the newest
        copies, and written back (whatever the change did before an error too)."""
        if _HOLDING_SHARED.get():
            yield
            return
        cluster = self.broker.cluster
        assert cluster is not None
        async with cluster.exclusive(SHARED_LOCK):
            token = _HOLDING_SHARED.set(True)
            try:
                await self._refresh_shared(force=True)
                before = {CATALOG_DOC: self.catalog.snapshot(), USERS_DOC: self.users.snapshot()}
                try:
                    yield
                finally:
                    for name, target in ((CATALOG_DOC, self.catalog), (USERS_DOC, self.users)):
                        data = target.snapshot()
                        if data != before[name]:
                            if not await cluster.write_doc(name, data, self._doc_version[name]):
                                raise IggyError(Status.ERROR, f"the cluster's {name} changed under its lock")
                            self._doc_version[name] += 1
            finally:
                _HOLDING_SHARED.reset(token)

    def _anonymous(self, s: Session) -> bool:
        """A design-document client: it has no login (the seed predates users), so with D
        support enabled its legacy-framed connection is served without one (D.3)."""
        return (self.seed_dialect and s.user is None and s.framing is Dialect.LEGACY
                and s.dialect in (None, Dialect.SEED))

    def _require_login(self, s: Session, command: Command) -> None:
        caller = current_caller()
        if s.user is not None:  # permissions are the user's as they are now, not at login
            current = self.users.current(s.user.id, s.token_hash)
            if current is None:  # deleted, deactivated, or its token deleted: the session ends
                if caller is not None:
                    caller.logout()
                log.warning("iggy session ended: its user or token was revoked",
                            extra={"peer": s.address, "user": s.user.username})
                s.user = None
                s.close_after_reply = True
                raise IggyError(Status.UNAUTHENTICATED, "the user or token was revoked",
                                eviction=EvictionReason.INVALID_CREDENTIALS if s.dialect is Dialect.VSR
                                else None)
            s.user = current
            if caller is not None:  # what the broker checks this request against
                caller.login(Principal.login(current.id, current.username, s.token_hash))
            return
        if caller is not None:
            caller.logout()
        if command in PUBLIC or self._anonymous(s):
            return
        raise IggyError(Status.UNAUTHENTICATED, f"{command.name} needs a login")

    def _principal(self, s: Session) -> Principal | None:
        """Who the session is: its user, or (a seed-dialect client, which has no login) the
        connection's own principal (anonymous, or its TLS client certificate's user)."""
        if s.user is not None:
            return Principal.login(s.user.id, s.user.username, s.token_hash)
        if self._anonymous(s):
            caller = current_caller()
            return ANONYMOUS if caller is None else caller.base
        return None

    def _permit(self, s: Session, action: Action, stream: int | None = None,
                topic: int | None = None) -> None:
        principal = self._principal(s)
        if principal is None or not self.broker.authorizer.permits(principal, action, stream, topic):
            raise IggyError(Status.UNAUTHORIZED, f"not allowed to {action}")

    # -- what the broker's authorizer asks of the Iggy front end ------------------------------

    def serve_authorizer(self) -> None:
        """Make Iggy's users and streams the broker's principals and permission scopes: the
        authorizer asks this front end where a topic is and what a user may do, and forgets its
        answers whenever users or the catalog change."""
        authorizer = self.broker.authorizer
        authorizer.configure(resolver=self.resolve_topic, users=self.user_permissions)
        self.users.on_change = self.catalog.on_change = authorizer.invalidate

    def resolve_topic(self, topic: str) -> tuple[int, int | None]:
        """A bayou topic's (stream id, topic id) for the permission check (Catalog.locate)."""
        return self.catalog.locate(topic)

    def user_permissions(self, principal: Principal) -> Permissions | None:
        """A user principal's permissions now: a login's by id (None once the user or its token
        is gone or inactive), a certificate's by the CN as user name (None when no active user
        has that name: the connection is then anonymous; said once per name at INFO)."""
        if principal.user_id is not None:
            user = self.users.current(principal.user_id, principal.token_hash)
        else:
            found = self.users.get(principal.name or "")
            user = found if found is not None and found.active else None
            if user is None and principal.name not in self._unknown_cns:
                self._unknown_cns.add(principal.name or "")
                log.info("TLS client certificate names no active user: anonymous",
                         extra={"cn": principal.name})
        return None if user is None else permissions_of(user)

    def _handler_table(self) -> dict[Command, Handler]:
        c = Command
        return {
            c.PING: self._ping, c.GET_STATS: self._get_stats, c.GET_CLUSTER_METADATA: self._cluster,
            c.GET_ME: self._get_me, c.GET_CLIENT: self._get_client, c.GET_CLIENTS: self._get_clients,
            c.LOGIN_USER: self._login_user, c.LOGIN_WITH_PERSONAL_ACCESS_TOKEN: self._login_token,
            c.LOGIN_REGISTER: self._unreachable, c.LOGIN_REGISTER_WITH_PAT: self._unreachable,
            c.LOGOUT_USER: self._logout,
            c.GET_USER: self._get_user, c.GET_USERS: self._get_users, c.CREATE_USER: self._create_user,
            c.DELETE_USER: self._delete_user, c.UPDATE_USER: self._update_user,
            c.UPDATE_PERMISSIONS: self._update_permissions, c.CHANGE_PASSWORD: self._change_password,
            c.GET_PERSONAL_ACCESS_TOKENS: self._get_tokens,
            c.CREATE_PERSONAL_ACCESS_TOKEN: self._create_token,
            c.DELETE_PERSONAL_ACCESS_TOKEN: self._delete_token,
            c.POLL_MESSAGES: self._poll, c.SEND_MESSAGES: self._send_decoded,
            c.FLUSH_UNSAVED_BUFFER: self._flush,
            c.GET_CONSUMER_OFFSET: self._get_offset, c.STORE_CONSUMER_OFFSET: self._store_offset,
            c.DELETE_CONSUMER_OFFSET: self._delete_offset,
            c.GET_STREAM: self._get_stream, c.GET_STREAMS: self._get_streams,
            c.CREATE_STREAM: self._create_stream, c.DELETE_STREAM: self._delete_stream,
            c.UPDATE_STREAM: self._update_stream, c.PURGE_STREAM: self._purge_stream,
            c.GET_TOPIC: self._get_topic, c.GET_TOPICS: self._get_topics,
            c.CREATE_TOPIC: self._create_topic, c.DELETE_TOPIC: self._delete_topic,
            c.UPDATE_TOPIC: self._update_topic, c.PURGE_TOPIC: self._purge_topic,
            c.CREATE_PARTITIONS: self._create_partitions, c.DELETE_PARTITIONS: self._delete_partitions,
            c.DELETE_SEGMENTS: self._delete_segments,
            c.GET_CONSUMER_GROUP: self._get_group, c.GET_CONSUMER_GROUPS: self._get_groups,
            c.CREATE_CONSUMER_GROUP: self._create_group, c.DELETE_CONSUMER_GROUP: self._delete_group,
            c.JOIN_CONSUMER_GROUP: self._join_group, c.LEAVE_CONSUMER_GROUP: self._leave_group,
            c.SYNC_CONSUMER_GROUP: self._sync_group,
        }

    async def _unreachable(self, s: Session, req: Any) -> None:
        raise IggyError(Status.INVALID_COMMAND, "a V login must travel as operation Register")

    # -- resolution ----------------------------------------------------------------------------

    def _stream(self, ident: m.Identifier) -> StreamEntry:
        entry = self.catalog.stream(ident.value)
        if entry is None:
            raise IggyError(not_found_status(Status.STREAM_ID_NOT_FOUND, ident.is_name),
                            f"stream {_ident(ident.value)}")
        return entry

    def _topic(self, stream: StreamEntry, ident: m.Identifier) -> TopicEntry:
        entry = stream.topic(ident.value)
        if entry is None or entry.topic not in self.broker.topics:
            raise IggyError(not_found_status(Status.TOPIC_ID_NOT_FOUND, ident.is_name),
                            f"topic {_ident(ident.value)}")
        return entry

    async def _resolve(self, stream: m.Identifier, topic: m.Identifier) -> tuple[StreamEntry, TopicEntry]:
        try:
            s = self._stream(stream)
            return s, self._topic(s, topic)
        except IggyError:
            await self._sync()  # a topic may have been created or deleted through another protocol
            s = self._stream(stream)
            return s, self._topic(s, topic)

    async def _find_stream(self, ident: m.Identifier) -> StreamEntry | None:
        entry = self.catalog.stream(ident.value)
        if entry is None or entry.is_default:  # the default stream mirrors other protocols' topics
            await self._sync()
            entry = self.catalog.stream(ident.value)
        return entry

    @staticmethod
    def _group(topic: TopicEntry, ident: m.Identifier) -> GroupEntry:
        entry = topic.group(ident.value)
        if entry is None:
            raise IggyError(not_found_status(Status.CONSUMER_GROUP_ID_NOT_FOUND, ident.is_name),
                            f"consumer group {_ident(ident.value)}")
        return entry

    @staticmethod
    def _partition_in(s: Session, partition_id: int | None) -> int | None:
        """A client's partition id as a bayou partition index (D numbers from 1, 0 = unspecified)."""
        if partition_id is None:
            return None
        if s.dialect is Dialect.SEED:
            return partition_id - 1 if partition_id > 0 else None
        return partition_id

    @staticmethod
    def _partition_out(s: Session, partition: int) -> int:
        return partition + 1 if s.dialect is Dialect.SEED else partition

    def _check_partition(self, topic: TopicEntry, partition: int) -> None:
        if not 0 <= partition < self.broker.partition_count(topic.topic):
            raise IggyError(Status.PARTITION_NOT_FOUND, f"partition {partition}")

    # -- records for the getters ---------------------------------------------------------------

    def _partition_infos(self, s: Session, topic: TopicEntry) -> tuple[m.PartitionInfo, ...]:
        info = self.broker.describe_topic(topic.topic)
        for p in info.partitions:
            if p.offline is not None:
                self._report_offline(topic, p.partition, p.offline)
        return tuple(
            m.PartitionInfo(self._partition_out(s, p.partition), topic.created_at, p.segments,
                            max(p.high_watermark - 1, 0), p.size_bytes,
                            p.high_watermark - p.log_start_offset)
            for p in info.partitions)

    def _report_offline(self, topic: TopicEntry, partition: int, reason: str) -> None:
        """Iggy's partition and topic records have no status field (iggy.md E): a quarantined
        partition an Iggy client describes is named in the log instead (once a minute at most;
        its polls answer CANNOT_READ_MESSAGE)."""
        now = time.monotonic()
        key = (topic.topic, partition)
        if now - self._offline_told.get(key, -OFFLINE_LOG_S) < OFFLINE_LOG_S:
            return
        self._offline_told[key] = now
        log.warning("an Iggy client described topic %s (bayou topic %s): partition %d is offline: %s",
                    topic.name, topic.topic, partition, reason)

    def _topic_info(self, s: Session, topic: TopicEntry,
                    parts: tuple[m.PartitionInfo, ...] | None = None) -> m.TopicInfo:
        parts = self._partition_infos(s, topic) if parts is None else parts
        return m.TopicInfo(
            id=topic.id, created_at=topic.created_at, partitions_count=len(parts),
            message_expiry=topic.message_expiry, compression_algorithm=topic.compression,
            max_topic_size=topic.max_topic_size, size_bytes=sum(p.size_bytes for p in parts),
            messages_count=sum(p.messages_count for p in parts), name=topic.name,
            replication_factor=topic.replication_factor or 1)

    def _topic_details(self, s: Session, topic: TopicEntry) -> m.TopicDetails:
        parts = self._partition_infos(s, topic)
        return m.TopicDetails(self._topic_info(s, topic, parts), parts)

    def _stream_info(self, s: Session, stream: StreamEntry,
                     topics: tuple[m.TopicInfo, ...] | None = None) -> m.StreamInfo:
        topics = self._topic_infos(s, stream) if topics is None else topics
        return m.StreamInfo(stream.id, stream.created_at, len(topics), sum(t.size_bytes for t in topics),
                            sum(t.messages_count for t in topics), stream.name)

    def _topic_infos(self, s: Session, stream: StreamEntry) -> tuple[m.TopicInfo, ...]:
        return tuple(self._topic_info(s, t) for t in sorted(stream.topics.values(), key=lambda t: t.id)
                     if t.topic in self.broker.topics)

    # -- system --------------------------------------------------------------------------------

    async def _ping(self, s: Session, req: m.Ping) -> None:
        return None

    async def _cluster(self, s: Session, req: m.GetClusterMetadata) -> m.ClusterMetadata:
        cluster = self.broker.cluster
        if cluster is None:
            node = m.ClusterNode("bayou", self.host, self.port, 0, 0, 0, role=0, status=0)
            return m.ClusterMetadata("single-node", (node,))
        # cluster mode: every live broker with an Iggy listener; the controller is the "leader"
        # (a partition's own leader answers sends; others answer TRANSIENT_NOT_ACCEPTED)
        controller = cluster.snapshot.controller if cluster.snapshot is not None else None
        nodes = tuple(
            m.ClusterNode(f"bayou-{b}", reg.host, reg.endpoints["iggy"], 0, 0, 0,
                          role=0 if b == controller else 1, status=0)
            for b, reg in sorted(cluster.live_brokers().items()) if "iggy" in reg.endpoints)
        return m.ClusterMetadata("bayou-cluster", nodes)

    async def _get_stats(self, s: Session, req: m.GetStats) -> m.Stats:
        self._permit(s, "read_servers")
        return await asyncio.get_running_loop().run_in_executor(None, self._stats)

    def _stats(self) -> m.Stats:
        now = time.monotonic()
        cpu = sum(os.times()[:2])
        t0, c0 = self._cpu
        self._cpu = (now, cpu)
        usage = 100.0 * (cpu - c0) / (now - t0) if now > t0 else 0.0
        meminfo = _meminfo()
        parts = [p for t in self.broker.topics.values() for p in t.partitions]
        disk = shutil.disk_usage(self.broker.config.data_dir)
        io = _proc_io()
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        groups = sum(len(t.groups) for _s, t in self.catalog.all_topics())
        major, minor, patch = (int(x) for x in [*__version__.split("."), "0", "0"][:3])
        return m.Stats(
            process_id=os.getpid(), cpu_usage=usage,
            total_cpu_usage=min(100.0, 100.0 * load1 / (os.cpu_count() or 1)),
            memory_usage=_rss(), total_memory=meminfo.get("MemTotal", 0),
            available_memory=meminfo.get("MemAvailable", 0),
            run_time=int((time.time() - self._started) * 1_000_000),
            start_time=int(self._started * 1_000_000),
            read_bytes=io.get("read_bytes", 0), written_bytes=io.get("write_bytes", 0),
            messages_size_bytes=sum(p.log.size_bytes for p in parts),
            streams_count=len(self.catalog.visible_streams()),
            topics_count=sum(1 for _ in self.catalog.all_topics()), partitions_count=len(parts),
            segments_count=sum(len(p.log.segments) for p in parts),
            messages_count=sum(p.high_watermark - p.log.log_start_offset for p in parts),
            clients_count=len(self.sessions), consumer_groups_count=groups,
            hostname=socket.gethostname(), os_name=platform.system(), os_version=platform.release(),
            kernel_version=platform.version(), iggy_server_version=SERVER_NAME,
            iggy_server_semver=major * 1_000_000 + minor * 1_000 + patch, cache_metrics=(),
            threads_count=threading.active_count(), free_disk_space=disk.free, total_disk_space=disk.total)

    def _client_details(self, c: Session) -> m.ClientDetails:
        groups = tuple(m.ClientGroup(*key) for key in sorted(c.groups))
        info = m.ClientInfo(c.client_id, c.user.id if c.user else NO_USER, TRANSPORT_TCP, c.address,
                            len(groups))
        return m.ClientDetails(info, groups)

    async def _get_me(self, s: Session, req: m.GetMe) -> m.ClientDetails:
        return self._client_details(s)

    async def _get_client(self, s: Session, req: m.GetClient) -> m.ClientDetails | None:
        self._permit(s, "read_servers")
        c = self.sessions.get(req.client_id)
        return None if c is None else self._client_details(c)

    async def _get_clients(self, s: Session, req: m.GetClients) -> tuple[m.ClientInfo, ...]:
        self._permit(s, "read_servers")
        return tuple(self._client_details(c).client for c in self.sessions.values())

    # -- sessions and users --------------------------------------------------------------------

    async def _authenticate(self, fn: Callable[..., User], *args: str) -> User:
        return await asyncio.get_running_loop().run_in_executor(hash_pool(), fn, *args)

    async def _guarded_login(self, s: Session, username: str, fn: Callable[..., User], *args: str) -> User:
        """A login attempt through the guard: after failures (on this connection or from this
        address) each attempt waits, doubling, before it is judged; every failure is logged at
        WARNING (address and user name, never the secret); the connection is closed after its
        budget of failures."""
        ip = client_ip(s.address)
        wait = self.login_guard.delay(ip, s.login_failures)
        if wait:
            await asyncio.sleep(wait)
        try:
            user = await self._authenticate(fn, *args)
        except AuthFailure:
            s.login_failures += 1
            recent = self.login_guard.failed(ip)
            closing = self.login_guard.exhausted(s.login_failures)
            log.warning("iggy login failed", extra={"peer": s.address, "user": username,
                                                    "failures": s.login_failures,
                                                    "address_failures": recent, "closing": closing})
            if closing:
                s.close_after_reply = True
            raise
        self.login_guard.succeeded(ip)
        return user

    async def credentials_principal(self, address: str, username: str | None, secret: str) -> Principal:
        """The principal of credentials presented outside an Iggy connection (the HTTP port's
        Basic ``username``/password, or a Bearer personal access token when ``username`` is None):
        the same users, hash pool and guard as an Iggy login (the wait doubles with the address's
        recent failures; every failure logged at WARNING with the address and user name, never the
        secret). Raises AuthFailure."""
        ip = client_ip(address)
        wait = self.login_guard.delay(ip, 0)
        if wait:
            await asyncio.sleep(wait)
        try:
            if username is None:
                user = await self._authenticate(self.users.authenticate_token, secret)
                principal = Principal.login(user.id, user.username, hash_token(secret))
            else:
                user = await self._authenticate(self.users.authenticate, username, secret)
                principal = Principal.login(user.id, user.username)
        except AuthFailure:
            recent = self.login_guard.failed(ip)
            log.warning("http login failed", extra={
                "peer": address, "user": username or "(personal access token)", "address_failures": recent})
            raise
        self.login_guard.succeeded(ip)
        return principal

    async def change_users(self, change: Callable[[], Any]) -> Any:
        """A change of the users made outside an Iggy connection (the HTTP admin API), made as the
        Iggy commands make theirs: on the hashing pool, the file rewritten later if it cannot be
        written now, and in cluster mode under the shared lock on the cluster's copy. The store's
        own errors (UserStoreError) are raised as they are."""
        async with self._shared_change() if self.broker.cluster is not None else contextlib.nullcontext():
            try:
                return await run_in(hash_pool(), change)
            except OSError as exc:
                self._write_failed(USERS_FILE, exc)
                self._rewrite_later()
                raise StorageError(f"cannot write the Iggy {USERS_FILE}: {exc.strerror or exc}") from None

    async def _login_user(self, s: Session, req: m.LoginUser) -> m.LoginReply:
        if s.dialect is None:
            s.dialect = Dialect.LEGACY
        try:
            s.user = await self._guarded_login(s, req.username, self.users.authenticate, req.username,
                                               req.password)
            s.token_hash = None
            s.envelopes = (req.version or "").startswith(ENVELOPE_CLIENT)
        except AuthFailure as exc:
            raise IggyError(Status(exc.iggy_status), "login refused") from None
        log.info("iggy login", extra={"client": s.client_id, "user": s.user.username})
        return m.LoginReply(s.user.id)

    async def _login_token(self, s: Session, req: m.LoginWithToken) -> m.LoginReply:
        if s.dialect is None:
            s.dialect = Dialect.LEGACY
        try:
            s.user = await self._guarded_login(s, "(personal access token)", self.users.authenticate_token,
                                               req.token)
            s.token_hash = hash_token(req.token)
        except AuthFailure as exc:
            raise IggyError(Status(exc.iggy_status), "token refused") from None
        return m.LoginReply(s.user.id)

    async def _login_register(self, s: Session, req: m.LoginRegister | m.LoginRegisterWithToken,
                              header: RequestHeader) -> m.LoginRegisterReply:
        if req.protocol_version >> 10 != PROTOCOL_VERSION >> 10:
            raise IggyError(Status.INCOMPATIBLE_PROTOCOL_VERSION, "protocol version",
                            eviction=EvictionReason.INCOMPATIBLE_PROTOCOL)
        try:
            if isinstance(req, m.LoginRegister):
                user = await self._guarded_login(s, req.username, self.users.authenticate, req.username,
                                                 req.password)
                s.token_hash = None
            else:
                user = await self._guarded_login(s, "(personal access token)", self.users.authenticate_token,
                                                 req.token)
                s.token_hash = hash_token(req.token)
        except AuthFailure as exc:
            reason = {Status.USER_INACTIVE: EvictionReason.USER_INACTIVE,
                      Status.INVALID_PERSONAL_ACCESS_TOKEN: EvictionReason.INVALID_TOKEN,
                      }.get(Status(exc.iggy_status), EvictionReason.INVALID_CREDENTIALS)
            raise IggyError(Status(exc.iggy_status), "login refused", eviction=reason) from None
        s.user = user
        s.dialect = Dialect.VSR
        s.session = secrets.randbits(63) | 1
        log.info("iggy login", extra={"client": s.client_id, "user": user.username})
        return m.LoginRegisterReply(user.id, s.session, PROTOCOL_VERSION, SERVER_NAME)

    async def _logout(self, s: Session, req: m.LogoutUser) -> None:
        for key in list(s.groups):
            with contextlib.suppress(BayouError, IggyError):
                await self._leave(s, key)
        s.user = None
        s.session = 0
        return None

    async def _users_call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:  # user changes hash passwords: their own pool, not the one TANK's sendfile uses
            return await loop.run_in_executor(hash_pool(), lambda: fn(*args, **kwargs))
        except UserStoreError as exc:
            raise IggyError(Status(exc.iggy_status), str(exc)) from None
        except OSError as exc:  # the change is made in memory; its file is written later
            self._write_failed(USERS_FILE, exc)
            self._rewrite_later()
            raise StorageError(f"cannot write the Iggy {USERS_FILE}: {exc.strerror or exc}") from None

    async def _get_user(self, s: Session, req: m.GetUser) -> m.Reply | None:
        self._permit(s, "read_users")
        user = self.users.get(req.user.value)
        return None if user is None else user.details()

    async def _get_users(self, s: Session, req: m.GetUsers) -> m.Reply:
        self._permit(s, "read_users")
        return tuple(u.info() for u in self.users.users())

    async def _create_user(self, s: Session, req: m.CreateUser) -> m.Reply:
        self._permit(s, "manage_users")
        user: User = await self._users_call(self.users.create_user, req.username, req.password,
                                      active=req.status == m.UserStatus.ACTIVE,
                                      permissions=from_iggy(req.permissions))
        return user.details()

    async def _delete_user(self, s: Session, req: m.DeleteUser) -> None:
        self._permit(s, "manage_users")
        await self._users_call(self.users.delete_user, req.user.value)

    async def _update_user(self, s: Session, req: m.UpdateUser) -> None:
        self._permit(s, "manage_users")
        active = None if req.status is None else req.status == m.UserStatus.ACTIVE
        await self._users_call(self.users.update_user, req.user.value, username=req.username,
                               active=active)

    async def _update_permissions(self, s: Session, req: m.UpdatePermissions) -> None:
        self._permit(s, "manage_users")
        await self._users_call(self.users.update_permissions, req.user.value, from_iggy(req.permissions))

    async def _change_password(self, s: Session, req: m.ChangePassword) -> None:
        assert s.user is not None
        target = self.users.get(req.user.value)
        if target is None or target.id != s.user.id:
            self._permit(s, "manage_users")
        await self._users_call(self.users.change_password, req.user.value, req.current_password,
                               req.new_password)

    async def _get_tokens(self, s: Session, req: m.GetPersonalAccessTokens) -> m.Reply:
        assert s.user is not None
        return tuple(t.info() for t in self.users.tokens(s.user.id))

    async def _create_token(self, s: Session, req: m.CreatePersonalAccessToken) -> m.Reply:
        assert s.user is not None
        token = await self._users_call(self.users.create_token, s.user.id, req.name,
                                       req.expiry or None)
        return m.RawPersonalAccessToken(token)

    async def _delete_token(self, s: Session, req: m.DeletePersonalAccessToken) -> None:
        assert s.user is not None
        await self._users_call(self.users.delete_token, s.user.id, req.name)

    # -- streams -------------------------------------------------------------------------------

    async def _get_stream(self, s: Session, req: m.GetStream) -> m.StreamDetails | None:
        stream = await self._find_stream(req.stream)
        if stream is None:
            return None
        self._permit(s, "read_streams", stream.id)
        topics = self._topic_infos(s, stream)
        return m.StreamDetails(self._stream_info(s, stream, topics), topics)

    async def _get_streams(self, s: Session, req: m.GetStreams) -> tuple[m.StreamInfo, ...]:
        self._permit(s, "read_streams")
        await self._sync()
        return tuple(self._stream_info(s, st) for st in self.catalog.visible_streams())

    async def _create_stream(self, s: Session, req: m.CreateStream) -> m.StreamDetails:
        self._permit(s, "manage_streams")
        _check_name(req.name, Status.INVALID_STREAM_NAME)
        if self.catalog.stream_name_taken(req.name):
            raise IggyError(Status.STREAM_NAME_ALREADY_EXISTS, f"stream {req.name!r} exists")
        if req.stream_id is not None:  # D: the client chooses, from 1
            if req.stream_id < 1 or req.stream_id >= 0x7FFF_FFFF:
                raise IggyError(Status.INVALID_STREAM_ID, f"stream id {req.stream_id}")
            if req.stream_id in self.catalog.streams:
                raise IggyError(Status.STREAM_ID_ALREADY_EXISTS, f"stream {req.stream_id} exists")
        stream = self.catalog.add_stream(req.name, now_us(), req.stream_id)
        await self._save_catalog()
        return m.StreamDetails(self._stream_info(s, stream, ()))

    async def _delete_stream(self, s: Session, req: m.DeleteStream) -> None:
        stream = await self._require_stream(req.stream)
        self._permit(s, "manage_streams", stream.id)
        for topic in list(stream.topics.values()):
            await self._drop_topic(stream, topic)
        if not stream.is_default:
            self.catalog.remove_stream(stream)
        await self._save_catalog()

    async def _require_stream(self, ident: m.Identifier) -> StreamEntry:
        stream = await self._find_stream(ident)
        if stream is None:
            raise IggyError(not_found_status(Status.STREAM_ID_NOT_FOUND, ident.is_name),
                            f"stream {_ident(ident.value)}")
        return stream

    async def _update_stream(self, s: Session, req: m.UpdateStream) -> None:
        stream = await self._require_stream(req.stream)
        self._permit(s, "manage_streams", stream.id)
        _check_name(req.name, Status.INVALID_STREAM_NAME)
        if stream.is_default:
            raise IggyError(Status.INVALID_STREAM_NAME, "the default stream cannot be renamed")
        if req.name != stream.name and self.catalog.stream_name_taken(req.name):
            raise IggyError(Status.STREAM_NAME_ALREADY_EXISTS, f"stream {req.name!r} exists")
        stream.name = req.name
        self.catalog.changed()  # names not yet in the catalog go by stream name prefix
        await self._save_catalog()

    async def _purge_stream(self, s: Session, req: m.PurgeStream) -> None:
        stream = await self._require_stream(req.stream)
        self._permit(s, "manage_streams", stream.id)
        for topic in stream.topics.values():
            await self.broker.purge_topic(topic.topic)

    # -- topics --------------------------------------------------------------------------------

    async def _get_topic(self, s: Session, req: m.GetTopic) -> m.TopicDetails | None:
        try:
            stream, topic = await self._resolve(req.stream, req.topic)
        except IggyError:
            return None
        self._permit(s, "read_topics", stream.id, topic.id)
        return self._topic_details(s, topic)

    async def _get_topics(self, s: Session, req: m.GetTopics) -> bytes | tuple[m.TopicInfo, ...]:
        stream = await self._require_stream(req.stream)
        self._permit(s, "read_topics", stream.id)
        topics = self._topic_infos(s, stream)
        if s.dialect is Dialect.VSR:
            # V lists topics as u32 count + records: apache-iggy 0.9.0 reads the first u32 as the
            # count, so without it a list starting with topic id 0 came back empty (SDK e2e test).
            return len(topics).to_bytes(4, "little") + encode_reply(topics, Dialect.VSR)
        return topics

    @staticmethod
    def _retention(expiry_us: int, max_size: int, partitions: int) -> dict[str, str | None]:
        """Topic config for Iggy's expiry (us) and maximum size (bytes, split per partition):
        0 = the server default (bayou's retention), u64 max = never / unlimited."""
        cfg: dict[str, str | None] = {"retention.ms": None, "retention.bytes": None}
        if expiry_us == U64_MAX:
            cfg["retention.ms"] = "-1"
        elif expiry_us:
            cfg["retention.ms"] = str(max(1, math.ceil(expiry_us / 1000)))
        if max_size == U64_MAX:
            cfg["retention.bytes"] = "-1"
        elif max_size:
            cfg["retention.bytes"] = str(max(1, max_size // max(partitions, 1)))
        return cfg

    async def _create_topic(self, s: Session, req: m.CreateTopic) -> m.TopicDetails:
        """A topic of an Iggy stream is the bayou topic ``<stream>.<topic>`` (iggy_catalog); one of
        the default stream is the bayou topic of exactly that name (bayou's topic name rule)."""
        stream = await self._require_stream(req.stream)
        self._permit(s, "manage_topics", stream.id)
        _check_name(req.name, Status.INVALID_TOPIC_NAME)
        if stream.is_default:
            validate_topic_name(req.name)
            await self._sync()  # the default stream mirrors topics other protocols create and delete
        if stream.topic(req.name) is not None:
            raise IggyError(Status.TOPIC_NAME_ALREADY_EXISTS, f"topic {req.name!r} exists")
        if req.topic_id is not None:
            if req.topic_id < 1:
                raise IggyError(Status.INVALID_TOPIC_ID, f"topic id {req.topic_id}")
            if req.topic_id in stream.topics:
                raise IggyError(Status.TOPIC_ID_ALREADY_EXISTS, f"topic {req.topic_id} exists")
        if not 1 <= req.partitions_count <= MAX_PARTITIONS:
            raise IggyError(Status.INVALID_PARTITIONS_COUNT, f"{req.partitions_count} partitions")
        expiry = req.message_expiry or 0
        max_size = req.max_topic_size or 0
        config = {k: v for k, v in self._retention(expiry, max_size, req.partitions_count).items()
                  if v is not None}
        if req.replication_factor:
            config["replication.factor"] = str(req.replication_factor)
        segment = option(req.options, "segment_size")  # V: the size at which a segment is sealed
        if segment is not None and segment.value_kind == m.HeaderKind.UINT64 and len(segment.value) == 8:
            size = int.from_bytes(segment.value, "little")
            if size:
                config["segment.bytes"] = str(size)
        config.update(_bayou_config(req.options))
        if stream.is_default:
            name = req.name  # TopicAlreadyExists (made elsewhere) answers TOPIC_NAME_ALREADY_EXISTS
            await self.broker.create_topic(name, req.partitions_count, config)
        else:
            name = self.catalog.bayou_topic_name(stream.name, req.name, set(self.broker.topics))
            try:
                await self.broker.create_topic(name, req.partitions_count, config)
            except TopicAlreadyExists:  # created elsewhere in between: take the next free name
                name = self.catalog.bayou_topic_name(stream.name, req.name, set(self.broker.topics) | {name})
                await self.broker.create_topic(name, req.partitions_count, config)
        topic = self.catalog.add_topic(stream, req.name, name, now_us(), topic_id=req.topic_id,
                                       compression=req.compression_algorithm or 1, message_expiry=expiry,
                                       max_topic_size=max_size,
                                       replication_factor=req.replication_factor or 0)
        await self._save_catalog()
        return self._topic_details(s, topic)

    async def _drop_topic(self, stream: StreamEntry, topic: TopicEntry) -> None:
        for g in topic.groups.values():
            await self.broker.delete_group(topic.broker_group(g))
        with contextlib.suppress(BayouError):
            await self.broker.delete_topic(topic.topic)
        self.catalog.remove_topic(stream, topic.id)

    async def _delete_topic(self, s: Session, req: m.DeleteTopic) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "manage_topics", stream.id, topic.id)
        await self._drop_topic(stream, topic)
        await self._save_catalog()

    async def _update_topic(self, s: Session, req: m.UpdateTopic) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "manage_topics", stream.id, topic.id)
        _check_name(req.name, Status.INVALID_TOPIC_NAME)
        other = stream.topic(req.name)
        if other is not None and other is not topic:
            raise IggyError(Status.TOPIC_NAME_ALREADY_EXISTS, f"topic {req.name!r} exists")
        partitions = self.broker.partition_count(topic.topic)
        changes = self._retention(req.message_expiry, req.max_topic_size, partitions)
        changes.update(_bayou_config(req.options))
        await self.broker.alter_topic_config(topic.topic, changes)
        topic.name = req.name
        topic.compression = req.compression_algorithm or 1
        topic.message_expiry = req.message_expiry
        topic.max_topic_size = req.max_topic_size
        if req.replication_factor is not None:
            topic.replication_factor = req.replication_factor
        await self._save_catalog()

    async def _purge_topic(self, s: Session, req: m.PurgeTopic) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "manage_topics", stream.id, topic.id)
        await self.broker.purge_topic(topic.topic)

    async def _resplit_size(self, topic: TopicEntry) -> None:
        if topic.max_topic_size and topic.max_topic_size != U64_MAX:
            n = self.broker.partition_count(topic.topic)
            await self.broker.alter_topic_config(
                topic.topic, {"retention.bytes": str(max(1, topic.max_topic_size // n))})

    async def _create_partitions(self, s: Session, req: m.CreatePartitions) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "manage_topics", stream.id, topic.id)
        have = self.broker.partition_count(topic.topic)
        if not req.partitions_count >= 1 or have + req.partitions_count > MAX_PARTITIONS:
            raise IggyError(Status.INVALID_PARTITIONS_COUNT, f"{req.partitions_count} partitions")
        await self.broker.grow_partitions(topic.topic, req.partitions_count)
        await self._resplit_size(topic)

    async def _delete_partitions(self, s: Session, req: m.DeletePartitions) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "manage_topics", stream.id, topic.id)
        have = self.broker.partition_count(topic.topic)
        if not 1 <= req.partitions_count < have:
            raise IggyError(Status.INVALID_PARTITIONS_COUNT,
                            f"cannot delete {req.partitions_count} of {have} partitions")
        await self.broker.remove_partitions(topic.topic, req.partitions_count)
        await self._resplit_size(topic)

    async def _delete_segments(self, s: Session, req: m.DeleteSegments) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "manage_topics", stream.id, topic.id)
        p = self._partition_in(s, req.partition_id)
        if p is None:
            raise IggyError(Status.PARTITION_NOT_FOUND, "partition 0")
        self._check_partition(topic, p)
        await self.broker.delete_segments(topic.topic, p, req.segments_count)

    # -- sending -------------------------------------------------------------------------------

    def _route(self, s: Session, topic: TopicEntry, partitioning: m.Partitioning) -> int:
        n = self.broker.partition_count(topic.topic)
        kind = partitioning.kind
        if kind == m.PartitioningKind.PARTITION_ID:
            pid = partitioning.partition_id
            if pid is None:
                raise IggyError(Status.INVALID_FORMAT, "partition id must be a u32")
            p = self._partition_in(s, pid)
            if p is None:
                raise IggyError(Status.PARTITION_NOT_FOUND, "partition 0")
            self._check_partition(topic, p)
            return p
        if kind == m.PartitioningKind.MESSAGES_KEY:
            if not partitioning.value:
                raise IggyError(Status.INVALID_FORMAT, "empty messages key")
            return xxhash.xxh32_intdigest(partitioning.value) % n
        counter = self._balanced.get(topic.topic, -1) + 1
        self._balanced[topic.topic] = counter
        return counter % n

    async def _append_frames(self, s: Session, stream: StreamEntry, topic: TopicEntry, partition: int,
                             frames: bytes, count: int, origin_base: int, stride: int) -> int:
        self._permit(s, "send", stream.id, topic.id)
        if origin_base > MAX_ORIGIN_BASE:  # stored as the batch's int64 producer id
            raise IggyError(Status.INVALID_FORMAT, f"origin timestamp {origin_base} past 2^63-1 microseconds")
        if self.broker.deduplicating(topic.topic):
            return await self._append_unique_frames(topic, partition, frames, count, origin_base, stride)
        ms, sub = split_append_time(now_us(), stride)
        batch = assemble_batch(frames, record_count=count, base_offset=0,
                               attributes=FORMAT_IGGY << 8, base_timestamp=ms, max_timestamp=ms,
                               producer_id=origin_base, base_sequence=sub)
        result = await self.broker.produce(topic.topic, partition, batch, Acks.LEADER, create=False,
                                           forward=True)
        return result.base_offset

    async def _append_unique_frames(self, topic: TopicEntry, partition: int, frames: bytes, count: int,
                                    origin_base: int, stride: int) -> int:
        """A send to a topic with ``message.deduplication``: only messages whose ids are not
        replays are stored (``Broker.produce_unique``), renumbered when some are dropped. Returns
        the base offset of what was stored, or the log end when every message was a replay."""
        positions = frame_positions(frames, 0, len(frames), count, stride)

        def build(keep: list[bool]) -> bytes:
            data, n, size = frames, count, stride
            if not all(keep):
                data, size = select_frames(frames, positions, keep)
                n = sum(keep)
            ms, sub = split_append_time(now_us(), size)
            return assemble_batch(data, record_count=n, base_offset=0, attributes=FORMAT_IGGY << 8,
                                  base_timestamp=ms, max_timestamp=ms, producer_id=origin_base,
                                  base_sequence=sub)

        run = id_run(frames, count, stride)
        ids: list[int] | IdRun = frame_ids(frames, positions) if run is None else IdRun(*run, count)
        result = await self.broker.produce_unique(topic.topic, partition, ids, build, Acks.LEADER,
                                                  forward=True)
        return result.base_offset

    async def _append_keyed(self, s: Session, stream: StreamEntry, topic: TopicEntry, partition: int,
                            req: m.SendMessages) -> int:
        """A messages-key send keeps its key, so it is stored as records (key included)."""
        self._permit(s, "send", stream.id, topic.id)
        ms = now_us() // 1000
        records = [Record(r.value, r.key, ms, r.headers, r.message_id or mint_uuid4())
                   for r in send_to_records(req)]
        if self.broker.deduplicating(topic.topic):
            def build(keep: list[bool]) -> bytes:
                return encode_batch([r for r, k in zip(records, keep, strict=True) if k])
            ids = [r.message_id or 0 for r in records]
            result = await self.broker.produce_unique(topic.topic, partition, ids, build, Acks.LEADER,
                                                  forward=True)
        else:
            result = await self.broker.produce(topic.topic, partition, encode_batch(records), Acks.LEADER,
                                               create=False, forward=True)
        return result.base_offset

    async def _send_vsr(self, s: Session, body: bytes) -> bytes:
        stream_id, topic_id, partitioning, count, pos = read_send_metadata(body)
        stream, topic = await self._resolve(stream_id, topic_id)
        partition = self._route(s, topic, partitioning)
        if partitioning.kind == m.PartitioningKind.MESSAGES_KEY:
            req = decode_vsr_send(body)
            base = await self._append_keyed(s, stream, topic, partition, req)
        else:
            frames, origin, stride = vsr_send_frames(body, pos, count)
            base = await self._append_frames(s, stream, topic, partition, frames, count, origin, stride)
        confirmation = m.SendConfirmation(stream.id, topic.id, partition, base)
        return encode_reply(m.SendConfirmations((confirmation,)), Dialect.VSR)

    async def _send_legacy(self, s: Session, payload: bytes) -> bytes:
        stream_id, topic_id, partitioning, count, pos = read_send_metadata(payload)
        # a one-message send may be bayou's compressed envelope: inflated off the loop
        expanded = (await run_in(inflate_pool(), expand_compressed, payload, pos, count)
                    if count == 1 else None)
        if expanded is not None:  # bayou's compressed send: the real one, inflated
            payload = expanded
            stream_id, topic_id, partitioning, count, pos = read_send_metadata(payload)
        fast = None
        if partitioning.kind != m.PartitioningKind.MESSAGES_KEY:
            fast = legacy_send_frames(payload, pos, count, now_us=now_us())
        if fast is None:
            await self._send_decoded(s, decode_legacy_send(payload))
            return b""
        frames, origin, stride = fast
        stream, topic = await self._resolve(stream_id, topic_id)
        partition = self._route(s, topic, partitioning)
        await self._append_frames(s, stream, topic, partition, frames, count, origin, stride)
        return b""

    async def _send_decoded(self, s: Session, req: m.SendMessages) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        partition = self._route(s, topic, req.partitioning)
        if req.partitioning.kind == m.PartitioningKind.MESSAGES_KEY:
            await self._append_keyed(s, stream, topic, partition, req)
            return None
        frames, origin, stride = frames_from_messages(req.messages, now_us=now_us())
        await self._append_frames(s, stream, topic, partition, frames, len(req.messages), origin, stride)
        return None

    async def _flush(self, s: Session, req: m.FlushUnsavedBuffer) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "send", stream.id, topic.id)
        p = self._partition_in(s, req.partition_id)
        if p is None:
            raise IggyError(Status.PARTITION_NOT_FOUND, "partition 0")
        self._check_partition(topic, p)
        await self.broker.flush_partition(topic.topic, p)

    # -- consumers and offsets -----------------------------------------------------------------

    def _consumer_key(self, s: Session, topic: TopicEntry, consumer: m.Consumer) -> str:
        """The broker group holding this consumer's offsets: the Iggy group's, or one per
        regular consumer id (a numeric id and its decimal name are the same consumer)."""
        if consumer.kind == m.ConsumerKind.GROUP:
            return topic.broker_group(self._group(topic, consumer.id))
        return f"iggy-consumer.{consumer.id.value}"

    async def _member_partitions(self, s: Session, stream: StreamEntry, topic: TopicEntry,
                                 group: GroupEntry) -> tuple[int, ...]:
        if (stream.id, topic.id, group.id) not in s.groups:
            raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND, f"not a member of {group.name!r}")
        try:  # cluster mode: as ZooKeeper has it now (members on other brokers change it)
            desc = await self.broker.current_group(topic.broker_group(group))
        except GroupNotFound:
            raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND,
                            f"not a member of {group.name!r}") from None
        for member, _seen, parts in desc.members:
            if member == s.member:
                return parts
        raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND, f"not a member of {group.name!r}")

    async def _offset_partition(self, s: Session, stream: StreamEntry, topic: TopicEntry,
                                consumer: m.Consumer, partition_id: int | None) -> int:
        p = self._partition_in(s, partition_id)
        if p is None:
            if consumer.kind == m.ConsumerKind.GROUP:
                group = self._group(topic, consumer.id)
                parts = await self._member_partitions(s, stream, topic, group)
                if not parts:
                    raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND, "no partitions assigned")
                return parts[0]
            p = 0
        self._check_partition(topic, p)
        return p

    async def _get_offset(self, s: Session, req: m.GetConsumerOffset) -> m.ConsumerOffsetInfo | None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "poll", stream.id, topic.id)
        p = await self._offset_partition(s, stream, topic, req.consumer, req.partition_id)
        committed = await self.broker.current_committed_offset(self._consumer_key(s, topic, req.consumer),
                                                               topic.topic, p)
        if committed is None or committed == 0:
            return None
        hw = self.broker.partition(topic.topic, p).high_watermark
        return m.ConsumerOffsetInfo(self._partition_out(s, p), max(hw - 1, 0), committed - 1)

    async def _store_offset(self, s: Session, req: m.StoreConsumerOffset) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "poll", stream.id, topic.id)
        p = await self._offset_partition(s, stream, topic, req.consumer, req.partition_id)
        hw = self.broker.partition(topic.topic, p).high_watermark
        if hw == 0 or req.offset > hw - 1:
            raise IggyError(Status.INVALID_OFFSET, f"offset {req.offset} is past the partition's last")
        await self.broker.commit_offset(self._consumer_key(s, topic, req.consumer), topic.topic, p,
                                        req.offset + 1)

    async def _delete_offset(self, s: Session, req: m.DeleteConsumerOffset) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "poll", stream.id, topic.id)
        p = await self._offset_partition(s, stream, topic, req.consumer, req.partition_id)
        key = self._consumer_key(s, topic, req.consumer)
        if not await self.broker.delete_committed_offset(key, topic.topic, p):
            raise IggyError(Status.CONSUMER_OFFSET_NOT_FOUND, "no stored offset")

    # -- polling -------------------------------------------------------------------------------

    async def _poll_partition(self, s: Session, stream: StreamEntry, topic: TopicEntry,
                              req: m.PollMessages) -> int | None:
        """The partition a poll reads, or None for "nothing to read" (a member without
        partitions, or a V member naming a partition it no longer owns)."""
        p = self._partition_in(s, req.partition_id)
        if req.consumer.kind != m.ConsumerKind.GROUP:
            p = 0 if p is None else p
            self._check_partition(topic, p)
            return p
        group = self._group(topic, req.consumer.id)
        owned = await self._member_partitions(s, stream, topic, group)
        if p is None:
            if not owned:
                return None
            key = (stream.id, topic.id, group.id)
            i = s.cursor.get(key, -1) + 1
            s.cursor[key] = i
            return owned[i % len(owned)]
        self._check_partition(topic, p)
        return p if p in owned else None

    async def _poll(self, s: Session, req: m.PollMessages) -> bytes | m.PolledMessages:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "poll", stream.id, topic.id)
        dialect = s.dialect or Dialect.LEGACY
        p = await self._poll_partition(s, stream, topic, req)
        if p is None:
            pid = m.RESYNC_PARTITION if dialect is Dialect.VSR and req.partition_id is not None else 0
            return POLL_PREFIX.pack(pid, 0, 0)
        kind = req.strategy.kind
        cluster = self.broker.cluster
        try:
            self.broker.check_readable(topic.topic, p)
            remote = False
        except NotLeader:  # cluster mode, no replica here: read at the leader (not by timestamp)
            if cluster is None or kind == m.PollingKind.TIMESTAMP:
                raise
            remote = True
        if remote:
            assert cluster is not None
            probe = await cluster.consumer_fetch(topic.topic, p, 0, 0)
            hw, start_of_log = probe.high_watermark, probe.log_start_offset
        else:
            part = self.broker.partition(topic.topic, p)
            hw = part.high_watermark
            start_of_log = part.log.log_start_offset
        current = max(hw - 1, 0)
        key = self._consumer_key(s, topic, req.consumer)
        not_before_us = 0
        if kind == m.PollingKind.OFFSET:
            start = req.strategy.value
        elif kind == m.PollingKind.TIMESTAMP:
            not_before_us = req.strategy.value
            found = await self.broker.offset_for_timestamp(topic.topic, p, not_before_us // 1000)
            start = hw if found is None else found
        elif kind == m.PollingKind.FIRST:
            start = start_of_log
        elif kind == m.PollingKind.LAST:
            start = hw - min(req.count, hw)
        else:  # NEXT
            committed = await self.broker.current_committed_offset(key, topic.topic, p)
            start = start_of_log if committed is None else committed
        start = max(start, start_of_log)
        out_pid = self._partition_out(s, p)
        if req.count == 0 or start >= hw:
            return POLL_PREFIX.pack(out_pid, current, 0)
        parts, count, last = await self._read(topic.topic, p, out_pid, start, req.count, hw, dialect,
                                              not_before_us, remote=remote, envelope=s.envelopes)
        if req.auto_commit and count:
            await self.broker.commit_offset(key, topic.topic, p, last + 1)
        if dialect is Dialect.SEED:
            assert isinstance(parts, list)
            return m.PolledMessages(out_pid, current, tuple(parts))
        return POLL_PREFIX.pack(out_pid, current, count) + b"".join(parts)

    async def _read(self, topic: str, p: int, out_pid: int, start: int, count: int, hw: int,
                    dialect: Dialect, not_before_us: int, *, remote: bool = False,
                    envelope: bool = False) -> tuple[list[Any], int, int]:
        """Up to ``count`` messages from ``start``: reply parts (bytes for L and V, PolledMessage
        for D), how many, and the last offset. ``remote``: read at the partition's leader."""
        parts: list[Any] = []
        taken = 0
        last = start - 1
        offset = start
        while taken < count and offset < hw:
            before = offset
            if remote:
                assert self.broker.cluster is not None
                r = await self.broker.cluster.consumer_fetch(topic, p, offset, POLL_MAX_BYTES)
            else:
                r = await self.broker.fetch(topic, p, offset, max_bytes=POLL_MAX_BYTES,
                                            max_records=count - taken, from_log_start=True)
            if not r.data:
                break
            data = r.data

            async def decode(pos: int, _h: BatchHeader, data: bytes = data) -> list[Record]:
                return await decode_stored(data, pos)

            async for piece in window(iter_batches(data), FORMAT_IGGY, offset, decode, stop=hw):
                h, lo = piece.header, piece.lo
                hi = min(piece.hi, lo + count - taken)
                if isinstance(piece, Stored):
                    append = append_time_us(h.base_timestamp, h.base_sequence)
                    if append < not_before_us:
                        offset = h.next_offset
                        continue
                    pos = piece.pos
                    body = pos + HEADER_SIZE
                    positions = frame_positions(data, body, pos + h.size, h.record_count,
                                                frame_stride(h.base_sequence))
                    i0, i1 = lo - h.base_offset, hi - h.base_offset
                    if dialect is Dialect.VSR:
                        parts.append(vsr_record(out_pid, data, positions, i0, i1, base_offset=h.base_offset,
                                                append_us=append, origin_base=h.producer_id))
                    elif dialect is Dialect.LEGACY:
                        stride = frame_stride(h.base_sequence)
                        if stride and positions[1] - positions[0] == stride:
                            parts.append(legacy_messages_uniform(
                                data, body, stride, i0, i1, base_offset=h.base_offset, append_us=append,
                                origin_base=h.producer_id))
                        else:
                            parts.extend(legacy_messages(data, positions, i0, i1, base_offset=h.base_offset,
                                                         append_us=append, origin_base=h.producer_id))
                    else:
                        parts.extend(record_to_polled(rec, timestamp=append, envelope=envelope)
                                     for rec in (await decode_stored(data, pos))[i0:i1])
                    taken += i1 - i0
                    last = hi - 1
                else:
                    polled = [record_to_polled(rec, timestamp=micros(rec.timestamp), envelope=envelope)
                              for rec in piece.records
                              if rec.offset < hi and micros(rec.timestamp) >= not_before_us]
                    if polled:
                        if dialect is Dialect.SEED:
                            parts.extend(polled)
                        else:
                            reply = m.PolledMessages(out_pid, 0, tuple(polled))
                            parts.append(encode_reply(reply, dialect)[POLL_PREFIX.size:])
                        taken += len(polled)
                        last = polled[-1].offset
                offset = hi
                if taken >= count:
                    break
            if offset == before:  # nothing below hw in what came back (retention moved the start past it)
                break
        return parts, taken, last

    # -- consumer groups -----------------------------------------------------------------------

    async def _group_details(self, topic: TopicEntry, group: GroupEntry) -> m.ConsumerGroupDetails:
        try:
            desc = await self.broker.current_group(topic.broker_group(group))
            found = desc.members
        except GroupNotFound:  # registered, no state yet
            found = ()
        members = tuple(m.ConsumerGroupMember(int(mid), tuple(parts)) for mid, _seen, parts in found)
        info = m.ConsumerGroupInfo(group.id, self.broker.partition_count(topic.topic), len(members),
                                   group.name)
        return m.ConsumerGroupDetails(info, members)

    async def _get_group(self, s: Session, req: m.GetConsumerGroup) -> m.ConsumerGroupDetails | None:
        try:
            stream, topic = await self._resolve(req.stream, req.topic)
        except IggyError:
            return None
        self._permit(s, "read_topics", stream.id, topic.id)
        group = topic.group(req.group.value)
        return None if group is None else await self._group_details(topic, group)

    async def _get_groups(self, s: Session, req: m.GetConsumerGroups) -> tuple[m.ConsumerGroupInfo, ...]:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "read_topics", stream.id, topic.id)
        return tuple([(await self._group_details(topic, g)).group
                      for g in sorted(topic.groups.values(), key=lambda g: g.id)])

    async def _create_group(self, s: Session, req: m.CreateConsumerGroup) -> m.ConsumerGroupDetails:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "poll", stream.id, topic.id)
        if req.group_id is not None:  # D: the client chose the id (its name is derived from it)
            if req.group_id < 1:
                raise IggyError(Status.INVALID_CONSUMER_GROUP_ID, f"group id {req.group_id}")
            if req.group_id in topic.groups:
                raise IggyError(Status.CONSUMER_GROUP_ID_ALREADY_EXISTS, f"group {req.group_id} exists")
        name = req.name if req.name is not None else str(req.group_id)
        _check_name(name, Status.INVALID_CONSUMER_GROUP_NAME)
        if topic.group(name) is not None:
            raise IggyError(Status.CONSUMER_GROUP_NAME_ALREADY_EXISTS, f"group {name!r} exists")
        group = topic.add_group(name, req.group_id)
        await self.broker.register_group(topic.broker_group(group), topic.topic, IGGY_POLICY)
        await self._save_catalog()
        return await self._group_details(topic, group)

    async def _delete_group(self, s: Session, req: m.DeleteConsumerGroup) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "poll", stream.id, topic.id)
        group = self._group(topic, req.group)
        await self.broker.delete_group(topic.broker_group(group))
        del topic.groups[group.id]
        for c in self.sessions.values():
            c.groups.discard((stream.id, topic.id, group.id))
        await self._save_catalog()

    async def _join_group(self, s: Session, req: m.JoinConsumerGroup) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        self._permit(s, "poll", stream.id, topic.id)
        group = self._group(topic, req.group)
        await self.broker.join_group(topic.broker_group(group), topic.topic, s.member, policy=IGGY_POLICY)
        s.groups.add((stream.id, topic.id, group.id))

    async def _leave(self, s: Session, key: tuple[int, int, int]) -> None:
        s.groups.discard(key)
        stream = self.catalog.stream(key[0])
        topic = stream.topics.get(key[1]) if stream else None
        group = topic.groups.get(key[2]) if topic else None
        if topic is not None and group is not None:
            with contextlib.suppress(GroupNotFound, UnknownMember):
                await self.broker.leave_group(topic.broker_group(group), topic.topic, s.member, None)

    async def _leave_group(self, s: Session, req: m.LeaveConsumerGroup) -> None:
        stream, topic = await self._resolve(req.stream, req.topic)
        group = self._group(topic, req.group)
        key = (stream.id, topic.id, group.id)
        if key not in s.groups:
            raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND, f"not a member of {group.name!r}")
        await self._leave(s, key)

    async def _sync_group(self, s: Session, req: m.SyncConsumerGroup) -> m.ConsumerGroupAssignment | None:
        stream, topic = await self._resolve(req.stream, req.topic)
        group = self._group(topic, req.group)
        if (stream.id, topic.id, group.id) not in s.groups:
            return None
        try:
            desc = await self.broker.current_group(topic.broker_group(group))
        except GroupNotFound:
            return None
        for member, _seen, parts in desc.members:
            if member == s.member:
                return m.ConsumerGroupAssignment(desc.generation, tuple(parts))
        return None


def _bayou_config(options: m.Headers) -> dict[str, str]:
    """bayou topic config carried in CREATE_TOPIC / UPDATE_TOPIC options: every option whose
    (string) key is a per-topic config key (``segment.bytes``, ``retention.ms``, ``fsync``,
    ``message.deduplication``, ...), its value a UTF-8 string of kind STRING or RAW. Other keys are
    Iggy's own or unknown and left alone; such a key with any other value is INVALID_OPTION_VALUE,
    as is a value the topic refuses (checked when it is applied)."""
    out: dict[str, str] = {}
    for o in options:
        key = o.name
        if key is None or key not in TOPIC_KEYS:
            continue
        if o.value_kind not in (m.HeaderKind.STRING, m.HeaderKind.RAW):
            raise IggyError(Status.INVALID_OPTION_VALUE, f"option {key} must be a string")
        try:
            out[key] = o.value.decode("utf-8")
        except UnicodeDecodeError:
            raise IggyError(Status.INVALID_OPTION_VALUE, f"option {key} is not UTF-8") from None
    return out


def _check_name(name: str, status: Status) -> None:
    if not name or len(name.encode()) > 255:
        raise IggyError(status, "names are 1..255 bytes")


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            k, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                out[k] = int(parts[0]) * 1024
    return out


def _rss() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return 0


def _proc_io() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/self/io") as f:
        for line in f:
            k, _, v = line.partition(":")
            with contextlib.suppress(ValueError):
                out[k.strip()] = int(v)
    return out


def iggy_handler(service: IggyService) -> Callable[[Connection, Listener], Awaitable[None]]:
    async def serve(conn: Connection, listener: Listener) -> None:
        await service.start()
        s = service.open_session(conn)
        try:
            await _serve(service, s, conn, listener)
        finally:
            await service.close_session(s)

    return serve


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
                       done=lambda: s.close_after_reply, first=first)


__all__ = ["IggyService", "Session", "iggy_handler"]
