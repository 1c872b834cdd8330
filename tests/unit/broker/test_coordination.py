"""The single-node and cluster implementations of broker/coordination.py's Topology and
GroupStore, chosen once (BrokerContext.join_cluster): what each answers, on stand-ins for the
cluster node (the real one is tested in tests/cluster)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.broker.cluster.state import BrokerRegistration
from bayou.broker.coordination import (
    ClusterGroupStore,
    ClusterTopology,
    LocalGroupStore,
    StandaloneTopology,
)
from bayou.broker.groups.coordinator import CURSUS_POLICY, IGGY_POLICY, RTES_POLICY, GroupCoordinator
from bayou.broker.views import THIS_BROKER, Endpoint
from bayou.errors import NotLeader


async def test_a_broker_is_built_standalone_and_joins_a_cluster_once(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", broker_id=3))
    assert isinstance(b.ctx.topology, StandaloneTopology) and isinstance(b.ctx.group_store, LocalGroupStore)
    assert b.group_coordinator("g", ("cursus",)) is THIS_BROKER
    assert b.leader_endpoint("t", 0, "cursus") is THIS_BROKER
    assert b.leader_epoch("t", 0) == 0
    await b.check_leads("no-such-topic", 0)  # standalone: nothing, not even the lookup
    b.cluster = cast(Any, SimpleNamespace(snapshot=None))
    assert isinstance(b.ctx.topology, ClusterTopology) and isinstance(b.ctx.group_store, ClusterGroupStore)
    assert b.clustered
    b.cluster = None
    assert not b.clustered and isinstance(b.ctx.group_store, LocalGroupStore)


def test_cluster_topology_names_coordinators_and_leaders_at_a_listener() -> None:
    regs = {1: BrokerRegistration(1, "h1", {"cursus": 9001}), 2: BrokerRegistration(2, "h2", {"kafka": 9092})}
    node = SimpleNamespace(
        snapshot=SimpleNamespace(controller=2),
        coordinator_of=lambda group, names: regs[1] if "cursus" in names else None,
        partition_leader=lambda topic, p: (regs[p], 7) if p in regs else (None, -1))
    topo = ClusterTopology(cast(Any, node), 1, lambda t, p: cast(Any, None))
    assert topo.group_coordinator("g", ("cursus",)) == Endpoint(1, "h1", 9001, False)
    assert topo.group_coordinator("g", ("kafka",)) is None  # none known yet
    assert topo.leader_endpoint("t", 1, "cursus") == Endpoint(1, "h1", 9001, False)
    assert topo.leader_endpoint("t", 2, "cursus") is None  # its leader has no such listener
    assert topo.leader_endpoint("t", 0, "cursus") is None  # no leader known
    assert (topo.leader_epoch("t", 1), topo.leader_epoch("t", 0)) == (7, -1)


async def test_standalone_topology_forwards_nothing(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    with pytest.raises(NotLeader):
        await b.ctx.topology.forward_produce("t", 0, b"", cast(Any, None))


async def test_only_a_cluster_shares_groups_and_offsets() -> None:
    groups = GroupCoordinator(10_000, lambda _t: 2)
    local = LocalGroupStore(groups)
    assert not any(local.shares(p) for p in (None, RTES_POLICY, IGGY_POLICY, CURSUS_POLICY))
    groups.store_offset("g", "t", 0, 5)
    assert await local.committed_offset("g", "t", 0) == 5
    assert await local.shared_groups() == {}

    published: list[tuple[str, str, dict[int, int]]] = []

    async def publish(group: str, topic: str, entries: dict[int, int]) -> None:
        published.append((group, topic, entries))

    shared = ClusterGroupStore(cast(Any, SimpleNamespace(publish_offsets=publish)), groups)
    assert shared.shares(None) and shared.shares(RTES_POLICY) and shared.shares(IGGY_POLICY)
    assert not shared.shares(CURSUS_POLICY)  # in its coordinator's memory
    mark = shared.offsets_mark()
    await shared.publish_offsets("g", "t", {1: 9})
    assert published == [("g", "t", {1: 9})]
    groups.store_offset("g", "t", 1, 9)
    # a copy read before that commit neither reverts it nor keeps what it no longer holds
    assert shared.adopt_offsets({("g", "t", 0): 6}, since=mark)
    assert groups.offsets == {("g", "t", 0): 6, ("g", "t", 1): 9}
    # once a copy read after the commit comes, it wins
    assert shared.adopt_offsets({("g", "t", 0): 6}, since=shared.offsets_mark())
    assert groups.offsets == {("g", "t", 0): 6}
