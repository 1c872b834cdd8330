"""One partition's replication state on this broker in cluster mode: who leads in which epoch,
the committed ISR, and (on the leader) how far each follower has copied the log.

The high watermark (exclusive) is the smallest log end among the ISR: every record below it is on
every in-sync replica, so no single failure can take it back, and consumers of every protocol see
only records below it. On the leader it never moves back; a follower takes the leader's, capped by
its own log end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bayou.broker.partition import Partition


@dataclass(slots=True)
class ReplicaSet:
    me: int
    leader: int
    epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    version: int = -1  # the znode version this state was read at
    hw: int = 0
    follower_leo: dict[int, int] = field(default_factory=dict)  # broker id -> log end it holds
    caught_up_at: dict[int, float] = field(default_factory=dict)  # when it last held the leader's end
    fetched_at: dict[int, float] = field(default_factory=dict)  # when it last fetched
    end_at_fetch: dict[int, int] = field(default_factory=dict)  # the leader's end at its last fetch
    epoch_start: int = 0  # the leader's log end when this epoch began
    since: float = field(default_factory=time.monotonic)  # when this broker took this state on

    @property
    def is_leader(self) -> bool:
        return self.leader == self.me

    def follower_fetched(self, broker_id: int, fetch_offset: int, leader_end: int) -> None:
        """A follower asked for ``fetch_offset``: it holds everything below it. It counts as caught
        up when it holds the leader's end, or everything the leader had at its previous fetch
        (Kafka's rule: under steady production a follower is always one fetch behind)."""
        now = time.monotonic()
        self.follower_leo[broker_id] = fetch_offset
        self.fetched_at[broker_id] = now
        previous = self.end_at_fetch.get(broker_id)
        if fetch_offset >= leader_end or (previous is not None and fetch_offset >= previous):
            self.caught_up_at[broker_id] = now
        self.end_at_fetch[broker_id] = leader_end

    def advance_hw(self, leader_end: int) -> bool:
        """Recompute the leader's high watermark; True when it moved."""
        hw = leader_end
        for b in self.isr:
            if b != self.me:
                hw = min(hw, self.follower_leo.get(b, 0))
        if hw > self.hw:
            self.hw = hw
            return True
        return False

    def wanted_isr(self, leader_end: int, lag_timeout_s: float, live: set[int],
                   max_lag_records: int = 0) -> tuple[int, ...]:
        """The ISR the leader should commit now: members that have not held the leader's log end
        for ``lag_timeout_s``, that trail it by more than ``max_lag_records`` (when not 0), or
        whose broker is gone leave; live replicas that fetch and caught up to the high watermark
        (and into this epoch) join. The leader itself always stays."""
        now = time.monotonic()
        out = [self.me]
        for b in self.replicas:
            if b == self.me or b not in live:
                continue
            leo = self.follower_leo.get(b)
            if max_lag_records and leo is not None and leader_end - leo > max_lag_records:
                continue
            if b in self.isr:
                seen = self.caught_up_at.get(b)
                if seen is not None and now - seen <= lag_timeout_s:
                    out.append(b)
                elif seen is None and now - self.since <= lag_timeout_s:
                    out.append(b)  # give a member of the handed-over ISR time for a first fetch
            elif (leo is not None and leo >= self.hw and leo >= self.epoch_start
                  and now - self.fetched_at.get(b, 0.0) <= lag_timeout_s):
                out.append(b)
        return tuple(sorted(out, key=self.replicas.index))


class ClusterReplicas:
    """Cluster mode's ``ReplicaState`` (broker/coordination.py): the high watermark is the ISR's
    (``ReplicaSet.hw``), capped by the local log end; a partition whose state has not arrived
    from ZooKeeper yet shows nothing."""

    @staticmethod
    def high_watermark(part: Partition) -> int:
        rs = part.cluster
        if rs is None:
            return part.log.log_start_offset
        return part.durable_cap(min(rs.hw, part.log.next_offset))


CLUSTER = ClusterReplicas()
