"""Message de-duplication: the message-id table (broker/idempotence.py), its rebuild from a
partition log, and ``Broker.produce_unique`` (check + append in one step, lazy rebuild after a start)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.broker import Acks, Broker, BrokerConfig
from bayou.broker.idempotence import DedupTable, IdRun, rebuild, split_id
from bayou.errors import InvalidConfig
from bayou.protocols.iggy.messages import Message
from bayou.protocols.iggy.stored import frames_from_messages
from bayou.records.batch import (
    Record,
    assemble_batch,
    decode_records,
    encode_batch,
    iter_batches,
    message_ids,
)
from bayou.records.compression import Compression
from bayou.records.iggy import FORMAT_IGGY, split_append_time
from bayou.storage import LogConfig, PartitionLog

P, Q, R = 7, 8, 9


def mid(producer: int, seq: int) -> int:
    return producer << 64 | seq


def admit(table: DedupTable, ids: Sequence[int]) -> list[bool]:
    """check + commit, as the broker does around a successful append."""
    keep, staged = table.check(ids)
    table.commit(staged)
    return keep


# -- the table ----------------------------------------------------------------------------------


def test_split_id() -> None:
    assert split_id(mid(P, 5)) == (P, 5)
    assert split_id((1 << 128) - 1) == ((1 << 64) - 1, (1 << 64) - 1)


def test_replays_are_dropped_and_new_sequences_kept() -> None:
    t = DedupTable()
    assert admit(t, [mid(P, s) for s in range(1, 11)]) == [True] * 10
    assert t.last(P) == 10
    keep = admit(t, [mid(P, s) for s in range(5, 16)])
    assert keep == [False] * 6 + [True] * 5  # 5..10 replayed, 11..15 new
    assert t.last(P) == 15
    assert admit(t, [mid(P, 3)]) == [False]  # anything at or below the last is a replay
    assert admit(t, [mid(P, 100)]) == [True]  # gaps are allowed: only "above the last" counts
    assert t.last(P) == 100


def test_check_changes_nothing_until_commit() -> None:
    t = DedupTable()
    keep, staged = t.check([mid(P, 1), mid(P, 2)])
    assert keep == [True, True] and staged == {P: 2}
    assert t.last(P) is None and len(t) == 0  # the append may still fail
    assert t.check([mid(P, 1)])[0] == [True]
    t.commit(staged)
    assert t.check([mid(P, 1)])[0] == [False]


def test_a_send_is_checked_against_itself() -> None:
    t = DedupTable()
    assert admit(t, [mid(P, 3), mid(P, 3), mid(P, 2), mid(P, 4)]) == [True, False, False, True]
    assert t.last(P) == 4


def test_producers_are_independent_and_new_ones_start_anywhere() -> None:
    t = DedupTable()
    admit(t, [mid(P, 10)])
    assert admit(t, [mid(Q, 1), mid(P, 1), mid(Q, 1), mid(R, 1 << 63)]) == [True, False, False, True]
    assert (t.last(P), t.last(Q), t.last(R)) == (10, 1, 1 << 63)


def test_id_zero_is_never_a_replay_and_never_remembered() -> None:
    t = DedupTable()
    assert admit(t, [0, 0, mid(0, 1), 0]) == [True, True, True, True]
    assert len(t) == 1 and t.last(0) == 1  # producer 0 (ids 1, 2, 3, ...) is a producer like any
    assert admit(t, [mid(0, 1), 0]) == [False, True]


def test_random_uuid_ids_behave_like_exact_id_dedup() -> None:
    t = DedupTable()
    ids = [0x1F2E3D4C5B6A79880123456789ABCDEF, 0x0F0E0D0C0B0A09080706050403020100]
    assert admit(t, ids) == [True, True]
    assert admit(t, ids) == [False, False]
    assert admit(t, list(reversed(ids))) == [False, False]


def test_least_recently_stored_producer_is_evicted() -> None:
    t = DedupTable(max_producers=2)
    admit(t, [mid(P, 1)])
    admit(t, [mid(Q, 1)])
    admit(t, [mid(P, 2)])  # P is now the most recent
    admit(t, [mid(R, 1)])  # evicts Q
    assert len(t) == 2 and t.last(Q) is None and t.last(P) == 2 and t.last(R) == 1
    assert admit(t, [mid(Q, 1)]) == [True]  # forgotten: a replay of Q is stored again
    assert t.last(P) is None  # and P, the least recent now, went


def test_a_replay_does_not_refresh_a_producer() -> None:
    """The table depends on stored messages only, so the log can rebuild it."""
    t = DedupTable(max_producers=2)
    admit(t, [mid(P, 1)])
    admit(t, [mid(Q, 1)])
    assert admit(t, [mid(P, 1)]) == [False]
    admit(t, [mid(R, 1)])
    assert t.last(P) is None and t.last(Q) == 1


def test_max_producers_must_be_positive() -> None:
    with pytest.raises(ValueError):
        DedupTable(0)


def test_record_replays_stored_ids_in_log_order() -> None:
    t = DedupTable(max_producers=2)
    t.record([mid(P, 100), mid(Q, 1), 0, mid(P, 1), mid(R, 5)])
    # the last stored message counts (a producer forgotten by the live table restarts at any
    # sequence), and the same eviction as live applies
    assert t.last(P) == 1 and t.last(Q) is None and t.last(R) == 5


# -- message ids in stored batches --------------------------------------------------------------


def iggy_batch(ids: Sequence[int], payload: bytes = b"x") -> bytes:
    frames, origin, stride = frames_from_messages([Message(payload, i) for i in ids], now_us=1)
    ms, sub = split_append_time(time.time_ns() // 1000, stride)
    return assemble_batch(frames, record_count=len(ids), base_offset=0, attributes=FORMAT_IGGY << 8,
                          base_timestamp=ms, max_timestamp=ms, producer_id=origin, base_sequence=sub)


def records_batch(ids: Sequence[int | None], compression: Compression = Compression.NONE) -> bytes:
    return encode_batch([Record(b"v%d" % n, None, 1, (), i) for n, i in enumerate(ids)],
                        compression=compression)


def test_message_ids_of_every_payload_format() -> None:
    b = bytearray(iggy_batch([mid(P, 1), mid(P, 2)]))
    b[0:8] = (40).to_bytes(8, "big")
    assert message_ids(b) == [(40, mid(P, 1)), (41, mid(P, 2))]
    # sizes differ: no common stride recorded, the frames are walked
    frames, origin, stride = frames_from_messages([Message(b"a", 5), Message(b"bbb", 6)], now_us=1)
    assert stride == 0
    mixed = assemble_batch(frames, record_count=2, base_offset=0, attributes=FORMAT_IGGY << 8,
                           base_timestamp=1, max_timestamp=1, producer_id=origin)
    assert message_ids(mixed) == [(0, 5), (1, 6)]
    assert message_ids(records_batch([None, mid(Q, 3), None, mid(Q, 4)])) == [(1, mid(Q, 3)), (3, mid(Q, 4))]
    gz = records_batch([mid(Q, 1), None], Compression.GZIP)
    assert message_ids(gz) == [(0, mid(Q, 1))]
    assert message_ids(records_batch([None, None])) == []
    # the ids message_ids finds are the ones decode_records reports
    for data in (bytes(b), mixed, gz):
        assert message_ids(data) == [(r.offset, r.message_id) for r in decode_records(data) if r.message_id]


# -- rebuild from a log -------------------------------------------------------------------------


def test_rebuild_from_the_log_gives_back_the_live_table(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p0", LogConfig(segment_bytes=256))
    live = DedupTable(max_producers=3)
    sends: list[list[int]] = [
        [mid(P, s) for s in range(1, 11)], [mid(Q, 1), mid(P, 5), mid(P, 11)], [mid(R, 7)],
        [mid(11, 1)], [mid(P, 12), mid(12, 2)], [mid(Q, 2)],
    ]
    for i, ids in enumerate(sends):
        keep, staged = live.check(ids)
        kept = [x for x, k in zip(ids, keep, strict=True) if k]
        assert kept
        log.append(iggy_batch(kept) if i % 2 == 0 else records_batch(kept))
        live.commit(staged)
        log.append(records_batch([None, None]))  # records without ids (another protocol)
    assert len(log.segments) > 1
    rebuilt = DedupTable(max_producers=3)
    assert rebuild(rebuilt, log, 0, log.next_offset) == log.next_offset
    assert list(rebuilt._last.items()) == list(live._last.items())
    log.close()


def test_rebuild_covers_only_its_window(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p0", LogConfig())
    log.append(iggy_batch([mid(Q, 1), mid(P, 1)]))  # offsets 0, 1
    log.append(iggy_batch([mid(R, 1), mid(R, 2)]))  # offsets 2, 3
    t = DedupTable()
    assert rebuild(t, log, 1, 4) == 4  # a window starting inside a batch
    assert (t.last(Q), t.last(P), t.last(R)) == (None, 1, 2)
    empty = DedupTable()
    assert rebuild(empty, log, 4, 4) == 4 and len(empty) == 0
    log.close()


# -- Broker.produce_unique ----------------------------------------------------------------------


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d", min_insync_replicas=1))
    await b.start()
    yield b
    await b.stop()


async def produce(b: Broker, ids: Sequence[int], topic: str = "t", partition: int = 0) -> tuple[int, int]:
    def build(keep: list[bool]) -> bytes:
        return records_batch([x for x, k in zip(ids, keep, strict=True) if k])
    r = await b.produce_unique(topic, partition, ids, build, Acks.LEADER)
    return r.base_offset, r.last_offset


def stored_ids(b: Broker, topic: str = "t", partition: int = 0) -> list[int]:
    log = b.partition(topic, partition).log
    data = log.read(log.log_start_offset, 1 << 24).data
    return [r.message_id or 0 for pos, _h in iter_batches(data) for r in decode_records(data, pos)]


async def test_produce_unique_stores_each_sequence_once(broker: Broker) -> None:
    await broker.create_topic("t", 2, {"message.deduplication": "true"})
    assert broker.deduplicating("t")
    assert await produce(broker, [mid(P, s) for s in range(1, 11)]) == (0, 9)
    assert await produce(broker, [mid(P, s) for s in range(5, 16)]) == (10, 14)
    assert stored_ids(broker) == [mid(P, s) for s in range(1, 16)]
    # everything replayed: nothing stored, an empty range at the log end
    assert await produce(broker, [mid(P, 3), mid(P, 15)]) == (15, 14)
    assert broker.partition("t", 0).log.next_offset == 15
    # partitions keep their own tables
    assert await produce(broker, [mid(P, 1)], partition=1) == (0, 0)


async def test_concurrent_sends_cannot_both_store_a_sequence(broker: Broker) -> None:
    await broker.create_topic("t", 1, {"message.deduplication": "true"})
    sends = [[mid(P, s) for s in range(i, i + 20)] for i in range(1, 200, 7)] * 2  # overlapping, twice
    await asyncio.gather(*(produce(broker, ids) for ids in sends))  # the first one waits for the rebuild
    last = sends[-1][-1] & 0xFFFF
    assert stored_ids(broker) == [mid(P, s) for s in range(1, last + 1)]  # every sequence once, in order


async def test_the_table_is_rebuilt_after_a_restart(tmp_path: Path) -> None:
    cfg = BrokerConfig(data_dir=tmp_path / "d", min_insync_replicas=1)
    b = Broker(cfg)
    await b.start()
    await b.create_topic("t", 1, {"message.deduplication": "true"})
    await produce(b, [mid(P, s) for s in range(1, 11)])
    await b.produce("t", 0, records_batch([None]), Acks.LEADER)  # another protocol's record
    await b.stop()

    b = Broker(cfg)
    await b.start()
    try:
        assert b.partition("t", 0).dedup is None  # rebuilt lazily, by the first de-duplicated send
        assert await produce(b, [mid(P, s) for s in range(5, 16)]) == (11, 15)
        assert stored_ids(b).count(mid(P, 5)) == 1
    finally:
        await b.stop()


async def test_the_rebuild_scans_only_the_window(tmp_path: Path) -> None:
    cfg = BrokerConfig(data_dir=tmp_path / "d", min_insync_replicas=1)
    b = Broker(cfg)
    await b.start()
    await b.create_topic("t", 1, {"message.deduplication": "true", "message.deduplication.window": "3"})
    await produce(b, [mid(P, 1), mid(Q, 1)])
    await produce(b, [mid(R, 1), mid(R, 2), mid(R, 3)])
    await b.stop()
    b = Broker(cfg)
    await b.start()
    try:
        # P and Q are older than the last 3 offsets: forgotten; R is known
        assert await produce(b, [mid(P, 1), mid(R, 3)]) == (5, 5)
        assert stored_ids(b)[-1] == mid(P, 1)
    finally:
        await b.stop()


async def test_settings_and_purge_reset_the_table(broker: Broker) -> None:
    await broker.create_topic("t", 1)
    assert not broker.deduplicating("t")
    await broker.alter_topic_config("t", {"message.deduplication": "true",
                                          "message.deduplication.producers": "1"})
    await produce(broker, [mid(P, 1)])
    await produce(broker, [mid(Q, 1)])  # evicts P (one producer only)
    assert await produce(broker, [mid(P, 1)]) == (2, 2)
    part = broker.partition("t", 0)
    assert part.dedup is not None and part.dedup.max_producers == 1
    await broker.alter_topic_config("t", {"message.deduplication.producers": "10"})
    assert part.dedup is None  # rebuilt with the new size: P (offset 2) and Q (offset 1) known
    assert await produce(broker, [mid(P, 1), mid(Q, 1)]) == (3, 2)
    await broker.purge_topic("t")
    assert part.dedup is None
    assert await produce(broker, [mid(P, 1)]) == (3, 3)  # the log is empty: nothing to replay


async def test_dedup_settings_are_validated(broker: Broker) -> None:
    for bad in ({"message.deduplication": "yes"}, {"message.deduplication.producers": "0"},
                {"message.deduplication.window": "x"}):
        with pytest.raises(InvalidConfig):
            await broker.create_topic("t", 1, bad)
    await broker.create_topic("t", 1, {"message.deduplication": "TRUE"})
    assert broker.describe_topic("t").config == {"message.deduplication": "true"}


async def test_a_failed_append_changes_nothing(broker: Broker) -> None:
    await broker.create_topic("t", 1, {"message.deduplication": "true"})

    def broken(keep: list[bool]) -> bytes:
        raise InvalidConfig("cannot build")

    with pytest.raises(InvalidConfig):
        await broker.produce_unique("t", 0, [mid(P, 1)], broken)
    assert await produce(broker, [mid(P, 1)]) == (0, 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(1, 20)),
                min_size=1, max_size=12))
def test_an_id_run_is_checked_like_its_ids(sends: list[tuple[int, int, int]]) -> None:
    """``check(IdRun)`` (the O(1) path for one producer's consecutive sequences) answers what
    ``check`` of the same ids one by one answers, send after send."""
    by_run, by_ids = DedupTable(), DedupTable()
    for producer, first, count in sends:
        run = IdRun(producer, first, count)
        got = by_run.check(run)
        want = by_ids.check([(producer << 64) | (first + i) for i in range(count)])
        assert got == want
        by_run.commit(got[1])
        by_ids.commit(want[1])
    assert all(by_run.last(p) == by_ids.last(p) for p in range(4))


def test_id_run_of_stored_frames() -> None:
    from bayou.protocols.iggy.stored import id_run

    def frames(ids: list[int]) -> tuple[bytes, int]:
        data, _origin, stride = frames_from_messages(
            [Message(payload=b"x" * 10, id=i) for i in ids], now_us=1)
        return data, stride

    data, stride = frames([(5 << 64) | s for s in range(3, 9)])
    assert id_run(data, 6, stride) == (5, 3)
    for ids in ([(5 << 64) | s for s in (3, 4, 6)], [(5 << 64) | 3, (6 << 64) | 4], [9, 8]):
        data, stride = frames(ids)
        assert id_run(data, len(ids), stride) is None
    assert id_run(b"", 0, 58) is None


async def test_a_replay_whose_originals_an_undo_took_meanwhile_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync=always: a send's original is appended and waits for its fsync, whose write then
    fails and undoes it (a full disk) while its retry is being checked. The check saw the original
    and calls the retry a replay; it must not be acknowledged (the original is gone): it is
    refused, and the next retry is stored. (The undo is made from the check itself here, where
    the I/O thread's could land.) Failed before: the replay was acknowledged at once."""
    import threading

    from bayou.errors import StorageError
    from bayou.storage import FsyncPolicy

    b = Broker(BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(fsync=FsyncPolicy.parse("always"))))
    await b.start()
    try:
        await b.create_topic("t", 1, {"message.deduplication": "true"})
        log = b.partition("t", 0).log
        release = threading.Event()
        real_sync_to = log.sync_to

        def held_sync_to(offset: int) -> None:  # the group commit's fsync, held until released
            assert release.wait(30)
            real_sync_to(offset)

        monkeypatch.setattr(log, "sync_to", held_sync_to)
        original = asyncio.create_task(produce(b, [mid(P, 1)]))
        deadline = time.monotonic() + 10
        while log.next_offset == 0:  # appended (deferred), waiting for its fsync
            assert time.monotonic() < deadline
            await asyncio.sleep(0.001)
        real_check = DedupTable.check

        def check_then_undo(self: DedupTable, ids: Sequence[int] | IdRun) -> tuple[list[bool], object]:
            out = real_check(self, ids)
            assert log.drop_unwritten()  # the original's write failed in the I/O thread
            return out

        with monkeypatch.context() as m:
            m.setattr(DedupTable, "check", check_then_undo)
            with pytest.raises(StorageError, match="undone meanwhile"):
                await produce(b, [mid(P, 1)])
        release.set()
        with pytest.raises(StorageError, match="undone"):
            await original
        assert log.next_offset == 0
        assert await produce(b, [mid(P, 1)]) == (0, 0)  # the next retry is stored
        assert stored_ids(b) == [mid(P, 1)]
    finally:
        release.set()
        await b.stop()
