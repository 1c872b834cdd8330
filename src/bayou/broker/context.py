"""What the broker's parts share, and the lookups every one of them makes.

``Broker`` (broker.py) builds one ``BrokerContext`` and hands it to each part: topic lifecycle
(topics.py), the produce path (produce.py), the fetch path (fetch.py), groups and offsets
(consumers.py), the V1 role commands (roles.py) and start, stop and background work
(lifecycle.py). The parts hold this object rather than the broker or each other, as the cluster's
parts hold their ClusterContext (broker/cluster/context.py), so each can be read alone.

The choices where a single node and a cluster differ (``metadata_store``, ``replica_state``,
``topology``, ``group_store``, ``cluster``: broker/coordination.py) live here, set once at start:
standalone when built, the cluster's by ``join_cluster`` (broker/cluster/node.py, before the
first request).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from bayou.broker.authz import Action, Authorizer
from bayou.broker.coordination import (
    Cluster,
    ClusterGroupStore,
    ClusterTopology,
    GroupStore,
    LocalGroupStore,
    MetadataStore,
    ReplicaState,
    StandaloneTopology,
    Topology,
)
from bayou.broker.groups.classic import ClassicGroups
from bayou.broker.groups.coordinator import GroupCoordinator, render_snapshot
from bayou.broker.metadata import ClusterMetadata
from bayou.broker.model import Topic
from bayou.broker.partition import Partition
from bayou.broker.persist import StateFile
from bayou.broker.replication import SINGLE_NODE
from bayou.broker.settings import BrokerConfig
from bayou.errors import UnknownPartition, UnknownTopic
from bayou.storage import Store, TopicMeta


class BrokerContext:
    def __init__(self, config: BrokerConfig, metadata_store: MetadataStore) -> None:
        self.config = config
        self.store = Store(config.data_dir, config.log.max_open_files)
        self.topics: dict[str, Topic] = {}
        # Who may do what (broker/authz.py): every request is checked against the principal of
        # the connection it came from; server/ injects the topic resolver and the users.
        self.authorizer = Authorizer()
        self.metadata = ClusterMetadata(config.broker_id, self.authorizer)
        self.groups = GroupCoordinator(config.group_session_timeout_ms, self.partition_count)
        self.groups_file = StateFile(config.data_dir / "groups.json", self.groups.groups_json)
        self.classic_groups = ClassicGroups()  # Kafka's (broker/groups/classic.py)
        self.offsets_file = StateFile(config.data_dir / "offsets.json", self.groups.offsets_snapshot,
                                      render_snapshot)  # a large table is encoded off the event loop
        self.io = ThreadPoolExecutor(max_workers=16, thread_name_prefix="bayou-io")
        self.admin_lock = asyncio.Lock()  # topic changes, one at a time
        self.closing = False
        # Where topic changes are decided, who decides high watermarks, where partitions are led
        # and groups coordinated, where committed offsets are kept (broker/coordination.py):
        # this broker alone, until ``join_cluster``; partitions then follow the leaders the
        # cluster elects.
        self.metadata_store = metadata_store
        self.replica_state: ReplicaState = SINGLE_NODE
        self.topology: Topology = StandaloneTopology(config.broker_id, self.metadata)
        self.group_store: GroupStore = LocalGroupStore(self.groups)
        self.cluster: Cluster | None = None

    def join_cluster(self, cluster: Cluster | None) -> None:
        """Take on ``cluster``'s topology and group store (None: standalone again). The cluster
        node sets its metadata store and replica state itself (broker/cluster/node.py)."""
        self.cluster = cluster
        if cluster is None:
            self.topology = StandaloneTopology(self.config.broker_id, self.metadata)
            self.group_store = LocalGroupStore(self.groups)
        else:
            self.topology = ClusterTopology(cluster, self.config.broker_id, self.partition)
            self.group_store = ClusterGroupStore(cluster, self.groups)

    def partition_count(self, topic: str) -> int:
        t = self.topics.get(topic)
        return len(t.partitions) if t else self.config.default_partitions

    def topic_flag(self, topic: str, key: str) -> bool:
        t = self.topics.get(topic)
        return t is not None and t.meta.config.get(key) == "true"

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's ``min.insync.replicas``, else the broker's, capped by its replica count."""
        t = self.topics.get(topic)
        value = t.meta.config.get("min.insync.replicas") if t is not None else None
        try:
            n = int(value) if value is not None else self.config.min_insync_replicas
        except ValueError:
            n = self.config.min_insync_replicas
        return max(1, n)

    def topic_rf(self, meta: TopicMeta) -> int:
        try:
            return int(meta.config.get("replication.factor", self.config.replication_factor))
        except ValueError:
            return self.config.replication_factor

    def topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name}")
        return topic

    def partition(self, topic: str, partition: int) -> Partition:
        t = self.topic(topic)
        if not 0 <= partition < len(t.partitions):
            raise UnknownPartition(f"topic {topic} has no partition {partition}")
        return t.partitions[partition]

    async def ready_topic(self, name: str, partition: int = 0) -> Topic:
        """``topic(name)`` for a request. In cluster mode a topic (or partition) that ZooKeeper has
        but this broker has not opened yet, or whose cluster state has not reached it, is waited
        for briefly instead of being called unknown: a client that created it through another
        broker must not be told it does not exist because a watch is still on its way."""
        await self.metadata_store.await_topic(name, partition)
        return self.topic(name)

    def settled_topic(self, name: str, partition: int = 0) -> Topic | None:
        """``topic(name)`` when ``ready_topic`` would not wait (None: await ``ready_topic``): the
        produce path's way past a coroutine per request."""
        if self.metadata_store.topic_settled(name, partition):
            return self.topics.get(name)
        return None

    def settled_partition(self, topic: str, partition: int) -> Partition | None:
        """``partition(topic, partition)`` when ``ready_partition`` would not wait (None: await
        it; it also tells an unknown topic or partition)."""
        t = self.settled_topic(topic, partition)
        return t.partitions[partition] if t is not None and 0 <= partition < len(t.partitions) else None

    async def has_topic(self, name: str) -> bool:
        """Whether ``name`` exists, for a request (in cluster mode: see ``ready_topic``)."""
        if name not in self.topics:
            try:
                await self.ready_topic(name)
            except UnknownTopic:
                return False
        return name in self.topics

    async def ready_partition(self, topic: str, partition: int) -> Partition:
        """``partition(topic, partition)`` for a request (see ``ready_topic``)."""
        await self.ready_topic(topic, partition)
        return self.partition(topic, partition)

    def visible_topics_of(self, names: Iterable[str]) -> list[str]:
        """Those of ``names`` the caller may describe."""
        return self.authorizer.describable(names)

    def authorize(self, action: Action, topic: str) -> None:
        """Raise Unauthorized unless the caller may do ``action`` on ``topic``: the check each
        call below makes, for a front end that must choose its reply before calling."""
        self.authorizer.check_topic(action, topic)

    def check_serving(self, part: Partition) -> None:
        """Raise if ``part`` was deleted (with its topic, or by remove_partitions) meanwhile."""
        t = self.topics.get(part.topic)
        if t is None:
            raise UnknownTopic(f"unknown topic {part.topic}")
        if part.index >= len(t.partitions) or t.partitions[part.index] is not part:
            raise UnknownPartition(f"partition {part.index} of topic {part.topic} was deleted")

    def check_leader(self, part: Partition) -> None:
        """Raise NotLeader unless this broker leads ``part`` (Topology.check_leader)."""
        self.topology.check_leader(part)
