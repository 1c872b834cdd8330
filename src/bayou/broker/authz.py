"""Who may do what: bayou's principals, its permission model and the authorizer the broker asks.

Kafka's shape across every protocol bayou serves: each connection has one **principal** (who is
asking), and the broker API checks every request against it, beside produce, fetch and the admin
calls, so no front end can forget the check.

* A principal is ``anonymous`` (no login, no client certificate), a **user** (logged in through
  Iggy by password or personal access token: by id; or named by the CN of a verified TLS client
  certificate: by name), or ``system`` (bayou's own work: replication, recovery, reconcile, scrub,
  and any in-process caller outside a listener).
* The permission model is Apache Iggy's (``permissions.rs``), applied to bayou topics whatever the
  protocol: global flags, per stream flags and per topic flags, with Iggy's implication chains
  (``_RULES``). A bayou topic belongs to one Iggy stream (``<stream>.<topic>``, or the default
  stream), so the authorizer asks an injected resolver for a topic's (stream id, topic id); it asks
  an injected lookup for a user's permissions *as they are now* (revocation applies to the next
  request). Both live in ``server/`` (the Iggy catalog and user store); the broker imports neither.
* ``anonymous`` gets what ``[security] anonymous`` says: ``all`` (everything: the seed protocols
  have no login), ``read`` (read_streams, read_topics, poll) or ``none``.

The principal of the request being served travels in a context variable: the shared listener
(``server/base.py``) binds one ``Caller`` per connection, so every broker call made while serving
that connection sees it, and a login changes it in place (tasks the connection starts, such as a
long poll, share the same ``Caller``). Outside any connection the principal is ``system``.
"""

from __future__ import annotations

import bisect
import contextvars
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from bayou.errors import Unauthorized

Action = Literal["manage_servers", "read_servers", "manage_users", "read_users", "manage_streams",
                 "read_streams", "manage_topics", "read_topics", "poll", "send"]
AnonymousAccess = Literal["all", "read", "none"]
ANONYMOUS_ACCESS: tuple[AnonymousAccess, ...] = ("all", "read", "none")
# A topic may be described (listed, its metadata shown) by whoever may do any of these with it:
# Kafka's rule that Read, Write and Alter each imply Describe.
DESCRIBE: tuple[Action, ...] = ("read_topics", "poll", "send")


# -- the permission model -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GlobalPermissions:
    """The ten global flags; they apply to every stream and topic."""

    manage_servers: bool = False
    read_servers: bool = False
    manage_users: bool = False
    read_users: bool = False
    manage_streams: bool = False
    read_streams: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False


T = TypeVar("T")
MAX_GRANTS = 10_000  # streams and topics one user's permissions may name, in all (bayou's bound)
_TOPIC_ID: Callable[[TopicPermissions], int] = operator.attrgetter("topic_id")
_STREAM_ID: Callable[[StreamPermissions], int] = operator.attrgetter("stream_id")


def _by_id(grants: tuple[T, ...], wanted: int, key: Callable[[T], int]) -> T | None:
    """The grant of id ``wanted`` among ``grants`` (sorted by id): a search, not a scan, since
    each request of the user is checked against them (a scan of 10,000 grants took 0.46 ms)."""
    i = bisect.bisect_left(grants, wanted, key=key)
    return grants[i] if i < len(grants) and key(grants[i]) == wanted else None


@dataclass(frozen=True, slots=True)
class TopicPermissions:
    topic_id: int
    manage_topic: bool = False
    read_topic: bool = False
    poll_messages: bool = False
    send_messages: bool = False


@dataclass(frozen=True, slots=True)
class StreamPermissions:
    stream_id: int
    manage_stream: bool = False
    read_stream: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False
    topics: tuple[TopicPermissions, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(sorted(self.topics, key=_TOPIC_ID)))

    def topic(self, topic_id: int) -> TopicPermissions | None:
        return _by_id(self.topics, topic_id, _TOPIC_ID)


