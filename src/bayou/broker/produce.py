"""The produce path: admission (authorization, shutdown, leadership, min.insync.replicas), the
append, idempotence (one check-append-commit step over broker/idempotence.py's tables, rebuilt
from the log), and what ``acks`` and the fsync policy promise before the answer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from bayou.broker import ordering
from bayou.broker.context import BrokerContext
from bayou.broker.durability import GroupCommit
from bayou.broker.idempotence import (
    DEFAULT_MAX_PRODUCERS,
    DEFAULT_WINDOW,
    DedupTable,
    IdRun,
    ProducerTable,
    Rebuilt,
    TableT,
    producer_rebuild_start,
    rebuild,
)
from bayou.broker.model import Acks, ProduceResult
from bayou.broker.partition import Partition
from bayou.broker.topics import DEDUP, DEDUP_PRODUCERS, DEDUP_WINDOW, TopicAdmin
from bayou.errors import (
    BrokerShuttingDown,
    StorageError,
    UnknownPartition,
)
from bayou.records.formats import ProducerSequence
from bayou.storage.log import AppendInfo

log = logging.getLogger("bayou.broker")
_ALL = Acks.ALL  # (an Enum member read through its class costs a metaclass __getattr__ hook in 3.11)
Stamp = Callable[[bytearray, int], None]  # writes the assigned offsets into a batch (produce)


class ProducePath:
    def __init__(self, ctx: BrokerContext, admin: TopicAdmin) -> None:
        self.ctx = ctx
        self.admin = admin  # auto-creation of a produced-to topic

    def _led_elsewhere(self, part: Partition) -> bool:
        """Cluster mode: another broker leads ``part`` now."""
        rs = part.cluster
        return rs is not None and not rs.is_leader and rs.leader >= 0

    async def _await_leadership(self, part: Partition) -> None:
        """Cluster mode, a produce to a partition this broker does not lead by its local state:
        if ZooKeeper already names it leader, wait (briefly) for the state to arrive rather than
        send the client back to the old leader (Topology.await_leadership)."""
        await self.ctx.topology.await_leadership(part)

    @staticmethod
    def _check_insync(part: Partition, acks: Acks) -> None:
        """acks=all: refuse before appending when the append could only time out (it would still
        become visible, and the client's retry would store it twice): ReplicaState.check_insync."""
        if acks == Acks.ALL:
            part.replica_state.check_insync(part)

    @staticmethod
    def _epoch(part: Partition) -> int | None:
        """The leader epoch a leader stamps on what it appends (ReplicaState.epoch)."""
        return part.replica_state.epoch(part)

    async def produce(self, topic: str, partition: int, batch: bytes | bytearray,
                      acks: Acks = Acks.LEADER, *,
                      stamp: Callable[[bytearray, int], None] | None = None,
                      create: bool = True, at_offset: int | None = None,
                      forward: bool = False) -> ProduceResult:
        """Append one batch (its base offset is assigned here) and acknowledge per ``acks``.

        ``stamp`` writes the assigned offsets into formats that carry them per record (the batch
        was built by the caller, so its CRC is computed after stamping instead of verified).
        With ``create=False`` an unknown topic is an error even when auto-creation is on.
        ``at_offset`` places the batch at that base offset, past the log end (a gap; see
        ``PartitionLog.append``). ``forward`` (cluster mode): a partition led by another broker
        gets the batch through this one (for clients that cannot follow a redirect) instead of
        NotLeader.
        """
        ordering.begin()
        try:
            self.ctx.authorize("send", topic)
            if self.ctx.closing:
                raise BrokerShuttingDown()
            # the topic without a coroutine when nothing is to be waited for (one per request)
            t = self.ctx.topics.get(topic) if create else self.ctx.settled_topic(topic, partition)
            if t is None:
                t = (await self.admin.ensure_topic(topic) if create
                     else await self.ctx.ready_topic(topic, partition))
            if not 0 <= partition < len(t.partitions):
                raise UnknownPartition(f"topic {topic} has no partition {partition}")
            part = t.partitions[partition]
            if forward and self._led_elsewhere(part):
                return await self.ctx.topology.forward_produce(topic, partition, bytes(batch), acks)
            if self.ctx.topology.clustered:  # a single node leads every partition
                await self._await_leadership(part)
            self.ctx.check_leader(part)
            # (_check_insync and _epoch inline: this runs once per produce request)
            rs = part.replica_state
            if acks == _ALL:
                rs.check_insync(part)
            defer = self._defers(part)
            if stamp is None:
                info = part.log.append(batch, at_offset=at_offset, leader_epoch=rs.epoch(part), defer=defer)
            else:
                info = part.log.append(batch, verify_crc=False, stamp=stamp, at_offset=at_offset,
                                       leader_epoch=rs.epoch(part), defer=defer)
        finally:
            ordering.appended()  # appended, refused or forwarded: the next request may go on
        if acks != _ALL and not defer:  # nothing to wait for: no coroutine either
            return self._acknowledged(part, info)
        return await self._acknowledge(part, info, acks)

    @staticmethod
    def _defers(part: Partition) -> bool:
        """Whether an append followed by ``_acknowledge`` may leave its write to the fsync that
        ``_acknowledge`` waits for (fsync=always; storage/segment.py's deferred appends)."""
        return part.log.config.fsync.mode == "always"

    async def _durable(self, part: Partition, end: int, drops: int) -> None:
        """fsync=always: wait until the partition's log is on disk below ``end`` (the partition's
        group commit, broker/durability.py); ``drops``: the log's count of undone appends when the
        records were appended (StorageError if it moved on: they may have been undone)."""
        commits = part.group_commit
        if commits is None or commits.log is not part.log:
            commits = part.group_commit = GroupCommit(part.log, self.ctx.io)
        await commits.wait(end, drops)

    async def _acknowledge(self, part: Partition, info: AppendInfo, acks: Acks) -> ProduceResult:
        """After an append: move the leader's high watermark, wait for what ``acks`` and the
        fsync policy promise, wake long-polls, report."""
        self._count_in(part, info)
        if part.log.config.fsync.mode == "always":
            await self._durable(part, info.last_offset + 1, info.drops)
        part.notify()
        if acks == Acks.ALL:
            await self._await_replication(part, info.last_offset)
        return self._result(part, info)

    def _acknowledged(self, part: Partition, info: AppendInfo) -> ProduceResult:
        """``_acknowledge`` when nothing is waited for (fsync not ``always``, acks not all)."""
        self._count_in(part, info)
        part.notify()
        return self._result(part, info)

    @staticmethod
    def _count_in(part: Partition, info: AppendInfo) -> None:
        part.bytes_in += info.size
        part.records_in += info.record_count
        part.replica_state.appended(part)

    @staticmethod
    def _result(part: Partition, info: AppendInfo) -> ProduceResult:
        return ProduceResult(part.index, info.base_offset, info.last_offset, part.high_watermark,
                             part.log.log_start_offset)

    def deduplicating(self, topic: str) -> bool:
        """Whether sends to ``topic`` go through ``produce_unique`` (``message.deduplication``)."""
        return self.ctx.topic_flag(topic, DEDUP)

    async def produce_unique(self, topic: str, partition: int, ids: Sequence[int] | IdRun,
                             build: Callable[[list[bool]], bytes], acks: Acks = Acks.LEADER, *,
                             forward: bool = False) -> ProduceResult:
        """Append, of a send whose messages carry ``ids`` (in order, none 0), only those that are not
        replays for the partition's de-duplication table (broker/idempotence.py); ``build(keep)``
        returns the batch of the kept messages, in order (see ``_append_checked``).

        The table is rebuilt from the last ``message.deduplication.window`` offsets of the log by
        the first such send after a start (or after the settings changed or the topic was purged).
        """
        self.ctx.authorize("send", topic)
        if self.ctx.closing:
            raise BrokerShuttingDown()
        part = await self.ctx.ready_partition(topic, partition)
        if forward and self._led_elsewhere(part):  # the leader checks the ids (see produce)
            count = ids.count if isinstance(ids, IdRun) else len(ids)
            return await self.ctx.topology.forward_produce(topic, partition, build([True] * count), acks,
                                                           deduplicate=True)
        ordering.begin()
        return await self._append_checked(part, part.dedup_state, self._new_dedup_table, ids,
                                          lambda keep: (build(keep), None), acks)

    async def produce_idempotent(self, topic: str, partition: int, producers: Sequence[ProducerSequence],
                                 build: Callable[[list[bool]], tuple[bytes, Stamp | None]],
                                 acks: Acks = Acks.LEADER) -> ProduceResult:
        """Append, of a send whose messages carry (producer id, epoch, sequence) ``producers`` (in
        order), only those that are not replays for the partition's producer table
        (broker/idempotence.py); ``build(keep)`` returns the batch of the kept messages and the
        ``stamp`` that writes their offsets (see ``produce``). Raises ProducerFenced or
        OutOfOrderSequence (nothing stored) when the producer rules refuse the send.

        The table is rebuilt from the active segment by the first such send after a start.
        """
        self.ctx.authorize("send", topic)
        if self.ctx.closing:
            raise BrokerShuttingDown()
        part = await self.ctx.ready_partition(topic, partition)
        ordering.begin()
        return await self._append_checked(part, part.producer_state, self._new_producer_table,
                                          producers, build, acks)

    async def _append_checked(self, part: Partition, slot: Rebuilt[TableT],
                              new: Callable[[Partition], tuple[TableT, int]], keys: Any,
                              build: Callable[[list[bool]], tuple[bytes, Stamp | None]],
                              acks: Acks) -> ProduceResult:
        """The one idempotent produce step: check ``keys`` (one per message, in order) against the
        partition's table of ``slot`` (rebuilt from the log first, by ``new``'s table from its
        offset, if need be), append ``build(keep)``'s batch of the kept messages, commit. No await
        from the check to the commit, so concurrent sends to a partition cannot both store one
        sequence; the table changes only once the append succeeded.

        When every message is a replay nothing is appended and the result is an empty range at the
        log end: ``base_offset`` = the next offset, ``last_offset`` = ``base_offset - 1``; under
        fsync=always it is returned once the log is durable up to there (the replayed originals
        may still have been waiting for their fsync)."""
        try:  # the caller's ``ordering.begin`` ends here (see produce)
            if self.ctx.topology.clustered:
                await self._await_leadership(part)
            drops = part.log.drops
            if drops != part.drops_seen:  # appends were undone: the tables may count them
                part.drops_seen = drops
                part.reset_idempotence()
            table = slot.table
            if table is None:
                table = await self._rebuilt(part, slot, new)
            self.ctx.check_leader(part)
            self._check_insync(part, acks)
            keep, staged = table.check(keys)
            info = None
            if any(keep):
                batch, stamp = build(keep)
                defer = self._defers(part)
                if stamp is None:
                    info = part.log.append(batch, leader_epoch=self._epoch(part), defer=defer)
                else:
                    info = part.log.append(batch, verify_crc=False, stamp=stamp,
                                           leader_epoch=self._epoch(part), defer=defer)
                table.commit(staged)
        finally:
            ordering.appended()
        if info is not None:
            if acks != Acks.ALL and not self._defers(part):
                return self._acknowledged(part, info)
            return await self._acknowledge(part, info, acks)
        end, now = part.log.end_and_drops()
        if now != drops:  # appends were undone since the check: maybe the originals it saw
            raise StorageError(f"appends to {part.topic}/{part.index} were undone meanwhile "
                               "(a failed write): send again")
        if part.log.config.fsync.mode == "always" and part.log.durable_offset < end:
            await self._durable(part, end, drops)  # the originals were appended under ``drops``
        return ProduceResult(part.index, end, end - 1, part.high_watermark, part.log.log_start_offset)

    def _new_dedup_table(self, part: Partition) -> tuple[DedupTable, int]:
        """An empty message de-duplication table sized per the topic's settings, and the first
        offset its rebuild reads (the last ``message.deduplication.window`` ones)."""
        t = self.ctx.topics.get(part.topic)
        config = t.meta.config if t is not None else {}
        window = int(config.get(DEDUP_WINDOW, DEFAULT_WINDOW))
        return (DedupTable(int(config.get(DEDUP_PRODUCERS, DEFAULT_MAX_PRODUCERS))),
                max(part.log.log_start_offset, part.log.next_offset - window))

    @staticmethod
    def _new_producer_table(part: Partition) -> tuple[ProducerTable, int]:
        """An empty producer table, and the first offset its rebuild reads: the segments that
        hold records within the producer expiry (``producer_rebuild_start``)."""
        return ProducerTable(), producer_rebuild_start(part.log, int(time.time() * 1000))

    async def append_control(self, part: Partition, batch: bytes, acks: Acks = Acks.LEADER) -> AppendInfo:
        """Append a control batch (a transaction marker, broker/transactions.py) as the leader,
        durable per the fsync policy before this returns; not counted as client traffic. acks=all
        refuses it first when too few replicas are in sync (``await_replication`` then waits)."""
        self.ctx.check_leader(part)
        self._check_insync(part, acks)
        info = part.log.append(batch, leader_epoch=self._epoch(part))
        run = part.control_run
        part.control_run = ((run[0] if run is not None and run[1] == info.base_offset else info.base_offset),
                            info.last_offset + 1)
        part.replica_state.appended(part)
        if part.log.config.fsync.mode == "always":
            await self._durable(part, info.last_offset + 1, info.drops)
        part.notify()
        return info

    async def await_replication(self, part: Partition, last_offset: int) -> None:
        """After an acks=all append (``append_control``): until the ISR holds ``last_offset``."""
        await self._await_replication(part, last_offset)

    async def rebuilt(self, part: Partition, slot: Rebuilt[TableT],
                      new: Callable[[Partition], tuple[TableT, int]]) -> TableT:
        """``_rebuilt``, for the other tables rebuilt from the log the same way."""
        return await self._rebuilt(part, slot, new)

    async def _rebuilt(self, part: Partition, slot: Rebuilt[TableT],
                       new: Callable[[Partition], tuple[TableT, int]]) -> TableT:
        """The table of ``slot``, rebuilt from the partition's log first (one rebuild however many
        sends wait for it; a failed one is retried by the next send). Checks again that this
        broker may serve the partition, as the rebuild awaited."""
        task = slot.loading
        if task is None:
            task = asyncio.get_running_loop().create_task(self._rebuild(part, slot, new),
                                                          name=f"idempotence-{part.topic}-{part.index}")
            slot.loading = task
        try:
            table = await asyncio.shield(task)
        except Exception:
            if slot.loading is task:
                slot.loading = None
            raise
        self.ctx.check_serving(part)
        if self.ctx.closing:
            raise BrokerShuttingDown()
        return table

    async def _rebuild(self, part: Partition, slot: Rebuilt[TableT],
                       new: Callable[[Partition], tuple[TableT, int]]) -> TableT:
        generation = slot.generation
        table, offset = new(part)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        end = part.log.next_offset
        first = offset
        while True:
            offset = await loop.run_in_executor(self.ctx.io, rebuild, table, part.log, offset, end)
            if part.log.next_offset <= end:  # nothing appended meanwhile (and no await from here on)
                break
            offset, end = max(offset, end), part.log.next_offset
        if slot.generation == generation:
            slot.table = table
            slot.loading = None
        log.info("rebuilt %s of %s/%d from offsets %d-%d: %d producers in %.3f s",
                 table.KIND, part.topic, part.index, first, end - 1, len(table),
                 time.monotonic() - started)
        return table

    async def _await_replication(self, part: Partition, last_offset: int) -> None:
        deadline = time.monotonic() + self.ctx.config.ack_all_timeout_ms / 1000
        await part.replica_state.await_replicated(part, last_offset, deadline)

    async def flush_partition(self, topic: str, partition: int) -> None:
        """fsync everything appended to a partition so far."""
        self.ctx.authorize("send", topic)
        part = self.ctx.partition(topic, partition)
        await asyncio.get_running_loop().run_in_executor(self.ctx.io, part.log.flush)
