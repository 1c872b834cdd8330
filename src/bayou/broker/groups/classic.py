"""Kafka's classic group protocol: a join barrier, a leader that assigns, metadata kept opaque.

bayou's own groups (coordinator.py) assign on the broker as soon as membership changes. A Kafka
consumer runs its assignor in the group's leader instead: every member rejoins (JoinGroup waits
until all have, or the rebalance timeout passes), the leader gets every member's protocol
metadata and sends back an assignment per member (SyncGroup), which the broker hands out without
reading it. This module is that protocol's membership; committed offsets are the broker's one
table (``GroupCoordinator.offsets``), so lag and resets show in every protocol's tools.

The states and transitions are one table (STYLE habit 3), as in state.py. Plain asyncio futures:
a JoinGroup or a follower's SyncGroup waits on its member's future, completed by the request
that closes the barrier, by the sweep that expires the members that did not rejoin, or failed
with the error the member must act on (rejoin).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from bayou.errors import (
    GroupNotFound,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidRequest,
    RebalanceInProgress,
    UnknownMember,
)

SWEEP_INTERVAL_S = 0.25


class ClassicState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class ClassicEvent(enum.Enum):
    MEMBERSHIP_CHANGED = "membership_changed"  # a join, a leave or an expiry: everyone rejoins
    JOIN_COMPLETED = "join_completed"  # every member rejoined (or the rest expired)
    ASSIGNED = "assigned"  # the leader's SyncGroup
    LAST_MEMBER_GONE = "last_member_gone"
    DELETED = "deleted"


S, E = ClassicState, ClassicEvent

TRANSITIONS: dict[tuple[ClassicState, ClassicEvent], ClassicState] = {
    (S.EMPTY, E.MEMBERSHIP_CHANGED): S.PREPARING_REBALANCE,
    (S.EMPTY, E.LAST_MEMBER_GONE): S.EMPTY,
    (S.EMPTY, E.DELETED): S.DEAD,
    (S.PREPARING_REBALANCE, E.MEMBERSHIP_CHANGED): S.PREPARING_REBALANCE,
    (S.PREPARING_REBALANCE, E.JOIN_COMPLETED): S.COMPLETING_REBALANCE,
    (S.PREPARING_REBALANCE, E.LAST_MEMBER_GONE): S.EMPTY,
    (S.COMPLETING_REBALANCE, E.MEMBERSHIP_CHANGED): S.PREPARING_REBALANCE,
    (S.COMPLETING_REBALANCE, E.ASSIGNED): S.STABLE,
    (S.COMPLETING_REBALANCE, E.LAST_MEMBER_GONE): S.EMPTY,
    (S.STABLE, E.MEMBERSHIP_CHANGED): S.PREPARING_REBALANCE,
    (S.STABLE, E.LAST_MEMBER_GONE): S.EMPTY,
}


def transition(state: ClassicState, event: ClassicEvent) -> ClassicState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidRequest(f"{event.value} is not allowed in group state {state.value}") from None


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol_type: str
    protocol_name: str
    leader: str
    member_id: str
    members: tuple[tuple[str, str | None, bytes], ...]  # (id, instance id, metadata): the leader's


@dataclass(slots=True)
class ClassicMember:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    last_seen: float
    group_instance_id: str | None = None
    assignment: bytes = b""
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[bytes] | None = None
    by_name: dict[str, bytes] = field(default_factory=dict)  # protocols by name (the first of a name)

    def __post_init__(self) -> None:
        self.set_protocols(self.protocols)

    def set_protocols(self, protocols: tuple[tuple[str, bytes], ...]) -> None:
        """The member's protocols in its order, and by name: a JoinGroup may list a hundred
        thousand (its frame may be 100 MiB), and every check against them is a lookup."""
        self.protocols = protocols
        self.by_name = dict(reversed(protocols))  # reversed: a name listed twice keeps its first

    def metadata(self, protocol: str) -> bytes:
        return self.by_name.get(protocol, b"")


@dataclass(slots=True)
class ClassicGroup:
    name: str
    state: ClassicState = ClassicState.EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol_name: str = ""
    leader: str = ""
    members: dict[str, ClassicMember] = field(default_factory=dict)  # join order
    join_deadline: float = 0.0

    def fire(self, event: ClassicEvent) -> None:
        self.state = transition(self.state, event)


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ClassicDescription:
    name: str
    state: str
    protocol_type: str
    protocol_name: str
    generation: int
    members: tuple[MemberDescription, ...]


def _common(members: Iterable[ClassicMember]) -> AbstractSet[str]:
    """The protocol names every one of ``members`` lists (a set operation: linear in the lists,
    where a scan per name was quadratic, 0.55 s for two members of 4,000 names)."""
    names = sorted((m.by_name for m in members), key=len)
    if len(names) == 1:
        return names[0].keys()
    return set(names[0]).intersection(*names[1:])


def _fail(fut: asyncio.Future[object] | asyncio.Future[bytes] | asyncio.Future[JoinResult] | None,
          exc: Exception) -> None:
    if fut is not None and not fut.done():
        fut.set_exception(exc)


class ClassicGroups:
    """Every classic group of the broker. ``clock`` is monotonic seconds (tests pass their own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.groups: dict[str, ClassicGroup] = {}
        self._sweeper: asyncio.Task[None] | None = None

    # -- requests ------------------------------------------------------------------------------

    async def join(self, group: str, member_id: str, *, client_id: str, client_host: str,
                   session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: Sequence[tuple[str, bytes]],
                   group_instance_id: str | None = None) -> JoinResult:
        """Join (or rejoin) and wait for the barrier: every member rejoined, or the rest expired."""
        if not group:
            raise InvalidRequest("empty group id")
        if not protocols:
            raise InconsistentGroupProtocol("a member must name at least one protocol")
        g = self.groups.get(group)
        if g is None or g.state is ClassicState.DEAD:
            g = self.groups[group] = ClassicGroup(group)
        self._expire(g)
        if g.members and protocol_type != g.protocol_type:
            raise InconsistentGroupProtocol(f"group {group} runs protocol type {g.protocol_type!r}")
        if g.members and _common(g.members.values()).isdisjoint(name for name, _meta in protocols):
            raise InconsistentGroupProtocol(f"no protocol of the member is one every member of {group} has")
        now = self.clock()
        if member_id:
            member = g.members.get(member_id)
            if member is None:
                raise UnknownMember(f"{member_id} is not a member of group {group}")
        else:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            member = None
        if member is None:
            member = ClassicMember(member_id, client_id, client_host, session_timeout_ms,
                                   rebalance_timeout_ms, tuple(protocols), now, group_instance_id)
            g.members[member_id] = member
        else:
            member.set_protocols(tuple(protocols))
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.last_seen = now
        g.protocol_type = protocol_type
        _fail(member.join, RebalanceInProgress("a newer JoinGroup of this member replaced it"))
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join = fut
        if g.state is not ClassicState.PREPARING_REBALANCE:
            self._start_rebalance(g)
        self._complete_join(g, forced=False)
        self._ensure_sweeper()
        return await fut

    async def sync(self, group: str, member_id: str, generation: int,
                   assignments: dict[str, bytes]) -> tuple[str, str, bytes]:
        """(protocol type, protocol name, this member's assignment); the leader's call carries
        everyone's and completes the rebalance, a follower's waits for it."""
        g, member = self._member(group, member_id)
        if generation != g.generation:
            raise IllegalGeneration(f"generation {generation} of group {group} is not {g.generation}")
        if g.state is ClassicState.PREPARING_REBALANCE:
            raise RebalanceInProgress()
        member.last_seen = self.clock()
        if g.state is ClassicState.COMPLETING_REBALANCE:
            if member_id == g.leader:
                for m in g.members.values():
                    m.assignment = assignments.get(m.member_id, b"")
                g.fire(ClassicEvent.ASSIGNED)
                for m in g.members.values():
                    if m.sync is not None and not m.sync.done():
                        m.sync.set_result(m.assignment)
                    m.sync = None
            else:
                _fail(member.sync, RebalanceInProgress("a newer SyncGroup of this member replaced it"))
                fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
                member.sync = fut
                await fut
        return g.protocol_type, g.protocol_name, member.assignment

    def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        g, member = self._member(group, member_id)
        member.last_seen = self.clock()
        if g.state is ClassicState.PREPARING_REBALANCE:
            raise RebalanceInProgress()
        if generation != g.generation:
            raise IllegalGeneration(f"generation {generation} of group {group} is not {g.generation}")

    def leave(self, group: str, member_ids: Sequence[str]) -> list[BaseException | None]:
        """Remove members; per member None or the error (an unknown one)."""
        g = self.groups.get(group)
        out: list[BaseException | None] = []
        gone: dict[str, None] = {}  # in order; an id listed twice is unknown the second time
        for mid in member_ids:
            if g is None or mid not in g.members or mid in gone:
                out.append(UnknownMember(f"{mid} is not a member of group {group}"))
            else:
                gone[mid] = None
                out.append(None)
        if g is not None and gone:
            self._remove(g, list(gone))
        return out

    def check_commit(self, group: str, member_id: str, generation: int) -> None:
        """A commit's member and generation are current. A commit without a generation (-1, a
        consumer that assigns itself partitions) is accepted while no member is in the group."""
        g = self.groups.get(group)
        if generation < 0 and not member_id:
            if g is not None and g.members:
                raise UnknownMember(f"group {group} has members: commit as one of them")
            return
        if g is None or member_id not in g.members:
            raise UnknownMember(f"{member_id} is not a member of group {group}")
        if g.state is ClassicState.PREPARING_REBALANCE:
            raise RebalanceInProgress()
        if generation != g.generation:
            raise IllegalGeneration(f"generation {generation} of group {group} is not {g.generation}")
        g.members[member_id].last_seen = self.clock()

    def describe(self, group: str) -> ClassicDescription:
        g = self.groups.get(group)
        if g is None:
            raise GroupNotFound(f"group {group} not found")
        self._expire(g)
        return ClassicDescription(
            g.name, g.state.value, g.protocol_type,
            g.protocol_name if g.state is ClassicState.STABLE else "", g.generation,
            tuple(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.metadata(g.protocol_name), m.assignment)
                  for m in g.members.values()))

    def delete(self, group: str) -> None:
        """Forget an empty group (GROUP_NOT_EMPTY is the caller's to answer: ``has_members``)."""
        g = self.groups.pop(group, None)
        if g is not None:
            g.fire(ClassicEvent.DELETED)

    def has_members(self, group: str) -> bool:
        g = self.groups.get(group)
        if g is None:
            return False
        self._expire(g)
        return bool(g.members)

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for g in self.groups.values():
            for m in g.members.values():
                _fail(m.join, RebalanceInProgress("the broker is stopping"))
                _fail(m.sync, RebalanceInProgress("the broker is stopping"))

    # -- the rebalance -------------------------------------------------------------------------

    def _member(self, group: str, member_id: str) -> tuple[ClassicGroup, ClassicMember]:
        g = self.groups.get(group)
        if g is not None:
            self._expire(g)
        member = g.members.get(member_id) if g is not None else None
        if g is None or member is None:
            raise UnknownMember(f"{member_id} is not a member of group {group}")
        return g, member

    def _start_rebalance(self, g: ClassicGroup) -> None:
        g.fire(ClassicEvent.MEMBERSHIP_CHANGED)
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.join_deadline = self.clock() + timeout / 1000
        for m in g.members.values():  # followers waiting for the old assignment rejoin
            _fail(m.sync, RebalanceInProgress())
            m.sync = None

    def _complete_join(self, g: ClassicGroup, *, forced: bool) -> None:
        """Close the barrier when every member has rejoined (or, ``forced``, drop those that did
        not): a new generation, the protocol every member has, the leader."""
        if g.state is not ClassicState.PREPARING_REBALANCE:
            return
        waiting = [m for m in g.members.values() if m.join is not None and not m.join.done()]
        if len(waiting) < len(g.members) and not forced:
            return
        for m in [m for m in g.members.values() if m not in waiting]:
            del g.members[m.member_id]
        g.generation += 1
        if not g.members:
            g.fire(ClassicEvent.LAST_MEMBER_GONE)
            g.leader = g.protocol_name = ""
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        leader = g.members[g.leader]
        common = _common(g.members.values())
        chosen = next((name for name, _meta in leader.protocols if name in common), None)
        g.fire(ClassicEvent.JOIN_COMPLETED)
        if chosen is None:  # checked at each join; members changed their lists meanwhile
            for m in g.members.values():
                _fail(m.join, InconsistentGroupProtocol())
            return
        g.protocol_name = chosen
        everyone = tuple((m.member_id, m.group_instance_id, m.metadata(chosen)) for m in g.members.values())
        for m in g.members.values():
            m.assignment = b""
            fut, m.join = m.join, None
            if fut is not None and not fut.done():
                fut.set_result(JoinResult(g.generation, g.protocol_type, chosen, g.leader, m.member_id,
                                          everyone if m.member_id == g.leader else ()))

    def _remove(self, g: ClassicGroup, gone: Sequence[str]) -> None:
        for mid in gone:
            m = g.members.pop(mid)
            _fail(m.join, UnknownMember(f"{mid} left group {g.name}"))
            _fail(m.sync, UnknownMember(f"{mid} left group {g.name}"))
        if not g.members:
            if g.state is not ClassicState.EMPTY:
                g.generation += 1
            g.fire(ClassicEvent.LAST_MEMBER_GONE)
            g.leader = g.protocol_name = ""
        elif g.state is ClassicState.PREPARING_REBALANCE:
            self._complete_join(g, forced=False)
        else:
            self._start_rebalance(g)

    def _expire(self, g: ClassicGroup) -> None:
        """Drop members silent past their session timeout (one waiting in a JoinGroup is alive),
        and close a barrier whose rebalance timeout passed."""
        now = self.clock()
        dead = [m.member_id for m in g.members.values()
                if (m.join is None or m.join.done()) and now - m.last_seen > m.session_timeout_ms / 1000]
        if dead:
            self._remove(g, dead)
        if g.state is ClassicState.PREPARING_REBALANCE and now >= g.join_deadline:
            self._complete_join(g, forced=True)

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="classic-groups")

    async def _sweep(self) -> None:
        """Expire members and close timed-out barriers while any group has members."""
        while any(g.members for g in self.groups.values()):
            await asyncio.sleep(SWEEP_INTERVAL_S)
            for g in list(self.groups.values()):
                with contextlib.suppress(InvalidRequest):
                    self._expire(g)
