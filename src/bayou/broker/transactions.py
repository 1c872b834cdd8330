"""Transactions (Kafka's exactly-once producer): the coordinator, and each partition's open and
aborted transactions.

A transactional producer (a ``transactional.id``) gets a producer id and epoch from
``init_producer``, names each partition before it writes there (``add_partitions``) and each group
whose offsets it commits (``add_offsets``, ``stage_offsets``), then ends the transaction
(``end``): a control batch (a commit or abort marker) is appended to every partition it wrote, and
on commit its staged offsets become the groups' committed offsets. Readers that ask for committed
records only (Kafka's read_committed) read up to the partition's last stable offset (LSO, before
the first record of any transaction still open) and get the aborted transactions of the range
they read, so they can drop those records. Every other reader (V1, Cursus, Iggy, TANK, the SDK,
Kafka's read_uncommitted) reads up to the high watermark and never sees a marker
(``decode_records`` skips control batches); aborted records are data to them, as to Kafka's
read_uncommitted consumers.

Durability: the coordinator's state (``transactions.json``, written before a change is
answered) says which transactions are open, with which partitions and staged offsets; a
transaction found half-ended at start is finished, an open one is aborted when its timeout
passes. A partition's table (``TxnTable``) is rebuilt from the log like the producer table
(broker/idempotence.py), with the aborted ones kept in storage/txnindex.py.

Cluster mode: a transactional id's state is a ZooKeeper node (``/transactions/<id>``), read
before each change and written back with a compare-and-set, so any broker can take over a
transaction whose coordinator died (the Kafka front end names the coordinator as it names a
group's; the ids a broker coordinates are cached for the expiry pass and adopted by a periodic
scan). Two brokers changing one transaction at once: the loser's write fails and its client gets
CONCURRENT_TRANSACTIONS, a retriable error. A TxnOffsetCommit, sent to the group's coordinator,
stages its offsets in the same node. Markers are appended by each partition's leader (forwarded
over the replication link when that is another broker) and replicated to the ISR before the
transaction is recorded complete; one that cannot be written leaves it prepared, and EndTxn's
retry or the expiry pass writes it later. A partition's leader checks a transactional producer's
first batch of each transaction against the ZooKeeper node (KIP-890's verification), so a
producer fenced or writing outside its transaction is refused there too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bayou.broker.cluster.state import TXN_BUCKETS
from bayou.broker.idempotence import producer_rebuild_start
from bayou.broker.model import Acks, ProduceResult
from bayou.broker.partition import Partition
from bayou.broker.persist import StateFile
from bayou.broker.txnstate import COMMIT, TxnTable, control_batch, marker_info
from bayou.errors import (
    BayouError,
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    ProducerFenced,
    StorageError,
    TransactionalIdLimit,
    UnknownPartition,
    UnknownTopic,
)
from bayou.records.batch import decode_header
from bayou.records.formats import ProducerSequence
from bayou.storage.txnindex import AbortedIndex, AbortedTxn

if TYPE_CHECKING:
    from bayou.broker.context import BrokerContext
    from bayou.broker.coordination import Cluster
    from bayou.broker.produce import ProducePath, Stamp

log = logging.getLogger("bayou.broker")

MAX_TIMEOUT_MS = 15 * 60 * 1000  # Kafka's transaction.max.timeout.ms default
EXPIRY_CHECK_S = 1.0
ADOPT_EVERY_S = 10.0  # cluster mode: how often the ids this broker now coordinates are looked for
MAX_EPOCH = 32767
ID_EXPIRY_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms default
MAX_TRANSACTIONAL_IDS = 10_000  # kept at once (in cluster mode, a 64th of it per bucket)
MAX_ID_CHARS = 249  # a transactional id's length, as a Kafka topic name's
EMPTY, ONGOING = "Empty", "Ongoing"
PREPARE_COMMIT, PREPARE_ABORT = "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"


# -- the coordinator's state ----------------------------------------------------------------------


@dataclass(slots=True)
class TxnMeta:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    # group -> topic -> partition -> offset, committed when the transaction commits
    offsets: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    started_ms: int = 0
    # the how-manieth transaction of the id (its markers carry it: txnstate.control_batch)
    sequence: int = 0
    last_epoch: int = -1  # the epoch before the last bump: a retried InitProducerId names it (KIP-360)
    version: int = -1  # cluster mode: the ZooKeeper node's version this copy was read at (-1: none)

    def as_json(self) -> dict[str, Any]:
        return {"producer_id": self.producer_id, "epoch": self.epoch, "timeout_ms": self.timeout_ms,
                "state": self.state, "partitions": sorted([t, p] for t, p in self.partitions),
                "groups": sorted(self.groups), "offsets": self.offsets, "started_ms": self.started_ms,
                "sequence": self.sequence, "last_epoch": self.last_epoch}

    @classmethod
    def from_json(cls, txn_id: str, d: dict[str, Any]) -> TxnMeta:
        return cls(txn_id, int(d["producer_id"]), int(d["epoch"]), int(d["timeout_ms"]), str(d["state"]),
                   {(str(t), int(p)) for t, p in d.get("partitions", [])}, set(d.get("groups", [])),
                   {g: {t: {int(p): int(o) for p, o in ps.items()} for t, ps in ts.items()}
                    for g, ts in d.get("offsets", {}).items()},
                   int(d.get("started_ms", 0)), int(d.get("sequence", 0)), int(d.get("last_epoch", -1)))


def _now_ms() -> int:
    return int(time.time() * 1000)


class Transactions:
    """The transaction coordinator of a single broker, and the transactional side of produce and
    fetch. ``next_producer_id`` hands out producer ids (the Kafka front end's allocator)."""

    def __init__(self, ctx: BrokerContext, produce: ProducePath,
                 commit_offsets: Callable[[str, str, dict[int, int]], Any]) -> None:
        self.ctx = ctx
        self.path = produce
        self._commit_offsets = commit_offsets  # (group, topic, {partition: offset}), awaited
        self.txns: dict[str, TxnMeta] = {}
        self.by_producer: dict[int, TxnMeta] = {}
        self.file = StateFile(ctx.config.data_dir / "transactions.json", self._snapshot)
        self._lock = asyncio.Lock()  # one state change at a time: markers are written in order
        self.next_producer_id: Callable[[], int] = self._unset
        # cluster mode: whether this broker coordinates a transactional id (the Kafka front end's
        # answer, set with the producer id allocator); the expiry pass acts on those only
        self.coordinates: Callable[[str], bool] = lambda _txn_id: True
        self._adopted_at = 0.0
        self._members: frozenset[int] = frozenset()

    @staticmethod
    def _unset() -> int:
        raise InvalidRequest("no producer id allocator")

    # -- state ------------------------------------------------------------------------------------

    def _snapshot(self) -> bytes:
        return json.dumps({"version": 1, "transactions": {
            k: m.as_json() for k, m in self.txns.items()}}, sort_keys=True).encode()

    def load(self) -> None:
        self._take(self._stored())

    def _stored(self) -> dict[str, TxnMeta]:
        """What transactions.json holds (blocking: a worker thread's, but at start)."""
        raw = self.file.load()
        if not raw:
            return {}
        try:
            doc = json.loads(raw)
            return {txn_id: TxnMeta.from_json(txn_id, d) for txn_id, d in doc.get("transactions", {}).items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("transactions.json is unreadable (%s): starting without transactions", exc)
            return {}

    def _take(self, txns: dict[str, TxnMeta]) -> None:
        self.txns = txns
        self.by_producer = {m.producer_id: m for m in txns.values()}

    async def start(self) -> list[asyncio.Task[None]]:
        """Finish what was half-ended at the last stop; the expiry task to run."""
        self.load()
        for meta in list(self.txns.values()):
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                try:
                    async with self._lock:
                        await self._complete(meta)
                except Exception:  # the expiry pass retries it
                    log.exception("could not finish transaction %s", meta.transactional_id)
            elif meta.state == ONGOING:
                meta.started_ms = _now_ms()  # its timeout counts from now: the producer may go on
        from bayou.broker.background import run_forever

        return [asyncio.get_running_loop().create_task(
            run_forever("transaction-expiry", self.expire, EXPIRY_CHECK_S, logger=log),
            name="transaction-expiry")]

    # -- where the state is kept: this broker's file, or ZooKeeper in cluster mode ---------------

    def _cache(self, meta: TxnMeta) -> None:
        self.txns[meta.transactional_id] = meta
        self.by_producer[meta.producer_id] = meta

    def _uncache(self, txn_id: str) -> None:
        meta = self.txns.pop(txn_id, None)
        if meta is not None and self.by_producer.get(meta.producer_id) is meta:
            del self.by_producer[meta.producer_id]

    async def _read(self, txn_id: str) -> TxnMeta | None:
        """Cluster mode: ``txn_id``'s state as ZooKeeper has it now (not cached)."""
        cluster = self.ctx.cluster
        assert cluster is not None
        data, version = await cluster.txn_state(txn_id)
        if not data:
            return None
        try:
            meta = TxnMeta.from_json(txn_id, json.loads(data))
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"the state of transactional id {txn_id!r} is unreadable ({exc})") from None
        meta.version = version
        return meta

    async def _meta(self, txn_id: str) -> TxnMeta | None:
        """``txn_id``'s state: this broker's copy standalone; in cluster mode read from ZooKeeper
        (another broker may have changed it) and cached."""
        if self.ctx.cluster is None:
            return self.txns.get(txn_id)
        meta = await self._read(txn_id)
        self._uncache(txn_id)
        if meta is not None:
            self._cache(meta)
        return meta

    async def _save(self, meta: TxnMeta) -> None:
        """Record ``meta``'s change before it is answered. Cluster mode: compare-and-set of its
        node; ConcurrentTransactions (retriable) when another broker changed it first."""
        cluster = self.ctx.cluster
        if cluster is None:
            try:
                await self.file.save()
            except Exception:
                # the change stays unrecorded: this copy must not keep it either (a retry that
                # found it made would answer as if it were recorded)
                self._take(await asyncio.get_running_loop().run_in_executor(self.ctx.io, self._stored))
                raise
            return
        data = json.dumps(meta.as_json(), sort_keys=True).encode()
        if not await cluster.set_txn_state(meta.transactional_id, data, meta.version):
            self._uncache(meta.transactional_id)
            raise ConcurrentTransactions(
                f"transactional id {meta.transactional_id!r} was changed by another broker: retry")
        meta.version += 1  # a create makes version 0, a set the next one

    async def _forget(self, meta: TxnMeta) -> None:
        """Drop an id unused for ``ID_EXPIRY_MS``."""
        self._uncache(meta.transactional_id)
        cluster = self.ctx.cluster
        if cluster is None:
            await self.file.save()
        else:
            await cluster.set_txn_state(meta.transactional_id, None, meta.version)

    async def _txn(self, txn_id: str, producer_id: int, epoch: int) -> TxnMeta:
        """The transaction ``txn_id`` as its producer names it: the errors Kafka gives a stale
        or unknown producer."""
        meta = await self._meta(txn_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(f"transactional id {txn_id!r} has no producer {producer_id}")
        if epoch != meta.epoch:
            raise ProducerFenced(f"producer {producer_id} of {txn_id!r}: epoch {epoch}, "
                                 f"current {meta.epoch}")
        return meta

    # -- the coordinator's requests ---------------------------------------------------------------

    async def init_producer(self, txn_id: str, timeout_ms: int, producer_id: int = -1,
                            epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for ``txn_id``: a new id the first time, the same id with the
        next epoch afterwards (fencing the previous producer; an open transaction of it is
        aborted first). ``producer_id``/``epoch`` (KIP-360) must then be the current ones."""
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            raise InvalidTransactionTimeout(
                f"transaction timeout {timeout_ms} ms is outside 1..{MAX_TIMEOUT_MS}")
        async with self._lock:
            meta = await self._meta(txn_id)
            if meta is not None and producer_id >= 0 and (
                    producer_id != meta.producer_id or epoch not in (meta.epoch, meta.last_epoch)):
                if producer_id != meta.producer_id:
                    raise InvalidProducerIdMapping(f"transactional id {txn_id!r} has another producer id")
                raise ProducerFenced(f"epoch {epoch} of {txn_id!r} is not the current {meta.epoch}")
            if meta is not None and meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                await self._complete(meta)
            if meta is not None and meta.state == ONGOING:
                meta.epoch = self._bump(meta)
                meta.state = PREPARE_ABORT
                await self._save(meta)
                await self._complete(meta)
            if meta is None:
                await self._check_room(txn_id)
                meta = TxnMeta(txn_id, self.next_producer_id(), 0, timeout_ms)
            else:
                self.by_producer.pop(meta.producer_id, None)
                if meta.epoch >= MAX_EPOCH - 1:
                    meta.producer_id, meta.epoch, meta.last_epoch = self.next_producer_id(), 0, -1
                else:
                    meta.epoch = self._bump(meta)
            meta.timeout_ms, meta.state, meta.started_ms = timeout_ms, EMPTY, _now_ms()
            meta.partitions, meta.groups, meta.offsets = set(), set(), {}
            self._cache(meta)
            await self._save(meta)
            return meta.producer_id, meta.epoch

    async def _check_room(self, txn_id: str) -> None:
        """A new transactional id: refused past ``MAX_ID_CHARS`` or ``MAX_TRANSACTIONAL_IDS``
        (the state a client can make the broker keep is bounded; unused ids expire)."""
        if not 0 < len(txn_id) <= MAX_ID_CHARS:
            raise InvalidRequest(f"a transactional id has 1 to {MAX_ID_CHARS} characters")
        cluster = self.ctx.cluster
        if cluster is None:
            full = len(self.txns) >= MAX_TRANSACTIONAL_IDS
        else:
            full = await cluster.txn_bucket_size(txn_id) >= MAX_TRANSACTIONAL_IDS // TXN_BUCKETS
        if full:
            raise TransactionalIdLimit(f"{MAX_TRANSACTIONAL_IDS} transactional ids are kept already: "
                                       f"{txn_id!r} is refused until unused ones expire")

    @staticmethod
    def _bump(meta: TxnMeta) -> int:
        """The next epoch (kept as ``last_epoch`` the current one)."""
        meta.last_epoch = meta.epoch
        return meta.epoch + 1 if meta.epoch < MAX_EPOCH - 1 else meta.epoch

    def _begin(self, meta: TxnMeta) -> None:
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            raise ConcurrentTransactions()
        if meta.state != ONGOING:
            meta.state, meta.started_ms = ONGOING, _now_ms()
            meta.partitions, meta.groups, meta.offsets = set(), set(), {}
            meta.sequence += 1

    async def add_partitions(self, txn_id: str, producer_id: int, epoch: int,
                             partitions: Sequence[tuple[str, int]]) -> None:
        """Name partitions the transaction writes to (UnknownTopic/UnknownPartition for one that
        does not exist: then none is added)."""
        async with self._lock:
            meta = await self._txn(txn_id, producer_id, epoch)
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise ConcurrentTransactions()
            for topic, p in partitions:
                self.ctx.authorize("send", topic)
                if not 0 <= p < len(self.ctx.topic(topic).partitions):
                    raise UnknownPartition(f"topic {topic} has no partition {p}")
            if set(partitions) <= meta.partitions and meta.state == ONGOING:
                return
            self._begin(meta)
            meta.partitions.update(partitions)
            await self._save(meta)

    async def add_offsets(self, txn_id: str, producer_id: int, epoch: int, group: str) -> None:
        async with self._lock:
            meta = await self._txn(txn_id, producer_id, epoch)
            self._begin(meta)
            if group not in meta.groups:
                meta.groups.add(group)
                await self._save(meta)

    async def stage_offsets(self, txn_id: str, producer_id: int, epoch: int, group: str,
                            offsets: dict[str, dict[int, int]]) -> None:
        """TxnOffsetCommit: offsets committed for ``group`` if the transaction commits."""
        async with self._lock:
            meta = await self._txn(txn_id, producer_id, epoch)
            if meta.state != ONGOING or group not in meta.groups:
                raise InvalidTxnState(f"group {group!r} was not added to transaction {txn_id!r}")
            for topic, parts in offsets.items():
                self.ctx.authorize("poll", topic)
                meta.offsets.setdefault(group, {}).setdefault(topic, {}).update(parts)
            await self._save(meta)

    async def end(self, txn_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn: write the markers, commit (or drop) the staged offsets. A retry of an end that
        completed is answered as it was; the other end is INVALID_TXN_STATE."""
        async with self._lock:
            meta = await self._txn(txn_id, producer_id, epoch)
            done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
            if meta.state == done:
                return
            if meta.state == (PREPARE_COMMIT if commit else PREPARE_ABORT):
                await self._complete(meta)
                return
            if meta.state != ONGOING:
                if meta.state == EMPTY and not commit:
                    return  # nothing was written: an abort has nothing to undo
                raise InvalidTxnState(f"transaction {txn_id!r} is {meta.state}: cannot "
                                      f"{'commit' if commit else 'abort'}")
            meta.state = PREPARE_COMMIT if commit else PREPARE_ABORT
            await self._save(meta)
            await self._complete(meta)

    async def _complete(self, meta: TxnMeta) -> None:
        """Write the markers of a prepared end, apply its offsets, record it complete. Under the
        lock. A partition deleted meanwhile is skipped."""
        commit = meta.state == PREPARE_COMMIT
        for topic, p in sorted(meta.partitions):
            await self._mark(topic, p, meta, commit)
        if commit:
            for group, topics in meta.offsets.items():
                for topic, parts in topics.items():
                    try:
                        await self._commit_offsets(group, topic, parts)
                    except BayouError as exc:
                        if exc.retriable:
                            raise ConcurrentTransactions(f"the offsets of group {group!r} are not "
                                                         f"committed yet ({exc.message}): retry") from None
                        log.warning("transaction %s: offsets of group %s on %s not committed: %s",
                                    meta.transactional_id, group, topic, exc.message)
        meta.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        meta.partitions, meta.groups, meta.offsets = set(), set(), {}
        await self._save(meta)
        log.info("transaction %s (producer %d, epoch %d) %s", meta.transactional_id, meta.producer_id,
                 meta.epoch, "committed" if commit else "aborted")

    async def _mark(self, topic: str, p: int, meta: TxnMeta, commit: bool) -> None:
        """Write the marker ending ``meta``'s transaction on one partition (a partition that
        already has it, from an earlier try, is left as it is: ``TxnTable.duplicate``).
        Standalone, here (a partition deleted meanwhile is skipped). In cluster mode, at the
        partition's leader as the cluster state has it (here, or forwarded), replicated to the
        ISR; a partition the cluster no longer has is skipped, and one that cannot be marked now
        raises ConcurrentTransactions (the transaction stays prepared: EndTxn's retry or the
        expiry pass writes it)."""
        pid, epoch, sequence = meta.producer_id, meta.epoch, meta.sequence
        cluster = self.ctx.cluster
        if cluster is None:
            try:
                part = self.ctx.partition(topic, p)
            except Exception:  # the topic or partition is gone: nothing left to mark
                return
            await self.write_marker(part, pid, epoch, commit, sequence=sequence)
            return
        if self._gone(cluster, topic, p):
            return
        leader, _epoch = cluster.partition_leader(topic, p)
        try:
            if leader is not None and leader.broker_id == self.ctx.config.broker_id:
                part = await self.ctx.ready_partition(topic, p)
                await self.write_marker(part, pid, epoch, commit, Acks.ALL, sequence)
            else:
                await cluster.forward_marker(topic, p, control_batch(pid, epoch, commit, _now_ms(), sequence))
        except (BayouError, OSError) as exc:
            if isinstance(exc, (UnknownTopic, UnknownPartition)) and self._gone(cluster, topic, p):
                return  # deleted meanwhile
            raise ConcurrentTransactions(
                f"the marker of {topic}/{p} is not written yet ({exc}): retry") from None

    @staticmethod
    def _gone(cluster: Cluster, topic: str, p: int) -> bool:
        """Whether the cluster state no longer has the partition (deleted: nothing to mark)."""
        snap = cluster.snapshot
        return snap is not None and (topic, p) not in snap.states

    async def _adopt(self) -> None:
        """Cluster mode: cache the state of the ids this broker coordinates now (their coordinator
        may have died: their expiry and half-ended ends are this broker's now), and drop the
        others. Every ``ADOPT_EVERY_S``, and at once when the live brokers change."""
        cluster = self.ctx.cluster
        assert cluster is not None
        members = frozenset(cluster.live_brokers())
        now = time.monotonic()
        if members == self._members and now - self._adopted_at < ADOPT_EVERY_S:
            return
        self._members, self._adopted_at = members, now
        for txn_id in list(self.txns):
            if not self.coordinates(txn_id):
                self._uncache(txn_id)
        for txn_id in await cluster.txn_ids():
            if txn_id not in self.txns and self.coordinates(txn_id):
                async with self._lock:
                    await self._meta(txn_id)

    async def expire(self) -> None:
        """Abort every open transaction past its timeout, fencing its producer (a new epoch);
        forget transactional ids unused for ``ID_EXPIRY_MS`` (Kafka's
        transactional.id.expiration.ms), so the state stays bounded."""
        clustered = self.ctx.cluster is not None
        if clustered:
            await self._adopt()
        now = _now_ms()

        def idle(m: TxnMeta) -> bool:
            return m.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and now - m.started_ms > ID_EXPIRY_MS

        def due(m: TxnMeta) -> bool:
            return m.state in (PREPARE_COMMIT, PREPARE_ABORT) or (
                m.state == ONGOING and now - m.started_ms > m.timeout_ms)

        for cached in list(self.txns.values()):
            if clustered and not self.coordinates(cached.transactional_id):
                continue  # another broker's now (``_adopt`` drops it): only it ends it
            try:
                if idle(cached):
                    async with self._lock:
                        meta = await self._meta(cached.transactional_id)  # cluster mode: as ZooKeeper has it
                        if meta is not None and idle(meta):
                            await self._forget(meta)
                elif due(cached):
                    await self._expire_one(cached, clustered, due)
            except Exception as exc:  # this id on the next pass; the others now
                log.warning("transaction %s: %s", cached.transactional_id,
                            exc.message if isinstance(exc, BayouError) else repr(exc))

    async def _expire_one(self, cached: TxnMeta, clustered: bool, due: Callable[[TxnMeta], bool]) -> None:
        async with self._lock:
            meta = await self._meta(cached.transactional_id) if clustered else cached
            if meta is None or not due(meta):
                return
            if meta.state == ONGOING:
                log.info("transaction %s timed out after %d ms: aborting",
                         meta.transactional_id, meta.timeout_ms)
                self.by_producer.pop(meta.producer_id, None)
                meta.epoch = self._bump(meta)
                self.by_producer[meta.producer_id] = meta
                meta.state = PREPARE_ABORT
                await self._save(meta)
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                await self._complete(meta)

    # -- the partitions' side ---------------------------------------------------------------------

    async def table(self, part: Partition) -> TxnTable:
        """The partition's transactions, rebuilt from the log and its aborted index first."""
        table = part.txn_state.table
        if table is None:
            table = await self.path.rebuilt(part, part.txn_state, self._new_table)
            table.aborted.sort()  # the rebuild may have found markers older than indexed ones
            if table.unsaved:
                entries, table.unsaved = table.unsaved, []
                await asyncio.get_running_loop().run_in_executor(
                    self.ctx.io, AbortedIndex(part.log.dir).append, entries)
        return table

    @staticmethod
    def _new_table(part: Partition) -> tuple[TxnTable, int]:
        log_ = part.log
        start = producer_rebuild_start(log_, _now_ms())
        index = AbortedIndex(log_.dir)
        entries = index.load(log_.log_start_offset)
        aborted = [a for a in entries if a.last_offset < log_.next_offset]
        if len(aborted) != len(entries):  # the log was cut (a torn tail): so is its index
            index.truncate(log_.next_offset)
        table = TxnTable(aborted)
        table.scan_start = start
        return table, start

    async def produce(self, topic: str, partition: int, producer_id: int, epoch: int,
                      producers: Sequence[ProducerSequence],
                      build: Callable[[list[bool]], tuple[bytes, Stamp | None]],
                      acks: Acks, txn_id: str | None = None) -> ProduceResult:
        """A transactional producer's batch: its transaction must be open and hold the partition.
        The partition's open transaction is registered before the batch is visible, so the last
        stable offset never passes it. In cluster mode the coordinator's state is in ZooKeeper:
        the first batch of each transaction here is checked against it (``txn_id``, the
        produce's transactional id), later ones against what that check found."""
        if self.ctx.cluster is None:
            self._check_producer(self.by_producer.get(producer_id), producer_id, epoch, topic, partition)
        part = await self.ctx.ready_partition(topic, partition)
        table = await self.table(part)
        for _try in range(3):
            if self.ctx.cluster is None or table.verified.get(producer_id) == epoch:
                break
            markers = table.markers
            meta = await self._read(txn_id) if txn_id is not None else None
            self._check_producer(meta, producer_id, epoch, topic, partition)
            again = await self.table(part)  # the same one unless the partition changed hands
            if again is table and table.markers == markers:  # no marker came while it was read
                table.verified[producer_id] = epoch
            table = again
        else:
            raise ConcurrentTransactions(f"the transaction of producer {producer_id} is ending: retry")
        table.begin(producer_id, part.log.next_offset)
        return await self.path.produce_idempotent(topic, partition, producers, build, acks)

    @staticmethod
    def _check_producer(meta: TxnMeta | None, producer_id: int, epoch: int, topic: str,
                        partition: int) -> None:
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(f"producer {producer_id} has no transaction (" + (
                "no state for its transactional id" if meta is None
                else f"its transactional id has producer {meta.producer_id}") + ")")
        if epoch != meta.epoch:
            raise ProducerFenced(f"producer {producer_id}: epoch {epoch}, current {meta.epoch}")
        if meta.state != ONGOING or (topic, partition) not in meta.partitions:
            raise InvalidTxnState(f"partition {topic}/{partition} is not in the producer's transaction")

    async def write_marker(self, part: Partition, producer_id: int, epoch: int, commit: bool,
                           acks: Acks = Acks.LEADER, sequence: int = 0) -> ProduceResult:
        """Append the marker ending ``producer_id``'s transaction ``sequence`` on ``part`` (this
        broker leads it), unless the partition has it already; acks=all (cluster mode) waits for
        the ISR after the table has it."""
        table = await self.table(part)
        if table.duplicate(producer_id, sequence):
            return ProduceResult(part.index, -1, -1, part.high_watermark, part.log.log_start_offset)
        batch = control_batch(producer_id, epoch, commit, _now_ms(), sequence)
        info = await self.path.append_control(part, batch, acks)
        entry = table.end(producer_id, info.base_offset, commit, sequence)
        if entry is not None:
            await asyncio.get_running_loop().run_in_executor(
                self.ctx.io, AbortedIndex(part.log.dir).append, [entry])
        if acks == Acks.ALL:
            await self.path.await_replication(part, info.last_offset)
        return ProduceResult(part.index, info.base_offset, info.last_offset, part.high_watermark,
                             part.log.log_start_offset)

    async def marker_from(self, topic: str, partition: int, batch: bytes, acks: Acks) -> ProduceResult:
        """A marker another broker's coordinator made (``batch``, a control batch), appended here
        as the partition's leader."""
        h = decode_header(batch)
        if not (h.control and h.transactional) or h.record_count != 1:
            raise InvalidRequest("a transaction marker that is not one control record")
        kind, sequence = marker_info(batch, 0)
        part = await self.ctx.ready_partition(topic, partition)
        return await self.write_marker(part, h.producer_id, h.producer_epoch, kind == COMMIT, acks, sequence)

    async def stable_offset(self, part: Partition, high_watermark: int) -> int:
        return (await self.table(part)).stable(high_watermark)

    async def aborted(self, part: Partition, start: int, end: int) -> list[AbortedTxn]:
        table = await self.table(part)
        table.forget_before(part.log.log_start_offset)
        return table.aborted_in(start, end)

    def forget_partition_data(self, part: Partition) -> None:
        part.txn_state.reset()


__all__ = ["Transactions", "TxnMeta"]
