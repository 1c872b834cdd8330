"""``ClusterNode``: one broker's part in a ZooKeeper-coordinated cluster.

A reconciliation task keeps the broker in step with ZooKeeper. Each pass reads the cluster state
(woken by any watch, and at least every ``tick_s``) and:

1. as the controller (whoever holds /controller; any broker takes it when it is free): moves the
   leadership of partitions whose leader's broker is gone to an in-sync replica, with the next
   leader epoch, and drops dead brokers from ISRs (``state.after_failures``);
2. opens the partitions of topics it does not have yet, and closes topics deleted from the cluster;
3. makes each partition a leader or a follower as its state says: a new leader records where its
   epoch begins (``LeaderEpochCache``); a follower runs a fetcher that copies the leader's batches
   at their offsets, truncating first whatever diverged from the leader (the leader answers a fetch
   whose last epoch it does not share with where that epoch ended on it);
4. as a leader: shrinks the ISR by followers that have not caught up for the lag timeout and grows
   it by followers that reached the high watermark, compare-and-set in ZooKeeper before it counts.

The high watermark is the smallest log end in the ISR, so an acks=all produce is answered once every
in-sync replica holds it (and at least ``min.insync.replicas`` are in sync), and consumers of every
protocol only see such records.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    LockTimeout,
    NodeExistsError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from bayou.broker.broker import Acks, Broker, FetchResult, ProduceResult, Topic
from bayou.broker.cluster.replicaset import ReplicaSet
from bayou.broker.cluster.state import (
    LOCKS,
    NO_LEADER,
    PARTITIONS_REMOVED,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    after_failures,
    assign_replicas,
    hand_over,
    initial_state,
    member_broker,
    partitions_to_drop,
)
from bayou.broker.cluster.zk import Snapshot, ZkCluster
from bayou.broker.partition import FOLLOWER, LEADER, Partition
from bayou.errors import (
    REGISTRY,
    BayouError,
    InvalidConfig,
    InvalidPartitions,
    InvalidRequest,
    NotEnoughReplicas,
    NotLeader,
    OffsetOutOfRange,
    ReplicationTimeout,
    StorageError,
    TopicAlreadyExists,
    UnknownPartition,
    UnknownTopic,
)
from bayou.protocols.replica.codec import (
    DEDUPLICATE,
    HEADER_SIZE,
    NONCE_SIZE,
    Auth,
    Challenge,
    Fetch,
    FetchError,
    FetchReply,
    Produce,
    ProduceError,
    ProduceReply,
    ReplicaProtocolError,
    auth_mac,
    decode,
    encode,
)
from bayou.records.batch import Record, decode_records, encode_batch, iter_batches
from bayou.records.hashing import fnv1a_32
from bayou.storage.epochs import LeaderEpochCache
from bayou.storage.fsutil import atomic_write

log = logging.getLogger("bayou.cluster")

T = TypeVar("T")
REPLICATION = "replication"  # the endpoint name of the replication listener
TOPIC_ID = "cluster.topic.id"  # topic config: which incarnation of a topic (a fresh uuid per creation)
CLUSTER_FILE = "cluster.json"  # in the data directory: the cluster it joined
FETCH_MAX_BYTES = 8 << 20
CONSUMER = -1  # the replica id of a FETCH that reads for a consumer (Kafka's convention)
MAX_IDLE_FORWARDERS = 4  # idle connections kept per leader for forwarded produces
FULL_READ_EVERY = 20  # passes (of tick_s) between full reads of ZooKeeper without a watch firing
FETCH_MAX_WAIT_MS = 500
INLINE_DECODE_BYTES = 64 * 1024  # a forwarded batch up to this size, not compressed, is decoded on the loop


class ClusterNode:
    def __init__(self, broker: Broker, url: str, registration: BrokerRegistration, *,
                 tick_s: float = 0.5, lag_timeout_s: float | None = None,
                 session_timeout_s: float = 6.0, secret: str | None = None, zk_auth: str | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.broker = broker
        self.me = broker.config.broker_id
        self.url = url
        self.secret = secret  # the replication listeners' shared secret ([cluster] secret)
        self.tls = tls  # replication listeners speak TLS: verify theirs, present this broker's certificate
        self.registration = registration
        self.tick_s = tick_s
        self.lag_timeout_s = (broker.config.replica_lag_timeout_ms / 1000 if lag_timeout_s is None
                              else lag_timeout_s)
        self.zk = ZkCluster(url, self.me, registration, self._on_change,
                            session_timeout_s=session_timeout_s, auth=zk_auth)
        self.snapshot: Snapshot | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._fetchers: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._known_topics: set[str] = set()
        self._synced = asyncio.Event()
        self.started = asyncio.Event()  # joined: registered, reaped, first reconcile done
        self._stopping = False
        self._leaving = False  # controlled shutdown under way: hand over, shrink no ISR
        self._passes = 0
        self._locks: dict[str, asyncio.Lock] = {}
        # idle connections to other brokers' replication listeners, for forwarded produces
        self._forwarders: dict[tuple[str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._reaped_with: set[int] | None = None  # live brokers at the controller's last reap
        self._probing: set[int] = set()  # brokers whose death is being confirmed
        # From now on the broker is in cluster mode: it leads nothing until ZooKeeper says so.
        broker.cluster = self
        for topic in broker.topics.values():
            for part in topic.partitions:
                part.in_cluster = True

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._run(self.zk.start, 30.0, self._accept_cluster)
        # connections of this broker's previous life (and of dead brokers) are gone
        live = set((await self._run(self.zk.snapshot)).brokers) - {self.me}
        await self._reap_members(live)
        self._task = self._loop.create_task(self._reconcile_loop(), name="cluster-reconcile")
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
                f"ZooKeeper at {self.url} holds cluster {cluster_id}: wrong --cluster address or chroot? "
                f"(remove {path} only to make this data directory join that cluster)")

    async def controlled_shutdown(self, timeout: float) -> bool:
        """Kafka's controlled shutdown, before a graceful stop stops serving: announce that this
        broker is leaving; the controller moves the leadership of its partitions to in-sync
        followers (next epoch) and takes it out of every ISR (``hand_over``). Returns once no
        partition that someone else could lead is led here any more (True), or after ``timeout``
        (False). Partitions with no other in-sync replica stay led here until the broker is gone."""
        if self._task is None or self._stopping:
            return True
        self._leaving = True
        t0 = time.monotonic()
        try:
            await self._run(self.zk.announce_leaving)
        except StorageError as exc:
            log.warning("controlled shutdown: cannot reach ZooKeeper (%s); stopping without it", exc)
            return False
        self._wake.set()
        while True:
            snap = self.snapshot
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
            self._wake.set()
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
        if b == self.me or b in self._probing or self._loop is None or self._stopping:
            return
        self._probing.add(b)
        task = self._loop.create_task(self._confirm_dead(reg), name=f"probe-broker-{b}")
        task.add_done_callback(lambda _t: self._probing.discard(b))

    async def _confirm_dead(self, reg: BrokerRegistration) -> None:
        try:
            snap = self.snapshot
            if snap is None or snap.brokers.get(reg.broker_id) != reg:
                return  # gone already, or registered again on other ports
            for port in sorted(set(reg.endpoints.values())):
                try:
                    _reader, writer = await asyncio.wait_for(asyncio.open_connection(reg.host, port), 1.0)
                except ConnectionRefusedError:
                    continue
                except (OSError, TimeoutError):
                    return  # unreachable is no proof: ZooKeeper decides
                writer.close()
                return  # something answers there: alive
            if await self._run(self.zk.remove_dead, reg):
                log.warning("broker %d refuses connections on every listener (%s): removed its "
                            "registration without waiting for its ZooKeeper session to expire",
                            reg.broker_id, reg.host)
                self._wake.set()
        except StorageError as exc:
            log.info("cannot remove dead broker %d now: %s", reg.broker_id, exc)
        except Exception:
            log.exception("probe of broker %d failed", reg.broker_id)

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for task in self._fetchers.values():
            task.cancel()
        for task in list(self._fetchers.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fetchers.clear()
        for conns in self._forwarders.values():
            for _reader, writer in conns:
                writer.close()
        self._forwarders.clear()
        await self._run(self.zk.stop)

    def _on_change(self) -> None:
        """Called on kazoo's thread by every watch."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` (blocking kazoo calls) in a worker thread; ZooKeeper being unreachable is a
        retriable StorageError that every front end answers with its error."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self.broker._io, fn, *args)
        except (ConnectionLoss, SessionExpiredError, ConnectionClosedError, KazooTimeoutError) as exc:
            raise StorageError(f"ZooKeeper is unreachable now ({type(exc).__name__})") from None

    # -- what other parts of the broker ask ---------------------------------------------------

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

    def coordinator_of(self, group: str, protocol: str) -> BrokerRegistration | None:
        """The broker that coordinates ``group`` for ``protocol``: FNV-1a of its name over the live
        brokers with that protocol's listener, in id order (so every broker agrees, and a dead
        coordinator's groups move to live brokers)."""
        live = {b: reg for b, reg in self.live_brokers().items() if protocol in reg.endpoints}
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

    async def create_topic(self, name: str, partitions: int, config: dict[str, str], *,
                           exist_ok: bool = False) -> Topic:
        snap = await self._run(self.zk.snapshot)
        live = sorted(snap.brokers)
        if name in snap.topics:
            topic_id = snap.topics[name].config.get(TOPIC_ID)
            if not exist_ok:  # raised once this broker has opened it, so the caller can use it
                with contextlib.suppress(UnknownTopic):
                    await self._await_local(name, timeout=5.0, topic_id=topic_id)
                raise TopicAlreadyExists(f"topic {name} already exists")
        else:
            explicit = config.get("replication.factor")
            try:  # never silently fewer copies than asked for (or than the broker default)
                rf = int(explicit) if explicit is not None else self.broker.config.replication_factor
            except ValueError:
                raise InvalidConfig(f"invalid replication.factor {explicit!r}") from None
            try:
                replicas = assign_replicas(live, partitions, rf, start=random.randrange(max(1, len(live))))
            except ValueError as exc:
                raise InvalidConfig(str(exc)) from None
            topic_id = uuid.uuid4().hex
            assignment = TopicAssignment(replicas, {**config, "replication.factor": str(rf),
                                                    TOPIC_ID: topic_id})
            states = {p: initial_state(r, set(live)) for p, r in replicas.items()}
            try:
                await self._run(self.zk.create_topic, name, assignment, states)
            except NodeExistsError:
                if not exist_ok:
                    raise TopicAlreadyExists(f"topic {name} already exists") from None
                topic_id = None  # made by another broker at the same moment: whichever it is
            else:
                log.info("created topic %s in the cluster: %s", name, replicas)
        return await self._await_local(name, topic_id=topic_id)

    async def add_partitions(self, name: str, total: int | None, more: int = 0) -> Topic:
        """Grow a topic in the cluster to ``total`` partitions, or by ``more`` (new partitions
        spread over the live brokers); returns once this broker has opened them."""
        try:
            new = await self._run(self.zk.add_partitions, name, total,
                                  random.randrange(max(1, len(self.live_brokers()))), more)
        except LookupError:
            raise UnknownTopic(f"unknown topic {name}") from None
        except ValueError as exc:
            raise InvalidPartitions(str(exc)) from None
        log.info("added partitions to topic %s in the cluster: %s", name, new)
        return await self._await_local(name, partitions=max(new) + 1)

    async def remove_partitions(self, name: str, count: int) -> Topic:
        """Remove a topic's last ``count`` partitions in the cluster; returns once this broker has
        removed them."""
        try:
            keep = await self._run(self.zk.remove_partitions, name, count)
        except LookupError:
            raise UnknownTopic(f"unknown topic {name}") from None
        except ValueError as exc:
            raise InvalidPartitions(str(exc)) from None
        log.info("removed partitions %d and beyond of topic %s in the cluster", keep, name)
        await self.broker.forget_shared_partitions(name, keep)
        return await self._await_local(name, partitions=keep, exact=True)

    async def _await_local(self, name: str, timeout: float = 15.0, partitions: int = 0,
                           exact: bool = False, topic_id: str | None = None) -> Topic:
        """The local copy of ``name`` once it has the partitions (and, given ``topic_id``, is that
        incarnation of the topic, not an older copy still being dropped) and their states."""
        deadline = time.monotonic() + timeout
        while True:
            topic = self.broker.topics.get(name)
            if (topic is not None and len(topic.partitions) >= partitions
                    and (topic_id is None or topic.meta.config.get(TOPIC_ID) == topic_id)
                    and (not exact or len(topic.partitions) == partitions)
                    and all(p.cluster is not None for p in topic.partitions)):
                return topic
            if time.monotonic() > deadline:
                raise UnknownTopic(f"topic {name} did not reach this broker in {timeout:.0f} s")
            self._wake.set()
            await asyncio.sleep(0.02)

    async def catch_up(self, name: str, partition: int, timeout: float = 5.0) -> None:
        """A request named a partition this broker has not opened (or whose state it has not
        taken) yet: when ZooKeeper has it, wake the reconciler and wait for the local copy;
        NotLeader (retriable) if it does not arrive in time. Returns at once when ZooKeeper does
        not have it either (the caller then answers unknown topic/partition)."""
        assignment = await self._run(self.zk.topic_assignment, name)
        if assignment is None or partition not in assignment.partitions:
            return
        try:
            await self._await_local(name, timeout=timeout, partitions=partition + 1,
                                    topic_id=assignment.config.get(TOPIC_ID))
        except UnknownTopic:
            raise NotLeader(f"partition {partition} of topic {name} has not reached this broker "
                            "yet; retry") from None

    async def await_leadership(self, topic: str, partition: int, timeout: float = 5.0) -> None:
        """A produce reached this broker while its local state says another broker leads the
        partition: when ZooKeeper already names this broker leader (a leadership change whose watch
        is still on its way), wake the reconciler and wait for the local state to take it on, so
        the client is not sent back to the old leader. Returns at once otherwise (the caller then
        answers NotLeader with the leader it knows), and after ``timeout`` in any case."""
        try:
            state = await self._run(self.zk.partition_state, topic, partition)
        except StorageError:  # ZooKeeper unreachable: the local state is all there is
            return
        if state is None or state.leader != self.me:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.broker.topics.get(topic)
            rs = None if t is None or partition >= len(t.partitions) else t.partitions[partition].cluster
            if rs is not None and (rs.is_leader or rs.epoch > state.leader_epoch):
                return
            self._wake.set()
            await asyncio.sleep(0.02)

    async def delete_topic(self, name: str) -> None:
        await self._run(self.zk.delete_topic, name)
        deadline = time.monotonic() + 15
        while name in self.broker.topics and time.monotonic() < deadline:
            self._wake.set()
            await asyncio.sleep(0.02)

    async def set_leader(self, topic: str, partition: int, leader: int, isr: list[int]) -> PartitionState:
        """An operator's choice of leader (V1 ADMIN_SET_PARTITION_LEADER): it must be a live
        replica in the ISR it names (given, or the current one), so no acknowledged record is
        lost; the epoch moves on when the leader changes."""
        self.broker.authorizer.check("manage_servers")
        snap = await self._run(self.zk.snapshot)
        entry = snap.states.get((topic, partition))
        if topic not in snap.topics or entry is None:
            raise UnknownPartition(f"partition not found: topic={topic} partition={partition}")
        state, version = entry
        replicas = snap.topics[topic].partitions[partition]
        new_isr = tuple(isr) if isr else state.isr
        if not set(new_isr) <= set(state.isr) or not set(new_isr) <= set(replicas):
            raise InvalidConfig(f"isr {list(new_isr)} must be replicas in the current ISR {list(state.isr)}")
        if leader not in new_isr or leader not in snap.brokers:
            raise InvalidConfig(f"leader {leader} must be a live broker in the ISR")
        epoch = state.leader_epoch + (1 if leader != state.leader else 0)
        new = PartitionState(leader, epoch, new_isr)
        if not await self._run(self.zk.set_state, topic, partition, new, version):
            raise InvalidConfig("the partition state changed meanwhile; try again")
        self._wake.set()
        return new

    async def await_role(self, part: Partition, role: str, timeout: float = 10.0) -> None:
        """Wait until ``part`` has taken ``role`` from the cluster state."""
        deadline = time.monotonic() + timeout
        while part.role != role or part.cluster is None or part.cluster.is_leader != (role == LEADER):
            if time.monotonic() > deadline:
                raise InvalidConfig(f"the partition did not become {role} in {timeout:.0f} s")
            self._wake.set()
            await asyncio.sleep(0.02)

    async def elect_leaders(self, topic: str) -> int:
        """V1 ADMIN_ELECT_TOPIC_LEADERS: run the controller's election for ``topic`` now; the
        number of partitions whose state changed."""
        self.broker.authorizer.check("manage_servers")
        snap = await self._run(self.zk.snapshot)
        if topic not in snap.topics:
            raise UnknownTopic(f"topic not found: {topic}")
        live = set(snap.brokers)
        changes = 0
        for (t, p), (state, version) in sorted(snap.states.items()):
            if t != topic:
                continue
            new = after_failures(state, snap.topics[t].partitions.get(p, []), live)
            if new != state and await self._run(self.zk.set_state, t, p, new, version):
                changes += 1
        if changes:
            self._wake.set()
        return changes

    # -- committed offsets ----------------------------------------------------------------------

    async def publish_offsets(self, group: str, topic: str, entries: dict[int, int]) -> None:
        """Write committed offsets through to ZooKeeper (before the commit is answered), so any
        broker serves them after this one is lost."""
        await self._run(self.zk.merge_offsets, group, topic, entries)

    async def forget_offset(self, group: str, topic: str, partition: int) -> None:
        await self._run(self.zk.delete_offset, group, topic, partition)

    async def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        return await self._run(self.zk.committed_offset, group, topic, partition)

    async def forget_group(self, group: str) -> None:
        await self._run(self.zk.delete_group, group)

    # -- shared documents (the Iggy catalog and users) -----------------------------------------

    async def read_doc(self, name: str) -> tuple[bytes, int]:
        """A JSON document every broker shares (``/<name>``), watched from now on; empty if
        nobody wrote it yet; and the version to write it back with."""
        await self._run(self.zk.watch_doc, f"/{name}")
        return await self._run(self.zk.doc, f"/{name}")

    async def write_doc(self, name: str, data: bytes, version: int) -> bool:
        return await self._run(self.zk.set_doc, f"/{name}", data, version)

    async def topic_names(self) -> list[str]:
        """The cluster's topics as ZooKeeper has them now."""
        return await self._run(self.zk.topic_names)

    def doc_changes(self, name: str) -> int:
        """How many changes of the document this broker has seen announced (a watch count)."""
        return self.zk.doc_changes.get(f"/{name}", 0)

    def is_locked(self, name: str) -> bool:
        """Whether a coroutine of this broker holds (or is taking) the cluster lock ``name``."""
        local = self._locks.get(name)
        return local is not None and local.locked()

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str, timeout: float = 15.0) -> AsyncIterator[None]:
        """Hold the cluster-wide lock ``name`` (one holder in the whole cluster)."""
        local = self._locks.setdefault(name, asyncio.Lock())
        async with local:
            lock = self.zk.lock(f"{LOCKS}/{name}")
            try:
                acquired = await self._run(lock.acquire, True, timeout)
            except LockTimeout:
                acquired = False
            if not acquired:
                raise StorageError(f"the cluster lock {name} was not free within {timeout:.0f} s")
            try:
                yield
            finally:
                await self._run(lock.release)

    async def shared_groups(self) -> dict[str, tuple[str, str]]:
        """The groups kept in ZooKeeper: name -> (policy, topic)."""
        return await self._run(self.zk.shared_groups)

    async def _reap_members(self, alive: set[int]) -> None:
        """Drop the connection-bound members (Iggy's) handed out by brokers not in ``alive``: their
        connections are gone with them, so their partitions go to the members left."""
        def gone(member: str) -> bool:
            b = member_broker(member)
            return b is not None and b not in alive

        for group, (policy, _topic) in (await self.shared_groups()).items():
            if policy == "iggy":
                try:
                    await self.broker.drop_group_members(group, gone)
                except Exception:
                    log.exception("cannot drop the members of dead brokers from group %s", group)

    async def group_state(self, group: str) -> tuple[bytes, int]:
        """A V1 group's state as ZooKeeper holds it, and the version to write it back with."""
        return await self._run(self.zk.group_state, group)

    async def set_group_state(self, group: str, data: bytes, version: int) -> bool:
        return await self._run(self.zk.set_group_state, group, data, version)

    async def _sync_offsets(self) -> None:
        """Take every group's committed offsets from ZooKeeper (the cluster's copy wins, deletions
        included; a local commit or deletion made while the copy was being read is kept)."""
        mark = self.broker.offsets_mark()
        remote = await self._run(self.zk.read_offsets)
        if self.broker.adopt_offsets(remote, since=mark):
            await self.broker.save_offsets()

    # -- reconciliation ------------------------------------------------------------------------

    async def _reconcile_loop(self) -> None:
        woken = True
        while not self._stopping:
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
                await asyncio.wait_for(self._wake.wait(), self.tick_s)
            woken = self._wake.is_set()
            self._wake.clear()

    async def _reconcile(self, *, full: bool = True) -> None:
        """One pass. The whole state is read from ZooKeeper when a watch fired (every node the
        pass depends on is watched) and every FULL_READ_EVERY passes anyway; the other passes (ISR
        upkeep on the tick) work from the last snapshot."""
        if self.zk.session_lost.is_set() or not await self._run(self.zk.is_registered):
            self._step_down_all()
            await self._run(self.zk.register, 60.0)
            full = True
        if full or self.snapshot is None:
            snap = await self._run(self.zk.snapshot)
            self.snapshot = snap
        else:
            snap = self.snapshot
        self.broker.metadata.mirror_cluster(
            {b: (reg.host, reg.endpoints.get("rtes", 0)) for b, reg in snap.brokers.items()},
            {k: (st.leader, list(st.isr), st.leader_epoch) for k, (st, _v) in snap.states.items()})
        if snap.controller is None or snap.controller == self.me:
            if snap.controller is None:
                await self._run(self.zk.try_become_controller)
            else:
                await self._control(snap)
                live = set(snap.brokers)
                if self._reaped_with is None or self._reaped_with - live:
                    await self._reap_members(live)
                self._reaped_with = live
        else:
            self._reaped_with = None  # reap again on becoming controller
        await self._sync_topics(snap)
        await self._apply_states(snap)
        await self._maintain_isr(snap)
        self._passes += 1
        if self.zk.offsets_dirty.is_set() or self._passes % FULL_READ_EVERY == 0:
            await self._sync_offsets()

    def _step_down_all(self) -> None:
        """The ZooKeeper session was lost: another broker may lead our partitions by now."""
        for topic in self.broker.topics.values():
            for part in topic.partitions:
                if part.cluster is not None and part.cluster.is_leader:
                    part.cluster.leader = NO_LEADER
                    part.role = FOLLOWER
                    part.notify()

    async def _control(self, snap: Snapshot) -> None:
        live = set(snap.brokers)
        leaving = {b for b, reg in snap.brokers.items() if reg.leaving}
        for (topic, p), (state, version) in sorted(snap.states.items()):
            replicas = snap.topics[topic].partitions.get(p, [])
            new = hand_over(after_failures(state, replicas, live), replicas, leaving)
            if new != state and await self._run(self.zk.set_state, topic, p, new, version):
                log.info("controller: %s/%d leader %d -> %d (epoch %d), isr %s", topic, p,
                         state.leader, new.leader, new.leader_epoch, list(new.isr))
                self._wake.set()

    async def _sync_topics(self, snap: Snapshot) -> None:
        """Open the topics ZooKeeper has; drop local copies of topics it no longer has, or of an
        older incarnation (deleted and created again while this broker was away: the topic id
        differs), so an old log is never served as the new topic."""
        for name, assignment in sorted(snap.topics.items()):
            self._known_topics.add(name)
            try:  # one topic that fails must not hold up the rest of the pass
                local = self.broker.topics.get(name)
                if local is not None and local.meta.config.get(TOPIC_ID) != assignment.config.get(TOPIC_ID):
                    log.info("dropping the local copy of an older incarnation of topic %s", name)
                    await self._drop_local(name)
                    local = None
                if local is not None and (assignment.config.get(PARTITIONS_REMOVED)
                                          != local.meta.config.get(PARTITIONS_REMOVED)):
                    await self._drop_removed(local, assignment)
                    local = self.broker.topics.get(name)
                if local is None:
                    await self.broker.create_topic(name, len(assignment.partitions), assignment.config,
                                                   exist_ok=True, from_cluster=True)
                elif len(local.partitions) < len(assignment.partitions):
                    await self.broker.add_partitions(name, len(assignment.partitions), from_cluster=True)
                elif len(local.partitions) > len(assignment.partitions):
                    keep = len(assignment.partitions)
                    for part in local.partitions[keep:]:
                        self._stop_fetcher((name, part.index))
                        await self._run(self._detach, part)
                    await self.broker.remove_partitions(name, len(local.partitions) - keep,
                                                        from_cluster=True)
            except Exception:
                log.exception("cannot open topic %s from the cluster state; retrying", name)
        gone = [t for t, topic in self.broker.topics.items() if t not in snap.topics
                and (t in self._known_topics or TOPIC_ID in topic.meta.config)]
        for name in gone:
            try:
                await self._drop_local(name)
            except Exception:
                log.exception("cannot drop topic %s; retrying", name)

    async def _drop_removed(self, local: Topic, assignment: TopicAssignment) -> None:
        """Partitions were removed since this copy last looked (maybe added again since): drop
        the local copies of every removed index, then remember the removals seen."""
        name = local.meta.name
        history = assignment.config.get(PARTITIONS_REMOVED)
        first = partitions_to_drop(history, local.meta.config.get(PARTITIONS_REMOVED))
        if first is not None and len(local.partitions) > first:
            for part in local.partitions[first:]:
                self._stop_fetcher((name, part.index))
                await self._run(self._detach, part)
            await self.broker.remove_partitions(name, len(local.partitions) - first, from_cluster=True)
        await self.broker.alter_topic_config(name, {PARTITIONS_REMOVED: history})

    async def _drop_local(self, name: str) -> None:
        topic = self.broker.topics.get(name)
        if topic is not None:
            for p, part in enumerate(topic.partitions):
                self._stop_fetcher((name, p))
                await self._run(self._detach, part)
            with contextlib.suppress(UnknownTopic):
                await self.broker.delete_topic(name, from_cluster=True)
        self._known_topics.discard(name)

    async def _apply_states(self, snap: Snapshot) -> None:
        for (topic, p), (state, version) in snap.states.items():
            t = self.broker.topics.get(topic)
            if t is None or p >= len(t.partitions):
                continue
            part = t.partitions[p]
            replicas = tuple(snap.topics[topic].partitions.get(p, ()))
            rs = part.cluster
            if rs is None or rs.epoch != state.leader_epoch or rs.leader != state.leader:
                if rs is not None and rs.epoch > state.leader_epoch:
                    continue  # an older state read after a newer one
                self._take_state(part, state, version, replicas, snap)
            elif version > rs.version:
                rs.isr = state.isr
                rs.version = version
                if rs.is_leader and rs.advance_hw(part.log.next_offset):
                    part.notify()

    def _take_state(self, part: Partition, state: PartitionState, version: int,
                    replicas: tuple[int, ...], snap: Snapshot) -> None:
        with part.replica_lock:  # no copy or truncation of the previous state is half-way now
            self._take_state_locked(part, state, version, replicas, snap)

    def _take_state_locked(self, part: Partition, state: PartitionState, version: int,
                           replicas: tuple[int, ...], snap: Snapshot) -> None:
        old = part.cluster
        if part.epochs is None:
            part.epochs = LeaderEpochCache(part.log.dir)
            part.epochs.truncate_from(part.log.next_offset + 1)  # recovery may have cut the log
        key = (part.topic, part.index)
        hw = min(old.hw, part.log.next_offset) if old is not None else 0
        rs = ReplicaSet(self.me, state.leader, state.leader_epoch, state.isr, replicas, version, hw)
        part.cluster = rs
        if state.leader == self.me:
            self._stop_fetcher(key)
            part.epochs.assign(state.leader_epoch, part.log.next_offset)
            rs.epoch_start = part.log.next_offset
            part.role = LEADER
            log.info("leading %s/%d in epoch %d from offset %d", part.topic, part.index,
                     state.leader_epoch, part.log.next_offset)
        else:
            part.role = FOLLOWER
            self._stop_fetcher(key)
            if state.leader != NO_LEADER and self.me in replicas:
                leader = snap.brokers.get(state.leader)
                if leader is not None and leader.address(REPLICATION) is not None:
                    assert self._loop is not None
                    self._fetchers[key] = self._loop.create_task(
                        self._fetch_loop(part, rs, leader), name=f"fetch-{part.topic}-{part.index}")
        part.notify()

    def _stop_fetcher(self, key: tuple[str, int]) -> None:
        task = self._fetchers.pop(key, None)
        if task is not None:
            task.cancel()

    async def _maintain_isr(self, snap: Snapshot) -> None:
        if self._leaving:  # the controller hands the partitions over; draining must not shrink ISRs
            return
        staying = {b for b, reg in snap.brokers.items() if not reg.leaving}  # leaving ones never rejoin
        for topic in list(self.broker.topics.values()):
            for part in topic.partitions:
                rs = part.cluster
                if rs is None or not rs.is_leader:
                    continue
                wanted = rs.wanted_isr(part.log.next_offset, self.lag_timeout_s, staying,
                                       self.broker.config.replica_max_lag_records)
                if wanted == rs.isr:
                    continue
                new = PartitionState(self.me, rs.epoch, wanted)
                if await self._run(self.zk.set_state, part.topic, part.index, new, rs.version):
                    log.info("%s/%d ISR %s -> %s", part.topic, part.index, list(rs.isr), list(wanted))
                    rs.isr = wanted
                    rs.version += 1
                    rs.since = time.monotonic()
                    rs.advance_hw(part.log.next_offset)
                    part.notify()
                else:
                    self._wake.set()  # someone else changed it: re-read

    # -- forwarded produces (for clients that cannot follow a redirect: Iggy's) -----------------

    async def _ask_leader(self, topic: str, partition: int, req: Produce | Fetch,
                          timeout: float, idempotent: bool) -> FetchReply | ProduceReply:
        """One request to the partition's leader over its replication listener (pooled
        connections); NotLeader when no other live broker leads it or it does not answer. A
        request is sent again on a new connection only when an idle one turns out closed before
        anything came back, and (``idempotent``) after a timeout."""
        reg, _epoch = self.partition_leader(topic, partition)
        if reg is None or reg.broker_id == self.me or reg.address(REPLICATION) is None:
            raise NotLeader("no other broker leads this partition now")
        host, port = reg.address(REPLICATION)  # type: ignore[misc]
        want = ProduceReply if isinstance(req, Produce) else FetchReply
        idle = self._forwarders.setdefault((host, port), [])
        while True:
            reused = bool(idle)
            try:
                reader, writer = idle.pop() if idle else await asyncio.wait_for(self._connect(host, port), 5)
            except (OSError, TimeoutError, ReplicaProtocolError):
                raise NotLeader("the partition's leader cannot be reached") from None
            got = b""
            try:
                writer.write(encode(req))
                await writer.drain()
                got = await asyncio.wait_for(reader.readexactly(5), timeout)
                got += await asyncio.wait_for(reader.readexactly(int.from_bytes(got[:4], "big") - 1),
                                              timeout)
                decoded = decode(got)
                if decoded is None or not isinstance(decoded[0], want):
                    raise ReplicaProtocolError(f"expected a {want.__name__}")
                break
            except (OSError, EOFError) as exc:
                writer.close()
                if reused and not got and isinstance(exc, ConnectionError | EOFError):
                    # an idle connection the leader had closed before reading the request: once
                    # more on a new one (a timeout is not retried: the leader may have appended)
                    continue
                raise NotLeader("the partition's leader did not answer") from None
            except asyncio.CancelledError:
                writer.close()  # half a request may be on it: never reuse it
                raise
            except (TimeoutError, ReplicaProtocolError):
                writer.close()
                raise NotLeader("the partition's leader did not answer") from None
        if len(idle) < MAX_IDLE_FORWARDERS:
            idle.append((reader, writer))
        else:
            writer.close()
        reply = decoded[0]
        assert isinstance(reply, FetchReply | ProduceReply)
        return reply

    async def consumer_fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        """A consumer's read at the partition's leader, for a broker holding no replica of it:
        batches from ``offset`` below the leader's high watermark, with that watermark and the log
        start (``max_bytes`` 0: only those two). OffsetOutOfRange outside the log."""
        reply = await self._ask_leader(topic, partition, Fetch(topic, partition, CONSUMER, -1, max(offset, 0),
                                                               -1, max_bytes, 0), 15.0, True)
        assert isinstance(reply, FetchReply)
        if reply.error == FetchError.OFFSET_OUT_OF_RANGE:
            raise OffsetOutOfRange(f"offset {offset} is outside the leader's log")
        if reply.error == FetchError.UNKNOWN_PARTITION:
            raise UnknownPartition(f"topic {topic} has no partition {partition} at its leader")
        if reply.error != FetchError.NONE:
            raise NotLeader("the broker asked no longer leads the partition")
        heads = [h for _pos, h in iter_batches(reply.data)]
        return FetchResult(reply.data, sum(h.record_count for h in heads),
                           heads[-1].next_offset if heads else max(offset, 0),
                           reply.high_watermark, reply.log_start_offset, reply.high_watermark)

    async def forward_produce(self, topic: str, partition: int, batch: bytes, acks: Acks, *,
                              deduplicate: bool = False) -> ProduceResult:
        """Have the partition's leader append ``batch`` (over the replication listener) and return
        its answer; NotLeader when no live broker leads the partition (or the leader went away)."""
        req = Produce(topic, partition, int(acks), DEDUPLICATE if deduplicate else 0, batch)
        reply = await self._ask_leader(topic, partition, req,
                                       self.broker.config.ack_all_timeout_ms / 1000 + 10, False)
        assert isinstance(reply, ProduceReply)
        if reply.error == ProduceError.NONE:
            return ProduceResult(partition, reply.base_offset, reply.last_offset, reply.high_watermark,
                                 reply.log_start_offset)
        error: type[BayouError] = {
            ProduceError.NOT_LEADER: NotLeader, ProduceError.REPLICATION_TIMEOUT: ReplicationTimeout,
            ProduceError.UNKNOWN_TOPIC: UnknownTopic, ProduceError.UNKNOWN_PARTITION: UnknownPartition,
        }.get(reply.error, InvalidRequest)
        message = reply.message
        if reply.error == ProduceError.REJECTED:  # "CODE: message": the leader's own error
            code, _sep, rest = message.partition(": ")
            if code in REGISTRY:
                error, message = REGISTRY[code], rest
        raise error(message or None)

    async def serve_produce(self, req: Produce) -> ProduceReply:
        """Another broker's forwarded produce, appended here if this broker leads the partition."""
        acks = Acks(req.acks)
        try:
            if req.flags & DEDUPLICATE:
                def decode_all() -> list[Record]:
                    return [r for pos, _h in iter_batches(req.batch) for r in decode_records(req.batch, pos)]

                # a large or compressed batch is decoded off the event loop (the default pool)
                records = (decode_all() if len(req.batch) <= INLINE_DECODE_BYTES
                           and not any(h.compression for _pos, h in iter_batches(req.batch))
                           else await asyncio.to_thread(decode_all))

                def build(keep: list[bool]) -> bytes:
                    if all(keep):
                        return req.batch
                    return encode_batch([r for r, k in zip(records, keep, strict=True) if k])

                result = await self.broker.produce_unique(
                    req.topic, req.partition, [r.message_id or 0 for r in records], build, acks)
            else:
                result = await self.broker.produce(req.topic, req.partition, req.batch, acks, create=False)
        except NotLeader:
            return ProduceReply(ProduceError.NOT_LEADER, message="not the partition's leader")
        except NotEnoughReplicas as exc:  # nothing appended: the forwarder raises the same error
            return ProduceReply(ProduceError.REJECTED, message=f"{exc.code}: {exc.message}")
        except ReplicationTimeout as exc:
            return ProduceReply(ProduceError.REPLICATION_TIMEOUT, message=exc.message)
        except UnknownTopic as exc:
            return ProduceReply(ProduceError.UNKNOWN_TOPIC, message=exc.message)
        except UnknownPartition as exc:
            return ProduceReply(ProduceError.UNKNOWN_PARTITION, message=exc.message)
        except BayouError as exc:
            return ProduceReply(ProduceError.REJECTED, message=f"{exc.code}: {exc.message}")
        return ProduceReply(ProduceError.NONE, result.base_offset, result.last_offset,
                            result.high_watermark, result.log_start_offset)

    # -- leader side of replication ----------------------------------------------------------

    async def serve_fetch(self, req: Fetch) -> FetchReply:
        """A follower's FETCH: check the epochs, record its progress, long-poll, send batches."""
        try:
            part = self.broker.partition(req.topic, req.partition)
        except (UnknownTopic, UnknownPartition):
            return FetchReply(FetchError.UNKNOWN_PARTITION, -1, 0, 0)
        rs = part.cluster
        if rs is None or not rs.is_leader or req.leader_epoch > rs.epoch:
            return FetchReply(FetchError.NOT_LEADER, rs.epoch if rs else -1, 0, 0)
        if req.replica_id == CONSUMER:  # a read forwarded by a broker holding no replica
            hw, start = part.high_watermark, part.log.log_start_offset
            if req.max_bytes == 0 or req.fetch_offset == hw:
                return FetchReply(FetchError.NONE, rs.epoch, hw, start)
            if not start <= req.fetch_offset < hw:
                return FetchReply(FetchError.OFFSET_OUT_OF_RANGE, rs.epoch, hw, start)
            try:
                result = await self.broker.fetch(req.topic, req.partition, req.fetch_offset,
                                                 max_bytes=req.max_bytes)
            except OffsetOutOfRange:
                return FetchReply(FetchError.OFFSET_OUT_OF_RANGE, rs.epoch, hw, start)
            except (UnknownTopic, UnknownPartition):
                return FetchReply(FetchError.UNKNOWN_PARTITION, -1, 0, 0)
            return FetchReply(FetchError.NONE, rs.epoch, result.high_watermark, result.log_start_offset,
                              data=bytes(result.data))
        if req.leader_epoch < rs.epoch:
            return FetchReply(FetchError.FENCED, rs.epoch, 0, 0)
        assert part.epochs is not None
        log_end = part.log.next_offset
        if req.fetch_offset < part.log.log_start_offset:  # checked first: the follower restarts there
            return FetchReply(FetchError.OFFSET_OUT_OF_RANGE, rs.epoch, part.high_watermark,
                              part.log.log_start_offset)
        if req.last_fetched_epoch >= 0:
            epoch, end = part.epochs.end_offset_for(req.last_fetched_epoch, log_end)
            if epoch < 0:
                # no epoch at or below the follower's here (a cache lost or restarted): what is
                # committed is common ground; past it, cut back to it
                if req.fetch_offset > part.high_watermark:
                    return FetchReply(FetchError.NONE, rs.epoch, part.high_watermark,
                                      part.log.log_start_offset, part.high_watermark, epoch)
            elif epoch != req.last_fetched_epoch or req.fetch_offset > end:
                return FetchReply(FetchError.NONE, rs.epoch, part.high_watermark, part.log.log_start_offset,
                                  end, epoch)
        if req.fetch_offset > log_end:
            return FetchReply(FetchError.OFFSET_OUT_OF_RANGE, rs.epoch, part.high_watermark,
                              part.log.log_start_offset)
        if req.replica_id in rs.replicas and req.replica_id != self.me:
            rs.follower_fetched(req.replica_id, req.fetch_offset, log_end)
            if rs.advance_hw(log_end):
                part.notify()
            if req.replica_id not in rs.isr and req.fetch_offset >= rs.hw:
                self._wake.set()  # it may join the ISR
        if req.fetch_offset >= part.log.next_offset and req.max_wait_ms > 0:
            await part.wait_for_data(req.max_wait_ms / 1000)
        try:
            result = await self.broker.fetch(req.topic, req.partition, req.fetch_offset,
                                             max_bytes=req.max_bytes, upto_log_end=True)
        except OffsetOutOfRange:
            return FetchReply(FetchError.OFFSET_OUT_OF_RANGE, rs.epoch, part.high_watermark,
                              part.log.log_start_offset)
        except (UnknownTopic, UnknownPartition):  # deleted or removed while the fetch waited
            return FetchReply(FetchError.UNKNOWN_PARTITION, -1, 0, 0)
        return FetchReply(FetchError.NONE, rs.epoch, part.high_watermark, part.log.log_start_offset,
                          data=bytes(result.data))

    # -- follower side ------------------------------------------------------------------------

    async def _connect(self, host: str, port: int, limit: int = 1 << 16
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to another broker's replication listener, past its challenge when the
        cluster has a shared secret (ReplicaProtocolError when the answer is refused), over TLS
        when the cluster's replication listeners use it (mTLS: this broker's certificate)."""
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=limit, ssl=self.tls,
                                                           server_hostname=host if self.tls else None)
        except ssl.SSLError as exc:
            raise ReplicaProtocolError(f"TLS handshake with {host}:{port} failed: {exc}") from None
        if self.secret is None:
            return reader, writer
        try:
            head = await asyncio.wait_for(reader.readexactly(HEADER_SIZE), 10)
            if int.from_bytes(head[:4], "big") != NONCE_SIZE + 1:
                raise ReplicaProtocolError("expected the replication listener's CHALLENGE")
            decoded = decode(head + await asyncio.wait_for(reader.readexactly(NONCE_SIZE), 10))
            if decoded is None or not isinstance(decoded[0], Challenge):
                raise ReplicaProtocolError("expected the replication listener's CHALLENGE")
            writer.write(encode(Auth(self.me, auth_mac(self.secret, decoded[0].nonce, self.me))))
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ReplicaProtocolError) as exc:
            writer.close()
            raise ReplicaProtocolError(f"replication handshake with {host}:{port} failed: "
                                       f"{exc or type(exc).__name__}") from None
        return reader, writer

    async def _fetch_loop(self, part: Partition, rs: ReplicaSet, leader: BrokerRegistration) -> None:
        addr = leader.address(REPLICATION)
        assert addr is not None
        backoff = 0.05
        while part.cluster is rs and not self._stopping:
            try:
                reader, writer = await self._connect(*addr, limit=FETCH_MAX_BYTES * 2)
            except (OSError, ReplicaProtocolError) as exc:
                if isinstance(exc, ConnectionRefusedError):
                    self._suspect(leader)
                elif isinstance(exc, ReplicaProtocolError):
                    log.warning("cannot fetch %s/%d from broker %d: %s", part.topic, part.index,
                                leader.broker_id, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                self._wake.set()
                continue
            backoff = 0.05
            try:
                await self._fetch_on(part, rs, reader, writer)
            except (OSError, ConnectionError, ReplicaProtocolError, asyncio.IncompleteReadError) as exc:
                log.info("fetch of %s/%d from broker %d stopped: %s", part.topic, part.index,
                         leader.broker_id, exc)
                await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                raise
            except Exception:  # a storage error must not end replication for good
                log.exception("fetch of %s/%d from broker %d failed; retrying", part.topic, part.index,
                              leader.broker_id)
                await asyncio.sleep(1.0)
            finally:
                writer.close()

    async def _fetch_on(self, part: Partition, rs: ReplicaSet, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        assert part.epochs is not None
        loop = asyncio.get_running_loop()
        while part.cluster is rs and not self._stopping:
            req = Fetch(part.topic, part.index, self.me, rs.epoch, part.log.next_offset,
                        self._last_epoch(part), FETCH_MAX_BYTES, FETCH_MAX_WAIT_MS)
            writer.write(encode(req))
            await writer.drain()
            head = await reader.readexactly(5)
            size = int.from_bytes(head[:4], "big")
            body = await reader.readexactly(size - 1)
            decoded = decode(head + body)
            if decoded is None or not isinstance(decoded[0], FetchReply):
                raise ReplicaProtocolError("expected a FETCH_REPLY")
            reply = decoded[0]
            if part.cluster is not rs:
                return
            if reply.error in (FetchError.NOT_LEADER, FetchError.FENCED, FetchError.UNKNOWN_PARTITION):
                self._wake.set()
                await asyncio.sleep(0.1)
                continue
            if reply.error == FetchError.OFFSET_OUT_OF_RANGE:
                if reply.log_start_offset > part.log.next_offset:
                    # retention on the leader passed our end: start over at its log start
                    await loop.run_in_executor(self.broker._io, self._restart_at, part, rs,
                                               reply.log_start_offset)
                else:  # our log runs past the leader's: what is beyond its end diverged
                    await loop.run_in_executor(self.broker._io, self._truncate, part, rs,
                                               min(part.log.next_offset, max(reply.high_watermark, 0)))
                await asyncio.sleep(0.05)
                continue
            if reply.diverging_end_offset >= 0:
                # KIP-320: cut where the epoch ended on the leader or here, whichever is first
                _own_epoch, own_end = part.epochs.end_offset_for(reply.diverging_epoch, part.log.next_offset)
                cut = min(reply.diverging_end_offset, part.log.next_offset)
                if own_end >= 0:
                    cut = min(cut, own_end)
                log.info("%s/%d diverged from the leader after offset %d (epoch %d): truncating",
                         part.topic, part.index, cut, reply.diverging_epoch)
                if cut >= part.log.next_offset:
                    await asyncio.sleep(0.1)  # nothing to cut: never spin
                await loop.run_in_executor(self.broker._io, self._truncate, part, rs, cut)
                continue
            if reply.data:
                await loop.run_in_executor(self.broker._io, self._append_copied, part, rs, reply.data)
            if reply.log_start_offset > part.log.log_start_offset:
                # the leader's log start moved (retention, purge, deleted segments): follow it
                if reply.log_start_offset >= part.log.next_offset:
                    await loop.run_in_executor(self.broker._io, self._restart_at, part, rs,
                                               reply.log_start_offset)
                else:
                    await loop.run_in_executor(self.broker._io, self._fenced, part, rs,
                                               functools.partial(self._drop_below, part,
                                                                 reply.log_start_offset))
            rs.hw = max(rs.hw, min(reply.high_watermark, part.log.next_offset))
            part.notify()

    @staticmethod
    def _drop_below(part: Partition, offset: int) -> None:
        if part.log.delete_segments_below(offset):
            part.reset_idempotence()

    @staticmethod
    def _detach(part: Partition) -> None:
        """Wait out a copy or truncation in a worker thread, then fence any later one."""
        with part.replica_lock:
            part.cluster = None

    @staticmethod
    def _last_epoch(part: Partition) -> int:
        """The epoch of the follower's last batch: from the epoch cache, else (a cache lost or a
        log from before cluster mode) from the last batch's header; -1 for an empty log."""
        assert part.epochs is not None
        if part.log.next_offset <= part.log.log_start_offset:
            return -1
        if part.epochs.entries:
            return part.epochs.latest_epoch
        h = part.log.batch_header_at(part.log.next_offset - 1)
        return h.leader_epoch if h is not None and h.leader_epoch >= 0 else -1

    @staticmethod
    def _truncate(part: Partition, rs: ReplicaSet, offset: int) -> None:
        """Cut the follower's log at ``offset`` (what diverged from the leader)."""
        ClusterNode._fenced(part, rs, lambda: ClusterNode._cut(part, rs, offset, restart=False))

    @staticmethod
    def _restart_at(part: Partition, rs: ReplicaSet, start: int) -> None:
        """Empty the follower's log and start it at ``start`` (the leader's log start)."""
        ClusterNode._fenced(part, rs, lambda: ClusterNode._cut(part, rs, start, restart=True))

    @staticmethod
    def _append_copied(part: Partition, rs: ReplicaSet, data: bytes) -> None:
        ClusterNode._fenced(part, rs, lambda: ClusterNode._copy(part, data))

    @staticmethod
    def _fenced(part: Partition, rs: ReplicaSet, change: Callable[[], None]) -> None:
        """Run a follower's change to its log (in a worker thread) only if the partition is still
        in the state ``rs`` that asked for it: the state may have moved on while it waited."""
        with part.replica_lock:
            if part.cluster is rs and not rs.is_leader:
                change()

    @staticmethod
    def _cut(part: Partition, rs: ReplicaSet, offset: int, *, restart: bool) -> None:
        assert part.epochs is not None
        if restart:
            part.log.purge(offset)
            part.epochs.truncate_from(0)
        else:
            part.log.truncate_to(offset)
            part.epochs.truncate_from(offset)
        rs.hw = min(rs.hw, part.log.next_offset)
        part.reset_idempotence()

    @staticmethod
    def _copy(part: Partition, data: bytes) -> None:
        """Append the leader's batches at their own offsets (skipping any we already hold)."""
        assert part.epochs is not None
        for pos, h in iter_batches(data):
            if h.next_offset <= part.log.next_offset:
                continue
            batch = data[pos : pos + h.size]
            part.epochs.assign(h.leader_epoch, h.base_offset)
            part.log.append(batch, at_offset=h.base_offset)
        if part.log.config.fsync.mode == "always":
            part.log.sync_to(part.log.next_offset)

