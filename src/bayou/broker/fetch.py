"""The fetch path: reads of whole batches up to the high watermark (or the log end, for a
replica), the long poll (a waiter registered before the log end is read), the log-start checks
that retention racing a read needs, and the zero-copy ``locate``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from bayou.broker.context import BrokerContext
from bayou.broker.model import FetchResult
from bayou.broker.partition import Partition
from bayou.errors import NotLeader, OffsetOutOfRange, WouldBlock
from bayou.storage import FileSpan

YIELD_AFTER_BYTES = 64 * 1024  # a read on the event loop this large yields to the loop after it
# The most one fetch answer holds (one batch larger than this still goes, so a consumer always
# makes progress), whatever a client asks: a read is held in memory until it is sent, so a request
# asking for gigabytes would otherwise make the broker read them. Kafka bounds the same with
# fetch.max.bytes (55 MB by default); each front end bounds the answers it puts together from
# several reads (a Kafka fetch of many partitions, an Iggy poll of many batches) by it too.
FETCH_MAX_BYTES = 64 * 1024 * 1024


class FetchPath:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    async def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20,
                    max_records: int | None = None, max_wait_ms: int = 0, min_bytes: int = 1,
                    upto_log_end: bool = False, from_log_start: bool = False,
                    committed_only: bool = False,
                    before_read: Callable[[], Awaitable[object] | None] | None = None) -> FetchResult:
        """Whole batches from the one holding ``offset`` up to the high watermark, at most
        ``max_bytes`` and (batch-granular) ``max_records``, but always at least one batch.

        With ``max_wait_ms``, waits until at least ``min_bytes`` are available or the time passes.
        An offset below the log start raises OffsetOutOfRange, or with ``from_log_start`` reads
        from the log start instead (V1 and Iggy clamp so); one at or past the end returns nothing
        (after the wait). ``upto_log_end`` reads past the high watermark (replica fetches);
        ``committed_only`` stops at the last stable offset (the partition's transaction table,
        broker/transactions.py, loaded by the caller), and the result's ``high_watermark`` is it.
        Retention may remove the segment while the read runs: the start is then checked again,
        never answered as an empty read. ``before_read`` is called once, when there is something
        to read (after any wait for it), before the first read, and what it returns awaited
        unless None: a front end reserves the memory of its answer there (server/answers.py),
        not while it waits.
        """
        self.ctx.authorize("poll", topic)
        max_bytes = min(max_bytes, FETCH_MAX_BYTES)
        if upto_log_end:  # records not yet committed: a replica's read (V1 BROKER_FETCH), not a consumer's
            self.ctx.authorizer.check("manage_servers")
        part = self.ctx.settled_partition(topic, partition)
        if part is None:
            part = await self.ctx.ready_partition(topic, partition)
        if not upto_log_end:
            self._check_replica(part)
        if offset < 0:
            raise OffsetOutOfRange(f"negative offset {offset}")
        deadline = time.monotonic() + max_wait_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            # registered before the log end is read: an append during the read still wakes us
            waiter = part.data_waiter() if max_wait_ms > 0 else None
            try:
                hw = part.log.next_offset if upto_log_end else part.high_watermark
                if committed_only:
                    txns = part.txn_state.table
                    hw = txns.stable(hw) if txns is not None else min(hw, offset)
                start = part.log.log_start_offset
                if offset < start:
                    if not from_log_start:
                        raise OffsetOutOfRange(f"offset {offset} is below the log start {start}")
                    offset = start
                if offset < hw:
                    if before_read is not None:
                        waiting = before_read()
                        before_read = None
                        if waiting is not None:
                            await waiting
                            self.ctx.check_serving(part)  # deleted meanwhile: told as after a wait
                            continue  # the bounds again, after that wait
                    try:  # bytes in the page cache (a reader at the tail) are read here, at once
                        r = self._read(part, offset, max_bytes, hw, max_records, nowait=True)
                    except WouldBlock:
                        r = await loop.run_in_executor(self.ctx.io, self._read, part, offset, max_bytes,
                                                       hw, max_records)
                    else:
                        if r is not None and len(r.data) >= YIELD_AFTER_BYTES:
                            await asyncio.sleep(0)  # a loop of such reads (a backlog) lets others run
                    if r is None and offset < part.log.log_start_offset:
                        continue  # retention removed the segment meanwhile: check the new start
                    if r is not None and (len(r.data) >= min_bytes or time.monotonic() >= deadline):
                        if not upto_log_end:  # a follower's copy is not client traffic
                            part.bytes_out += len(r.data)
                            part.records_out += r.record_count
                        return r
                left = deadline - time.monotonic()
                if left <= 0 or self.ctx.closing:
                    return FetchResult(b"", 0, offset, hw, start, part.log.next_offset)
                await part.wait_for_data(left, waiter)
            finally:
                if waiter is not None:
                    part.forget_waiter(waiter)
            self.ctx.check_serving(part)

    def check_readable(self, topic: str, partition: int) -> None:
        """Raise NotLeader (naming the leader) when this broker holds no replica of the partition
        (cluster mode): consumers are sent where the records are instead of reading nothing."""
        self.ctx.authorize("poll", topic)
        self._check_replica(self.ctx.partition(topic, partition))

    def _check_replica(self, part: Partition) -> None:
        rs = part.cluster
        if rs is not None and rs.me not in rs.replicas and not rs.is_leader:
            raise NotLeader(leader=self.ctx.topology.leader_of(part))

    @staticmethod
    def _read(part: Partition, offset: int, max_bytes: int, hw: int,
              max_records: int | None, nowait: bool = False) -> FetchResult | None:
        try:
            r = part.log.read(offset, max_bytes, max_offset=hw, max_records=max_records, nowait=nowait)
        except OffsetOutOfRange:
            return None
        return FetchResult(r.data, r.record_count, r.next_offset, hw, r.log_start_offset, r.log_end_offset)

    async def locate(self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20,
                     payload_only: bool = False) -> FileSpan | None:
        """Where the batches a fetch from ``offset`` (up to the high watermark) would return lie in
        one segment file, for zero-copy serving; None when nothing is visible yet. An offset below
        the log start raises OffsetOutOfRange."""
        self.ctx.authorize("poll", topic)
        part = await self.ctx.ready_partition(topic, partition)
        self._check_replica(part)
        try:  # headers in the page cache (a reader at the tail) are walked here, at once
            return part.log.locate(offset, max_bytes, max_offset=part.high_watermark,
                                   payload_only=payload_only, nowait=True)
        except WouldBlock:
            return await asyncio.get_running_loop().run_in_executor(
                self.ctx.io, lambda: part.log.locate(offset, max_bytes, max_offset=part.high_watermark,
                                                  payload_only=payload_only))

    async def first_batch_base(self, topic: str, partition: int) -> int | None:
        """The base offset of the partition's first stored batch (None while it stores none)."""
        self.ctx.authorize("poll", topic)
        part = await self.ctx.ready_partition(topic, partition)
        self._check_replica(part)
        try:  # remembered, or a header in the page cache
            return part.log.first_batch_base(nowait=True)
        except WouldBlock:
            return await asyncio.get_running_loop().run_in_executor(self.ctx.io, part.log.first_batch_base)

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        self.ctx.authorize("poll", topic)
        part = await self.ctx.ready_partition(topic, partition)
        self._check_replica(part)
        return await asyncio.get_running_loop().run_in_executor(
            self.ctx.io, part.log.offset_for_timestamp, timestamp)
