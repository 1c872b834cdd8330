"""The leader side of replication: what the replication listener (server/replica.py) calls.

A follower's FETCH is checked against the partition's epochs (a follower whose last epoch ended
elsewhere here is told where to truncate, KIP-320), records the follower's progress (which moves
the high watermark and may let it join the ISR), long-polls, and is answered with the stored
batches as they are. A consumer's read forwarded by a broker holding no replica is served below
the high watermark. A PRODUCE forwarded by another broker is appended here if this broker leads
the partition."""

from __future__ import annotations

import asyncio

from bayou.broker.cluster.context import ClusterContext
from bayou.broker.cluster.transport import (
    DEDUPLICATE,
    TXN_MARKER,
    FetchAnswer,
    FetchRequest,
    FetchStatus,
    ProduceAnswer,
    ProduceRequest,
    ProduceStatus,
)
from bayou.broker.model import Acks
from bayou.errors import (
    BayouError,
    NotEnoughReplicas,
    NotLeader,
    OffsetOutOfRange,
    ReplicationTimeout,
    UnknownPartition,
    UnknownTopic,
)
from bayou.records.batch import Record, decode_records, encode_batch, iter_batches

CONSUMER = -1  # the replica id of a FETCH that reads for a consumer (Kafka's convention)
INLINE_DECODE_BYTES = 64 * 1024  # a forwarded batch up to this size, not compressed, is decoded on the loop


class LeaderHandlers:
    def __init__(self, ctx: ClusterContext) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.me = ctx.me

    async def serve_produce(self, req: ProduceRequest) -> ProduceAnswer:
        """Another broker's forwarded produce, appended here if this broker leads the partition."""
        acks = Acks(req.acks)
        try:
            if req.flags & TXN_MARKER:  # another broker's transaction coordinator ends a transaction
                result = await self.broker.write_txn_marker(req.topic, req.partition, req.batch, acks)
            elif req.flags & DEDUPLICATE:
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
            return ProduceAnswer(ProduceStatus.NOT_LEADER, message="not the partition's leader")
        except NotEnoughReplicas as exc:  # nothing appended: the forwarder raises the same error
            return ProduceAnswer(ProduceStatus.REJECTED, message=f"{exc.code}: {exc.message}")
        except ReplicationTimeout as exc:
            return ProduceAnswer(ProduceStatus.REPLICATION_TIMEOUT, message=exc.message)
        except UnknownTopic as exc:
            return ProduceAnswer(ProduceStatus.UNKNOWN_TOPIC, message=exc.message)
        except UnknownPartition as exc:
            return ProduceAnswer(ProduceStatus.UNKNOWN_PARTITION, message=exc.message)
        except BayouError as exc:
            return ProduceAnswer(ProduceStatus.REJECTED, message=f"{exc.code}: {exc.message}")
        return ProduceAnswer(ProduceStatus.NONE, result.base_offset, result.last_offset,
                            result.high_watermark, result.log_start_offset)

    async def serve_fetch(self, req: FetchRequest) -> FetchAnswer:
        """A follower's FETCH: check the epochs, record its progress, long-poll, send batches."""
        try:
            part = self.broker.partition(req.topic, req.partition)
        except (UnknownTopic, UnknownPartition):
            return FetchAnswer(FetchStatus.UNKNOWN_PARTITION, -1, 0, 0)
        rs = part.cluster
        if rs is None or not rs.is_leader or req.leader_epoch > rs.epoch:
            return FetchAnswer(FetchStatus.NOT_LEADER, rs.epoch if rs else -1, 0, 0)
        if req.replica_id == CONSUMER:  # a read forwarded by a broker holding no replica
            hw, start = part.high_watermark, part.log.log_start_offset
            if req.max_bytes == 0 or req.fetch_offset == hw:
                return FetchAnswer(FetchStatus.NONE, rs.epoch, hw, start)
            if not start <= req.fetch_offset < hw:
                return FetchAnswer(FetchStatus.OFFSET_OUT_OF_RANGE, rs.epoch, hw, start)
            try:
                result = await self.broker.fetch(req.topic, req.partition, req.fetch_offset,
                                                 max_bytes=req.max_bytes)
            except OffsetOutOfRange:
                return FetchAnswer(FetchStatus.OFFSET_OUT_OF_RANGE, rs.epoch, hw, start)
            except (UnknownTopic, UnknownPartition):
                return FetchAnswer(FetchStatus.UNKNOWN_PARTITION, -1, 0, 0)
            return FetchAnswer(FetchStatus.NONE, rs.epoch, result.high_watermark, result.log_start_offset,
                              data=bytes(result.data))
        if req.leader_epoch < rs.epoch:
            return FetchAnswer(FetchStatus.FENCED, rs.epoch, 0, 0)
        assert part.epochs is not None
        log_end = part.log.next_offset
        if req.fetch_offset < part.log.log_start_offset:  # checked first: the follower restarts there
            return FetchAnswer(FetchStatus.OFFSET_OUT_OF_RANGE, rs.epoch, part.high_watermark,
                              part.log.log_start_offset)
        if req.last_fetched_epoch >= 0:
            epoch, end = part.epochs.end_offset_for(req.last_fetched_epoch, log_end)
            if epoch < 0:
                # no epoch at or below the follower's here (a cache lost or restarted): what is
                # committed is common ground; past it, cut back to it
                if req.fetch_offset > part.high_watermark:
                    return FetchAnswer(FetchStatus.NONE, rs.epoch, part.high_watermark,
                                      part.log.log_start_offset, part.high_watermark, epoch)
            elif epoch != req.last_fetched_epoch or req.fetch_offset > end:
                return FetchAnswer(FetchStatus.NONE, rs.epoch, part.high_watermark, part.log.log_start_offset,
                                  end, epoch)
        if req.fetch_offset > log_end:
            return FetchAnswer(FetchStatus.OFFSET_OUT_OF_RANGE, rs.epoch, part.high_watermark,
                              part.log.log_start_offset)
        if req.replica_id in rs.replicas and req.replica_id != self.me:
            rs.follower_fetched(req.replica_id, req.fetch_offset, log_end)
            if rs.advance_hw(log_end):
                part.notify()
            if req.replica_id not in rs.isr and req.fetch_offset >= rs.hw:
                self.ctx.wake.set()  # it may join the ISR
        if req.fetch_offset >= part.log.next_offset and req.max_wait_ms > 0:
            await part.wait_for_data(req.max_wait_ms / 1000)
        try:
            result = await self.broker.fetch(req.topic, req.partition, req.fetch_offset,
                                             max_bytes=req.max_bytes, upto_log_end=True)
        except OffsetOutOfRange:
            return FetchAnswer(FetchStatus.OFFSET_OUT_OF_RANGE, rs.epoch, part.high_watermark,
                              part.log.log_start_offset)
        except (UnknownTopic, UnknownPartition):  # deleted or removed while the fetch waited
            return FetchAnswer(FetchStatus.UNKNOWN_PARTITION, -1, 0, 0)
        return FetchAnswer(FetchStatus.NONE, rs.epoch, part.high_watermark, part.log.log_start_offset,
                          data=bytes(result.data))

