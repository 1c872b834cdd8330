"""``ClusterNode``: one broker's part in a ZooKeeper-coordinated cluster, and the one object the
rest of the broker and the front ends see of it.

It builds the parts around one shared ``ClusterContext`` and runs the reconciliation task. Each
pass reads the cluster state (woken by any watch, and at least every ``tick_s``) and:

1. the controller's duties, when this broker holds /controller (controller.py): elections,
   hand-overs, dead brokers out of ISRs;
2. the partition reconciler (reconciler.py): opens and closes local topics and partitions as
   ZooKeeper has them, makes each one a leader or a follower (a follower is copied by the follower
   fetcher, fetcher.py), and as a leader keeps the ISR;
3. committed offsets from ZooKeeper (store.py, which also holds the groups, shared documents and
   locks kept there).

The leader side of replication (leader.py) answers what other brokers send to this broker's
replication listener; the forwarder (forwarder.py) sends this broker's requests to other leaders.
Both speak through a ``ReplicaDialer`` (transport.py) that the server layer provides: the
broker opens no socket and imports no wire codec.

The high watermark is the smallest log end in the ISR, so an acks=all produce is answered once every
in-sync replica holds it (and at least ``min.insync.replicas`` are in sync), and consumers of every
protocol only see such records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from bayou.broker.broker import Broker
from bayou.broker.cluster.context import REPLICATION, TOPIC_ID, ClusterContext
from bayou.broker.cluster.controller import Controller
from bayou.broker.cluster.fetcher import FollowerFetcher
from bayou.broker.cluster.forwarder import LeaderForwarder
from bayou.broker.cluster.leader import LeaderHandlers
from bayou.broker.cluster.reconciler import PartitionReconciler
from bayou.broker.cluster.replicas import ClusterReplicas
from bayou.broker.cluster.state import BrokerRegistration, PartitionState
from bayou.broker.cluster.store import ZkMetadataStore
from bayou.broker.cluster.transport import (
    FetchAnswer,
    FetchRequest,
    ProduceAnswer,
    ProduceRequest,
    ReplicaDialer,
)
from bayou.broker.cluster.zk import Snapshot, ZkCluster
from bayou.broker.model import Acks, FetchResult, ProduceResult, Topic
from bayou.broker.partition import Partition
from bayou.errors import InvalidConfig, StorageError
from bayou.storage.fsutil import atomic_write

log = logging.getLogger("bayou.cluster")

CLUSTER_FILE = "cluster.json"  # in the data directory: the cluster it joined
FULL_READ_EVERY = 20  # passes (of tick_s) between full reads of ZooKeeper without a watch firing

__all__ = ["CLUSTER_FILE", "REPLICATION", "TOPIC_ID", "ClusterNode"]


class ClusterNode:
    def __init__(self, broker: Broker, url: str, registration: BrokerRegistration, dialer: ReplicaDialer,
                 *, tick_s: float = 0.5, lag_timeout_s: float | None = None, session_timeout_s: float = 6.0,
                 secret: str | None = None, zk_auth: str | None = None) -> None:
        self.broker = broker
        self.me = broker.config.broker_id
        self.secret = secret  # the replication listeners' shared secret ([cluster] secret)
        self.registration = registration
        self.tick_s = tick_s
        lag_timeout_s = (broker.config.replica_lag_timeout_ms / 1000 if lag_timeout_s is None
                         else lag_timeout_s)
        self.ctx = ctx = ClusterContext(broker, url, registration, session_timeout_s=session_timeout_s,
                                        zk_auth=zk_auth)
        self.dialer = dialer
        self.store = ZkMetadataStore(ctx)
        self.fetcher = FollowerFetcher(ctx, dialer, self._suspect)
        self.reconciler = PartitionReconciler(ctx, self.fetcher, lag_timeout_s)
        self.controller = Controller(ctx, self.reconciler, self.store)
        self.leader = LeaderHandlers(ctx)
        self.forwarder = LeaderForwarder(ctx, dialer)
        self._task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self.started = asyncio.Event()  # joined: registered, reaped, first reconcile done
        self._passes = 0
        self._probing: set[int] = set()  # brokers whose death is being confirmed
        # From now on the broker is in cluster mode: it leads nothing until ZooKeeper says so,
        # its topics change through ZooKeeper, and its groups and offsets are kept there (setting
        # ``cluster`` swaps in the cluster's topology and group store: broker/coordination.py).
        replicas = ClusterReplicas(ctx)
        broker.cluster = self
        broker.metadata_store = self
        broker.replica_state = replicas
        for topic in broker.topics.values():
            for part in topic.partitions:
                part.replica_state = replicas

    @property
    def zk(self) -> ZkCluster:
        return self.ctx.zk

    @property
    def snapshot(self) -> Snapshot | None:
        """The cluster state as the last pass read it."""
        return self.ctx.snapshot

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self.ctx.loop = asyncio.get_running_loop()
        await self.ctx.run(self.ctx.zk.start, 30.0, self._accept_cluster)
        # connections of this broker's previous life (and of dead brokers) are gone
        live = set((await self.ctx.run(self.ctx.zk.snapshot)).brokers) - {self.me}
        await self.controller.reap_members(live)
        self._task = self.ctx.loop.create_task(self._reconcile_loop(), name="cluster-reconcile")
        await asyncio.wait_for(self._synced.wait(), 60)
        self.started.set()

    def _accept_cluster(self, cluster_id: str) -> None:
        """Kafka's meta.properties check: a data directory that has joined a cluster joins only
        that cluster again. A broker pointed at another ZooKeeper or chroot would otherwise take
        the (empty) state there as the truth and drop its copies of the topics."""
        path = self.broker.config.data_dir / CLUSTER_FILE
        try:
            known = str(json.loads(path.read_bytes())["cluster_id"])
        except FileNotFoundError:
            atomic_write(path, json.dumps({"cluster_id": cluster_id, "broker_id": self.me}).encode() + b"\n")
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidConfig(f"cannot read {path}: {exc}") from None
        if known != cluster_id:
            raise InvalidConfig(
                f"the data directory {self.broker.config.data_dir} belongs to cluster {known}, but "
                f"ZooKeeper at {self.ctx.url} holds cluster {cluster_id}: wrong --cluster address or chroot? "
                f"(remove {path} only to make this data directory join that cluster)")

    async def controlled_shutdown(self, timeout: float) -> bool:
        """Kafka's controlled shutdown, before a graceful stop stops serving: announce that this
        broker is leaving; the controller moves the leadership of its partitions to in-sync
        followers (next epoch) and takes it out of every ISR (``hand_over``). Returns once no
        partition that someone else could lead is led here any more (True), or after ``timeout``
        (False). Partitions with no other in-sync replica stay led here until the broker is gone."""
        if self._task is None or self.ctx.stopping:
            return True
        self.ctx.leaving = True
        t0 = time.monotonic()
        try:
            await self.ctx.run(self.ctx.zk.announce_leaving)
        except StorageError as exc:
            log.warning("controlled shutdown: cannot reach ZooKeeper (%s); stopping without it", exc)
            return False
        self.ctx.wake.set()
        while True:
            snap = self.ctx.snapshot
            staying = {b for b, reg in snap.brokers.items() if not reg.leaving} if snap else set()
            pending = [f"{p.topic}/{p.index}" for t in list(self.broker.topics.values()) for p in t.partitions
                       if p.cluster is not None and p.cluster.is_leader
                       and any(b != self.me and b in staying for b in p.cluster.isr)]
            if not pending:
                log.info("controlled shutdown: leadership handed over in %.2f s",
                         time.monotonic() - t0)
                return True
            if time.monotonic() - t0 > timeout:
                log.warning("controlled shutdown: %d partitions still led here after %.0f s: %s",
                            len(pending), timeout, ", ".join(pending[:10]))
                return False
            self.ctx.wake.set()
            await asyncio.sleep(0.02)

    def _suspect(self, reg: BrokerRegistration) -> None:
        """``reg``'s replication listener refused a connection. A refusal means no process listens
        there any more (a killed broker's sockets are closed by the kernel at once), long before
        ZooKeeper expires its session (2 to 3 ticks, 4-6 s with the default tickTime of 2 s).
        Confirmed on every listener it registered, its registration is removed as the expiry
        would remove it, so the controller moves its partitions now (failover in well under a
        second instead of the session timeout). A stopped (SIGSTOP) or unreachable broker is not
        refused, only slow: that one is left to ZooKeeper."""
        b = reg.broker_id
        if b == self.me or b in self._probing or self.ctx.loop is None or self.ctx.stopping:
            return
        self._probing.add(b)
        task = self.ctx.loop.create_task(self._confirm_dead(reg), name=f"probe-broker-{b}")
        task.add_done_callback(lambda _t: self._probing.discard(b))

    async def _confirm_dead(self, reg: BrokerRegistration) -> None:
        try:
            snap = self.ctx.snapshot
            if snap is None or snap.brokers.get(reg.broker_id) != reg:
                return  # gone already, or registered again on other ports
            for port in sorted(set(reg.endpoints.values())):
                answer = await self.dialer.probe(reg.host, port, 1.0)
                if answer == "refused":
                    continue
                return  # something answers there (alive), or unreachable: no proof, ZooKeeper decides
            if await self.ctx.run(self.ctx.zk.remove_dead, reg):
                log.warning("broker %d refuses connections on every listener (%s): removed its "
                            "registration without waiting for its ZooKeeper session to expire",
                            reg.broker_id, reg.host)
                self.ctx.wake.set()
        except StorageError as exc:
            log.info("cannot remove dead broker %d now: %s", reg.broker_id, exc)
        except Exception:
            log.exception("probe of broker %d failed", reg.broker_id)

    async def stop(self) -> None:
        self.ctx.stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.fetcher.stop_all()
        self.forwarder.close_all()
        await self.ctx.run(self.ctx.zk.stop)

    # -- reconciliation ------------------------------------------------------------------------

    async def _reconcile_loop(self) -> None:
        woken = True
        while not self.ctx.stopping:
            try:
                await self._reconcile(full=woken or self._passes % FULL_READ_EVERY == 0)
                self._synced.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                woken = True
                log.exception("cluster reconciliation failed; retrying")
                await asyncio.sleep(self.tick_s)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ctx.wake.wait(), self.tick_s)
            woken = self.ctx.wake.is_set()
            self.ctx.wake.clear()

    async def _reconcile(self, *, full: bool = True) -> None:
        """One pass. The whole state is read from ZooKeeper when a watch fired (every node the
        pass depends on is watched) and every FULL_READ_EVERY passes anyway; the other passes (ISR
        upkeep on the tick) work from the last snapshot."""
        if self.ctx.zk.session_lost.is_set() or not await self.ctx.run(self.ctx.zk.is_registered):
            self.reconciler.step_down_all()
            await self.ctx.run(self.ctx.zk.register, 60.0)
            full = True
        if full or self.ctx.snapshot is None:
            snap = await self.ctx.run(self.ctx.zk.snapshot)
            self.ctx.snapshot = snap
        else:
            snap = self.ctx.snapshot
        self.broker.metadata.mirror_cluster(
            {b: (reg.host, reg.endpoints.get("rtes", 0)) for b, reg in snap.brokers.items()},
            {k: (st.leader, list(st.isr), st.leader_epoch) for k, (st, _v) in snap.states.items()})
        await self.controller.lead(snap)
        await self.reconciler.sync_topics(snap)
        await self.reconciler.apply_states(snap)
        await self.reconciler.maintain_isr(snap)
        self._passes += 1
        if self.ctx.zk.offsets_dirty.is_set() or self._passes % FULL_READ_EVERY == 0:
            await self.store.sync_offsets()


    # -- what other parts of the broker and the front ends ask (each part answers its own) -------

    def leader_of(self, part: Partition) -> tuple[int, str, dict[str, int]] | None:
        return self.ctx.leader_of(part)

    def coordinator_of(self, group: str, protocol: str | tuple[str, ...]) -> BrokerRegistration | None:
        return self.ctx.coordinator_of(group, protocol)

    def partition_leader(self, topic: str, partition: int) -> tuple[BrokerRegistration | None, int]:
        return self.ctx.partition_leader(topic, partition)

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return self.ctx.live_brokers()

    async def create_topic(self, name: str, partitions: int, config: dict[str, str], *,
                           exist_ok: bool = False) -> Topic:
        return await self.controller.create_topic(name, partitions, config, exist_ok=exist_ok)

    async def add_partitions(self, name: str, total: int | None, more: int = 0) -> Topic:
        return await self.controller.add_partitions(name, total, more)

    async def remove_partitions(self, name: str, count: int) -> Topic:
        return await self.controller.remove_partitions(name, count)

    async def delete_topic(self, name: str) -> None:
        await self.controller.delete_topic(name)

    async def set_leader(self, topic: str, partition: int, leader: int, isr: list[int]) -> PartitionState:
        return await self.controller.set_leader(topic, partition, leader, isr)

    async def elect_leaders(self, topic: str) -> int:
        return await self.controller.elect_leaders(topic)

    async def catch_up(self, name: str, partition: int, timeout: float = 5.0) -> None:
        await self.reconciler.catch_up(name, partition, timeout)

    async def await_topic(self, name: str, partition: int) -> None:
        """A partition this broker has not opened, or whose cluster state has not reached it, is
        caught up with ZooKeeper (``catch_up``) before the request is answered."""
        if not self.topic_settled(name, partition):
            await self.catch_up(name, partition)

    def topic_settled(self, name: str, partition: int) -> bool:
        t = self.broker.topics.get(name)
        return (t is not None and 0 <= partition < len(t.partitions)
                and t.partitions[partition].cluster is not None)

    async def await_leadership(self, topic: str, partition: int, timeout: float = 5.0) -> None:
        await self.reconciler.await_leadership(topic, partition, timeout)

    async def await_role(self, part: Partition, role: str, timeout: float = 10.0) -> None:
        await self.reconciler.await_role(part, role, timeout)

    async def publish_offsets(self, group: str, topic: str, entries: dict[int, int]) -> None:
        await self.store.publish_offsets(group, topic, entries)

    async def forget_offset(self, group: str, topic: str, partition: int) -> None:
        await self.store.forget_offset(group, topic, partition)

    async def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        return await self.store.committed_offset(group, topic, partition)

    async def forget_group(self, group: str) -> None:
        await self.store.forget_group(group)

    async def read_doc(self, name: str) -> tuple[bytes, int]:
        return await self.store.read_doc(name)

    async def write_doc(self, name: str, data: bytes, version: int) -> bool:
        return await self.store.write_doc(name, data, version)

    async def topic_names(self) -> list[str]:
        return await self.store.topic_names()

    def doc_changes(self, name: str) -> int:
        return self.store.doc_changes(name)

    def is_locked(self, name: str) -> bool:
        return self.store.is_locked(name)

    def exclusive(self, name: str, timeout: float = 15.0) -> contextlib.AbstractAsyncContextManager[None]:
        return self.store.exclusive(name, timeout)

    async def shared_groups(self) -> dict[str, tuple[str, str]]:
        return await self.store.shared_groups()

    async def group_state(self, group: str) -> tuple[bytes, int]:
        return await self.store.group_state(group)

    async def set_group_state(self, group: str, data: bytes, version: int) -> bool:
        return await self.store.set_group_state(group, data, version)

    async def txn_state(self, txn_id: str) -> tuple[bytes, int]:
        return await self.store.txn_state(txn_id)

    async def set_txn_state(self, txn_id: str, data: bytes | None, version: int) -> bool:
        return await self.store.set_txn_state(txn_id, data, version)

    async def txn_ids(self) -> list[str]:
        return await self.store.txn_ids()

    async def txn_bucket_size(self, txn_id: str) -> int:
        return await self.store.txn_bucket_size(txn_id)

    async def consumer_fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        return await self.forwarder.consumer_fetch(topic, partition, offset, max_bytes)

    async def forward_marker(self, topic: str, partition: int, batch: bytes) -> None:
        await self.forwarder.forward_marker(topic, partition, batch)

    async def forward_produce(self, topic: str, partition: int, batch: bytes, acks: Acks, *,
                              deduplicate: bool = False) -> ProduceResult:
        return await self.forwarder.forward_produce(topic, partition, batch, acks, deduplicate=deduplicate)

    async def serve_fetch(self, req: FetchRequest) -> FetchAnswer:
        return await self.leader.serve_fetch(req)

    async def serve_produce(self, req: ProduceRequest) -> ProduceAnswer:
        return await self.leader.serve_produce(req)
