"""Idempotent-producer admission rules (cursus.md 11) and their survival across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.broker.idempotence import ProducerSequence, ProducerTable, producer_rebuild_start
from bayou.errors import OutOfOrderSequence, ProducerFenced
from bayou.protocols.cursus.batch import encode_batch, encode_messages
from bayou.records.batch import Record
from bayou.records.batch import encode_batch as encode_records
from bayou.records.cursus import CursusMessage
from bayou.server.cursus import Advertised, ConnState, CursusService
from bayou.storage import LogConfig
from bayou.storage.log import PartitionLog


def admit(t: ProducerTable, sends: list[ProducerSequence]) -> list[bool]:
    """check + commit, as the broker does around a successful append."""
    keep, staged = t.check(sends)
    t.commit(staged)
    return keep


def test_rules() -> None:
    t = ProducerTable()
    assert admit(t, [(b"p", 1, 1), (b"p", 1, 2)]) == [True, True]
    assert admit(t, [(b"p", 1, 2), (b"p", 1, 3)]) == [False, True]  # replay dropped, next kept
    assert admit(t, [(b"", 0, 0), (b"q", 5, 0)]) == [True, True]  # no id or seq 0: never deduped
    with pytest.raises(OutOfOrderSequence, match="gap"):
        admit(t, [(b"p", 1, 7)])
    with pytest.raises(OutOfOrderSequence, match="first message for producer"):
        admit(t, [(b"new", 1, 2)])
    with pytest.raises(ProducerFenced, match="stale_producer_epoch"):
        admit(t, [(b"p", 0, 1)])
    with pytest.raises(OutOfOrderSequence, match="new producer epoch"):
        admit(t, [(b"p", 2, 5)])
    assert admit(t, [(b"p", 2, 1)]) == [True]  # a higher epoch restarts at 1 and fences epoch 1
    with pytest.raises(ProducerFenced):
        admit(t, [(b"p", 1, 4)])


def test_check_changes_nothing_until_commit() -> None:
    t = ProducerTable()
    admit(t, [(b"p", 1, 1)])
    t.check([(b"p", 1, 2), (b"x", 1, 1)])  # the append then failed: no commit
    assert t.entries[b"p"].last_seq == 1 and b"x" not in t.entries


def _batch(seqs: list[int], epoch: int = 1) -> bytes:
    msgs = [CursusMessage(b"v%d" % s, 0, s, b"p1", b"", epoch) for s in seqs]
    return encode_batch("idem", 0, encode_messages(msgs), len(msgs), seqs[0], seqs[-1])


async def test_replays_are_stored_once_even_after_a_restart(tmp_path: Path) -> None:
    for restart in (False, True):
        b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
        await b.start()
        try:
            s = CursusService(b, Advertised("localhost", 9000))
            st = ConnState()
            if not restart:
                await s.handle(b"\x00\x00CREATE topic=idem partitions=1 idempotent=true", st)
            ack = await s.handle(_batch([1, 2, 3]), st)
            assert isinstance(ack, bytes) and ack.startswith(b'{"status":"OK"')
            assert b.partition("idem", 0).log.next_offset == 3  # the replay after restart: stored once
            fenced = await s.handle(_batch([1], epoch=0), st)
            assert isinstance(fenced, bytes) and b"stale_producer_epoch" in fenced
        finally:
            await b.stop()


async def test_flag_alone_does_not_deduplicate(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    await b.start()
    try:
        s = CursusService(b, Advertised("localhost", 9000))
        st = ConnState()
        await s.handle(b"\x00\x00CREATE topic=idem partitions=1", st)
        await s.handle(_batch([1]), st)
        await s.handle(_batch([1]), st)
        assert b.partition("idem", 0).log.next_offset == 2  # cursus.md 11: a topic property only
    finally:
        await b.stop()


async def test_a_purged_log_forgets_its_producers_as_a_restart_does(tmp_path: Path) -> None:
    """After a purge the producer table is rebuilt from the (empty) log, as after a restart: a
    send that starts again at sequence 1 is stored (it used to be acknowledged as a replay of the
    purged records and dropped, while the same send after a restart was stored)."""
    for restart in (False, True):
        b = Broker(BrokerConfig(data_dir=tmp_path / f"d{restart}"))
        await b.start()
        try:
            s = CursusService(b, Advertised("localhost", 9000))
            st = ConnState()
            await s.handle(b"\x00\x00CREATE topic=idem partitions=1 idempotent=true", st)
            await s.handle(_batch([1, 2, 3]), st)
            await b.purge_topic("idem")
            if restart:
                await b.stop()
                b = Broker(BrokerConfig(data_dir=tmp_path / f"d{restart}"))
                await b.start()
                s = CursusService(b, Advertised("localhost", 9000))
            part = b.partition("idem", 0)
            before = part.log.next_offset
            ack = await s.handle(_batch([1]), st)
            assert isinstance(ack, bytes) and ack.startswith(b'{"status":"OK"'), ack
            assert part.log.next_offset == before + 1, restart  # stored, not dropped as a replay
        finally:
            await b.stop()


def _producer_batch(producer: bytes, seqs: list[int], pad: int = 0) -> bytes:
    msgs = [CursusMessage(b"v%d" % s + b"x" * pad, 0, s, producer, b"", 1) for s in seqs]
    return encode_batch("idem", 0, encode_messages(msgs), len(msgs), seqs[0], seqs[-1])


async def test_a_producer_whose_last_send_sits_in_a_rolled_segment_is_known_after_a_restart(
        tmp_path: Path) -> None:
    """The table was rebuilt from the active segment alone: after a roll, a restart (or a leader
    change) forgot a producer whose sends all lay in older segments, and its next send was
    refused as out of order (its replay would not have been recognised either)."""
    config = BrokerConfig(data_dir=tmp_path / "d", log=LogConfig(segment_bytes=2048))
    b = Broker(config)
    await b.start()
    try:
        s = CursusService(b, Advertised("localhost", 9000))
        st = ConnState()
        await s.handle(b"\x00\x00CREATE topic=idem partitions=1 idempotent=true", st)
        await s.handle(_producer_batch(b"p1", [1, 2, 3]), st)
        for seq in range(1, 9):  # another producer's sends roll the segment past p1's
            await s.handle(_producer_batch(b"p2", [seq], pad=600), st)
        log = b.partition("idem", 0).log
        assert len(log.segments) >= 3 and log.active.base_offset > 3
        end = log.next_offset
    finally:
        await b.stop()
    b = Broker(config)
    await b.start()
    try:
        s = CursusService(b, Advertised("localhost", 9000))
        st = ConnState()
        replay = await s.handle(_producer_batch(b"p1", [2, 3]), st)
        assert isinstance(replay, bytes) and replay.startswith(b'{"status":"OK"'), replay
        assert b.partition("idem", 0).log.next_offset == end  # recognised as a replay: not stored
        after = await s.handle(_producer_batch(b"p1", [4]), st)
        assert isinstance(after, bytes) and after.startswith(b'{"status":"OK"'), after
        assert b.partition("idem", 0).log.next_offset == end + 1
    finally:
        await b.stop()


def test_the_rebuild_reads_back_to_the_expiry_and_no_further_than_its_byte_bound(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=1024))
    try:
        for i in range(12):  # one batch a segment, timestamps one minute apart
            log.append(encode_records([Record(b"x" * 900, None, 60_000 * i)]))
        now = 60_000 * 11
        bases = [seg.base_offset for seg in log.segments]
        assert producer_rebuild_start(log, now) == bases[0]  # all within 30 minutes
        assert producer_rebuild_start(log, now, ttl_ms=5 * 60_000) == bases[-6]  # minutes 6..11
        assert producer_rebuild_start(log, now, max_bytes=2500) == bases[-3]  # two sealed ones fit
        assert producer_rebuild_start(log, now, ttl_ms=0) == bases[-1]  # the active one always
    finally:
        log.close()


async def test_a_send_undone_by_a_failed_write_is_stored_when_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync=always (the default) leaves an append's write to its fsync (deferred appends). When
    that write fails the send is refused and undone, and the producer table forgets it: the
    producer's retry of the same sequences is stored, not acknowledged as a replay of nothing."""
    import os

    from bayou.storage import segment as segment_module

    def no_space(fd: int, data: bytes | memoryview) -> int:
        raise OSError(28, "No space left on device")

    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    await b.start()
    try:
        s = CursusService(b, Advertised("localhost", 9000))
        st = ConnState()
        await s.handle(b"\x00\x00CREATE topic=idem partitions=1 idempotent=true", st)
        ack = await s.handle(_batch([1, 2]), st)
        assert isinstance(ack, bytes) and ack.startswith(b'{"status":"OK"')
        log = b.partition("idem", 0).log
        with monkeypatch.context() as m:
            m.setattr(segment_module.os, "write", no_space)
            refused = await s.handle(_batch([3, 4]), st)
        assert os.write is not no_space
        assert isinstance(refused, bytes) and not refused.startswith(b'{"status":"OK"'), refused
        assert log.next_offset == 2 and log.drops == 1
        ack = await s.handle(_batch([3, 4]), st)  # the retry
        assert isinstance(ack, bytes) and ack.startswith(b'{"status":"OK"'), ack
        assert log.next_offset == 4
        replay = await s.handle(_batch([3, 4]), st)  # now a replay: stored once
        assert isinstance(replay, bytes) and replay.startswith(b'{"status":"OK"'), replay
        assert log.next_offset == 4
    finally:
        await b.stop()
