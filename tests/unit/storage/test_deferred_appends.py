"""Deferred appends (storage/segment.py): under fsync=always the produce path leaves a batch's
write to the segment's next fsync. The file must always hold a prefix of the log's batches in
order, every reader must see every batch, and what was fsynced must survive a crash."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayou.errors import StorageError
from bayou.records import Record, decode_records, encode_batch, iter_batches
from bayou.storage import FsyncPolicy, LogConfig, PartitionLog
from bayou.storage import segment as segment_module

ALWAYS = LogConfig(fsync=FsyncPolicy.parse("always"), segment_bytes=2048, index_interval_bytes=128)


def batch(i: int, n: int = 1) -> bytes:
    return encode_batch([Record(f"v{i}.{j}".encode(), key=b"k", timestamp=1_000 + i) for j in range(n)])


def values(log: PartitionLog) -> list[bytes]:
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.next_offset:
        res = log.read(offset, 1 << 20)
        assert res.data, f"no progress at offset {offset}"
        for p, _h in iter_batches(res.data):
            out.extend(r.value or b"" for r in decode_records(res.data, p) if r.offset >= offset)
        offset = res.next_offset
    return out


def on_disk(log: PartitionLog) -> int:
    return sum(os.stat(s.path).st_size for s in log.segments)


def test_a_deferred_append_is_written_by_the_fsync(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", ALWAYS)
    for i in range(3):
        log.append(batch(i), defer=True)
    assert on_disk(log) == 0 and log.size_bytes > 0 and log.active.dirty
    log.sync_to(log.next_offset)
    assert on_disk(log) == log.size_bytes and log.durable_offset == 3 and not log.active.dirty
    log.close()


def test_a_read_writes_the_pending_batches_first(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0), defer=True)
    log.append(batch(1), defer=True)
    assert values(log) == [b"v0.0", b"v1.0"]
    assert on_disk(log) == log.size_bytes
    log.close()


def test_a_write_through_append_keeps_the_order(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0), defer=True)
    log.append(batch(1))  # not deferred: the pending batch is written before it
    assert on_disk(log) == log.size_bytes
    log.append(batch(2), defer=True)
    log.close()  # close writes what is pending
    again = PartitionLog(tmp_path / "p", ALWAYS)
    assert values(again) == [b"v0.0", b"v1.0", b"v2.0"]
    again.close()


def test_pending_bytes_are_bounded(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", LogConfig(fsync=FsyncPolicy.parse("always")))
    big = batch(0, 2000)
    n = segment_module.MAX_PENDING // len(big) + 2
    for _ in range(n):
        log.append(big, defer=True)
    assert log.size_bytes - on_disk(log) <= segment_module.MAX_PENDING
    log.close()


def test_a_roll_writes_the_sealed_segments_pending_batches(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", ALWAYS)
    i = 0
    while len(log.segments) < 3:
        log.append(batch(i, 5), defer=True)
        i += 1
    for seg in log.segments[:-1]:
        assert os.stat(seg.path).st_size == seg.size
    log.close()


def _full_disk(monkeypatch: pytest.MonkeyPatch, short: int | None = None) -> None:
    """Every write fails with ENOSPC (the first one after ``short`` bytes, if given)."""
    real_write = os.write
    calls = {"n": 0}

    def write(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] == 1 and short is not None:
            return real_write(fd, bytes(data)[:short])  # a short write, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(segment_module.os, "write", write)


def test_a_failed_write_undoes_the_deferred_appends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsync's write of the pending batches fails after a short write: they are undone as a
    failed write-through append is (none was acknowledged), the file is cut back to the last whole
    batch written before them, and ``drops`` tells their waiters."""
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0))
    log.append(batch(1))
    log.sync_to(log.next_offset)
    kept = on_disk(log)
    for i in range(2, 6):
        log.append(batch(i), defer=True)
    real_write = os.write
    _full_disk(monkeypatch, short=50)
    with pytest.raises(StorageError, match="No space left"):
        log.sync_to(log.next_offset)
    assert log.next_offset == 2 and log.durable_offset == 2 and log.drops == 1
    assert on_disk(log) == kept == log.size_bytes  # the short write's 50 bytes are cut too
    monkeypatch.setattr(segment_module.os, "write", real_write)
    info = log.append(batch(9), defer=True)  # the offsets are used again
    assert info.base_offset == 2 and info.drops == 1
    log.sync_to(log.next_offset)
    assert values(log) == [b"v0.0", b"v1.0", b"v9.0"]
    log.close()
    again = PartitionLog(tmp_path / "p", ALWAYS)
    assert values(again) == [b"v0.0", b"v1.0", b"v9.0"]
    again.close()


