"""Group membership, generations, session expiry and assignment; committed offsets.

Semantics (those of the V1 protocol's original broker, which the other protocols' eager groups
share): a new group starts at generation 1; each new member, leave, expiry sweep that removes
someone, assignor change or topic change adds 1; a re-join by an existing member only refreshes its
liveness. Expiry is checked lazily at the start of every group operation. Assignment is computed
on the broker with the group's assignor over the topic's partitions.

This module is plain in-memory logic; the broker persists ``snapshot()`` after each change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from bayou.broker.groups.assignors import ASSIGNORS
from bayou.broker.groups.state import GroupEvent, GroupState, transition
from bayou.errors import (
    GroupNotFound,
    GroupTopicMismatch,
    IllegalGeneration,
    InvalidRequest,
    OffsetRegression,
    PartitionNotAssigned,
    UnknownMember,
)

DEFAULT_ASSIGNOR = "round_robin"


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """How a group behaves, fixed by the protocol that created it.

    V1 (the default): created at generation 1, a JOIN naming another topic moves the group there,
    expiry is checked lazily, commits may move backwards. Cursus: created at generation 0, bound to
    its topic for good, expiry also swept in the background, commits are monotonic.
    """

    name: str = "rtes"
    initial_generation: int = 1
    rebind_topic: bool = True
    active_expiry: bool = False
    monotonic_commits: bool = False
    session_expiry: bool = True


RTES_POLICY = GroupPolicy()
CURSUS_POLICY = GroupPolicy("cursus", 0, False, True, True)
# Iggy: members are connections (the front end removes them on disconnect), so no session expiry;
# a group lives inside its topic; offsets may be stored backwards (STORE_CONSUMER_OFFSET rewinds).
IGGY_POLICY = GroupPolicy("iggy", 0, False, False, False, session_expiry=False)
POLICIES = {p.name: p for p in (RTES_POLICY, CURSUS_POLICY, IGGY_POLICY)}


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class Member:
    member_id: str
    last_seen_ms: int
    generation_confirmed: int = 0


@dataclass(slots=True)
class Group:
    name: str
    topic: str
    generation: int = 1
    assignor: str = DEFAULT_ASSIGNOR
    members: dict[str, Member] = field(default_factory=dict)  # join order
    assignments: dict[str, list[int]] = field(default_factory=dict)
    state: GroupState = GroupState.EMPTY
    policy: GroupPolicy = RTES_POLICY
    partitions: int | None = None  # fixed at registration for policies that bind the topic
    last_rebalance_ms: int = 0

    def fire(self, event: GroupEvent) -> None:
        self.state = transition(self.state, event)


@dataclass(frozen=True, slots=True)
class GroupView:
    generation: int
    assignment: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    name: str
    topic: str
    generation: int
    assignor: str
    state: str
    members: tuple[tuple[str, int, tuple[int, ...]], ...]  # (id, last_seen_ms, partitions)
    partition_count: int = 0
    last_rebalance_ms: int = 0
    policy: str = "rtes"


OffsetKey = tuple[str, str, int]  # (group, topic, partition)


class OffsetTable(dict[OffsetKey, int]):
    """Committed offsets by (group, topic, partition), with each group's keys indexed: a group's
    offsets, its topics and the groups that hold offsets are lookups, where a scan of every
    offset per group made a request naming many groups (Kafka OffsetFetch of all topics,
    DescribeGroups, DeleteGroups) cost groups x offsets. Every way a dict changes keeps it."""

    def __init__(self, items: Iterable[tuple[OffsetKey, int]] = ()) -> None:
        super().__init__()
        self._by_group: dict[str, set[tuple[str, int]]] = {}
        self.update(items)

    def __setitem__(self, key: OffsetKey, value: int) -> None:
        if key not in self:
            self._by_group.setdefault(key[0], set()).add((key[1], key[2]))
        super().__setitem__(key, value)

    def __delitem__(self, key: OffsetKey) -> None:
        super().__delitem__(key)
        self._unindex(key)

    def _unindex(self, key: OffsetKey) -> None:
        keys = self._by_group.get(key[0])
        if keys is not None:
            keys.discard((key[1], key[2]))
            if not keys:
                del self._by_group[key[0]]

    def pop(self, key: OffsetKey, *default: Any) -> Any:
        if key in self:
            self._unindex(key)
        return super().pop(key, *default)

    def popitem(self) -> tuple[OffsetKey, int]:
        key, value = super().popitem()
        self._unindex(key)
        return key, value

    def setdefault(self, key: OffsetKey, default: int) -> int:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        super().clear()
        self._by_group.clear()

    def __ior__(self, other: Any) -> OffsetTable:  # type: ignore[override,misc]
        self.update(other)
        return self

    def of_group(self, group: str) -> dict[tuple[str, int], int]:
        """``group``'s offsets by (topic, partition)."""
        return {(t, p): self[(group, t, p)] for t, p in self._by_group.get(group, ())}

    def keys_of(self, group: str) -> list[OffsetKey]:
        return [(group, t, p) for t, p in self._by_group.get(group, ())]

    def topics_of(self, group: str) -> set[str]:
        return {t for t, _p in self._by_group.get(group, ())}

    def groups(self) -> set[str]:
        """The groups holding at least one offset."""
        return set(self._by_group)


