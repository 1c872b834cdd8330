"""ZooKeeper access through kazoo: connection, registration, controller election, cluster state.

Every method blocks (kazoo's synchronous API): the broker calls them from a worker thread. Watches
fire on kazoo's thread and only call ``on_change``, which the broker turns into a wake-up of its
asyncio reconciliation task (``node.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlparse

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.lock import Lock
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from bayou.broker.cluster.state import (
    BROKERS,
    CLUSTER_ID,
    CONTROLLER,
    GROUPS,
    PARTITIONS_REMOVED,
    TOPICS,
    TXN_BUCKETS,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    assign_replicas,
    broker_path,
    bucket_path,
    group_path,
    initial_state,
    offsets_path,
    state_path,
    topic_path,
    txn_bucket,
    txn_path,
)

log = logging.getLogger("bayou.cluster")

TxOps = Callable[[TransactionRequest], None]  # adds operations to a ZooKeeper transaction
Plan = Callable[["TopicAssignment"], tuple["TopicAssignment", TxOps]]  # see ZkCluster._rewrite_topic


def parse_url(url: str) -> tuple[str, str]:
    """(``host:port[,host:port]``, chroot) of ``zk://HOST:PORT[,HOST:PORT]/path``."""
    parsed = urlparse(url)
    if parsed.scheme != "zk" or not parsed.netloc:
        raise ValueError(f"expected zk://HOST:PORT[,HOST:PORT]/path, got {url!r}")
    chroot = parsed.path.rstrip("/") or "/bayou"
    return parsed.netloc, chroot


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster state read in one pass (not atomic across nodes: watches bring the next)."""

    brokers: dict[int, BrokerRegistration]
    controller: int | None
    topics: dict[str, TopicAssignment]
    states: dict[tuple[str, int], tuple[PartitionState, int]]  # state and its znode version


def kazoo_auth(auth: str | None) -> dict[str, Any]:
    """KazooClient arguments for ``[cluster] zk_auth = "user:password"``: digest auth on the
    session, and every znode bayou creates readable by all but changed only by that user."""
    if not auth:
        return {}
    user, _sep, password = auth.partition(":")
    return {"auth_data": [("digest", auth)],
            "default_acl": [make_digest_acl(user, password, all=True), *READ_ACL_UNSAFE]}


class ZkCluster:
    def __init__(self, url: str, broker_id: int, registration: BrokerRegistration,
                 on_change: Callable[[], None], *, session_timeout_s: float = 6.0,
                 auth: str | None = None) -> None:
        hosts, chroot = parse_url(url)
        self.broker_id = broker_id
        self.registration = registration
        self.on_change = on_change
        self._kazoo_auth = kazoo_auth(auth)
        self.zk = KazooClient(hosts=hosts + chroot, timeout=session_timeout_s, **self._kazoo_auth)
        self._hosts = hosts
        self._chroot = chroot
        self._watched: set[str] = set()
        self.doc_changes: dict[str, int] = {}  # shared document path -> changes seen
        self._lock = threading.Lock()
        self.session_lost = threading.Event()
        self.offsets_dirty = threading.Event()  # a group's offsets changed in ZooKeeper
        self.offsets_dirty.set()

    # -- connection and registration -------------------------------------------------------

    def start(self, timeout: float = 30.0, accept: Callable[[str], None] | None = None) -> None:
        """Connect and register; ``accept`` sees the cluster's id first and may refuse it (raise),
        before this broker is visible to the others."""
        root = KazooClient(hosts=self._hosts, timeout=10.0, **self._kazoo_auth)
        root.start(timeout=timeout)
        try:
            root.ensure_path(self._chroot)
        finally:
            root.stop()
            root.close()
        self.zk.add_listener(self._state_listener)
        self.zk.start(timeout=timeout)
        for path in (BROKERS, TOPICS, GROUPS):
            self.zk.ensure_path(path)
        if accept is not None:
            try:
                accept(self.cluster_id())
            except BaseException:
                self.zk.stop()
                self.zk.close()
                raise
        self.register(timeout)
        self.zk.ChildrenWatch(BROKERS, self._children_changed)
        self.zk.ChildrenWatch(TOPICS, self._children_changed)
        self.zk.ChildrenWatch(GROUPS, self._groups_changed)
        self.zk.DataWatch(CONTROLLER, self._data_changed)

    def _state_listener(self, state: str) -> None:
        if state == KazooState.LOST:
            self.session_lost.set()
        self.on_change()

    def _children_changed(self, _children: list[str]) -> None:
        self.on_change()

    def _data_changed(self, _data: bytes | None, _stat: ZnodeStat | None) -> bool | None:
        self.on_change()
        return None

    def _groups_changed(self, _children: list[str]) -> None:
        self.offsets_dirty.set()
        self.on_change()

    def _offsets_changed(self, _data: bytes | None, _stat: ZnodeStat | None) -> bool | None:
        self.offsets_dirty.set()
        self.on_change()
        return None

    def register(self, timeout: float = 30.0) -> None:
        """Create this broker's ephemeral node. A node left by this id's previous process (killed
        before its session expired) is waited out; another live broker with this id is an error
        once ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        path = broker_path(self.broker_id)
        while True:
            try:
                self.zk.create(path, self.registration.to_json(), ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                _data, stat = self.zk.get(path)
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    break  # ours already (re-registration after a reconnect)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker id {self.broker_id} is registered by another live "
                                       "broker") from None
                time.sleep(0.25)
        self.session_lost.clear()
        log.info("registered broker %d in ZooKeeper", self.broker_id)

    def remove_dead(self, reg: BrokerRegistration) -> bool:
        """Delete the registration ``reg`` of a broker proven dead (every listener refuses
        connections), and its controller node, as its session's expiry would. Not when the node
        changed meanwhile (it registered again). True when removed."""
        path = broker_path(reg.broker_id)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return False
        if BrokerRegistration.from_json(data) != reg or stat.ephemeralOwner == self.zk.client_id[0]:
            return False
        try:
            cdata, cstat = self.zk.get(CONTROLLER)
            controller = (int(json.loads(cdata)["broker_id"]) == reg.broker_id
                          and cstat.ephemeralOwner == stat.ephemeralOwner)
        except NoNodeError:
            controller = False
        tx = self.zk.transaction()
        tx.check(path, stat.version)
        tx.delete(path)
        if controller:
            tx.delete(CONTROLLER, cstat.version)
        return all(not isinstance(r, Exception) for r in tx.commit())

    def announce_leaving(self) -> None:
        """Controlled shutdown: mark this broker's node ``leaving`` (a re-registration after a
        reconnect keeps the mark)."""
        reg = self.registration
        self.registration = BrokerRegistration(reg.broker_id, reg.host, dict(reg.endpoints), leaving=True,
                                               name=reg.name)
        self.zk.set(broker_path(self.broker_id), self.registration.to_json())

    def cluster_id(self) -> str:
        """The cluster's id, created by the first broker to ask (Kafka's /cluster/id)."""
        with contextlib.suppress(NodeExistsError):
            self.zk.create(CLUSTER_ID, json.dumps({"id": str(uuid.uuid4())}).encode(), makepath=True)
        data, _stat = self.zk.get(CLUSTER_ID)
        return str(json.loads(data)["id"])

    def is_registered(self) -> bool:
        try:
            _data, stat = self.zk.get(broker_path(self.broker_id))
        except NoNodeError:
            return False
        return bool(stat.ephemeralOwner == self.zk.client_id[0])

    def stop(self) -> None:
        try:
            self.zk.stop()
        finally:
            self.zk.close()

    # -- controller --------------------------------------------------------------------------

    def try_become_controller(self) -> bool:
        """Whether this broker holds /controller (creating it if nobody does)."""
        try:
            self.zk.create(CONTROLLER, b'{"broker_id": %d}' % self.broker_id, ephemeral=True)
            log.info("broker %d is the controller", self.broker_id)
            return True
        except NodeExistsError:
            try:
                _data, stat = self.zk.get(CONTROLLER)
            except NoNodeError:
                return False
            return bool(stat.ephemeralOwner == self.zk.client_id[0])

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        brokers: dict[int, BrokerRegistration] = {}
        for child in self.zk.get_children(BROKERS):
            try:
                data, _stat = self.zk.get(f"{BROKERS}/{child}")
            except NoNodeError:
                continue
            reg = BrokerRegistration.from_json(data)
            brokers[reg.broker_id] = reg
            self._watch(f"{BROKERS}/{child}")  # a broker announcing its controlled shutdown
        controller: int | None = None
        try:
            data, _stat = self.zk.get(CONTROLLER)
            controller = int(json.loads(data)["broker_id"])
        except NoNodeError:
            pass
        topics: dict[str, TopicAssignment] = {}
        states: dict[tuple[str, int], tuple[PartitionState, int]] = {}
        for name in self.zk.get_children(TOPICS):
            try:
                data, _stat = self.zk.get(topic_path(name))
            except NoNodeError:
                continue
            if not data:
                continue  # being created: the assignment is written with the node
            self._watch(topic_path(name))  # partitions added or removed
            assignment = TopicAssignment.from_json(data)
            topics[name] = assignment
            for p in assignment.partitions:
                path = state_path(name, p)
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                states[(name, p)] = (PartitionState.from_json(data), stat.version)
                self._watch(path)
        return Snapshot(brokers, controller, topics, states)

    def _watch(self, path: str) -> None:
        with self._lock:
            if path in self._watched:
                return
            self._watched.add(path)
        self.zk.DataWatch(path, self._data_changed)

    # -- writing ----------------------------------------------------------------------------

    def create_topic(self, name: str, assignment: TopicAssignment,
                     states: dict[int, PartitionState]) -> None:
        """The topic node and every partition's first state, in one transaction."""
        tx = self.zk.transaction()
        tx.create(topic_path(name), assignment.to_json())
        tx.create(f"{topic_path(name)}/partitions")
        for p in sorted(states):
            tx.create(f"{topic_path(name)}/partitions/{p}")
            tx.create(state_path(name, p), states[p].to_json())
        results = tx.commit()
        for r in results:
            if isinstance(r, NodeExistsError):
                raise NodeExistsError(name)
            if isinstance(r, Exception):
                raise r

    def _rewrite_topic(self, name: str, plan: Plan) -> tuple[TopicAssignment, TopicAssignment]:
        """Change a topic's assignment: ``plan(current)`` gives the new one and adds the state
        nodes' changes to the transaction that writes it (compare-and-set on the topic node; read
        again and re-planned when anything changed meanwhile). Returns (old, new); LookupError for
        an unknown topic; whatever ``plan`` raises."""
        path = topic_path(name)
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                raise LookupError(name) from None
            old = TopicAssignment.from_json(data)
            new, add_ops = plan(old)
            tx = self.zk.transaction()
            tx.set_data(path, new.to_json(), version=stat.version)
            add_ops(tx)
            results = tx.commit()
            if any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError)) for r in results):
                continue  # changed meanwhile: read it again
            for r in results:
                if isinstance(r, Exception):
                    raise r
            return old, new

    def add_partitions(self, name: str, total: int | None, start: int, more: int = 0
                       ) -> dict[int, list[int]]:
        """Grow a topic to ``total`` partitions (or by ``more``, counted from ZooKeeper's count, not
        a broker's copy that may be behind): the new ones assigned over the live brokers with
        the topic's replication factor, their first states written with the topic node. Returns
        the new partitions' replicas; raises LookupError for an unknown topic, ValueError for a
        count that does not grow it or too few live brokers."""
        def plan(assignment: TopicAssignment) -> tuple[TopicAssignment, TxOps]:
            have = len(assignment.partitions)
            want = have + more if more else total
            if want is None or want <= have:
                raise ValueError(f"topic {name} has {have} partitions; the new count must be larger")
            live = sorted(int(b) for b in self.zk.get_children(BROKERS))
            rf = int(assignment.config.get("replication.factor") or assignment.replication_factor)
            new = assign_replicas(live, want - have, rf, first_partition=have, start=start)

            def ops(tx: TransactionRequest) -> None:
                for p in sorted(new):
                    tx.create(f"{topic_path(name)}/partitions/{p}")
                    tx.create(state_path(name, p), initial_state(new[p], set(live)).to_json())

            return TopicAssignment({**assignment.partitions, **new}, assignment.config), ops

        old, grown = self._rewrite_topic(name, plan)
        return {p: r for p, r in grown.partitions.items() if p not in old.partitions}

    def remove_partitions(self, name: str, count: int) -> int:
        """Remove a topic's last ``count`` partitions (of ZooKeeper's count): their state nodes
        go with the topic node's change, then every group's committed offsets on them. Returns
        how many stay. Raises LookupError for an unknown topic, ValueError for a bad count."""
        def plan(assignment: TopicAssignment) -> tuple[TopicAssignment, TxOps]:
            have = len(assignment.partitions)
            if not 1 <= count < have:
                raise ValueError(f"topic {name} has {have} partitions: can remove 1 to {have - 1}")
            keep = have - count
            # the history of removals, so a broker that missed one (down, or it saw the removal and
            # a later re-adding in one pass) drops its copies of the removed partitions
            history = json.loads(assignment.config.get(PARTITIONS_REMOVED) or "[]")
            history.append([uuid.uuid4().hex[:12], keep])

            def ops(tx: TransactionRequest) -> None:
                for p in range(keep, have):
                    tx.delete(state_path(name, p))
                    tx.delete(f"{topic_path(name)}/partitions/{p}")

            return TopicAssignment({p: r for p, r in assignment.partitions.items() if p < keep},
                                   {**assignment.config, PARTITIONS_REMOVED: json.dumps(history)}), ops

        _old, shrunk = self._rewrite_topic(name, plan)
        keep = len(shrunk.partitions)
        for g in self.zk.get_children(GROUPS):
            self._drop_offsets(f"{GROUPS}/{g}/{quote(name, safe='')}", lambda p: p >= keep)
        return keep

    def _drop_offsets(self, path: str, drop: Callable[[int], bool]) -> None:
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                return
            doc = json.loads(data) if data else {}
            kept = {p: o for p, o in doc.items() if not drop(int(p))}
            if kept == doc:
                return
            try:
                self.zk.set(path, json.dumps(kept).encode(), version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue

    def delete_topic(self, name: str) -> None:
        """The topic and every group's committed offsets on it (a topic created again under the
        same name starts without them)."""
        with contextlib.suppress(NoNodeError):
            self.zk.delete(topic_path(name), recursive=True)
        bound = {group for group, (policy, topic) in self.shared_groups().items()
                 if policy == "iggy" and topic == name}  # an Iggy group lives in its topic
        for g in self.zk.get_children(GROUPS):
            with contextlib.suppress(NoNodeError):
                if unquote(g) in bound:
                    self.zk.delete(f"{GROUPS}/{g}", recursive=True)
                else:
                    self.zk.delete(f"{GROUPS}/{g}/{quote(name, safe='')}")

    def delete_group(self, group: str) -> None:
        """A group's state and all its committed offsets."""
        with contextlib.suppress(NoNodeError):
            self.zk.delete(group_path(group), recursive=True)

    def topic_names(self) -> list[str]:
        return sorted(self.zk.get_children(TOPICS))

    def topic_assignment(self, name: str) -> TopicAssignment | None:
        """One topic's assignment as ZooKeeper has it now (None: no such topic, or being made)."""
        try:
            data, _stat = self.zk.get(topic_path(name))
        except NoNodeError:
            return None
        return TopicAssignment.from_json(data) if data else None

    def doc(self, path: str) -> tuple[bytes, int]:
        """A shared document (empty if nobody wrote it yet) and its znode version."""
        while True:
            try:
                data, stat = self.zk.get(path)
                return data, stat.version
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(path, b"", makepath=True)

    def set_doc(self, path: str, data: bytes, version: int) -> bool:
        try:
            self.zk.set(path, data, version=version)
            return True
        except (BadVersionError, NoNodeError):
            return False

    def watch_doc(self, path: str) -> None:
        """Count the changes of a shared document (``doc_changes``) from now on."""
        with self._lock:
            if path in self.doc_changes:
                return
            self.doc_changes[path] = 0

        def changed(_data: bytes | None, _stat: ZnodeStat | None) -> None:
            with self._lock:
                self.doc_changes[path] += 1

        self.zk.DataWatch(path, changed)

    def lock(self, path: str) -> Lock:
        """A cluster-wide lock (kazoo's recipe: sequential ephemeral nodes)."""
        return self.zk.Lock(path, str(self.broker_id))

    def shared_groups(self) -> dict[str, tuple[str, str]]:
        """Every group whose state is kept in ZooKeeper (V1, Iggy): name -> (policy, topic)."""
        out: dict[str, tuple[str, str]] = {}
        for child in self.zk.get_children(GROUPS):
            try:
                data, _stat = self.zk.get(f"{GROUPS}/{child}")
            except NoNodeError:
                continue
            if data:
                for gd in json.loads(data).values():
                    gd = gd or {}
                    out[unquote(child)] = (str(gd.get("policy") or "rtes"), str(gd.get("topic") or ""))
        return out

    def group_state(self, group: str) -> tuple[bytes, int]:
        """(the group's stored state, empty when none, and the znode version for set_group_state:
        -1 when the node does not exist; reading never creates it)."""
        try:
            data, stat = self.zk.get(group_path(group))
            return data, stat.version
        except NoNodeError:
            return b"", -1

    def set_group_state(self, group: str, data: bytes, version: int) -> bool:
        """Compare-and-set of a group's state (version -1: create it); False when someone changed,
        created or deleted it first."""
        try:
            if version == -1:
                self.zk.create(group_path(group), data, makepath=True)
            else:
                self.zk.set(group_path(group), data, version=version)
            return True
        except (BadVersionError, NoNodeError, NodeExistsError):
            return False

    def txn_state(self, txn_id: str) -> tuple[bytes, int]:
        """(a transactional id's coordinator state, empty when none, and its znode version:
        -1 when the node does not exist)."""
        try:
            data, stat = self.zk.get(txn_path(txn_id))
            return data, stat.version
        except NoNodeError:
            return b"", -1

    def set_txn_state(self, txn_id: str, data: bytes | None, version: int) -> bool:
        """Compare-and-set of a transactional id's state (version -1: create it; ``data`` None:
        delete it); False when another broker changed, created or deleted it first."""
        try:
            if data is None:
                self.zk.delete(txn_path(txn_id), version=version)
            elif version == -1:
                self.zk.create(txn_path(txn_id), data, makepath=True)
            else:
                self.zk.set(txn_path(txn_id), data, version=version)
            return True
        except (BadVersionError, NoNodeError, NodeExistsError):
            return False

    def txn_ids(self) -> list[str]:
        """Every transactional id with a state kept here (bucket by bucket: each listing stays
        far below ZooKeeper's 1 MB reply limit)."""
        out: list[str] = []
        for i in range(TXN_BUCKETS):
            try:
                out.extend(unquote(c) for c in self.zk.get_children(bucket_path(i)))
            except NoNodeError:
                continue
        return out

    def txn_bucket_size(self, txn_id: str) -> int:
        """How many transactional ids share ``txn_id``'s bucket."""
        stat = self.zk.exists(txn_bucket(txn_id))
        return 0 if stat is None else int(stat.numChildren)

    def merge_offsets(self, group: str, topic: str, entries: dict[int, int]) -> None:
        """Set committed offsets of ``group`` on ``topic`` (read, merge, compare-and-set)."""
        path = offsets_path(group, topic)
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                try:
                    self.zk.create(path, json.dumps({str(p): o for p, o in entries.items()}).encode(),
                                   makepath=True)
                    return
                except NodeExistsError:
                    continue
            doc = json.loads(data) if data else {}
            doc.update({str(p): o for p, o in entries.items()})
            try:
                self.zk.set(path, json.dumps(doc).encode(), version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue

    def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        try:
            data, _stat = self.zk.get(offsets_path(group, topic))
        except NoNodeError:
            return None
        off = (json.loads(data) if data else {}).get(str(partition))
        return None if off is None else int(off)

    def delete_offset(self, group: str, topic: str, partition: int) -> None:
        self._drop_offsets(offsets_path(group, topic), lambda p: p == partition)

    def read_offsets(self) -> dict[tuple[str, str, int], int]:
        """Every group's committed offsets, watching each node for the next change."""
        self.offsets_dirty.clear()
        out: dict[tuple[str, str, int], int] = {}
        for g in self.zk.get_children(GROUPS):
            try:
                topics = self.zk.get_children(f"{GROUPS}/{g}")
            except NoNodeError:
                continue
            for t in topics:
                path = f"{GROUPS}/{g}/{t}"
                try:
                    data, _stat = self.zk.get(path)
                except NoNodeError:
                    continue
                self._watch_offsets(path)
                for p, off in (json.loads(data) if data else {}).items():
                    out[(unquote(g), unquote(t), int(p))] = int(off)
        return out

    def _watch_offsets(self, path: str) -> None:
        with self._lock:
            if path in self._watched:
                return
            self._watched.add(path)
        self.zk.DataWatch(path, self._offsets_changed)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """One partition's state as ZooKeeper has it now (None: no such partition)."""
        try:
            data, _stat = self.zk.get(state_path(topic, partition))
        except NoNodeError:
            return None
        return PartitionState.from_json(data)

    def set_state(self, topic: str, partition: int, state: PartitionState, version: int) -> bool:
        """Compare-and-set of a partition state; False when someone changed it first."""
        try:
            self.zk.set(state_path(topic, partition), state.to_json(), version=version)
            return True
        except (BadVersionError, NoNodeError):
            return False
