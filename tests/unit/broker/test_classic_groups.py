"""Kafka's classic group protocol (broker/groups/classic.py): the join barrier, the leader's
assignment handed out by SyncGroup, rebalances seen through heartbeats, expiry and leaving, and
the state table itself. A fake clock drives session and rebalance timeouts."""

from __future__ import annotations

import asyncio

import pytest

from bayou.broker.groups.classic import (
    TRANSITIONS,
    ClassicEvent,
    ClassicGroups,
    ClassicState,
    transition,
)
from bayou.errors import (
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidRequest,
    RebalanceInProgress,
    UnknownMember,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def join(groups: ClassicGroups, member: str = "", *, protocols: tuple[tuple[str, bytes], ...] = (
        ("range", b"meta"),), session_ms: int = 10_000, rebalance_ms: int = 30_000, client: str = "c",
         ptype: str = "consumer") -> asyncio.Task:  # type: ignore[type-arg]
    return asyncio.ensure_future(groups.join(
        "g", member, client_id=client, client_host="/127.0.0.1", session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms, protocol_type=ptype, protocols=protocols))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_every_transition_is_in_one_table() -> None:
    assert transition(ClassicState.STABLE, ClassicEvent.MEMBERSHIP_CHANGED) is \
        ClassicState.PREPARING_REBALANCE
    with pytest.raises(InvalidRequest):
        transition(ClassicState.EMPTY, ClassicEvent.ASSIGNED)
    assert {s for s, _e in TRANSITIONS} == set(ClassicState) - {ClassicState.DEAD}


async def test_a_lone_member_leads_and_assigns_itself() -> None:
    groups = ClassicGroups(Clock())
    first = await join(groups, client="solo")
    assert first.generation == 1 and first.leader == first.member_id
    assert first.member_id.startswith("solo-")
    assert first.members == ((first.member_id, None, b"meta"),)
    assert await groups.sync("g", first.member_id, 1, {first.member_id: b"all"}) == \
        ("consumer", "range", b"all")
    assert groups.describe("g").state == "Stable"


async def test_a_second_member_makes_everyone_rejoin() -> None:
    groups = ClassicGroups(Clock())
    a = await join(groups)
    await groups.sync("g", a.member_id, 1, {a.member_id: b"a-all"})
    b_join = join(groups)
    await settle()
    assert not b_join.done()  # the barrier waits for the leader to rejoin
    with pytest.raises(RebalanceInProgress):
        groups.heartbeat("g", a.member_id, 1)
    a_again = await join(groups, a.member_id)
    b = await b_join
    assert a_again.generation == b.generation == 2
    assert a_again.leader == a.member_id  # the leader stays the leader
    assert len(a_again.members) == 2 and b.members == ()  # only the leader sees the metadata
    follower = asyncio.ensure_future(groups.sync("g", b.member_id, 2, {}))
    await settle()
    assert not follower.done()  # waits for the leader's assignment
    assert (await groups.sync("g", a.member_id, 2, {a.member_id: b"a0", b.member_id: b"b1"}))[2] == b"a0"
    assert (await follower)[2] == b"b1"
    groups.heartbeat("g", b.member_id, 2)
    with pytest.raises(IllegalGeneration):
        groups.heartbeat("g", b.member_id, 1)


async def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() -> None:
    clock = Clock()
    groups = ClassicGroups(clock)
    a = await join(groups, rebalance_ms=5_000)
    await groups.sync("g", a.member_id, 1, {})
    b_join = join(groups, rebalance_ms=5_000)
    await settle()
    clock.now += 6
    groups.describe("g")  # any look at the group closes a barrier whose time is up
    b = await b_join
    assert b.generation == 2 and b.leader == b.member_id
    with pytest.raises(UnknownMember):
        groups.heartbeat("g", a.member_id, 1)


async def test_silent_members_expire_and_leaving_rebalances() -> None:
    clock = Clock()
    groups = ClassicGroups(clock)
    a = await join(groups, session_ms=1_000)
    await groups.sync("g", a.member_id, 1, {})
    clock.now += 2
    assert not groups.has_members("g")
    assert groups.describe("g").state == "Empty"
    c = await join(groups)
    assert groups.leave("g", [c.member_id, "nobody"])[0] is None
    assert isinstance(groups.leave("g", ["nobody"])[0], UnknownMember)
    assert groups.describe("g").state == "Empty"
    d = await join(groups)  # listed twice in one LeaveGroup: it leaves once (this raised KeyError)
    first, again = groups.leave("g", [d.member_id, d.member_id])
    assert first is None and isinstance(again, UnknownMember)
    assert not groups.has_members("g")


async def test_commits_check_member_generation_and_state() -> None:
    groups = ClassicGroups(Clock())
    groups.check_commit("g", "", -1)  # no group yet: a simple (assign) consumer's commit
    a = await join(groups)
    with pytest.raises(UnknownMember):
        groups.check_commit("g", "", -1)  # the group has members: commit as one of them
    await groups.sync("g", a.member_id, 1, {})
    groups.check_commit("g", a.member_id, 1)
    with pytest.raises(IllegalGeneration):
        groups.check_commit("g", a.member_id, 0)
    pending = join(groups)
    await settle()
    with pytest.raises(RebalanceInProgress):
        groups.check_commit("g", a.member_id, 1)
    pending.cancel()
    groups.close()


async def test_members_must_share_a_protocol() -> None:
    groups = ClassicGroups(Clock())
    a = await join(groups, protocols=(("range", b""), ("roundrobin", b"")))
    await groups.sync("g", a.member_id, 1, {})
    with pytest.raises(InconsistentGroupProtocol):
        await join(groups, protocols=(("sticky", b""),))
    with pytest.raises(InconsistentGroupProtocol):
        await join(groups, ptype="connect")
    b_join = join(groups, protocols=(("roundrobin", b"rr"),))
    await settle()
    a_again = await join(groups, a.member_id, protocols=(("range", b""), ("roundrobin", b"x")))
    assert a_again.protocol_name == (await b_join).protocol_name == "roundrobin"


async def test_members_with_many_protocols_are_matched_by_name_not_by_scans() -> None:
    """A JoinGroup may list a hundred thousand protocols (its frame may be 100 MiB). Each of the
    joining member's names was looked for in every member's list (two members of 4,000 names
    took 0.55 s, of 100,000 names several minutes, all on the event loop). The leader's first
    protocol that everyone has is chosen, and a name listed twice keeps its first metadata."""
    groups = ClassicGroups(Clock())
    many = 30_000
    leader_protocols = (*((f"l{i}", b"") for i in range(many)), ("shared", b"first"), ("shared", b"second"))
    a = await join(groups, protocols=leader_protocols)
    await groups.sync("g", a.member_id, 1, {})
    other = tuple((f"o{i}", b"") for i in range(many))
    with pytest.raises(InconsistentGroupProtocol):  # nothing in common
        await join(groups, protocols=other)
    b_join = join(groups, protocols=(*other, ("shared", b"b-meta")))  # one in common, last
    await settle()
    a_again = await join(groups, a.member_id, protocols=leader_protocols)
    b = await b_join
    assert a_again.protocol_name == b.protocol_name == "shared"
    metadata = {m: meta for m, _i, meta in a_again.members}
    assert metadata == {a.member_id: b"first", b.member_id: b"b-meta"}