class GroupCoordinator:
    def __init__(self, session_timeout_ms: int, partition_count: Callable[[str], int],
                 clock: Callable[[], int] = wall_ms) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.partition_count = partition_count
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetTable()

    # -- helpers -------------------------------------------------------------------------------

    def _rebalance(self, g: Group) -> None:
        n = g.partitions if g.partitions is not None else self.partition_count(g.topic)
        g.assignments = ASSIGNORS[g.assignor](list(g.members), n)
        g.last_rebalance_ms = self.clock()
        g.fire(GroupEvent.MEMBERSHIP_CHANGED if g.members else GroupEvent.LAST_MEMBER_GONE)

    def _sweep(self, g: Group) -> bool:
        if not g.policy.session_expiry:
            return False
        now = self.clock()
        return self._remove(g, [m for m, mem in g.members.items()
                                if now - mem.last_seen_ms > self.session_timeout_ms])

    def _remove(self, g: Group, dead: list[str]) -> bool:
        """Remove ``dead`` members: a new generation, rebalanced; False (nothing done) if none."""
        if not dead:
            return False
        for m in dead:
            del g.members[m]
        g.generation += 1
        self._rebalance(g)
        return True

    def _group(self, group: str, topic: str) -> Group:
        g = self.groups.get(group)
        if g is None:
            raise GroupNotFound()
        if g.topic != topic:
            if g.policy.rebind_topic:
                raise GroupNotFound()
            raise GroupTopicMismatch(g.topic, topic)
        return g

    def _checked(self, group: str, topic: str, member: str, generation: int | None
                 ) -> tuple[Group, Member]:
        g = self._group(group, topic)
        self._sweep(g)
        if generation is not None and generation != g.generation:
            raise IllegalGeneration(f"stale generation: current {g.generation}, got {generation}")
        mem = g.members.get(member)
        if mem is None:
            raise UnknownMember()
        return g, mem

    def _confirm(self, g: Group, mem: Member) -> None:
        mem.last_seen_ms = self.clock()
        mem.generation_confirmed = g.generation
        if g.state is not GroupState.EMPTY and all(
            m.generation_confirmed == g.generation for m in g.members.values()
        ):
            g.fire(GroupEvent.ALL_CONFIRMED)

    def _view(self, g: Group, member: str) -> GroupView:
        return GroupView(g.generation, tuple(g.assignments.get(member, ())))

    # -- operations ----------------------------------------------------------------------------

    def register(self, group: str, topic: str, policy: GroupPolicy, assignor: str | None = None,
                 partitions: int | None = None) -> Group:
        """The group, created for ``topic`` under ``policy`` if it does not exist yet."""
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = Group(
                group, topic, policy.initial_generation, assignor or DEFAULT_ASSIGNOR,
                policy=policy, partitions=partitions)
        return g

    def join(self, group: str, topic: str, member: str, assignor: str | None = None,
             policy: GroupPolicy = RTES_POLICY) -> GroupView:
        if assignor is not None and assignor not in ASSIGNORS:
            raise InvalidRequest(f"unknown assignor {assignor!r}")
        g = self.register(group, topic, policy, assignor,
                          None if policy.rebind_topic else self.partition_count(topic))
        if g.topic != topic and not g.policy.rebind_topic:
            raise GroupTopicMismatch(g.topic, topic)
        if g.topic != topic:
            g.topic = topic
            g.members.clear()
            g.generation += 1
            self._rebalance(g)
        if assignor is not None and assignor != g.assignor:
            g.assignor = assignor
            g.generation += 1
            self._rebalance(g)
        self._sweep(g)
        mem = g.members.get(member)
        if mem is None:
            g.members[member] = Member(member, self.clock())
            g.generation += 1
            self._rebalance(g)
        else:
            mem.last_seen_ms = self.clock()
        return self._view(g, member)

    def resume(self, group: str, topic: str, member: str, generation: int) -> GroupView:
        """Rejoin as an existing member at its generation, without a rebalance."""
        g, mem = self._checked(group, topic, member, generation)
        self._confirm(g, mem)
        return self._view(g, member)

    def sync(self, group: str, topic: str, member: str, generation: int) -> GroupView:
        g, mem = self._checked(group, topic, member, generation)
        self._confirm(g, mem)
        return self._view(g, member)

    def heartbeat(self, group: str, topic: str, member: str, generation: int) -> None:
        g, mem = self._checked(group, topic, member, generation)
        self._confirm(g, mem)

    def leave(self, group: str, topic: str, member: str, generation: int | None) -> None:
        """Remove a member; ``generation`` None leaves unconditionally (clients that never send it)."""
        g, _mem = self._checked(group, topic, member, generation)
        del g.members[member]
        g.generation += 1
        self._rebalance(g)

    def check_commit(self, group: str, topic: str, member: str, generation: int,
                     partitions: Iterable[int]) -> None:
        """Validate a member's commit of ``partitions``: group, expiry, generation, membership,
        ownership of each (checked once, then against a set: per partition, a commit of n
        partitions cost n times the group's checks and a scan of the member's list)."""
        g, _mem = self._checked(group, topic, member, generation)
        owned = set(g.assignments.get(member, ()))
        if not owned.issuperset(partitions):
            raise PartitionNotAssigned()

    def store_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        g = self.groups.get(group)
        if g is not None and g.policy.monotonic_commits:
            current = self.offsets.get((group, topic, partition))
            if current is not None and offset < current:
                raise OffsetRegression(
                    f"offset regression group={group} topic={topic} partition={partition} "
                    f"current={current} got={offset}")
        self.offsets[(group, topic, partition)] = offset

    def check_offsets(self, group: str, topic: str, entries: dict[int, int]) -> None:
        """Raise OffsetRegression if any entry would move a monotonic group's offset back."""
        g = self.groups.get(group)
        if g is None or not g.policy.monotonic_commits:
            return
        for partition, offset in entries.items():
            current = self.offsets.get((group, topic, partition))
            if current is not None and offset < current:
                raise OffsetRegression(
                    f"offset regression group={group} topic={topic} partition={partition} "
                    f"current={current} got={offset}")

    def reset_members(self, group: str) -> bool:
        """Remove every member (connection-bound members after a restart); True if any left."""
        g = self.groups.get(group)
        if g is None or not g.members:
            return False
        g.members.clear()
        g.generation += 1
        self._rebalance(g)
        return True

    def drop_members(self, group: str, gone: Callable[[str], bool]) -> bool:
        """Remove the members for which ``gone`` holds (connection-bound members of a broker that
        restarted or died); True if any went (a new generation, rebalanced)."""
        g = self.groups.get(group)
        return g is not None and self._remove(g, [m for m in g.members if gone(m)])

    def delete_group(self, group: str) -> bool:
        """Forget a group and its committed offsets; True if it existed."""
        existed = self.groups.pop(group, None) is not None
        for key in self.offsets.keys_of(group):
            del self.offsets[key]
            existed = True
        return existed

    def delete_offset(self, group: str, topic: str, partition: int) -> bool:
        return self.offsets.pop((group, topic, partition), None) is not None

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        return self.offsets.get((group, topic, partition))

    def sweep_all(self, active_only: bool = False) -> list[str]:
        return [name for name, g in self.groups.items()
                if (g.policy.active_expiry or not active_only) and self._sweep(g)]

    def describe(self, group: str) -> GroupDescription:
        g = self.groups.get(group)
        if g is None:
            raise GroupNotFound()
        self._sweep(g)
        return GroupDescription(
            g.name, g.topic, g.generation, g.assignor, g.state.value,
            tuple((m.member_id, m.last_seen_ms, tuple(g.assignments.get(m.member_id, ())))
                  for m in g.members.values()),
            g.partitions if g.partitions is not None else self.partition_count(g.topic),
            g.last_rebalance_ms, g.policy.name,
        )

    def list_groups(self) -> list[str]:
        return sorted(self.groups)

    def forget_topic(self, topic: str) -> None:
        """Drop committed offsets of a deleted topic."""
        for key in [k for k in self.offsets if k[1] == topic]:
            del self.offsets[key]

    def forget_partitions(self, topic: str, first_removed: int) -> list[str]:
        """Partitions ``first_removed`` and beyond of ``topic`` are gone: drop their committed
        offsets and rebalance the groups that had one of them assigned (a new generation, so
        members rejoin). Returns the groups whose state changed."""
        for key in [k for k in self.offsets if k[1] == topic and k[2] >= first_removed]:
            del self.offsets[key]
        changed = []
        for g in self.groups.values():
            if g.topic != topic:
                continue
            shrunk = g.partitions is not None and g.partitions > first_removed
            if shrunk:
                g.partitions = first_removed
            stale = any(p >= first_removed for parts in g.assignments.values() for p in parts)
            if stale:
                g.generation += 1
                self._rebalance(g)
            if shrunk or stale:
                changed.append(g.name)
        return changed

    # -- persistence (the V1 broker's groups.json / offsets.json shapes) -----------------------

    def group_json(self, name: str) -> bytes:
        """One group's state in groups.json's shape (a one-entry object); empty if there is none."""
        return self.groups_json((name,)) if name in self.groups else b""

    def replace_group(self, name: str, data: bytes) -> None:
        """Take one group's state from ``group_json`` bytes (empty: the group does not exist)."""
        self.groups.pop(name, None)
        if data:
            self.load_groups(data)

    def groups_json(self, names: Iterable[str] | None = None) -> bytes:
        out: dict[str, Any] = {}
        for name in sorted(self.groups if names is None else names):
            g = self.groups[name]
            order = list(g.members)
            out[name] = {
                "topic": g.topic,
                "generation": g.generation,
                "assignor": g.assignor,
                "member_order": order or None,
                "assignments": {m: g.assignments.get(m, []) for m in order},
                "members": [{"consumer_id": m.member_id, "last_heartbeat_unix_ms": m.last_seen_ms}
                            for m in g.members.values()],
            }
            if g.policy is not RTES_POLICY:  # bayou additions, after the original's fields
                out[name]["policy"] = g.policy.name
                out[name]["partitions"] = g.partitions
        return _go_json(out)

    def offsets_json(self) -> bytes:
        return render_offsets(self.offsets)

    def offsets_snapshot(self) -> bytes | dict[tuple[str, str, int], int]:
        """offsets.json's snapshot, taken on the event loop: the file's bytes when the table is
        small (a millisecond or two), else a copy for ``render_offsets`` in the writer's thread."""
        if len(self.offsets) <= _RENDER_CHUNK:
            return render_offsets(self.offsets)
        return dict(self.offsets)

    def load_groups(self, data: bytes) -> None:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("groups.json must hold an object")
        groups: dict[str, Group] = {}
        for name, gd in raw.items():
            gd = {} if gd is None else gd  # Go decodes null as the zero value
            if not isinstance(gd, dict):
                raise ValueError(f"group {name!r} must be an object")
            assignor = gd.get("assignor") or DEFAULT_ASSIGNOR
            if assignor not in ASSIGNORS:
                assignor = DEFAULT_ASSIGNOR
            g = Group(str(name), str(gd.get("topic") or ""), max(1, int(gd.get("generation") or 1)),
                      assignor)
            for m in gd.get("members") or []:
                mid = str(m["consumer_id"])
                g.members[mid] = Member(mid, int(m.get("last_heartbeat_unix_ms") or 0))
            for mid, parts in (gd.get("assignments") or {}).items():
                if mid in g.members:
                    g.assignments[mid] = [int(p) for p in parts or []]
            g.state = GroupState.COMPLETING_REBALANCE if g.members else GroupState.EMPTY
            policy = POLICIES.get(str(gd.get("policy") or "rtes"), RTES_POLICY)
            if policy is not RTES_POLICY:
                g.policy = policy
                g.generation = max(0, int(gd.get("generation") or 0))
                parts = gd.get("partitions")
                g.partitions = int(parts) if parts is not None else None
            groups[g.name] = g
        self.groups.update(groups)

    def load_offsets(self, data: bytes) -> None:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("offsets.json must hold an object")
        offsets: dict[tuple[str, str, int], int] = {}
        for group, topics in raw.items():
            for topic, parts in dict(topics or {}).items():
                for p, off in dict(parts or {}).items():
                    offsets[(str(group), str(topic), int(p))] = int(off)
        self.offsets.update(offsets)


