"""Fixtures shared by the chaos tests that run a cluster: one ZooKeeper per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.cluster import running_zookeeper
from support.zookeeper import ZooKeeperServer


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk
