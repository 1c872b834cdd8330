"""A partition's transactions (broker/txnstate.py) and its aborted-transaction index
(storage/txnindex.py): markers, the last stable offset, what a read_committed fetch lists, the
rebuild from the log, and readers of other protocols never seeing a marker."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.broker.idempotence import rebuild
from bayou.broker.model import Acks
from bayou.broker.partition import Partition
from bayou.broker.txnstate import ABORT, COMMIT, CopiedTxns, TxnTable, control_batch, marker_info, marker_type
from bayou.errors import InvalidRequest, ProducerFenced, TransactionalIdLimit
from bayou.records.batch import (
    ATTR_FORMAT_SHIFT,
    Record,
    decode_header,
    decode_records,
    encode_batch,
    is_control,
    is_sparse,
    iter_batches,
    refresh_crc,
)
from bayou.records.tank import FORMAT_TANK
from bayou.storage.config import LogConfig
from bayou.storage.log import PartitionLog
from bayou.storage.txnindex import AbortedIndex, AbortedTxn


def txn_batch(*values: bytes, pid: int, seq: int = 0) -> bytes:
    raw = bytearray(encode_batch([Record(value=v, timestamp=1) for v in values], producer_id=pid,
                                 producer_epoch=0, base_sequence=seq))
    raw[22] |= 0x10
    refresh_crc(raw)
    return bytes(raw)


def test_a_marker_is_a_transactional_control_batch_no_reader_sees_as_a_record() -> None:
    for commit, kind in ((True, COMMIT), (False, ABORT)):
        m = control_batch(42, 3, commit, 1000)
        h = decode_header(m)
        assert h.control and h.transactional and not h.sparse
        assert (h.producer_id, h.producer_epoch, h.record_count) == (42, 3, 1)
        assert marker_type(m, 0) == kind
        assert decode_records(m) == []


def test_the_last_stable_offset_and_aborted_ranges() -> None:
    t = TxnTable()
    assert t.stable(10) == 10
    t.begin(1, 10)
    t.begin(2, 12)
    t.begin(1, 15)  # the first offset of the open transaction stays
    assert t.stable(20) == 10
    assert t.end(1, 20, commit=True) is None
    assert t.stable(21) == 12
    entry = t.end(2, 21, commit=False)
    assert entry == AbortedTxn(21, 12, 2)
    assert t.stable(22) == 22
    assert t.aborted_in(0, 12) == []  # records from 12 on
    assert t.aborted_in(12, 13) == [entry]
    assert t.aborted_in(22, 30) == []  # ended before the range
    assert t.end(2, 21, commit=False) is None  # known already
    t.begin(5, 30)
    later = t.end(5, 31, commit=False)
    t.forget_before(25)  # retention moved the log start past the first abort
    assert t.aborted == [later]
    assert t.aborted_in(0, 100) == [later]


def test_the_table_is_rebuilt_from_the_log_and_the_index(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", LogConfig())
    log.append(bytearray(txn_batch(b"a", pid=1)))  # 0
    log.append(bytearray(encode_batch([Record(value=b"plain", timestamp=1)])))  # 1
    log.append(bytearray(txn_batch(b"b", pid=2)))  # 2
    log.append(bytearray(control_batch(1, 0, False, 5)))  # 3: 1 aborted
    log.append(bytearray(txn_batch(b"c", pid=2, seq=1)))  # 4
    log.append(bytearray(txn_batch(b"d", pid=3)))  # 5
    log.append(bytearray(control_batch(3, 0, True, 5)))  # 6: 3 committed; 2 still open
    index = AbortedIndex(log.dir)
    table = TxnTable(index.load(log.log_start_offset))
    rebuild(table, log, 0, log.next_offset)
    assert table.ongoing == {2: 2}
    assert table.stable(log.next_offset) == 2
    assert table.aborted_in(0, 7) == [AbortedTxn(3, 0, 1)]
    assert table.unsaved == [AbortedTxn(3, 0, 1)]  # the index did not have it
    index.append(table.unsaved)
    again = TxnTable(index.load(0))
    rebuild(again, log, 0, log.next_offset)
    assert again.unsaved == [] and again.aborted_in(0, 7) == [AbortedTxn(3, 0, 1)]
    # other readers: the records, no marker
    data = log.read(0, 1 << 20).data
    assert [r.value for p, _ in iter_batches(data) for r in decode_records(data, p)] == [
        b"a", b"plain", b"b", b"c", b"d"]
    log.close()


def test_the_index_drops_a_torn_entry_and_entries_before_the_log_start(tmp_path: Path) -> None:
    index = AbortedIndex(tmp_path)
    index.append([AbortedTxn(5, 1, 9), AbortedTxn(50, 40, 9)])
    with open(index.path, "ab") as f:
        f.write(b"\x00" * 7)  # a crash mid-append
    assert index.load(0) == [AbortedTxn(5, 1, 9), AbortedTxn(50, 40, 9)]
    assert index.path.stat().st_size == 48  # rewritten without the torn tail
    assert index.load(10) == [AbortedTxn(50, 40, 9)]


def test_bit_4_is_sparse_only_in_a_tank_batch() -> None:
    assert is_sparse((FORMAT_TANK << ATTR_FORMAT_SHIFT) | 0x10)
    assert not is_sparse(0x10)  # format 0: Kafka's transactional bit
    assert not is_control((FORMAT_TANK << ATTR_FORMAT_SHIFT) | 0x20)
    assert is_control(0x30)



def follower_copy(log: PartitionLog, copied: CopiedTxns, batch: bytes) -> None:
    """``batch`` appended to ``log`` as a follower's copy is (fetcher.py), then shown to ``copied``."""
    info = log.append(bytearray(batch))
    stored = log.read(info.base_offset, 1 << 20).data
    copied.copied(log, stored, 0, decode_header(stored), 10_000)


def test_a_follower_indexes_the_aborts_it_copies(tmp_path: Path) -> None:
    """CopiedTxns (cluster mode's follower copy): an abort marker copied from the leader is
    indexed with its transaction's first offset, a commit is not; a transaction opened before
    the follower started copying (a restart: an empty CopiedTxns) is found in the log."""
    log = PartitionLog(tmp_path / "p", LogConfig())
    copied = CopiedTxns()

    def copy(batch: bytes) -> None:
        follower_copy(log, copied, batch)

    copy(txn_batch(b"a", pid=7))  # 0
    copy(encode_batch([Record(value=b"plain", timestamp=1)]))  # 1
    copy(txn_batch(b"b", pid=8))  # 2
    copy(txn_batch(b"c", pid=7, seq=1))  # 3
    copy(control_batch(8, 0, True, 5))  # 4: 8 committed
    copy(control_batch(7, 0, False, 5))  # 5: 7 aborted, from 0
    copy(txn_batch(b"d", pid=9))  # 6
    assert AbortedIndex(log.dir).load(0) == [AbortedTxn(5, 0, 7)]
    copied = CopiedTxns()  # the follower restarted
    copy(control_batch(9, 0, False, 5))  # 7: 9 aborted, from 6
    assert AbortedIndex(log.dir).load(0) == [AbortedTxn(5, 0, 7), AbortedTxn(7, 6, 9)]
    # what a leader's rebuild then finds: nothing the index lacks
    table = TxnTable(AbortedIndex(log.dir).load(0))
    rebuild(table, log, 0, log.next_offset)
    assert table.unsaved == [] and table.ongoing == {}
    log.close()


@contextlib.asynccontextmanager
async def one_partition(tmp_path: Path) -> AsyncIterator[tuple[Broker, Partition, TxnTable]]:
    """A started broker with topic ``t`` of one partition, its partition and transaction table."""
    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    await b.start()
    try:
        await b.create_topic("t", 1)
        part = b.partition("t", 0)
        yield b, part, await b.transactions.table(part)
    finally:
        await b.stop()


async def test_a_marker_from_another_coordinator_ends_the_transaction_here(tmp_path: Path) -> None:
    """The leader's side of a forwarded marker (cluster mode's replication-link PRODUCE with the
    transaction-marker flag, Broker.write_txn_marker): a control batch ends the producer's open
    transaction on the partition and an abort is listed for read_committed fetches; anything but
    one control record is refused and nothing is appended."""
    async with one_partition(tmp_path) as (b, part, table):
        await b.produce("t", 0, txn_batch(b"x", b"y", pid=7), create=False)
        table.begin(7, 0)
        assert await b.last_stable_offset("t", 0) == 0
        for bad in (txn_batch(b"not a marker", pid=7),
                    encode_batch([Record(value=b"plain", timestamp=1)])):
            with pytest.raises(InvalidRequest):
                await b.write_txn_marker("t", 0, bad, Acks.LEADER)
        assert part.log.next_offset == 2
        result = await b.write_txn_marker("t", 0, control_batch(7, 0, False, 5), Acks.LEADER)
        assert result.base_offset == 2 and part.log.next_offset == 3
        assert await b.last_stable_offset("t", 0) == 3
        assert await b.aborted_transactions("t", 0, 0, 3) == [(7, 0)]


def test_a_marker_carries_its_transactions_sequence_and_a_late_copy_is_a_duplicate(tmp_path: Path) -> None:
    m = control_batch(42, 3, False, 1000, sequence=7)
    assert marker_info(m, 0) == (ABORT, 7)
    assert marker_info(control_batch(42, 3, True, 1000), 0) == (COMMIT, 0)  # 0: not known
    t = TxnTable()
    t.begin(42, 0)
    assert not t.duplicate(42, 7)
    t.end(42, 5, commit=True, sequence=7)
    assert t.duplicate(42, 7) and t.duplicate(42, 6) and not t.duplicate(42, 8)
    assert not t.duplicate(42, 0) and not t.duplicate(43, 7)
    # the table rebuilt from the log knows it too
    log = PartitionLog(tmp_path / "p", LogConfig())
    log.append(bytearray(txn_batch(b"a", pid=42)))
    log.append(bytearray(control_batch(42, 0, True, 5, sequence=7)))
    again = TxnTable()
    rebuild(again, log, 0, log.next_offset)
    assert again.duplicate(42, 7) and not again.duplicate(42, 8)
    log.close()


def test_the_index_keeps_each_abort_once_and_is_cut_with_the_log(tmp_path: Path) -> None:
    index = AbortedIndex(tmp_path)
    index.append([AbortedTxn(5, 0, 7), AbortedTxn(9, 6, 8)])
    index.append([AbortedTxn(5, 0, 7)])  # a follower's copy, then a rebuild's
    assert index.load(0) == [AbortedTxn(5, 0, 7), AbortedTxn(9, 6, 8)]
    index.truncate(9)
    assert index.load(0) == [AbortedTxn(5, 0, 7)]
    index.truncate(100)
    assert index.load(0) == [AbortedTxn(5, 0, 7)]


def test_a_follower_reads_the_log_once_for_producers_it_has_not_seen(tmp_path: Path) -> None:
    """After a restart, the first abort of a producer not seen since reads the log back once;
    an abort with no record since the producer's last marker starts after that marker."""
    log = PartitionLog(tmp_path / "p", LogConfig())
    log.append(bytearray(txn_batch(b"a", pid=1)))  # 0: before the restart
    log.append(bytearray(txn_batch(b"b", pid=2)))  # 1
    copied = CopiedTxns()
    scans = 0
    real = copied._before

    def counted(*args: object) -> TxnTable:
        nonlocal scans
        scans += copied.before is None
        return real(*args)  # type: ignore[arg-type]

    copied._before = counted  # type: ignore[method-assign]

    def copy(batch: bytes) -> None:
        follower_copy(log, copied, batch)

    copy(control_batch(1, 0, False, 5))  # 2: 1 aborted, from 0
    copy(control_batch(2, 0, False, 5))  # 3: 2 aborted, from 1
    copy(control_batch(2, 0, False, 5))  # 4: 2 again with nothing since: from 4
    assert scans == 1
    assert AbortedIndex(log.dir).load(0) == [AbortedTxn(2, 0, 1), AbortedTxn(3, 1, 2), AbortedTxn(4, 4, 2)]
    log.close()


async def test_a_marker_already_written_is_not_written_again(tmp_path: Path) -> None:
    """A coordinator's retry (or a late marker from a broker that coordinated the transaction
    before) of a marker the partition has: nothing appended, and the producer's next transaction
    stays open."""
    async with one_partition(tmp_path) as (b, part, table):
        await b.produce("t", 0, txn_batch(b"x", pid=7), create=False)
        table.begin(7, 0)
        first = await b.write_txn_marker("t", 0, control_batch(7, 0, True, 5, sequence=3), Acks.LEADER)
        assert first.base_offset == 1
        await b.produce("t", 0, txn_batch(b"next", pid=7, seq=1), create=False)  # transaction 4
        table.begin(7, 2)
        late = await b.write_txn_marker("t", 0, control_batch(7, 0, True, 5, sequence=3), Acks.LEADER)
        assert late.base_offset == -1 and part.log.next_offset == 3
        assert await b.last_stable_offset("t", 0) == 2  # transaction 4 still holds it


async def test_a_retried_init_producer_id_may_name_the_epoch_before_the_bump(tmp_path: Path) -> None:
    """KIP-360: a producer's InitProducerId that bumped the epoch but failed before it answered
    (its open transaction being aborted) is retried with the epoch the producer knows."""
    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    await b.start()
    b.set_producer_ids(iter(range(1000, 2000)).__next__)
    try:
        await b.create_topic("t", 1)
        pid, epoch = await b.txn_init_producer("tx", 60000)
        await b.txn_add_partitions("tx", pid, epoch, [("t", 0)])
        meta = b.transactions.txns["tx"]
        meta.last_epoch, meta.epoch, meta.state = epoch, epoch + 1, "PrepareAbort"  # the failed try
        again = await b.txn_init_producer("tx", 60000, pid, epoch)
        assert again[0] == pid and again[1] > epoch + 1
        with pytest.raises(ProducerFenced):
            await b.txn_init_producer("tx", 60000, pid, epoch)  # two bumps ago: fenced
    finally:
        await b.stop()


async def test_the_transactional_ids_a_client_can_make_the_broker_keep_are_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bayou.broker import transactions

    monkeypatch.setattr(transactions, "MAX_TRANSACTIONAL_IDS", 2)
    async with one_partition(tmp_path) as (b, _part, _table):
        b.set_producer_ids(iter(range(1000, 2000)).__next__)
        await b.txn_init_producer("a", 60000)
        await b.txn_init_producer("b", 60000)
        await b.txn_init_producer("a", 60000)  # an id kept already: a new epoch
        with pytest.raises(TransactionalIdLimit):
            await b.txn_init_producer("c", 60000)
        with pytest.raises(InvalidRequest):
            await b.txn_init_producer("x" * 250, 60000)
        assert sorted(b.transactions.txns) == ["a", "b"]


async def test_an_index_entry_past_a_cut_log_end_is_dropped_for_good(tmp_path: Path) -> None:
    """An abort indexed at an offset the log no longer holds (a torn tail cut at recovery) is not
    listed, and is gone from the file: when the log grows past it again, the records there are
    other ones."""
    async with one_partition(tmp_path) as (b, part, _table):
        AbortedIndex(part.log.dir).append([AbortedTxn(5, 0, 7)])
        part.reset_idempotence()
        assert await b.aborted_transactions("t", 0, 0, 10) == []
        assert AbortedIndex(part.log.dir).load(0) == []
