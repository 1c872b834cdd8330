"""What the parts of a cluster node share: the broker, the ZooKeeper client, the last snapshot of
the cluster state, the reconciler's wake-up, and the one way to call kazoo from the event loop.

The parts (controller.py, reconciler.py, fetcher.py, leader.py, forwarder.py) hold this object
rather than each other, so each can be read alone; node.py builds them around one context."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from bayou.broker.cluster.state import NO_LEADER, BrokerRegistration
from bayou.broker.cluster.zk import Snapshot, ZkCluster
from bayou.errors import StorageError
from bayou.records.hashing import fnv1a_32

if TYPE_CHECKING:
    from bayou.broker.broker import Broker
    from bayou.broker.partition import Partition

T = TypeVar("T")
REPLICATION = "replication"  # the endpoint name of the replication listener
TOPIC_ID = "cluster.topic.id"  # topic config: which incarnation of a topic (a fresh uuid per creation)


class ClusterContext:
    def __init__(self, broker: Broker, url: str, registration: BrokerRegistration, *,
                 session_timeout_s: float, zk_auth: str | None) -> None:
        self.broker = broker
        self.me = broker.config.broker_id
        self.url = url
        self.zk = ZkCluster(url, self.me, registration, self.on_change,
                            session_timeout_s=session_timeout_s, auth=zk_auth)
        self.snapshot: Snapshot | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wake = asyncio.Event()  # the reconciler runs a pass now
        self.stopping = False
        self.leaving = False  # controlled shutdown under way: hand over, shrink no ISR

    def on_change(self) -> None:
        """Called on kazoo's thread by every watch."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.wake.set)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` (blocking kazoo calls) in a worker thread; ZooKeeper being unreachable is a
        retriable StorageError that every front end answers with its error."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self.broker._io, fn, *args)
        except (ConnectionLoss, SessionExpiredError, ConnectionClosedError, KazooTimeoutError) as exc:
            raise StorageError(f"ZooKeeper is unreachable now ({type(exc).__name__})") from None

    async def on_io(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` (a change to a partition's log) on the broker's storage worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self.broker._io, fn, *args)

    # -- the last snapshot's answers -----------------------------------------------------------

    def leader_of(self, part: Partition) -> tuple[int, str, dict[str, int]] | None:
        """The leader of ``part`` as the last snapshot knows it: (id, host, ports)."""
        snap = self.snapshot
        if snap is None:
            return None
        entry = snap.states.get((part.topic, part.index))
        if entry is None or entry[0].leader == NO_LEADER:
            return None
        reg = snap.brokers.get(entry[0].leader)
        return None if reg is None else (reg.broker_id, reg.host, dict(reg.endpoints))

    def coordinator_of(self, group: str, protocol: str | tuple[str, ...]) -> BrokerRegistration | None:
        """The broker that coordinates ``group`` for ``protocol``: FNV-1a of its name over the live
        brokers with that protocol's listener (any of them, for a protocol served on several:
        Kafka's), in id order (so every broker agrees, and a dead coordinator's groups move to
        live brokers)."""
        names = (protocol,) if isinstance(protocol, str) else protocol
        live = {b: reg for b, reg in self.live_brokers().items() if any(n in reg.endpoints for n in names)}
        if not live:
            return None
        ids = sorted(live)
        return live[ids[fnv1a_32(group.encode()) % len(ids)]]

    def partition_leader(self, topic: str, partition: int) -> tuple[BrokerRegistration | None, int]:
        """(the partition's leader as the last snapshot knows it, its leader epoch)."""
        snap = self.snapshot
        entry = snap.states.get((topic, partition)) if snap is not None else None
        if snap is None or entry is None:
            return None, -1
        return snap.brokers.get(entry[0].leader), entry[0].leader_epoch

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return dict(self.snapshot.brokers) if self.snapshot is not None else {}