def test_a_write_through_append_that_cannot_write_the_pending_batches_undoes_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0), defer=True)
    log.append(batch(1), defer=True)
    _full_disk(monkeypatch)
    with pytest.raises(StorageError, match="No space left"):
        log.append(batch(2))  # not deferred: the pending bytes are written first, and fail
    assert log.next_offset == 0 and log.drops == 1 and log.size_bytes == 0 == on_disk(log)


def test_a_flush_on_a_full_disk_makes_what_was_written_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shutdown's flush: the deferred appends that cannot be written are undone, and what is
    in the file is fsynced, so the broker can still leave a clean log."""
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0))
    log.append(batch(1), defer=True)
    with monkeypatch.context() as m:
        _full_disk(m)
        log.flush()
    assert log.next_offset == 1 == log.durable_offset and log.drops == 1
    log.close()
    again = PartitionLog(tmp_path / "p", ALWAYS, recover=False)
    assert values(again) == [b"v0.0"]
    again.close()


def test_older_batches_stay_readable_while_the_pending_bytes_cannot_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read writes the pending bytes first only when it reaches into them: on a full disk a
    consumer behind the tail still reads."""
    log = PartitionLog(tmp_path / "p", LogConfig(fsync=FsyncPolicy.parse("always"), index_interval_bytes=128))
    for i in range(10):
        log.append(batch(i, 200))
    log.append(batch(10), defer=True)
    with monkeypatch.context() as m:
        _full_disk(m)
        res = log.read(0, 100, max_offset=400)
        assert res.data and res.start_offset == 0
        assert log.active.written_size < log.size_bytes  # still pending
    log.close()


def test_a_waiter_for_an_undone_append_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """broker/durability.py: a produce waiting for the fsync of an append that a failed write
    undid gets StorageError, also when its offsets hold other records by the time it looks."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from bayou.broker.durability import GroupCommit

    async def scenario() -> None:
        log = PartitionLog(tmp_path / "p", ALWAYS)
        with ThreadPoolExecutor(2) as io:
            commits = GroupCommit(log, io)
            first = log.append(batch(0), defer=True)
            real_write = os.write
            with monkeypatch.context() as m:
                _full_disk(m)
                with pytest.raises(StorageError, match="No space left"):
                    await commits.wait(first.last_offset + 1, first.drops)
            assert os.write is real_write and log.next_offset == 0
            again = log.append(batch(1), defer=True)  # at offset 0 again
            with pytest.raises(StorageError, match="undone"):  # the first append's late waiter
                await commits.wait(first.last_offset + 1, first.drops)
            await commits.wait(again.last_offset + 1, again.drops)
            assert values(log) == [b"v1.0"]
        log.close()

    asyncio.run(scenario())


def test_a_failed_write_of_later_appends_still_makes_the_earlier_ones_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record written (not deferred) but not fsynced yet, then deferred appends whose write
    fails: they are undone, and the fsync still makes the earlier record durable (no fsync had
    run, so retrying it is sound); its waiter is served, theirs are refused with the cause."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from bayou.broker.durability import GroupCommit
    from bayou.errors import AppendsUndone

    async def scenario() -> None:
        log = PartitionLog(tmp_path / "p", ALWAYS)
        with ThreadPoolExecutor(2) as io:
            commits = GroupCommit(log, io)
            written = log.append(batch(0))  # in the file, not fsynced
            later = [log.append(batch(i), defer=True) for i in (1, 2)]
            assert log.durable_offset == 0
            with monkeypatch.context() as m:
                _full_disk(m, short=30)
                results = await asyncio.gather(
                    commits.wait(written.last_offset + 1, written.drops),
                    *(commits.wait(i.last_offset + 1, i.drops) for i in later),
                    return_exceptions=True)
            assert results[0] is None
            for refused in results[1:]:
                # the cause when its wait began before the fsync ended; else the undo itself
                # (the I/O thread may end the fsync before gather has started the later waits)
                assert ((isinstance(refused, AppendsUndone) and "No space left" in str(refused))
                        or (isinstance(refused, StorageError) and "undone" in str(refused)))
            assert log.durable_offset == 1 == log.next_offset and log.drops == 1
            assert log.kept(1, 0) == 1 and log.kept(2, 0) is None
            # a late waiter for the kept record is served at once; one for an undone one refused
            await commits.wait(written.last_offset + 1, written.drops)
            with pytest.raises(StorageError, match="undone"):
                await commits.wait(later[0].last_offset + 1, later[0].drops)
        log.close()
        again = PartitionLog(tmp_path / "p", ALWAYS)
        assert values(again) == [b"v0.0"]
        again.close()

    asyncio.run(scenario())


def test_sync_to_below_undone_appends_fsyncs_what_was_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sync_to`` an offset below deferred appends whose write fails: they are undone, what was
    written before them is still fsynced, and the call returns; asked past them, it raises
    AppendsUndone with the durable offset moved as far as it could."""
    from bayou.errors import AppendsUndone

    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0))
    log.append(batch(1), defer=True)
    with monkeypatch.context() as m:
        _full_disk(m)
        log.sync_to(1)
    assert log.durable_offset == 1 == log.next_offset and log.drops == 1
    log.append(batch(2))
    log.append(batch(3), defer=True)
    with monkeypatch.context() as m:
        _full_disk(m, short=20)
        with pytest.raises(AppendsUndone, match="No space left"):
            log.sync_to(3)
    assert log.durable_offset == 2 == log.next_offset and log.drops == 2
    log.close()
    again = PartitionLog(tmp_path / "p", ALWAYS)
    assert values(again) == [b"v0.0", b"v2.0"]
    again.close()


