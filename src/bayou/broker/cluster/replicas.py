"""Cluster mode's ``ReplicaState`` (broker/coordination.py): what a partition's replication
decides on a broker of a cluster, from its ``ReplicaSet`` (replicaset.py). node.py sets it on the
broker and every partition when it is built (a single node's is broker/replication.py's)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from bayou.broker.replication import SINGLE_NODE
from bayou.errors import NotEnoughReplicas, NotEnoughReplicasAfterAppend, NotLeader, ReplicationTimeout

if TYPE_CHECKING:
    from bayou.broker.cluster.context import ClusterContext
    from bayou.broker.partition import Partition


class ClusterReplicas:
    """Cluster mode's ``ReplicaState`` (broker/coordination.py): the high watermark is the ISR's
    (``ReplicaSet.hw``), capped by the local log end; a partition whose state has not arrived
    from ZooKeeper yet shows nothing. An acks=all produce needs ``min.insync.replicas`` in sync
    before the append and waits for the ISR's high watermark after it."""

    def __init__(self, ctx: ClusterContext) -> None:
        self.ctx = ctx

    @staticmethod
    def high_watermark(part: Partition) -> int:
        rs = part.cluster
        if rs is None:
            return part.log.log_start_offset
        return part.durable_cap(min(rs.hw, part.log.next_offset))

    @staticmethod
    def epoch(part: Partition) -> int | None:
        return None if part.cluster is None else part.cluster.epoch

    @staticmethod
    def appended(part: Partition) -> None:
        if part.cluster is not None:
            part.cluster.advance_hw(part.log.next_offset)

    def check_insync(self, part: Partition) -> None:
        """Refuse before appending when fewer replicas are in sync than ``min.insync.replicas``
        (an append that could only time out would still become visible, and the client's retry
        would store it twice)."""
        rs = part.cluster
        if rs is not None:
            need = self.ctx.broker.min_insync_replicas(part.topic)
            if len(rs.isr) < need:
                raise NotEnoughReplicas(f"not enough in-sync replicas: {len(rs.isr)} in sync "
                                        f"({list(rs.isr)}), min.insync.replicas={need}")

    async def await_replicated(self, part: Partition, last_offset: int, deadline: float) -> None:
        if part.cluster is None:  # detached since the append (as before: the tracker's rule)
            await SINGLE_NODE.await_replicated(part, last_offset, deadline)
            return
        min_isr = self.ctx.broker.min_insync_replicas(part.topic)
        while not (part.cluster.hw > last_offset and len(part.cluster.isr) >= min_isr):
            if part.cluster.hw > last_offset:  # the ISR shrank under min.insync after the append
                isr = list(part.cluster.isr)
                raise NotEnoughReplicasAfterAppend(
                    f"appended, but only {len(isr)} replicas remain in sync ({isr}), "
                    f"min.insync.replicas={min_isr}")
            left = deadline - time.monotonic()
            if left <= 0 or self.ctx.broker.closing:
                raise ReplicationTimeout()
            if not part.cluster.is_leader:
                raise NotLeader(leader=self.ctx.leader_of(part))
            await part.wait_for_data(min(left, 0.05))
