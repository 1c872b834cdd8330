"""The follower side of replication: one task per partition this broker follows, copying the
leader's batches at their offsets, truncating first whatever diverged from the leader (the leader
answers a fetch whose last epoch it does not share with where that epoch ended on it).

Every change to the follower's log runs on the storage worker thread, fenced by the partition's
``replica_lock`` and the state (``ReplicaSet``) that asked for it: the reconciler may have moved the
partition on while the change waited."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable

from bayou.broker.cluster.context import REPLICATION, ClusterContext
from bayou.broker.cluster.replicaset import ReplicaSet
from bayou.broker.cluster.state import BrokerRegistration
from bayou.broker.cluster.transport import (
    FetchRequest,
    FetchStatus,
    LinkError,
    ReplicaDialer,
    ReplicaLink,
)
from bayou.broker.partition import Partition
from bayou.records.batch import iter_batches
from bayou.storage.txnindex import AbortedIndex

log = logging.getLogger("bayou.cluster")

FETCH_MAX_BYTES = 8 << 20
FETCH_MAX_WAIT_MS = 500


class FollowerFetcher:
    def __init__(self, ctx: ClusterContext, dialer: ReplicaDialer,
                 suspect: Callable[[BrokerRegistration], None]) -> None:
        self.ctx = ctx
        self.me = ctx.me
        self.dialer = dialer
        self._suspect = suspect  # a leader refused the connection: it may be dead
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}

    def follow(self, part: Partition, rs: ReplicaSet, leader: BrokerRegistration) -> None:
        """Fetch ``part`` from ``leader`` for as long as ``part`` is in state ``rs``."""
        assert self.ctx.loop is not None
        self._tasks[(part.topic, part.index)] = self.ctx.loop.create_task(
            self._fetch_loop(part, rs, leader), name=f"fetch-{part.topic}-{part.index}")

    def stop(self, key: tuple[str, int]) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    async def stop_all(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def _fetch_loop(self, part: Partition, rs: ReplicaSet, leader: BrokerRegistration) -> None:
        addr = leader.address(REPLICATION)
        assert addr is not None
        backoff = 0.05
        told = False
        while part.cluster is rs and not self.ctx.stopping:
            if part.log.fsync_error is not None:
                # offline after a failed fsync: fetch nothing more (a fetch's offset would tell
                # the leader that records not on disk here are replicated); out of the ISR
                if not told:
                    log.error("not fetching %s/%d: %s", part.topic, part.index, part.log.offline_reason)
                    told = True
                await asyncio.sleep(1.0)
                continue
            try:
                link = await self.dialer.connect(*addr, limit=FETCH_MAX_BYTES * 2)
            except (OSError, LinkError) as exc:
                if isinstance(exc, ConnectionRefusedError):
                    self._suspect(leader)
                elif isinstance(exc, LinkError):
                    log.warning("cannot fetch %s/%d from broker %d: %s", part.topic, part.index,
                                leader.broker_id, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                self.ctx.wake.set()
                continue
            backoff = 0.05
            try:
                await self._fetch_on(part, rs, link)
            except (OSError, ConnectionError, LinkError, asyncio.IncompleteReadError) as exc:
                log.info("fetch of %s/%d from broker %d stopped: %s", part.topic, part.index,
                         leader.broker_id, exc)
                await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                raise
            except Exception:  # a storage error must not end replication for good
                log.exception("fetch of %s/%d from broker %d failed; retrying", part.topic, part.index,
                              leader.broker_id)
                await asyncio.sleep(1.0)
            finally:
                link.close()

    async def _fetch_on(self, part: Partition, rs: ReplicaSet, link: ReplicaLink) -> None:
        assert part.epochs is not None
        on_io = self.ctx.on_io
        while part.cluster is rs and not self.ctx.stopping and part.log.fsync_error is None:
            req = FetchRequest(part.topic, part.index, self.me, rs.epoch, part.log.next_offset,
                               self._last_epoch(part), FETCH_MAX_BYTES, FETCH_MAX_WAIT_MS)
            reply = await link.fetch(req)
            if part.cluster is not rs:
                return
            if reply.error in (FetchStatus.NOT_LEADER, FetchStatus.FENCED, FetchStatus.UNKNOWN_PARTITION):
                self.ctx.wake.set()
                await asyncio.sleep(0.1)
                continue
            if reply.error == FetchStatus.OFFSET_OUT_OF_RANGE:
                if reply.log_start_offset > part.log.next_offset:
                    # retention on the leader passed our end: start over at its log start
                    await on_io(self._restart_at, part, rs, reply.log_start_offset)
                else:  # our log runs past the leader's: what is beyond its end diverged
                    await on_io(self._truncate, part, rs,
                                min(part.log.next_offset, max(reply.high_watermark, 0)))
                await asyncio.sleep(0.05)
                continue
            if reply.diverging_end_offset >= 0:
                # KIP-320: cut where the epoch ended on the leader or here, whichever is first
                _own_epoch, own_end = part.epochs.end_offset_for(reply.diverging_epoch, part.log.next_offset)
                cut = min(reply.diverging_end_offset, part.log.next_offset)
                if own_end >= 0:
                    cut = min(cut, own_end)
                log.info("%s/%d diverged from the leader after offset %d (epoch %d): truncating",
                         part.topic, part.index, cut, reply.diverging_epoch)
                if cut >= part.log.next_offset:
                    await asyncio.sleep(0.1)  # nothing to cut: never spin
                await on_io(self._truncate, part, rs, cut)
                continue
            if reply.data:
                await on_io(self._append_copied, part, rs, reply.data)
            if reply.log_start_offset > part.log.log_start_offset:
                # the leader's log start moved (retention, purge, deleted segments): follow it
                if reply.log_start_offset >= part.log.next_offset:
                    await on_io(self._restart_at, part, rs, reply.log_start_offset)
                else:
                    await on_io(self._fenced, part, rs,
                                functools.partial(self._drop_below, part, reply.log_start_offset))
            rs.hw = max(rs.hw, min(reply.high_watermark, part.log.next_offset))
            part.notify()
    @staticmethod
    def _drop_below(part: Partition, offset: int) -> None:
        if part.log.delete_segments_below(offset):
            part.reset_idempotence()

    @staticmethod
    def detach(part: Partition) -> None:
        """Wait out a copy or truncation in a worker thread, then fence any later one."""
        with part.replica_lock:
            part.cluster = None

    @staticmethod
    def _last_epoch(part: Partition) -> int:
        """The epoch of the follower's last batch: from the epoch cache, else (a cache lost or a
        log from before cluster mode) from the last batch's header; -1 for an empty log."""
        assert part.epochs is not None
        if part.log.next_offset <= part.log.log_start_offset:
            return -1
        if part.epochs.entries:
            return part.epochs.latest_epoch
        h = part.log.batch_header_at(part.log.next_offset - 1)
        return h.leader_epoch if h is not None and h.leader_epoch >= 0 else -1

    @staticmethod
    def _truncate(part: Partition, rs: ReplicaSet, offset: int) -> None:
        """Cut the follower's log at ``offset`` (what diverged from the leader)."""
        FollowerFetcher._fenced(part, rs, lambda: FollowerFetcher._cut(part, rs, offset, restart=False))

    @staticmethod
    def _restart_at(part: Partition, rs: ReplicaSet, start: int) -> None:
        """Empty the follower's log and start it at ``start`` (the leader's log start)."""
        FollowerFetcher._fenced(part, rs, lambda: FollowerFetcher._cut(part, rs, start, restart=True))

    @staticmethod
    def _append_copied(part: Partition, rs: ReplicaSet, data: bytes) -> None:
        FollowerFetcher._fenced(part, rs, lambda: FollowerFetcher._copy(part, data))

    @staticmethod
    def _fenced(part: Partition, rs: ReplicaSet, change: Callable[[], None]) -> None:
        """Run a follower's change to its log (in a worker thread) only if the partition is still
        in the state ``rs`` that asked for it: the state may have moved on while it waited."""
        with part.replica_lock:
            if part.cluster is rs and not rs.is_leader:
                change()

    @staticmethod
    def _cut(part: Partition, rs: ReplicaSet, offset: int, *, restart: bool) -> None:
        assert part.epochs is not None
        if restart:
            part.log.purge(offset)
            part.epochs.truncate_from(0)
            AbortedIndex(part.log.dir).rewrite([])
        else:
            part.log.truncate_to(offset)
            part.epochs.truncate_from(offset)
            AbortedIndex(part.log.dir).truncate(offset)
        rs.hw = min(rs.hw, part.log.next_offset)
        part.reset_idempotence()

    @staticmethod
    def _copy(part: Partition, data: bytes) -> None:
        """Append the leader's batches at their own offsets (skipping any we already hold)."""
        assert part.epochs is not None
        now_ms = int(time.time() * 1000)
        for pos, h in iter_batches(data):
            if h.next_offset <= part.log.next_offset:
                continue
            batch = data[pos : pos + h.size]
            part.epochs.assign(h.leader_epoch, h.base_offset)
            part.log.append(batch, at_offset=h.base_offset)
            if h.transactional:  # an abort marker goes into the aborted index, as at the leader
                part.copied_txns.copied(part.log, data, pos, h, now_ms)
        if part.log.config.fsync.mode == "always":
            part.log.sync_to(part.log.next_offset)

