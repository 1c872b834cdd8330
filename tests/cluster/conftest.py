"""Fixtures of the cluster tests: one ZooKeeper per module, three brokers per test
(support/cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import CLUSTER_CONFIG, Cluster, running_cluster, running_zookeeper, v1
from support.zookeeper import ZooKeeperServer

__all__ = ["CLUSTER_CONFIG", "Cluster", "v1"]


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with running_cluster(zookeeper, tmp_path, request.node.name) as c:
        yield c