@dataclass(frozen=True, slots=True)
class Permissions:
    """Global flags plus per-stream (and per-topic) grants that extend them (kept sorted by id)."""

    global_permissions: GlobalPermissions = GlobalPermissions()
    streams: tuple[StreamPermissions, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", tuple(sorted(self.streams, key=_STREAM_ID)))

    def stream(self, stream_id: int) -> StreamPermissions | None:
        return _by_id(self.streams, stream_id, _STREAM_ID)

    @property
    def grants(self) -> int:
        """Streams and topics named, in all (at most MAX_GRANTS are stored for a user)."""
        return len(self.streams) + sum(len(x.topics) for x in self.streams)

    @staticmethod
    def everything() -> Permissions:
        """Every global flag: the root user, ``system``, and anonymous under ``all``."""
        return Permissions(GlobalPermissions(*(True,) * 10))


NOTHING = Permissions()
READ_ONLY = Permissions(GlobalPermissions(read_streams=True, read_topics=True, poll_messages=True))
EVERYTHING = Permissions.everything()
ANONYMOUS_PERMISSIONS: dict[AnonymousAccess, Permissions] = {
    "all": EVERYTHING, "read": READ_ONLY, "none": NOTHING}

# action -> (global flags, stream flags, topic flags): any one set flag grants it. Stream flags count
# only when the stream is known, topic flags only when stream and topic are. The chains are the ones
# Iggy documents on its permission types (``permissions.rs``): manage implies read, manage_streams
# implies manage_topics, read_streams and manage_topics imply read_topics, read_topics implies poll.
# Sending follows Iggy's ``append_messages`` rule: only send_messages grants it globally;
# manage_stream, manage_topics and manage_topic also grant it below.
_RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "manage_servers": (("manage_servers",), (), ()),
    "read_servers": (("manage_servers", "read_servers"), (), ()),
    "manage_users": (("manage_users",), (), ()),
    "read_users": (("manage_users", "read_users"), (), ()),
    "manage_streams": (("manage_streams",), ("manage_stream",), ()),
    "read_streams": (("manage_streams", "read_streams"), ("manage_stream", "read_stream"), ()),
    "manage_topics": (("manage_streams", "manage_topics"), ("manage_stream", "manage_topics"),
                      ("manage_topic",)),
    "read_topics": (("manage_streams", "read_streams", "manage_topics", "read_topics"),
                    ("manage_stream", "read_stream", "manage_topics", "read_topics"),
                    ("manage_topic", "read_topic")),
    "poll": (("manage_streams", "read_streams", "manage_topics", "read_topics", "poll_messages"),
             ("manage_stream", "read_stream", "manage_topics", "read_topics", "poll_messages"),
             ("manage_topic", "read_topic", "poll_messages")),
    "send": (("send_messages",), ("manage_stream", "manage_topics", "send_messages"),
             ("manage_topic", "send_messages")),
}


def permits(p: Permissions | None, action: Action, stream_id: int | None = None,
            topic_id: int | None = None) -> bool:
    """Whether permission set ``p`` allows ``action`` (on ``stream_id`` / ``topic_id`` when given).

    Which action guards which request: stats and clients need read_servers; reading users
    read_users; user changes manage_users; creating, changing and deleting streams manage_streams;
    creating, changing, purging and deleting topics and partitions manage_topics; describing topics
    and every consumer-group membership command read_topics (the broker asks poll, which it
    implies); fetching and consumer offsets poll; producing send."""
    if p is None:
        return False
    global_flags, stream_flags, topic_flags = _RULES[action]
    g = p.global_permissions
    if any(getattr(g, f) for f in global_flags):
        return True
    stream = None if stream_id is None else p.stream(stream_id)
    if stream is None:
        return False
    if any(getattr(stream, f) for f in stream_flags):
        return True
    topic = None if topic_id is None else stream.topic(topic_id)
    return topic is not None and any(getattr(topic, f) for f in topic_flags)


