"""The V1 protocol's replication commands (SET_PARTITION_ROLE, REPLICA_FETCH reports): on a single
node the flux-era model of broker/replication.py, in cluster mode leadership moves in ZooKeeper
and progress is the followers' own fetches."""

from __future__ import annotations

from bayou.broker.context import BrokerContext
from bayou.broker.model import ReplicaReport
from bayou.broker.partition import FOLLOWER, LEADER
from bayou.broker.topics import TopicAdmin
from bayou.errors import InvalidRequest, NotLeader, UnknownPartition


class ReplicaRoles:
    def __init__(self, ctx: BrokerContext, admin: TopicAdmin) -> None:
        self.ctx = ctx
        self.admin = admin  # the implicit creation of the V1 commands

    async def set_partition_role(self, topic: str, partition: int, role: str) -> int:
        """Make this broker lead or follow ``partition``; returns its high watermark as V1 reports
        it (the last offset consumers see, inclusive). In cluster mode leadership moves in
        ZooKeeper: ``leader`` makes this broker the leader (it must be a live member of the ISR),
        ``follower`` hands leadership to another live ISR member; the partition follows when the
        new state reaches it."""
        self.ctx.authorizer.check("manage_servers")  # a flux-era replication command
        if role not in (LEADER, FOLLOWER):
            raise InvalidRequest("invalid role")
        if self.ctx.cluster is not None:
            part = await self.ctx.ready_partition(topic, partition)
            rs = part.cluster
            if rs is None:
                raise NotLeader("the partition's cluster state is not known yet")
            me = self.ctx.config.broker_id
            if role == LEADER and not rs.is_leader:
                await self.ctx.cluster.set_leader(topic, partition, me, [])
            elif role == FOLLOWER and rs.is_leader:
                live = self.ctx.cluster.live_brokers()
                others = [b for b in rs.isr if b != me and b in live]
                if not others:
                    raise InvalidRequest("no other live in-sync replica to hand the leadership to")
                await self.ctx.cluster.set_leader(topic, partition, others[0], [])
            await self.ctx.cluster.await_role(part, role)
            return part.high_watermark - 1
        t = await self.admin.ensure_topic(topic)
        if not 0 <= partition < len(t.partitions):
            raise UnknownPartition(f"partition not found: topic={topic} partition={partition}")
        part = t.partitions[partition]
        part.role = role
        meta = self.ctx.metadata.partitions.get((topic, partition))
        if meta is not None and meta.leader != self.ctx.config.broker_id:
            self.ctx.metadata.set_leader(topic, partition, self.ctx.config.broker_id, None)
        return part.replicas.high_watermark(part.leader_last)

    async def replica_progress(self, topic: str, partition: int, replica_id: int,
                               offset: int) -> ReplicaReport:
        """Record that follower ``replica_id`` holds everything up to ``offset`` (inclusive).

        In cluster mode progress comes only from the followers' own fetches (a report could
        otherwise acknowledge records no replica holds): the reply is the real state, checked like
        a report (the partition led here, the id one of its replicas)."""
        self.ctx.authorizer.check("manage_servers")  # a flux-era replication command
        if self.ctx.cluster is not None:
            part = await self.ctx.ready_partition(topic, partition)
            rs = part.cluster
            if rs is None or not rs.is_leader:
                raise NotLeader("partition is not leader")
            if replica_id not in rs.replicas or replica_id == rs.me:
                raise InvalidRequest("invalid replica id")
            min_isr = self.ctx.min_insync_replicas(topic)
            return ReplicaReport(offset, part.high_watermark - 1, rs.isr, len(rs.isr) < min_isr)
        # rtes.md 7.9: the replica id is checked first. Both refusals come before the implicit
        # creation: a rejected report must leave nothing behind.
        if not 1 <= replica_id < self.ctx.config.replication_factor:
            raise InvalidRequest("invalid replica id")
        if topic not in self.ctx.topics and not 0 <= partition < self.ctx.config.default_partitions:
            raise UnknownPartition(f"topic {topic} has no partition {partition}")
        t = await self.admin.ensure_topic(topic)
        if not 0 <= partition < len(t.partitions):
            raise UnknownPartition(f"topic {topic} has no partition {partition}")
        part = t.partitions[partition]
        if not part.replicas.valid_replica(replica_id):
            raise InvalidRequest("invalid replica id")
        if part.role != LEADER:
            raise NotLeader("partition is not leader")
        part.replicas.report(replica_id, offset, part.leader_last)
        part.notify()
        isr = tuple(part.replicas.isr(part.leader_last))
        return ReplicaReport(offset, part.high_watermark - 1, isr, len(isr) < part.replicas.min_isr)
