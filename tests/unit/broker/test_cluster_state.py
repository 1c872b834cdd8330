"""Cluster state as plain data (broker/cluster/state.py) and one partition's replica set
(broker/cluster/replicaset.py): assignment, election after failures, ISR and high watermark."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bayou.broker.cluster.replicaset import ReplicaSet
from bayou.broker.cluster.state import (
    NO_LEADER,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    after_failures,
    assign_replicas,
    hand_over,
    initial_state,
)
from bayou.broker.cluster.zk import parse_url


def test_round_robin_assignment_spreads_leaders() -> None:
    a = assign_replicas([3, 1, 2], 6, 3)
    assert a[0] == [1, 2, 3] and a[1] == [2, 3, 1] and a[2] == [3, 1, 2]
    assert sorted(r[0] for r in a.values()) == [1, 1, 2, 2, 3, 3]
    assert all(len(set(r)) == 3 for r in a.values())
    assert assign_replicas([1, 2], 1, 1, first_partition=4) == {4: [1]}
    with pytest.raises(ValueError, match="larger than the 2 live brokers"):
        assign_replicas([1, 2], 1, 3)
    with pytest.raises(ValueError):
        assign_replicas([1], 1, 0)


def test_json_round_trips() -> None:
    reg = BrokerRegistration(2, "10.0.0.2", {"rtes": 9092, "replication": 9093})
    assert BrokerRegistration.from_json(reg.to_json()) == reg
    named = BrokerRegistration(2, "10.0.0.2", {"kafka": 9092}, name="broker2.example")
    assert BrokerRegistration.from_json(named.to_json()) == named
    # a registration written before host names were kept reads as having none
    assert BrokerRegistration.from_json(b'{"broker_id": 2, "host": "10.0.0.2", "endpoints": {}}').name == ""
    assert reg.address("rtes") == ("10.0.0.2", 9092) and reg.address("tank") is None
    ta = TopicAssignment({0: [1, 2], 1: [2, 1]}, {"retention.ms": "5"})
    assert TopicAssignment.from_json(ta.to_json()) == ta and ta.replication_factor == 2
    ps = PartitionState(3, 7, (3, 1))
    assert PartitionState.from_json(ps.to_json()) == ps


def test_initial_state_leads_with_the_first_live_replica() -> None:
    assert initial_state([2, 3, 1], {1, 2, 3}) == PartitionState(2, 0, (2, 3, 1))
    assert initial_state([2, 3, 1], {1, 3}) == PartitionState(3, 0, (3, 1))


def test_failover_elects_from_the_isr_only() -> None:
    s = PartitionState(1, 4, (1, 2, 3))
    assert after_failures(s, [1, 2, 3], {1, 2, 3}) is s
    assert after_failures(s, [1, 2, 3], {1, 3}) == PartitionState(1, 4, (1, 3))  # follower gone
    assert after_failures(s, [1, 2, 3], {2, 3}) == PartitionState(2, 5, (2, 3))  # leader gone
    # 3 is alive but out of the ISR: no unclean election; the ISR keeps the last leader
    lone = PartitionState(1, 4, (1,))
    dead = after_failures(lone, [1, 2, 3], {2, 3})
    assert dead == PartitionState(NO_LEADER, 5, (1,))
    assert after_failures(dead, [1, 2, 3], {2, 3}) is dead
    assert after_failures(dead, [1, 2, 3], {1, 2, 3}) == PartitionState(1, 6, (1,))  # it came back


@given(st.lists(st.integers(1, 5), min_size=1, max_size=5, unique=True), st.sets(st.integers(1, 5)),
       st.integers(0, 100))
def test_election_never_leaves_the_isr(isr: list[int], live: set[int], epoch: int) -> None:
    replicas = [1, 2, 3, 4, 5]
    s = PartitionState(isr[0], epoch, tuple(isr))
    new = after_failures(s, replicas, live)
    assert new.leader == NO_LEADER or (new.leader in isr and new.leader in live)
    assert set(new.isr) <= set(isr) and new.isr
    assert new.leader_epoch >= s.leader_epoch
    assert (new.leader != s.leader) == (new.leader_epoch > s.leader_epoch)


def test_zk_url() -> None:
    assert parse_url("zk://a:2181,b:2181/bayou/prod") == ("a:2181,b:2181", "/bayou/prod")
    assert parse_url("zk://a:2181") == ("a:2181", "/bayou")
    for bad in ("a:2181/x", "http://a/x", "zk:///x"):
        with pytest.raises(ValueError):
            parse_url(bad)


def test_high_watermark_is_the_smallest_log_end_of_the_isr() -> None:
    rs = ReplicaSet(1, 1, 0, (1, 2, 3), (1, 2, 3))
    assert not rs.advance_hw(10)  # followers have not fetched: nothing is committed yet
    rs.follower_fetched(2, 7, 10)
    rs.follower_fetched(3, 5, 10)
    assert rs.advance_hw(10) and rs.hw == 5
    rs.follower_fetched(3, 10, 10)
    assert rs.advance_hw(10) and rs.hw == 7
    rs.isr = (1, 3)  # 2 left the ISR: it no longer holds the watermark back
    assert rs.advance_hw(10) and rs.hw == 10
    rs.follower_fetched(3, 4, 12)  # never moves back on the leader
    assert not rs.advance_hw(12) and rs.hw == 10


def test_isr_shrinks_by_laggards_and_grows_by_caught_up_live_followers() -> None:
    rs = ReplicaSet(1, 1, 0, (1, 2, 3), (1, 2, 3), since=time.monotonic() - 60)
    rs.follower_fetched(2, 10, 10)
    rs.caught_up_at[3] = time.monotonic() - 60  # 3 has lagged for a minute
    rs.follower_leo[3] = 2
    assert rs.wanted_isr(10, 5.0, {1, 2, 3}) == (1, 2)
    assert rs.wanted_isr(10, 5.0, {1, 3}) == (1,)  # a dead broker leaves at once
    rs.isr = (1, 2)
    rs.advance_hw(10)
    rs.follower_fetched(3, 10, 10)  # caught up again
    assert rs.wanted_isr(10, 5.0, {1, 2, 3}) == (1, 2, 3)
    assert rs.wanted_isr(10, 5.0, {1, 2}) == (1, 2)  # but not while its broker is gone


def test_a_follower_one_fetch_behind_under_load_stays_caught_up() -> None:
    rs = ReplicaSet(1, 1, 0, (1, 2), (1, 2))
    rs.follower_fetched(2, 0, 100)  # the leader is at 100
    rs.caught_up_at.clear()
    rs.follower_fetched(2, 100, 150)  # it got all of the previous answer; the leader moved on
    assert 2 in rs.caught_up_at


def test_a_follower_too_many_records_behind_leaves_at_once() -> None:
    rs = ReplicaSet(1, 1, 0, (1, 2), (1, 2))
    rs.follower_fetched(2, 50, 100)
    rs.caught_up_at[2] = time.monotonic()  # caught up recently by the time rule
    assert rs.wanted_isr(100, 30.0, {1, 2}) == (1, 2)
    assert rs.wanted_isr(100, 30.0, {1, 2}, max_lag_records=40) == (1,)
    assert rs.wanted_isr(100, 30.0, {1, 2}, max_lag_records=60) == (1, 2)


def test_partitions_to_drop_after_missed_removals() -> None:
    from bayou.broker.cluster.state import partitions_to_drop

    assert partitions_to_drop(None, None) is None
    assert partitions_to_drop('[["a", 3]]', '[["a", 3]]') is None  # seen
    assert partitions_to_drop('[["a", 3]]', None) == 3
    # two removals missed (to 3, then to 2, partitions added between): everything from 2 goes
    assert partitions_to_drop('[["a", 5], ["b", 3], ["c", 2]]', '[["a", 5]]') == 2
    assert partitions_to_drop('[["a", 1], ["b", 4]]', '[["a", 1]]') == 4


def test_a_leaving_broker_is_marked_in_its_registration() -> None:
    reg = BrokerRegistration(2, "10.0.0.2", {"rtes": 9092}, leaving=True)
    assert BrokerRegistration.from_json(reg.to_json()) == reg
    assert b"leaving" not in BrokerRegistration(2, "h").to_json()  # older brokers read it unchanged


def test_hand_over_moves_leadership_off_leaving_brokers_to_in_sync_followers() -> None:
    s = PartitionState(1, 4, (1, 2, 3))
    assert hand_over(s, [1, 2, 3], set()) is s
    assert hand_over(s, [1, 2, 3], {1}) == PartitionState(2, 5, (2, 3))  # next in assignment order
    assert hand_over(s, [1, 3, 2], {1}) == PartitionState(3, 5, (2, 3))
    assert hand_over(s, [1, 2, 3], {3}) == PartitionState(1, 4, (1, 2))  # a follower leaves the ISR
    assert hand_over(s, [1, 2, 3], {1, 2}) == PartitionState(3, 5, (3,))
    alone = PartitionState(1, 4, (1,))
    assert hand_over(alone, [1, 2, 3], {1}) is alone  # nobody in sync to take over: it stays
    assert hand_over(s, [1, 2, 3], {1, 2, 3}) is s
    leaderless = PartitionState(NO_LEADER, 4, (1,))
    assert hand_over(leaderless, [1, 2, 3], {1}) is leaderless