def render_offsets(offsets: dict[tuple[str, str, int], int]) -> bytes:
    """offsets.json: group -> topic -> partition -> offset, sorted, as ``_go_json`` writes it.
    It runs in the state file's writer thread, so it is built a group at a time: one C call over
    the whole table (a sort, one json.dumps of every group) would hold the interpreter lock, and
    the event loop, for its whole length (240 ms for 140,000 offsets). A small table is written
    in one call (twice as fast)."""
    if len(offsets) <= _RENDER_CHUNK:
        whole: dict[str, dict[str, dict[str, int]]] = {}
        for (group, topic, partition), off in sorted(offsets.items()):
            whole.setdefault(group, {}).setdefault(topic, {})[str(partition)] = off
        return _go_json(whole)
    by_group: dict[str, dict[str, dict[int, int]]] = {}
    for (group, topic, partition), off in offsets.items():
        by_group.setdefault(group, {}).setdefault(topic, {})[partition] = off
    pieces: list[str] = []
    chunk: dict[str, dict[str, dict[str, int]]] = {}
    size = 0
    for group in sorted(by_group):
        topics = by_group[group]
        chunk[group] = {t: {str(p): topics[t][p] for p in sorted(topics[t])} for t in sorted(topics)}
        size += sum(len(parts) for parts in topics.values())
        if size >= _RENDER_CHUNK:  # about this many offsets per json.dumps call
            pieces.append(_go_text(chunk)[1:-1])
            chunk, size = {}, 0
    if chunk:
        pieces.append(_go_text(chunk)[1:-1])
    return ("{" + ",".join(pieces) + "}\n").encode("utf-8", "backslashreplace")


_RENDER_CHUNK = 2048


def render_snapshot(snapshot: bytes | dict[tuple[str, str, int], int]) -> bytes:
    """offsets.json's bytes from ``GroupCoordinator.offsets_snapshot`` (in the writer's thread)."""
    return snapshot if isinstance(snapshot, bytes) else render_offsets(snapshot)


def _go_json(obj: Any) -> bytes:
    """Compact JSON as Go's encoder writes it (``<``, ``>``, ``&`` escaped), plus a newline."""
    # Names decoded from the wire with surrogateescape may hold lone surrogates (bytes that are not
    # UTF-8): write them as JSON \\udcXX escapes, which json.loads turns back into the same name.
    return (_go_text(obj) + "\n").encode("utf-8", "backslashreplace")


def _go_text(obj: Any) -> str:
    """``_go_json``'s text, before its newline and encoding."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