def test_a_failed_fsync_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the fsync itself fails nothing it covered counts as durable, and it is not tried
    again (the kernel may have dropped the dirty pages it failed to write): every waiter is
    refused, the pending appends are undone."""
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0))
    log.append(batch(1), defer=True)
    calls = {"n": 0}

    def fsync(fd: int) -> None:
        calls["n"] += 1
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(segment_module.os, "fsync", fsync)
        with pytest.raises(StorageError, match="Input/output") as caught:
            log.sync_to(log.next_offset)
    assert calls["n"] == 1 and log.durable_offset == 0
    assert type(caught.value) is StorageError  # not AppendsUndone: nobody is served
    log.close()


def test_kept_tells_whose_records_an_undo_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kept(end, drops)``: the records below ``end`` survived every undo since ``drops`` (the
    current count), else None; a follower's ``truncate_to`` counts as an undo; after more undos
    than it remembers, it cannot tell and says None."""
    from bayou.storage import log as log_module

    log = PartitionLog(tmp_path / "p", ALWAYS)
    for i in range(4):
        log.append(batch(i))
    assert log.kept(4, 0) == 0
    log.truncate_to(3)
    assert log.drops == 1 and log.kept(3, 0) == 1 and log.kept(4, 0) is None
    log.append(batch(9))
    log.truncate_to(2)
    assert log.kept(2, 0) == 2 and log.kept(3, 0) is None and log.kept(3, 1) is None
    assert log.kept(2, 1) == 2
    monkeypatch.setattr(log_module, "_CUTS_KEPT", 3)
    small = PartitionLog(tmp_path / "q", ALWAYS)
    small.append(batch(0))
    for _ in range(4):
        small.append(batch(1))
        small.truncate_to(1)
    assert small.drops == 4 and small.kept(1, 1) == 4 and small.kept(1, 0) is None
    log.close()
    small.close()


