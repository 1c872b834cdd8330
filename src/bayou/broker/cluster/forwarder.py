"""Requests this broker sends to a partition's leader on a client's behalf, over the leader's
replication listener: produces forwarded for clients that cannot follow a redirect (Iggy's), and
consumer reads for a broker that holds no replica of the partition. Connections are pooled per
leader (a few idle ones kept)."""

from __future__ import annotations

import asyncio

from bayou.broker.cluster.context import REPLICATION, ClusterContext
from bayou.broker.cluster.leader import CONSUMER
from bayou.broker.cluster.transport import (
    DEDUPLICATE,
    TXN_MARKER,
    FetchAnswer,
    FetchRequest,
    FetchStatus,
    LinkDropped,
    LinkError,
    ProduceAnswer,
    ProduceRequest,
    ProduceStatus,
    ReplicaDialer,
    ReplicaLink,
)
from bayou.broker.model import Acks, FetchResult, ProduceResult
from bayou.errors import (
    REGISTRY,
    BayouError,
    InvalidRequest,
    NotLeader,
    OffsetOutOfRange,
    ReplicationTimeout,
    UnknownPartition,
    UnknownTopic,
)
from bayou.records.batch import iter_batches

MAX_IDLE_FORWARDERS = 4  # idle connections kept per leader for forwarded produces


class LeaderForwarder:
    def __init__(self, ctx: ClusterContext, dialer: ReplicaDialer) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.me = ctx.me
        self.dialer = dialer
        self._idle: dict[tuple[str, int], list[ReplicaLink]] = {}

    def close_all(self) -> None:
        for links in self._idle.values():
            for link in links:
                link.close()
        self._idle.clear()

    async def _ask_leader(self, topic: str, partition: int, req: ProduceRequest | FetchRequest,
                          timeout: float, idempotent: bool) -> FetchAnswer | ProduceAnswer:
        """One request to the partition's leader over its replication listener (pooled
        connections); NotLeader when no other live broker leads it or it does not answer. A
        request is sent again on a new connection only when an idle one turns out closed before
        anything came back, and (``idempotent``) after a timeout."""
        reg, _epoch = self.ctx.partition_leader(topic, partition)
        if reg is None or reg.broker_id == self.me or reg.address(REPLICATION) is None:
            raise NotLeader("no other broker leads this partition now")
        host, port = reg.address(REPLICATION)  # type: ignore[misc]
        idle = self._idle.setdefault((host, port), [])
        while True:
            reused = bool(idle)
            try:
                link = idle.pop() if idle else await asyncio.wait_for(self.dialer.connect(host, port), 5)
            except (OSError, TimeoutError, LinkError):
                raise NotLeader("the partition's leader cannot be reached") from None
            try:
                reply = await (link.produce(req, timeout) if isinstance(req, ProduceRequest)
                               else link.fetch(req, timeout))
                break
            except (OSError, EOFError) as exc:
                link.close()
                if reused and isinstance(exc, LinkDropped):
                    # an idle connection the leader had closed before reading the request: once
                    # more on a new one (a timeout is not retried: the leader may have appended)
                    continue
                raise NotLeader("the partition's leader did not answer") from None
            except asyncio.CancelledError:
                link.close()  # half a request may be on it: never reuse it
                raise
            except (TimeoutError, LinkError):
                link.close()
                raise NotLeader("the partition's leader did not answer") from None
        if len(idle) < MAX_IDLE_FORWARDERS:
            idle.append(link)
        else:
            link.close()
        return reply

    async def consumer_fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        """A consumer's read at the partition's leader, for a broker holding no replica of it:
        batches from ``offset`` below the leader's high watermark, with that watermark and the log
        start (``max_bytes`` 0: only those two). OffsetOutOfRange outside the log."""
        req = FetchRequest(topic, partition, CONSUMER, -1, max(offset, 0), -1, max_bytes, 0)
        reply = await self._ask_leader(topic, partition, req, 15.0, True)
        assert isinstance(reply, FetchAnswer)
        if reply.error == FetchStatus.OFFSET_OUT_OF_RANGE:
            raise OffsetOutOfRange(f"offset {offset} is outside the leader's log")
        if reply.error == FetchStatus.UNKNOWN_PARTITION:
            raise UnknownPartition(f"topic {topic} has no partition {partition} at its leader")
        if reply.error != FetchStatus.NONE:
            raise NotLeader("the broker asked no longer leads the partition")
        heads = [h for _pos, h in iter_batches(reply.data)]
        return FetchResult(reply.data, sum(h.record_count for h in heads),
                           heads[-1].next_offset if heads else max(offset, 0),
                           reply.high_watermark, reply.log_start_offset, reply.high_watermark)

    async def forward_produce(self, topic: str, partition: int, batch: bytes, acks: Acks, *,
                              deduplicate: bool = False) -> ProduceResult:
        """Have the partition's leader append ``batch`` (over the replication listener) and return
        its answer; NotLeader when no live broker leads the partition (or the leader went away)."""
        return await self._forward(topic, partition, batch, acks, DEDUPLICATE if deduplicate else 0)

    async def forward_marker(self, topic: str, partition: int, batch: bytes) -> None:
        """Have the partition's leader append a transaction marker (a control batch this broker's
        transaction coordinator made) and see it replicated to the ISR (acks=all): a marker lost
        with its leader would leave the transaction open there for good."""
        await self._forward(topic, partition, batch, Acks.ALL, TXN_MARKER)

    async def _forward(self, topic: str, partition: int, batch: bytes, acks: Acks, flags: int
                       ) -> ProduceResult:
        req = ProduceRequest(topic, partition, int(acks), flags, batch)
        reply = await self._ask_leader(topic, partition, req,
                                       self.broker.config.ack_all_timeout_ms / 1000 + 10, False)
        assert isinstance(reply, ProduceAnswer)
        if reply.error == ProduceStatus.NONE:
            return ProduceResult(partition, reply.base_offset, reply.last_offset, reply.high_watermark,
                                 reply.log_start_offset)
        error: type[BayouError] = {
            ProduceStatus.NOT_LEADER: NotLeader, ProduceStatus.REPLICATION_TIMEOUT: ReplicationTimeout,
            ProduceStatus.UNKNOWN_TOPIC: UnknownTopic, ProduceStatus.UNKNOWN_PARTITION: UnknownPartition,
        }.get(reply.error, InvalidRequest)
        message = reply.message
        if reply.error == ProduceStatus.REJECTED:  # "CODE: message": the leader's own error
            code, _sep, rest = message.partition(": ")
            if code in REGISTRY:
                error, message = REGISTRY[code], rest
        raise error(message or None)

