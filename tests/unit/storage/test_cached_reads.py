"""Reads on the event loop (storage/cached.py): ``pread_cached`` gives what ``os.pread`` gives or
WouldBlock, never a different answer, and ``PartitionLog.read``/``locate`` with ``nowait`` return
exactly what the blocking calls return whenever they answer."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.errors import WouldBlock
from bayou.records import Record, encode_batch
from bayou.records.batch import iter_batches
from bayou.storage import LogConfig, PartitionLog, cached
from bayou.storage.cached import MAX_BYTES, pread_cached


@pytest.fixture
def data_file(tmp_path: Path) -> tuple[int, bytes]:
    body = os.urandom(100_000)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    os.write(fd, body)
    yield fd, body
    os.close(fd)


def test_cached_bytes_are_what_pread_returns(data_file: tuple[int, bytes]) -> None:
    fd, body = data_file
    for size, pos in ((100, 0), (1, 99_999), (5000, 98_000), (200, 100_000), (10, 200_000), (0, 5)):
        assert pread_cached(fd, size, pos) == os.pread(fd, size, pos) == body[pos:pos + size]


def test_a_read_larger_than_an_event_loop_copy_would_block(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "big", os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"x" * (MAX_BYTES + 10))
        assert len(pread_cached(fd, MAX_BYTES, 0)) == MAX_BYTES
        with pytest.raises(WouldBlock):
            pread_cached(fd, MAX_BYTES + 1, 0)
        assert len(pread_cached(fd, MAX_BYTES + 1, 10)) == MAX_BYTES  # the file ends first
    finally:
        os.close(fd)


def test_bytes_not_in_the_page_cache_would_block(tmp_path: Path) -> None:
    """Pages dropped from the cache are not read on the event loop: WouldBlock, and the blocking
    read still gets them. Each attempt reads a region no read touched before (a read that misses
    may start readahead around it); where the kernel keeps the dropped pages anyway (tmpfs), every
    attempt returns the bytes, and the test is skipped."""
    fd = os.open(tmp_path / "cold", os.O_RDWR | os.O_CREAT)
    try:
        body = os.urandom(8 << 20)
        os.write(fd, body)
        os.fsync(fd)
        for region in range(1, 8):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages: dropped from the cache
            at = region << 20
            try:
                got = pread_cached(fd, 4096, at)
            except WouldBlock:
                assert os.pread(fd, 4096, at) == body[at:at + 4096]  # the blocking read gets them
                return
            assert got == body[at:at + 4096]  # served from memory: the same bytes
        pytest.skip("this file system kept the dropped pages cached")
    finally:
        os.close(fd)


def test_a_kernel_without_nowait_reads_makes_every_read_block(data_file: tuple[int, bytes],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fd, _body = data_file
    monkeypatch.setattr(cached, "_NOWAIT", cached._NOWAIT)  # restored after the test
    calls: list[object] = []

    def unsupported(*a: object) -> int:
        calls.append(a)
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(os, "preadv", unsupported)
    for _ in range(3):
        with pytest.raises(WouldBlock):
            pread_cached(fd, 10, 0)
    assert len(calls) == 1  # remembered: the loop hands every read to a thread from then on


def _log(tmp_path: Path, sizes: list[int]) -> PartitionLog:
    lg = PartitionLog(tmp_path / "p", LogConfig(segment_bytes=4096, index_interval_bytes=256))
    for i, n in enumerate(sizes):
        lg.append(encode_batch([Record(b"v%d-%d" % (i, j) + b"x" * (i % 50), timestamp=1000 + i)
                                for j in range(n)]))
    return lg


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=60), data=st.data())
def test_nowait_read_and_locate_equal_the_blocking_ones(tmp_path_factory: pytest.TempPathFactory,
                                                       sizes: list[int], data: st.DataObject) -> None:
    lg = _log(tmp_path_factory.mktemp("log"), sizes)
    try:
        for _ in range(5):
            offset = data.draw(st.integers(0, lg.next_offset))
            max_bytes = data.draw(st.sampled_from([1, 100, 1000, 1 << 20]))
            max_records = data.draw(st.sampled_from([None, 1, 3, 100]))
            max_offset = data.draw(st.sampled_from([None, lg.next_offset, max(0, lg.next_offset - 3)]))
            want = lg.read(offset, max_bytes, max_offset=max_offset, max_records=max_records)
            got = lg.read(offset, max_bytes, max_offset=max_offset, max_records=max_records, nowait=True)
            assert got == want
            span = lg.locate(offset, max_bytes, max_offset=max_offset)
            try:
                quick = lg.locate(offset, max_bytes, max_offset=max_offset, nowait=True)
            except WouldBlock:  # only for a span of more batches than an event-loop walk takes
                assert span is not None and len(span.batches) >= 64
                continue
            assert (span is None) == (quick is None)
            if span is not None and quick is not None:
                assert quick.batches == span.batches and quick.limit == span.limit
                quick.release()
                span.release()
    finally:
        lg.close()


def test_a_log_busy_in_another_thread_would_block(tmp_path: Path) -> None:
    lg = _log(tmp_path, [2] * 10)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lg._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        held.wait(10)
        with pytest.raises(WouldBlock):
            lg.read(0, 1000, nowait=True)
        with pytest.raises(WouldBlock):
            lg.locate(0, 1000, nowait=True)
    finally:
        release.set()
        t.join()
    assert lg.read(0, 1000, nowait=True).record_count > 0
    lg.close()


def test_a_damaged_batch_is_left_to_the_blocking_read(tmp_path: Path) -> None:
    """What needs the integrity checks (quarantine) is never decided on the event loop."""
    lg = _log(tmp_path, [2] * 10)
    seg = lg.segments[-1]
    with open(seg.path, "r+b") as f:
        f.seek(seg.size - 3)
        f.write(b"\xff\xff\xff")  # the last batch's records: its CRC no longer matches
    with pytest.raises(WouldBlock):
        lg.read(lg.next_offset - 1, 1000, nowait=True)
    lg.read(0, 1 << 20)  # the blocking read meets it and quarantines from that batch on
    assert lg.damage is not None
    lg.close()


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=200), cut=st.integers(0, 199),
       data=st.data())
def test_a_segment_finds_recent_batches_where_its_index_does(tmp_path_factory: pytest.TempPathFactory,
                                                             sizes: list[int], cut: int,
                                                             data: st.DataObject) -> None:
    """The positions of the last batches appended (remembered past the sparse index, so a reader
    at the tail needs no header scan) give what a scan from the index gives, also after the
    segment was cut back (a follower's truncation)."""
    lg = _log(tmp_path_factory.mktemp("seg"), sizes)
    seg = lg.segments[-1]
    try:
        batches = list(iter_batches(seg.pread(seg.size, 0)))
        if cut < len(batches):  # cut back, then appended to again: other batches at those offsets
            lg.truncate_to(batches[cut][1].base_offset)
            for i in range(3):
                lg.append(encode_batch([Record(b"after-%d" % i, timestamp=5000 + i)] * (i + 1)))
            seg = lg.segments[-1]
        # what it remembers are batch starts of the segment as it is now, in order
        starts = {pos: h.base_offset for pos, h in iter_batches(seg.pread(seg.size, 0))}
        assert all(starts.get(pos) == base for base, pos in seg._recent)
        assert seg._recent == sorted(seg._recent)
        for _ in range(10):
            offset = data.draw(st.integers(seg.base_offset, lg.next_offset + 2))
            remembered = seg._recent
            seg._recent = []  # the index alone
            want = seg.find_position(offset)
            seg._recent = remembered
            assert seg.find_position(offset) == want
            assert seg.find_position(offset, nowait=True) == want
    finally:
        lg.close()


def test_a_record_limited_read_stops_within_its_first_chunk(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 150 KB (an Iggy client's 1,000 messages): a read of one batch's records finds
    it within the first 256 KB chunk, whose end cuts the next batch. It stops there and is served
    on the event loop; it used to grow the chunk to 1 MB, past what a nowait read takes, and go
    to an I/O thread for every such poll."""
    log = PartitionLog(tmp_path / "p", LogConfig())
    batch = encode_batch([Record(os.urandom(150), None, 1) for _ in range(1000)])
    assert 128 * 1024 < len(batch) < 256 * 1024
    for _ in range(6):
        log.append(batch)
    sizes: list[int] = []
    real = cached.pread_cached

    def spy(fd: int, size: int, position: int, *, in_file: bool = False) -> bytes:
        sizes.append(size)
        return real(fd, size, position, in_file=in_file)

    monkeypatch.setattr("bayou.storage.segment.pread_cached", spy)
    for start in (0, 1000, 4000):
        r = log.read(start, 64 << 20, max_records=1000, nowait=True)
        assert r.record_count == 1000 and r.data[8:] == batch[8:]  # one whole batch (its own offset)
        assert r.next_offset == start + 1000
    assert max(sizes) <= MAX_BYTES


def test_a_read_known_to_be_in_the_file_skips_the_size_and_a_cut_file_would_block(tmp_path: Path) -> None:
    """``in_file``: the caller knows the range is written, so no fstat; if the file was cut
    meanwhile, the short read is WouldBlock (the I/O thread's read then tells), never short data.
    Without RWF_NOWAIT (an old kernel, a file system lacking it) every such read is WouldBlock."""
    path = tmp_path / "f"
    path.write_bytes(b"0123456789" * 10)
    fd = os.open(path, os.O_RDWR)
    try:
        if cached._NOWAIT is None:
            with pytest.raises(WouldBlock):
                pread_cached(fd, 10, 90, in_file=True)
            return
        assert pread_cached(fd, 10, 90, in_file=True) == b"0123456789"
        os.ftruncate(fd, 95)
        assert pread_cached(fd, 10, 90) == b"01234"  # the size looked up: what is there
        with pytest.raises(WouldBlock):
            pread_cached(fd, 10, 90, in_file=True)
    finally:
        os.close(fd)


def test_a_read_at_the_tail_takes_the_batch_from_the_lookup_s_bytes(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader at the log end (the batch just appended): the offset lookup reads the bytes the
    batch is in, and the read serves it from them instead of reading it again."""
    log = PartitionLog(tmp_path / "p", LogConfig())
    batches = [encode_batch([Record(b"v%d" % i, None, 1)], base_offset=i) for i in range(20)]
    for b in batches:
        log.append(b)
    calls: list[tuple[int, int]] = []
    real = cached.pread_cached

    def spy(fd: int, size: int, position: int, *, in_file: bool = False) -> bytes:
        calls.append((size, position))
        return real(fd, size, position, in_file=in_file)

    monkeypatch.setattr("bayou.storage.segment.pread_cached", spy)
    for offset in (19, 18, 10):
        calls.clear()
        r = log.read(offset, 1 << 20, nowait=True)
        assert [h.base_offset for _p, h in iter_batches(r.data)] == list(range(offset, 20))
        assert r.data == b"".join(batches[offset:])
        assert len(calls) == 1, calls  # the lookup's read only
