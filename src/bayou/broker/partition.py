"""A partition as the broker runs it: its log, its role, follower progress and long-poll waiters."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

from bayou.broker.idempotence import DedupTable, ProducerTable, Rebuilt
from bayou.broker.replication import SINGLE_NODE, ReplicaTracker
from bayou.broker.settings import BrokerConfig
from bayou.broker.txnstate import CopiedTxns
from bayou.storage.epochs import LeaderEpochCache
from bayou.storage.log import PartitionLog

if TYPE_CHECKING:
    from bayou.broker.cluster.replicaset import ReplicaSet
    from bayou.broker.coordination import ReplicaState
    from bayou.broker.durability import GroupCommit
    from bayou.broker.txnstate import TxnTable

LEADER = "leader"
FOLLOWER = "follower"


class Partition:
    def __init__(self, topic: str, index: int, log: PartitionLog, config: BrokerConfig) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.role = LEADER
        self.replicas = ReplicaTracker(config.replication_factor, config.min_insync_replicas,
                                       config.replica_max_lag, config.replica_lag_timeout_ms)
        self._waiters: list[asyncio.Future[None]] = []
        self.last_flush = 0.0
        self.round_robin = 0  # next partition hint for unkeyed, unpartitioned produce
        # Idempotent produce (broker/idempotence.py), each rebuilt from the log by the first send
        # that needs it: Cursus producer sequences, and Iggy message ids (``message.deduplication``)
        self.producer_state: Rebuilt[ProducerTable] = Rebuilt()
        self.dedup_state: Rebuilt[DedupTable] = Rebuilt()
        # Kafka transactions (broker/transactions.py): open ones and aborted ones, rebuilt alike
        self.txn_state: Rebuilt[TxnTable] = Rebuilt()
        # Cluster mode, as a follower: the transactions of the batches copied from the leader,
        # whose aborts go into the aborted index as the leader's do
        self.copied_txns = CopiedTxns()
        # The run of control batches (markers) at the log end, offsets ``from..to-1``: what readers
        # that have no gap at the end (TANK's last assigned sequence) leave out. None until known.
        self.control_run: tuple[int, int] | None = None
        # fsync=always: the waiters for the log to be durable (broker/durability.py), made by the
        # first produce that waits
        self.group_commit: GroupCommit | None = None
        self.drops_seen = 0  # the log's ``drops`` when the idempotence tables were last checked
        # Cluster mode: this broker's view of the partition's leader, epoch and ISR (None on a
        # single node, where ``replicas`` above holds the V1 protocol's reported followers).
        self.cluster: ReplicaSet | None = None
        self.epochs: LeaderEpochCache | None = None
        # Who decides the high watermark (broker/coordination.py): the V1 reports in ``replicas``
        # on a single node; in cluster mode the ISR in ``cluster`` (until that is known, nothing
        # is led and nothing shown). The broker's choice, made once at start.
        self.replica_state: ReplicaState = SINGLE_NODE
        self.replica_lock = threading.Lock()  # state switches vs. a fetcher's appends in a worker thread
        # Client traffic, summed per topic by /metrics at scrape time (replica copies not counted).
        self.bytes_in = 0
        self.records_in = 0
        self.bytes_out = 0
        self.records_out = 0

    @property
    def leader_last(self) -> int:
        """The last offset in the leader's log (inclusive), -1 when empty."""
        return self.log.next_offset - 1

    @property
    def high_watermark(self) -> int:
        """Exclusive high watermark: consumers see offsets below it.

        Under fsync=always only records already on disk count, so nothing a crash can take back is
        ever served.
        """
        return self.replica_state.high_watermark(self)

    def durable_cap(self, hw: int) -> int:
        """``hw``, but under fsync=always no further than what is on disk."""
        if self.log.config.fsync.mode == "always":
            return min(hw, self.log.durable_offset)
        return hw

    @property
    def dedup(self) -> DedupTable | None:
        """The message de-duplication table, None until rebuilt."""
        return self.dedup_state.table

    def reset_idempotence(self) -> None:
        """Forget the de-duplication and producer tables (config changed, log purged or cut by a
        follower's truncation): the next idempotent or de-duplicated send rebuilds them from what
        the log holds then, as after a restart (a table that remembered records no longer stored
        would acknowledge their retries as replays and store nothing)."""
        self.dedup_state.reset()
        self.producer_state.reset()
        self.txn_state.reset()
        self.copied_txns = CopiedTxns()
        self.control_run = None

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def data_waiter(self) -> asyncio.Future[None]:
        """A future the next ``notify`` resolves, registered at once. Register, then check the log
        end, then wait on it: an append between the check and the wait is not missed (a waiter
        registered on a later loop turn would sleep through it). ``forget_waiter`` when done."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def forget_waiter(self, fut: asyncio.Future[None]) -> None:
        if fut in self._waiters:
            self._waiters.remove(fut)

    async def wait_for_data(self, timeout: float, fut: asyncio.Future[None] | None = None) -> None:
        """Wait up to ``timeout`` s for the next append (on ``fut`` from ``data_waiter`` when the
        caller registered before checking)."""
        if fut is None:
            fut = self.data_waiter()
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            self.forget_waiter(fut)
