"""Follower progress, ISR and high watermark of one partition led by this broker.

On a single node the followers are whatever reports progress with the V1 protocol's REPLICA_FETCH
(replica ids 1..RF-1). A follower is in sync when it reported within the lag timeout and trails the
leader by at most ``max_lag`` records. The high watermark is the minimum of the leader's last offset
and the in-sync followers' offsets. Offsets here are inclusive ("last offset"), -1 when empty.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bayou.errors import ReplicationTimeout

if TYPE_CHECKING:
    from bayou.broker.partition import Partition


def mono_ms() -> float:
    return time.monotonic() * 1000


@dataclass(slots=True)
class FollowerState:
    offset: int = -1
    last_seen_ms: float | None = None


class ReplicaTracker:
    def __init__(self, replication_factor: int, min_isr: int, max_lag: int, lag_timeout_ms: int) -> None:
        self.replication_factor = replication_factor
        self.min_isr = min_isr
        self.max_lag = max_lag
        self.lag_timeout_ms = lag_timeout_ms
        self.followers: dict[int, FollowerState] = {
            r: FollowerState() for r in range(1, replication_factor)
        }
        self.reported = False  # until a follower reports, none is in sync (the usual standalone case)

    def valid_replica(self, replica_id: int) -> bool:
        return 1 <= replica_id < self.replication_factor

    def report(self, replica_id: int, offset: int, leader_last: int) -> None:
        st = self.followers[replica_id]
        st.offset = max(st.offset, min(offset, leader_last))
        st.last_seen_ms = mono_ms()
        self.reported = True

    def in_sync(self, leader_last: int, now: float | None = None) -> list[int]:
        now = mono_ms() if now is None else now
        return [
            r for r, st in sorted(self.followers.items())
            if st.last_seen_ms is not None
            and now - st.last_seen_ms <= self.lag_timeout_ms
            and leader_last - st.offset <= self.max_lag
        ]

    def isr(self, leader_last: int) -> list[int]:
        return [0, *self.in_sync(leader_last)]

    def high_watermark(self, leader_last: int) -> int:
        if not self.reported:  # replication factor 1, or no follower yet: the leader's log end
            return max(leader_last, -1)
        hw = leader_last
        for r in self.in_sync(leader_last):
            hw = min(hw, self.followers[r].offset)
        return max(hw, -1)

    def acks_all_satisfied(self, offset: int, leader_last: int) -> bool:
        return self.high_watermark(leader_last) >= offset and len(self.isr(leader_last)) >= self.min_isr


class SingleNodeReplicas:
    """A single node's ``ReplicaState`` (broker/coordination.py): the high watermark is what the
    in-sync followers reported (``ReplicaTracker``), one past it; an acks=all produce waits for
    their reports (the V1 model, rtes.md 6.2)."""

    @staticmethod
    def high_watermark(part: Partition) -> int:
        return part.durable_cap(part.replicas.high_watermark(part.leader_last) + 1)

    @staticmethod
    def epoch(part: Partition) -> int | None:
        return None

    @staticmethod
    def appended(part: Partition) -> None:
        return None  # the followers' reports move the high watermark

    @staticmethod
    def check_insync(part: Partition) -> None:
        return None  # followers report while the produce waits

    @staticmethod
    async def await_replicated(part: Partition, last_offset: int, deadline: float) -> None:
        while not part.replicas.acks_all_satisfied(last_offset, part.leader_last):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReplicationTimeout()
            await asyncio.sleep(min(0.002, left))


SINGLE_NODE = SingleNodeReplicas()