def test_appends_racing_the_fsync_thread_all_land_in_order(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", LogConfig(fsync=FsyncPolicy.parse("always"),
                                                 segment_bytes=1 << 16))
    stop = threading.Event()

    def fsyncs() -> None:
        while not stop.is_set():
            log.sync_to(log.next_offset)

    t = threading.Thread(target=fsyncs)
    t.start()
    try:
        for i in range(3000):
            log.append(batch(i), defer=True)
    finally:
        stop.set()
        t.join()
    log.sync_to(log.next_offset)
    assert values(log) == [f"v{i}.0".encode() for i in range(3000)]
    log.close()


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 8), st.booleans()),
    st.tuples(st.just("sync"), st.just(0), st.just(False)),
    st.tuples(st.just("read"), st.just(0), st.just(False)),
    st.tuples(st.just("truncate"), st.integers(0, 200), st.just(False)),
), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_after_a_crash_the_log_is_a_prefix_holding_everything_fsynced(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, bool]]) -> None:
    """Appends (deferred or not), fsyncs, reads and truncations in any order, then a crash (the
    log dropped without a close: its pending bytes are lost): the reopened log holds a prefix of
    what was appended, at least up to the durable offset."""
    path = tmp_path_factory.mktemp("crash") / "p"
    log = PartitionLog(path, ALWAYS)
    expected: list[bytes] = []
    n = 0
    for op, arg, defer in ops:
        if op == "append":
            log.append(batch(n, arg), defer=defer)
            expected.extend(f"v{n}.{j}".encode() for j in range(arg))
            n += 1
        elif op == "sync":
            log.sync_to(log.next_offset)
        elif op == "read":
            assert values(log) == expected
        elif op == "truncate":
            log.truncate_to(arg)  # whole batches from the one at or after ``arg``
            del expected[log.next_offset:]
    durable = log.durable_offset
    for seg in log.segments:  # the crash: nothing pending reaches the file
        seg._pending = bytearray()
    again = PartitionLog(path, ALWAYS)
    got = values(again)
    assert got == expected[:len(got)] and len(got) >= durable
    again.close()


# -- races between a flush and the fsync, a cut, a read (found by review; each failed before) ----


def test_an_fsync_waits_for_a_write_in_flight_in_another_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader's flush has taken the pending bytes and is writing them (and then fails) when the
    group commit's fsync starts: the fsync must wait for that write, not find nothing pending and
    declare the batch durable while it is in no file."""
    log = PartitionLog(tmp_path / "p", ALWAYS)
    info = log.append(batch(0, 5), defer=True)
    seg = log.active
    real_write, real_flush = os.write, segment_module.Segment.flush
    in_write, sync_flushing = threading.Event(), threading.Event()

    def write(fd: int, data: bytes | memoryview) -> int:
        if threading.current_thread().name == "reader":
            in_write.set()
            sync_flushing.wait(10)  # until the fsync is in its flush (or 10 s: the test fails)
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    def flush(self: segment_module.Segment) -> None:
        if threading.current_thread().name == "syncer":
            sync_flushing.set()
        real_flush(self)

    monkeypatch.setattr(segment_module.os, "write", write)
    monkeypatch.setattr(segment_module.Segment, "flush", flush)
    failed: list[BaseException] = []

    def read() -> None:
        try:
            seg.pread(seg.size, 0)
        except StorageError as exc:
            failed.append(exc)

    reader = threading.Thread(target=read, name="reader")
    reader.start()
    assert in_write.wait(10)
    syncer = threading.Thread(target=log.sync_to, args=(log.next_offset,), name="syncer")
    syncer.start()
    syncer.join(20)
    reader.join(20)
    assert failed and not syncer.is_alive()
    assert log.durable_offset == info.last_offset + 1
    assert on_disk(log) == log.size_bytes  # durable means written: the fsync wrote it after the failure


def test_an_fsync_racing_a_cut_does_not_count_the_cut_bytes_as_synced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An fsync in the I/O thread, a failed write-through append undoing the pending batch on the
    loop meanwhile, then new appends: they must stay dirty, so the next fsync writes them."""
    log = PartitionLog(tmp_path / "p", ALWAYS)
    log.append(batch(0, 30), defer=True)
    real_flush = segment_module.Segment.flush
    hold, at = threading.Event(), threading.Event()

    def flush(self: segment_module.Segment) -> None:
        if threading.current_thread().name == "io" and not at.is_set():
            at.set()
            hold.wait(10)
        real_flush(self)

    monkeypatch.setattr(segment_module.Segment, "flush", flush)
    def fsync() -> None:
        with contextlib.suppress(StorageError):  # it may see the cut (then it makes nothing durable)
            log.sync_to(log.next_offset)

    io = threading.Thread(target=fsync, name="io")
    io.start()
    assert at.wait(10)
    with monkeypatch.context() as m:
        _full_disk(m)
        with pytest.raises(StorageError):
            log.append(batch(1))  # write-through (a control batch): undoes the pending one
    assert log.drops == 1 and log.next_offset == 0
    log.append(batch(2), defer=True)
    hold.set()
    io.join(20)
    last = log.append(batch(3), defer=True)
    log.sync_to(log.next_offset)
    assert log.durable_offset == last.last_offset + 1 and on_disk(log) == log.size_bytes