# -- principals -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking. ``user``: by ``user_id`` (a login; ``token_hash`` when it logged in with a
    personal access token, so deleting the token ends it) or by ``name`` (a certificate's CN)."""

    kind: Literal["anonymous", "user", "system"]
    user_id: int | None = None
    name: str | None = None
    token_hash: str | None = None

    @staticmethod
    def login(user_id: int, name: str, token_hash: str | None = None) -> Principal:
        return Principal("user", user_id, name, token_hash)

    @staticmethod
    def certificate(cn: str) -> Principal:
        return Principal("user", None, cn)

    def __str__(self) -> str:
        return self.kind if self.kind != "user" else f"user {self.name or self.user_id}"


ANONYMOUS = Principal("anonymous")
SYSTEM = Principal("system")


def connection_principal(peer_cn: str | None) -> Principal:
    """A new connection's principal: the user a verified client certificate names, else anonymous."""
    return ANONYMOUS if peer_cn is None else Principal.certificate(peer_cn)


@dataclass(slots=True)
class Caller:
    """One connection's principal: ``base`` from how it connected (anonymous or its certificate),
    ``principal`` what it is now (a login replaces it; a logout goes back to ``base``).

    ``memo`` keeps the authorizer's recent answers for this connection, each stamped with the
    authorizer's epoch, which moves on at any change of users, permissions or topic placement."""

    base: Principal
    principal: Principal = field(init=False)
    memo: dict[tuple[str, str], tuple[int, Principal, bool]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.principal = self.base

    def login(self, principal: Principal) -> None:
        if principal != self.principal:  # the same one stays the same object (``memo``'s key)
            self.principal = principal

    def logout(self) -> None:
        self.principal = self.base


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("bayou_caller", default=None)


def bind_caller(caller: Caller) -> contextvars.Token[Caller | None]:
    """Make ``caller`` the principal of everything the current task (and tasks it starts) does."""
    return _CALLER.set(caller)


def current_caller() -> Caller | None:
    return _CALLER.get()


def current_principal() -> Principal:
    caller = _CALLER.get()
    return SYSTEM if caller is None else caller.principal


# -- the authorizer -------------------------------------------------------------------------------

# bayou topic -> (stream id, topic id or None when the topic has none yet)
Resolver = Callable[[str], tuple[int, int | None]]
# a user principal -> its permissions now; None: no such user now (deleted, inactive, token gone)
UserLookup = Callable[[Principal], Permissions | None]


class Authorizer:
    """Answers "may this principal do ACTION on bayou topic T (or globally)" for the broker."""

    def __init__(self, anonymous: AnonymousAccess = "all") -> None:
        self.anonymous: AnonymousAccess = anonymous
        self._anonymous = ANONYMOUS_PERMISSIONS[anonymous]
        self._open = anonymous == "all"
        self._resolve: Resolver | None = None
        self._lookup: UserLookup | None = None
        # (id of a permission set, action, stream id, topic id) -> (that set, the answer): sets are
        # immutable and replaced whole when they change, so an answer holds while its set lives
        self._memo: dict[tuple[int, str, int | None, int | None], tuple[Permissions, bool]] = {}
        self.epoch = 0  # moves on at every change that can change an answer (``invalidate``)

    def invalidate(self) -> None:
        """Users, their permissions or the topics' placement changed: answers given so far and
        kept by connections (``Caller.memo``) no longer hold."""
        self.epoch += 1

    def configure(self, *, anonymous: AnonymousAccess | None = None, resolver: Resolver | None = None,
                  users: UserLookup | None = None) -> None:
        self.invalidate()
        if anonymous is not None:
            if anonymous not in ANONYMOUS_PERMISSIONS:
                raise ValueError(f"anonymous access is one of {', '.join(ANONYMOUS_ACCESS)}")
            self.anonymous = anonymous
            self._anonymous = ANONYMOUS_PERMISSIONS[anonymous]
            self._open = anonymous == "all"
        if resolver is not None:
            self._resolve = resolver
        if users is not None:
            self._lookup = users

    def permissions(self, principal: Principal) -> Permissions | None:
        """What ``principal`` may do now. A certificate naming no current user is anonymous."""
        if principal.kind == "system":
            return EVERYTHING
        if principal.kind == "anonymous":
            return self._anonymous
        found = None if self._lookup is None else self._lookup(principal)
        if found is None and principal.user_id is None:
            return self._anonymous
        return found

    def permits(self, principal: Principal, action: Action, stream_id: int | None = None,
                topic_id: int | None = None) -> bool:
        return permits(self.permissions(principal), action, stream_id, topic_id)

    def where(self, topic: str) -> tuple[int | None, int | None]:
        """The (stream id, topic id) of a bayou topic (None, None without a resolver: only global
        flags then grant anything about it)."""
        return (None, None) if self._resolve is None else self._resolve(topic)

    def permits_topic(self, principal: Principal, action: Action, topic: str) -> bool:
        if principal.kind == "system" or (self._open and principal.kind == "anonymous"):
            return True  # the hot path: no look-up at all
        p = self.permissions(principal)
        if p is None:
            return False
        stream_id, topic_id = self.where(topic)
        key = (id(p), action, stream_id, topic_id)
        memo = self._memo.get(key)
        if memo is not None and memo[0] is p:
            return memo[1]
        answer = permits(p, action) or permits(p, action, stream_id, topic_id)  # global, or below
        if len(self._memo) >= 10_000:
            self._memo.clear()
        self._memo[key] = (p, answer)
        return answer

    def check_topic(self, action: Action, topic: str) -> None:
        """Raise ``Unauthorized`` unless the current principal may do ``action`` on ``topic``.

        The per-request hot path: a connection's answer is kept in its ``Caller`` until the
        epoch moves (any change of users or topics). A login by personal access token is looked
        up every time, since its token can expire without any change being made."""
        caller = _CALLER.get()
        if caller is None:
            return  # bayou's own work
        principal = caller.principal
        kind = principal.kind
        if kind == "system" or (self._open and kind == "anonymous"):
            return
        key = (action, topic)
        hit = caller.memo.get(key)
        if hit is not None and hit[0] == self.epoch and hit[1] is principal:
            allowed = hit[2]
        else:
            allowed = self.permits_topic(principal, action, topic)
            if principal.token_hash is None:
                if len(caller.memo) >= 1024:
                    caller.memo.clear()
                caller.memo[key] = (self.epoch, principal, allowed)
        if not allowed:
            raise Unauthorized(f"{principal} may not {action.replace('_', ' ')} on topic {topic}")

    def check(self, action: Action) -> None:
        """Raise ``Unauthorized`` unless the current principal may do ``action`` globally."""
        principal = current_principal()
        if not self.permits(principal, action):
            raise Unauthorized(f"{principal} may not {action.replace('_', ' ')}")

    def describable(self, topics: Iterable[str]) -> list[str]:
        """The topics the current principal may describe (list, see the metadata of)."""
        principal = current_principal()
        return [t for t in topics if any(self.permits_topic(principal, a, t) for a in DESCRIBE)]
