"""Cluster metadata as a single broker keeps it: brokers, partition leaders and ISRs, fencing.

A single node registers itself as the only broker and leads every partition. The V1 protocol's
ADMIN_* commands read and change this table; ``index`` counts every change (as the flux broker's
metadata log did) and ``term`` is the metadata leader's term, 1 for a single node.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bayou.broker.authz import Authorizer


@dataclass(slots=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    epoch: int = 0
    last_heartbeat_ms: int = 0
    fenced: bool = False


@dataclass(slots=True)
class PartitionMeta:
    leader: int
    isr: list[int] = field(default_factory=list)
    leader_epoch: int = 0


class ClusterMetadata:
    def __init__(self, self_id: int, authorizer: Authorizer | None = None) -> None:
        self.self_id = self_id
        self.authorizer = authorizer or Authorizer()
        self.term = 1
        self.index = 0
        self.brokers: dict[int, BrokerInfo] = {}
        self.partitions: dict[tuple[str, int], PartitionMeta] = {}
        self.topics: dict[str, int] = {}  # name -> replication factor

    def _bump(self, n: int = 1) -> None:
        self.index += n

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def register_broker(self, broker_id: int, host: str, port: int, epoch: int = 0) -> BrokerInfo:
        self.authorizer.check("manage_servers")  # the V1 ADMIN_* commands change it
        info = BrokerInfo(broker_id, host, port, epoch, self.now_ms())
        prev = self.brokers.get(broker_id)
        if prev is not None:
            info.fenced = prev.fenced
        self.brokers[broker_id] = info
        self._bump()
        return info

    def heartbeat(self, broker_id: int) -> BrokerInfo:
        self.authorizer.check("manage_servers")  # the V1 ADMIN_* commands change it
        info = self.brokers[broker_id]
        info.last_heartbeat_ms = self.now_ms()
        self._bump()
        return info

    def set_fenced(self, broker_id: int, fenced: bool) -> BrokerInfo:
        self.authorizer.check("manage_servers")  # the V1 ADMIN_* commands change it
        info = self.brokers[broker_id]
        info.fenced = fenced
        self._bump()
        return info

    def reconcile_health(self, timeout_ms: int) -> int:
        """Fence brokers silent for longer than ``timeout_ms``; unfence those heard from since."""
        self.authorizer.check("manage_servers")  # the V1 ADMIN_* commands change it
        now = self.now_ms()
        changes = 0
        for info in self.brokers.values():
            if info.broker_id == self.self_id:
                info.last_heartbeat_ms = now
            stale = now - info.last_heartbeat_ms > timeout_ms
            if stale != info.fenced:
                info.fenced = stale
                changes += 1
        if changes:
            self._bump(changes)
        return changes

    def add_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        """Register ``topic`` with ``partitions`` partitions; also how a partition count changes
        (grown: new partitions led by this broker; shrunk: the partitions beyond it dropped)."""
        self.topics[topic] = replication_factor
        for p in range(partitions):
            self.partitions.setdefault((topic, p), PartitionMeta(self.self_id, [self.self_id]))
        for key in [k for k in self.partitions if k[0] == topic and k[1] >= partitions]:
            del self.partitions[key]
        self._bump(1 + partitions)

    def remove_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
        for key in [k for k in self.partitions if k[0] == topic]:
            del self.partitions[key]
        self._bump()

    def set_leader(self, topic: str, partition: int, leader: int, isr: list[int] | None) -> PartitionMeta:
        self.authorizer.check("manage_servers")
        meta = self.partitions[(topic, partition)]
        if leader != meta.leader:
            meta.leader_epoch += 1
        meta.leader = leader
        if isr:
            meta.isr = list(isr)
        self._bump()
        return meta

    def elect_leaders(self, topic: str) -> int:
        """Give every partition of ``topic`` whose leader is missing or fenced a live leader."""
        self.authorizer.check("manage_servers")
        live = sorted(b for b, info in self.brokers.items() if not info.fenced)
        changes = 0
        for (t, _p), meta in sorted(self.partitions.items()):
            if t != topic:
                continue
            ok = meta.leader in self.brokers and not self.brokers[meta.leader].fenced
            if ok:
                continue
            candidates = [b for b in meta.isr if b in live] or live
            if candidates and candidates[0] != meta.leader:
                meta.leader = candidates[0]
                meta.leader_epoch += 1
                changes += 1
        if changes:
            self._bump(changes)
        return changes

    def mirror_cluster(self, brokers: dict[int, tuple[str, int]],
                       partitions: dict[tuple[str, int], tuple[int, list[int], int]]) -> None:
        """Cluster mode: take the live brokers (id -> host, V1 port) and partition states
        (leader, ISR, leader epoch) from ZooKeeper; brokers no longer registered stay, fenced."""
        changes = 0
        for b, (host, port) in brokers.items():
            info = self.brokers.get(b)
            if info is None or (info.host, info.port) != (host, port) or info.fenced:
                self.brokers[b] = BrokerInfo(b, host, port, 0, self.now_ms())
                changes += 1
            else:
                info.last_heartbeat_ms = self.now_ms()
        for b, info in self.brokers.items():
            if b not in brokers and not info.fenced:
                info.fenced = True
                changes += 1
        for key, (leader, isr, epoch) in partitions.items():
            meta = self.partitions.get(key)
            if meta is not None and (meta.leader, meta.isr, meta.leader_epoch) != (leader, isr, epoch):
                meta.leader, meta.isr, meta.leader_epoch = leader, list(isr), epoch
                changes += 1
        if changes:
            self._bump(changes)

    def fenced_ids(self) -> list[int]:
        return sorted(b for b, info in self.brokers.items() if info.fenced)