def test_batches_a_failed_write_put_in_the_file_are_not_served_before_they_are_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short write puts a whole pending batch in the file, but undoing the send cuts it: a
    replica's read of it must flush first (and fail on the full disk), not serve it."""
    log = PartitionLog(tmp_path / "p", LogConfig(fsync=FsyncPolicy.parse("always"), index_interval_bytes=128))
    log.append(batch(0))
    log.sync_to(log.next_offset)
    a = log.append(batch(1, 400), defer=True)
    log.append(batch(2, 50), defer=True)
    _full_disk(monkeypatch, short=a.size + 20)
    with pytest.raises(StorageError):  # reaches into the pending bytes: its flush fails
        log.read(0, 1 << 20)
    with pytest.raises(StorageError):  # the whole batch now in the file is still not served
        log.read(a.base_offset, 100, max_offset=log.next_offset)
    with pytest.raises(StorageError):
        log.sync_to(log.next_offset)
    assert log.next_offset == a.base_offset  # undone, and nobody was given it


ONE_SEGMENT = LogConfig(fsync=FsyncPolicy.parse("always"), segment_bytes=1 << 20, index_interval_bytes=128)


class SignallingLock:
    """The segment's flush lock, telling when a thread other than the reader waits for it."""

    def __init__(self, lock: threading.Lock, waiting: threading.Event) -> None:
        self.lock, self.waiting = lock, waiting

    def __enter__(self) -> bool:
        if threading.current_thread().name != "reader":
            self.waiting.set()
        return self.lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(*exc)


@pytest.mark.parametrize("short", [0, 40])
def test_write_through_append_waits_behind_a_failed_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          short: int) -> None:
    """A reader's flush of the pending bytes fails (a full disk, after a short write or not)
    while a write-through append (a control batch, or a batch too big to defer) waits for the
    segment's flush lock: the append must not write its batch in front of the bytes put back
    pending, or the fsync after it makes a file whose batches are out of order. (Found in
    review: skipping the flush call when nothing looked pending did that.)"""
    log = PartitionLog(tmp_path / "p", ONE_SEGMENT)
    log.append(batch(0))
    log.append(batch(1, 5), defer=True)  # pending
    seg = log.active
    waiting = threading.Event()
    seg._flush_lock = SignallingLock(seg._flush_lock, waiting)  # type: ignore[assignment]
    real_write = os.write
    in_write = threading.Event()

    def write(fd: int, data: bytes | memoryview) -> int:
        if threading.current_thread().name == "reader":
            in_write.set()
            assert waiting.wait(10)  # the write-through append waits for the flush lock now
            if short and len(data) > short:
                return real_write(fd, bytes(data)[:short])
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(segment_module.os, "write", write)
    failed: list[BaseException] = []

    def read() -> None:
        try:
            seg.pread(seg.size, 0)  # reaches into the pending bytes: flushes them (I/O pool read)
        except StorageError as exc:
            failed.append(exc)

    reader = threading.Thread(target=read, name="reader")
    reader.start()
    assert in_write.wait(10)
    with contextlib.suppress(StorageError):
        log.append(batch(2))  # write-through, as append_control does (or may fail: fine)
    reader.join(10)
    assert failed, "the reader's flush should have failed"
    monkeypatch.setattr(segment_module.os, "write", real_write)  # the disk has room again
    log.sync_to(log.next_offset)  # the group commit: writes what is pending, fsyncs
    expected = [b"v0.0", *(f"v1.{j}".encode() for j in range(5)), b"v2.0"][: log.next_offset]
    durable = log.durable_offset
    assert sum(os.stat(s.path).st_size for s in log.segments) == log.size_bytes
    got = values(log)
    assert got == expected, (got, expected, durable)
    log.close()
    again = PartitionLog(tmp_path / "p", ONE_SEGMENT)
    assert values(again)[:durable] == expected[:durable]
    again.close()
