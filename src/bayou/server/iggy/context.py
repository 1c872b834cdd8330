"""What every group of Iggy handlers shares: a connection's session, and the context a request
runs in (the broker, the catalog and users, the live sessions, the permission check and the
resolution of the ids and names a request carries)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bayou import __version__
from bayou.broker import Broker
from bayou.broker.authz import ANONYMOUS, Action, Principal, current_caller
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Status, not_found_status
from bayou.protocols.iggy.framing import Dialect, IggyError
from bayou.server.base import Connection
from bayou.server.iggy.catalog import Catalog, GroupEntry, StreamEntry, TopicEntry
from bayou.server.iggy.state import IggyState
from bayou.server.iggy.users import User, UserStore

PROTOCOL_VERSION = m.pack_version(0, 11, 0)  # the V protocol apache-iggy 0.9.0 speaks (C.7)
SERVER_NAME = f"bayou-{__version__}"


def ident_text(value: int | str) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


def check_name(name: str, status: Status) -> None:
    if not name or len(name.encode()) > 255:
        raise IggyError(status, "names are 1..255 bytes")


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
    # (action, stream, topic) -> (authorizer epoch, user) of a permission granted to a password
    # login: ``Context.permit``'s per-request answer until any user, permission or topic changes
    granted: dict[tuple[str, int | None, int | None], tuple[int, User]] = field(default_factory=dict)

    @property
    def member(self) -> str:
        return str(self.client_id)


Handler = Callable[[Session, Any], Awaitable[bytes | m.Reply | None]]


class Context:
    """The handlers' common ground. Permission checks go through the broker's authorizer with
    the session's principal; a stream or topic not found is looked up again after the catalog
    has taken in the topics other protocols made or deleted meanwhile (``IggyState.sync``)."""

    def __init__(self, broker: Broker, state: IggyState, *, seed_dialect: bool) -> None:
        self.broker = broker
        self.state = state
        self.seed_dialect = seed_dialect
        self.catalog: Catalog = state.catalog  # (both changed in place, never replaced)
        self.users: UserStore = state.users
        self.sessions: dict[int, Session] = {}

    # -- who the session is and what it may do ------------------------------------------------

    def anonymous(self, s: Session) -> bool:
        """A design-document client: it has no login (the seed predates users), so with D
        support enabled its legacy-framed connection is served without one (D.3)."""
        return (self.seed_dialect and s.user is None and s.framing is Dialect.LEGACY
                and s.dialect in (None, Dialect.SEED))

    def principal(self, s: Session) -> Principal | None:
        """Who the session is: its user, or (a seed-dialect client, which has no login) the
        connection's own principal (anonymous, or its TLS client certificate's user)."""
        if s.user is not None:
            return Principal.login(s.user.id, s.user.username, s.token_hash)
        if self.anonymous(s):
            caller = current_caller()
            return ANONYMOUS if caller is None else caller.base
        return None

    def permit(self, s: Session, action: Action, stream: int | None = None, topic: int | None = None) -> None:
        """Raise UNAUTHORIZED unless the session may do ``action``. A grant to a password login
        is kept in the session (``granted``) while the authorizer's epoch stays (any change of
        users, permissions or the catalog moves it, as for ``Authorizer.authorize``'s memo); a
        token login is checked every time, since its token can expire without a change."""
        user, authorizer = s.user, self.broker.authorizer
        key = (action, stream, topic)
        if user is not None and s.token_hash is None:
            hit = s.granted.get(key)
            if hit is not None and hit[0] == authorizer.epoch and hit[1] is user:
                return
        epoch = authorizer.epoch
        principal = self.principal(s)
        if principal is None or not authorizer.permits(principal, action, stream, topic):
            raise IggyError(Status.UNAUTHORIZED, f"not allowed to {action}")
        if user is not None and s.token_hash is None:
            if len(s.granted) >= 1024:
                s.granted.clear()
            s.granted[key] = (epoch, user)

    # -- resolution ----------------------------------------------------------------------------

    def stream(self, ident: m.Identifier) -> StreamEntry:
        entry = self.catalog.stream(ident.value)
        if entry is None:
            raise IggyError(not_found_status(Status.STREAM_ID_NOT_FOUND, ident.is_name),
                            f"stream {ident_text(ident.value)}")
        return entry

    def topic(self, stream: StreamEntry, ident: m.Identifier) -> TopicEntry:
        entry = stream.topic(ident.value)
        if entry is None or not self.broker.topic_exists(entry.topic):
            raise IggyError(not_found_status(Status.TOPIC_ID_NOT_FOUND, ident.is_name),
                            f"topic {ident_text(ident.value)}")
        return entry

    async def resolve(self, stream: m.Identifier, topic: m.Identifier) -> tuple[StreamEntry, TopicEntry]:
        try:
            s = self.stream(stream)
            return s, self.topic(s, topic)
        except IggyError:
            await self.state.sync()  # a topic may have been created or deleted through another protocol
            s = self.stream(stream)
            return s, self.topic(s, topic)

    async def find_stream(self, ident: m.Identifier) -> StreamEntry | None:
        entry = self.catalog.stream(ident.value)
        if entry is None or entry.is_default:  # the default stream mirrors other protocols' topics
            await self.state.sync()
            entry = self.catalog.stream(ident.value)
        return entry

    async def require_stream(self, ident: m.Identifier) -> StreamEntry:
        stream = await self.find_stream(ident)
        if stream is None:
            raise IggyError(not_found_status(Status.STREAM_ID_NOT_FOUND, ident.is_name),
                            f"stream {ident_text(ident.value)}")
        return stream

    @staticmethod
    def group(topic: TopicEntry, ident: m.Identifier) -> GroupEntry:
        entry = topic.group(ident.value)
        if entry is None:
            raise IggyError(not_found_status(Status.CONSUMER_GROUP_ID_NOT_FOUND, ident.is_name),
                            f"consumer group {ident_text(ident.value)}")
        return entry

    @staticmethod
    def partition_in(s: Session, partition_id: int | None) -> int | None:
        """A client's partition id as a bayou partition index (D numbers from 1, 0 = unspecified)."""
        if partition_id is None:
            return None
        if s.dialect is Dialect.SEED:
            return partition_id - 1 if partition_id > 0 else None
        return partition_id

    @staticmethod
    def partition_out(s: Session, partition: int) -> int:
        return partition + 1 if s.dialect is Dialect.SEED else partition

    def check_partition(self, topic: TopicEntry, partition: int) -> None:
        if not 0 <= partition < self.broker.partition_count(topic.topic):
            raise IggyError(Status.PARTITION_NOT_FOUND, f"partition {partition}")

    def named_partition(self, s: Session, topic: TopicEntry, partition_id: int | None) -> int:
        """The partition a request names (FLUSH_UNSAVED_BUFFER, DELETE_SEGMENTS): it must name one."""
        p = self.partition_in(s, partition_id)
        if p is None:
            raise IggyError(Status.PARTITION_NOT_FOUND, "partition 0")
        self.check_partition(topic, p)
        return p
