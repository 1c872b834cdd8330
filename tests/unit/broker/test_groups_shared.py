"""What cluster mode builds shared groups on: one group's state as bytes (group_json /
replace_group, the form kept in ZooKeeper), handed from one coordinator to another; dropping the
members of a dead broker; the member-id rule for connection-bound members."""

from __future__ import annotations

import pytest

from bayou.broker.cluster.state import MEMBER_BROKER_SHIFT, connection_member_base, member_broker
from bayou.broker.groups.coordinator import IGGY_POLICY, GroupCoordinator
from bayou.errors import IllegalGeneration


def coordinator(clock: list[int]) -> GroupCoordinator:
    return GroupCoordinator(10_000, lambda _t: 4, lambda: clock[0])


def hand_over(src: GroupCoordinator, dst: GroupCoordinator, group: str) -> None:
    dst.replace_group(group, src.group_json(group))


def test_one_group_on_two_coordinators_through_its_bytes() -> None:
    """Two brokers applying operations in turn on the state they read: the same group as one
    broker would have."""
    clock = [1_700_000_000_000]
    a, b, single = coordinator(clock), coordinator(clock), coordinator(clock)
    assert a.group_json("g") == b""
    ops = [("join", "m1"), ("join", "m2"), ("join", "m3"), ("leave", "m2")]
    for i, (op, member) in enumerate(ops):
        here, there = (a, b) if i % 2 == 0 else (b, a)
        for c in (here, single):
            if op == "join":
                c.join("g", "t", member)
            else:
                c.leave("g", "t", member, c.groups["g"].generation)
        hand_over(here, there, "g")
    assert a.group_json("g") == b.group_json("g") == single.group_json("g")
    assert a.describe("g").members == single.describe("g").members
    # a stale generation is refused on the other broker as well
    with pytest.raises(IllegalGeneration):
        b.heartbeat("g", "t", "m1", 2)
    # an empty state removes the group
    b.replace_group("g", b"")
    assert "g" not in b.groups


def test_iggy_group_state_keeps_its_policy_and_partition_count() -> None:
    clock = [1_700_000_000_000]
    a, b = coordinator(clock), coordinator(clock)
    a.register("iggy.t.w", "t", IGGY_POLICY, partitions=4)
    a.join("iggy.t.w", "t", "5", policy=IGGY_POLICY)
    hand_over(a, b, "iggy.t.w")
    g = b.groups["iggy.t.w"]
    assert g.policy is IGGY_POLICY and g.partitions == 4 and g.generation == a.groups["iggy.t.w"].generation
    assert b.describe("iggy.t.w").members[0][2] == (0, 1, 2, 3)


def test_dropping_the_members_of_a_dead_broker_rebalances_once() -> None:
    clock = [1_700_000_000_000]
    c = coordinator(clock)
    c.register("iggy.t.w", "t", IGGY_POLICY, partitions=4)
    ids = [connection_member_base(1) + 1, connection_member_base(2) + 1, connection_member_base(1) + 2]
    for mid in ids:
        c.join("iggy.t.w", "t", str(mid), policy=IGGY_POLICY)
    gen = c.groups["iggy.t.w"].generation
    assert c.drop_members("iggy.t.w", lambda m: member_broker(m) == 1)
    assert c.groups["iggy.t.w"].generation == gen + 1
    assert [(m, parts) for m, _seen, parts in c.describe("iggy.t.w").members] == [(str(ids[1]), (0, 1, 2, 3))]
    assert not c.drop_members("iggy.t.w", lambda m: member_broker(m) == 1)  # nothing left to drop
    assert not c.drop_members("missing", lambda m: True)


def test_member_ids_name_their_broker() -> None:
    assert member_broker(str(connection_member_base(7) + 12345)) == 7
    assert connection_member_base(4095) + (1 << MEMBER_BROKER_SHIFT) - 1 < 1 << 32  # an Iggy u32
    assert member_broker("consumer-a") is None and member_broker("٣") is None
