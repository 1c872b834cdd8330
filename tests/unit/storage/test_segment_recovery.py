"""Recovery of the active segment: torn and corrupt tails are cut, indexes are rebuilt."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from bayou.errors import CorruptStorage
from bayou.records import Record, decode_records, encode_batch, iter_batches
from bayou.storage import LogConfig, PartitionLog
from bayou.storage.segment import segment_name

CFG = LogConfig(index_interval_bytes=1)  # an index entry for every batch
SPARSE = LogConfig()  # 4 KiB between index entries: one entry for these small logs


def batch(i: int, n: int = 3) -> bytes:
    return encode_batch([Record(f"b{i}-r{j}".encode(), key=b"k", timestamp=1000 + 10 * i + j)
                         for j in range(n)])


def values(log: PartitionLog) -> list[bytes]:
    out: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.next_offset:
        res = log.read(offset, 1 << 20)
        assert res.data
        for p, _h in iter_batches(res.data):
            recs = decode_records(res.data, p)
            assert [r.offset for r in recs] == list(range(_h.base_offset, _h.next_offset))
            out.extend(r.value for r in recs)
        offset = res.next_offset
    return out


def expected(batches: int, n: int = 3) -> list[bytes]:
    return [f"b{i}-r{j}".encode() for i in range(batches) for j in range(n)]


def build(path: Path, batches: int, config: LogConfig = CFG) -> tuple[Path, list[int]]:
    """A closed log of ``batches`` 3-record batches; returns the active segment path and positions."""
    lg = PartitionLog(path, config)
    positions = []
    for i in range(batches):
        positions.append(lg.active.size)
        lg.append(batch(i))
    seg = lg.active.path
    lg.close()
    return seg, positions


def reopen(path: Path, config: LogConfig = CFG, *, recover: bool = True) -> PartitionLog:
    return PartitionLog(path, config, recover=recover)


def check_recovered(path: Path, good_batches: int, config: LogConfig = CFG) -> None:
    lg = reopen(path, config)
    assert lg.truncated_bytes > 0
    assert lg.next_offset == 3 * good_batches
    assert values(lg) == expected(good_batches)
    info = lg.append(batch(99))
    assert info.base_offset == 3 * good_batches
    lg.close()
    lg = reopen(path, config)  # the cut is durable and the new batch sits right after it
    assert lg.truncated_bytes == 0
    assert values(lg) == [*expected(good_batches), b"b99-r0", b"b99-r1", b"b99-r2"]
    assert lg.offset_for_timestamp(1000 + 990) == 3 * good_batches
    lg.close()


@pytest.mark.parametrize("config", [CFG, SPARSE], ids=["dense-index", "sparse-index"])
@pytest.mark.parametrize("garbage", [b"\x00", b"\x00" * 61, b"\x00" * 4096, b"\xff" * 100, b"garbage" * 3,
                                     os.urandom(500)], ids=["1-zero", "61-zeros", "4k-zeros", "ff", "text",
                                                            "random"])
def test_garbage_at_the_tail_is_cut(tmp_path: Path, garbage: bytes, config: LogConfig) -> None:
    seg, _ = build(tmp_path, 5, config)
    size = seg.stat().st_size
    with seg.open("ab") as f:
        f.write(garbage)
    check_recovered(tmp_path, 5, config)
    assert seg.stat().st_size == size + len(batch(99))


@pytest.mark.parametrize("keep", [1, 12, 60, 61, 62, 0.5, -1])
def test_torn_half_batch_at_the_tail_is_cut(tmp_path: Path, keep: float) -> None:
    seg, _ = build(tmp_path, 4)
    tail = batch(4)
    n = int(len(tail) * keep) if isinstance(keep, float) else (len(tail) + keep if keep < 0 else keep)
    with seg.open("ab") as f:
        f.write(tail[:n])
    check_recovered(tmp_path, 4)


@pytest.mark.parametrize("where", [17, 21, 30, -1], ids=["crc", "attributes", "timestamps", "last-byte"])
def test_flipped_crc_covered_byte_in_last_batch_is_cut(tmp_path: Path, where: int) -> None:
    seg, positions = build(tmp_path, 5)
    data = bytearray(seg.read_bytes())
    last = positions[-1]
    i = len(data) - 1 if where == -1 else last + where
    data[i] ^= 0x10
    seg.write_bytes(bytes(data))
    check_recovered(tmp_path, 4)


def test_wrong_base_offset_at_the_tail_is_cut(tmp_path: Path) -> None:
    seg, positions = build(tmp_path, 5)
    data = bytearray(seg.read_bytes())
    struct.pack_into(">q", data, positions[-1], 1234)  # outside the CRC, but not the offset expected
    seg.write_bytes(bytes(data))
    check_recovered(tmp_path, 4)


@pytest.mark.parametrize("victim", [0, 1, 3])
def test_corrupt_batch_in_the_middle_cuts_everything_after_it(tmp_path: Path, victim: int) -> None:
    # Sparse index: the only index point is at position 0, so recovery checks every batch.
    seg, positions = build(tmp_path, 6, SPARSE)
    data = bytearray(seg.read_bytes())
    data[positions[victim] + 40] ^= 0xFF
    seg.write_bytes(bytes(data))
    lg = reopen(tmp_path, SPARSE)
    assert lg.truncated_bytes == len(data) - positions[victim]
    assert seg.stat().st_size == positions[victim]
    assert lg.next_offset == 3 * victim
    assert values(lg) == expected(victim)
    assert lg.append(batch(99)).base_offset == 3 * victim
    lg.close()


def test_corrupt_tail_without_recover_quarantines(tmp_path: Path) -> None:
    """After a clean stop a damaged active segment is not cut (it held acknowledged data): the
    partition opens quarantined, readable up to the damage, refusing appends; recovery (what
    `bayou verify --repair` runs) cuts it later."""
    seg, _positions = build(tmp_path, 3)
    size = seg.stat().st_size
    with seg.open("ab") as f:
        f.write(batch(3)[:30])
    lg = reopen(tmp_path, recover=False)
    assert lg.damage is not None and lg.damage.offset == 9 and lg.damage.position == size
    assert lg.offline_reason is not None and "torn batch header" in lg.offline_reason
    assert values(lg) == expected(3)
    with pytest.raises(CorruptStorage):
        lg.append(batch(99))
    lg.close()
    assert seg.stat().st_size == size + 30  # nothing was cut
    check_recovered(tmp_path, 3)


def test_only_the_active_segment_is_recovered(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=1024, index_interval_bytes=1)
    lg = PartitionLog(tmp_path, cfg)
    for i in range(20):
        lg.append(batch(i))
    bases = [s.base_offset for s in lg.segments]
    assert len(bases) >= 3
    active = lg.active.path
    lg.close()
    with active.open("ab") as f:
        f.write(b"\x00" * 100)
    lg = reopen(tmp_path, cfg)
    assert lg.truncated_bytes == 100
    assert [s.base_offset for s in lg.segments] == bases
    assert values(lg) == expected(20)
    lg.close()


def test_whole_active_segment_garbage_recovers_to_its_base(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=1024, index_interval_bytes=1)
    lg = PartitionLog(tmp_path, cfg)
    for i in range(20):
        lg.append(batch(i))
    lg.roll()
    base = lg.active.base_offset
    active = lg.active.path
    lg.close()
    active.write_bytes(os.urandom(300))
    lg = reopen(tmp_path, cfg)
    assert lg.truncated_bytes == 300
    assert lg.next_offset == base == 60
    assert lg.append(batch(20)).base_offset == 60
    assert values(lg) == expected(21)
    lg.close()


# -- indexes ----------------------------------------------------------------------------------


def index_paths(path: Path, base: int = 0) -> tuple[Path, Path]:
    name = segment_name(base)
    return path / (name + ".index"), path / (name + ".timeindex")


def check_reads(path: Path, batches: int, config: LogConfig = CFG, *, recover: bool = True) -> PartitionLog:
    lg = reopen(path, config, recover=recover)
    assert lg.next_offset == 3 * batches
    assert values(lg) == expected(batches)
    for off in range(3 * batches):
        res = lg.read(off, 1)
        assert res.start_offset == off - off % 3, off
        assert res.record_count == 3
    for i in range(batches):
        for j in range(3):
            assert lg.offset_for_timestamp(1000 + 10 * i + j) == 3 * i + j
    assert lg.offset_for_timestamp(1000 + 10 * batches) is None
    return lg


@pytest.mark.parametrize("recover", [True, False])
@pytest.mark.parametrize("which", ["index", "timeindex", "both"])
def test_deleted_indexes_are_rebuilt(tmp_path: Path, which: str, recover: bool) -> None:
    build(tmp_path, 8)
    ix, tix = index_paths(tmp_path)
    good = ix.read_bytes(), tix.read_bytes()
    if which in ("index", "both"):
        ix.unlink()
    if which in ("timeindex", "both"):
        tix.unlink()
    lg = check_reads(tmp_path, 8, recover=recover)
    assert lg.truncated_bytes == 0
    lg.close()
    assert (ix.read_bytes(), tix.read_bytes()) == good


@pytest.mark.parametrize(
    ("which", "content"),
    [
        ("index", b""),  # emptied
        ("index", b"\xff" * 64),  # positions past the end of the log
        ("index", b"\x00" * 64),  # offsets not increasing
        ("index", struct.pack(">II", 0, 0) + struct.pack(">II", 7, 5)),  # last entry points mid-batch
        ("index", struct.pack(">II", 0, 0) + struct.pack(">II", 1, 1)),
        ("timeindex", b"\x00" * 36),  # timestamps not increasing
        ("timeindex", struct.pack(">qI", 5, 3) + struct.pack(">qI", 4, 6)),
        ("index", b"\x01\x02\x03"),  # a torn first entry
    ],
)
def test_corrupt_indexes_are_rebuilt(tmp_path: Path, which: str, content: bytes) -> None:
    build(tmp_path, 8)
    ix, tix = index_paths(tmp_path)
    good = ix.read_bytes(), tix.read_bytes()
    (ix if which == "index" else tix).write_bytes(content)
    lg = check_reads(tmp_path, 8)
    lg.close()
    assert (ix.read_bytes(), tix.read_bytes()) == good


@pytest.mark.parametrize("content", [b"", b"\x01\x02\x03\x04\x05"], ids=["empty", "torn-only"])
def test_emptied_timeindex_keeps_reads_correct(tmp_path: Path, content: bytes) -> None:
    build(tmp_path, 8)
    _ix, tix = index_paths(tmp_path)
    tix.write_bytes(content)
    lg = check_reads(tmp_path, 8)
    lg.close()


@pytest.mark.parametrize("content", [b"", b"\x01\x02\x03\x04\x05"], ids=["empty", "torn-only"])
def test_emptied_timeindex_is_rebuilt(tmp_path: Path, content: bytes) -> None:
    build(tmp_path, 8)
    _ix, tix = index_paths(tmp_path)
    good = tix.read_bytes()
    tix.write_bytes(content)
    reopen(tmp_path).close()
    assert tix.read_bytes() == good


def test_torn_last_index_entries_are_dropped(tmp_path: Path) -> None:
    build(tmp_path, 8)
    ix, tix = index_paths(tmp_path)
    good = ix.read_bytes(), tix.read_bytes()
    ix.write_bytes(good[0][:-3])
    tix.write_bytes(good[1][:-5])
    lg = check_reads(tmp_path, 8)
    lg.close()
    assert (ix.read_bytes(), tix.read_bytes()) == good


def test_index_entries_past_a_cut_tail_are_dropped(tmp_path: Path) -> None:
    seg, positions = build(tmp_path, 6)
    with seg.open("r+b") as f:
        f.truncate(positions[4] + 20)  # batch 4 torn, batch 5 gone; the index still names both
    lg = reopen(tmp_path)
    assert lg.truncated_bytes == 20
    assert values(lg) == expected(4)
    assert list(lg.active.index.positions) == positions[:4]
    assert max(lg.active.index.rel_offsets) == 9
    for i in range(4):
        assert lg.offset_for_timestamp(1000 + 10 * i) == 3 * i
    assert lg.offset_for_timestamp(1000 + 10 * 4) is None
    lg.append(batch(4))
    lg.append(batch(5))
    lg.close()
    lg = check_reads(tmp_path, 6)
    lg.close()


def test_plausible_garbage_timeindex_is_rebuilt(tmp_path: Path) -> None:
    build(tmp_path, 8)
    _ix, tix = index_paths(tmp_path)
    tix.write_bytes(b"\xff" * 12)  # one entry: timestamp -1, relative offset 0xFFFFFFFF
    lg = check_reads(tmp_path, 8)
    lg.close()


def test_wrong_middle_index_entry_is_rebuilt(tmp_path: Path) -> None:
    _seg, positions = build(tmp_path, 8)
    ix, _tix = index_paths(tmp_path)
    ix.write_bytes(struct.pack(">IIIIII", 0, 0, 9, positions[3] + 16, 21, positions[7]))
    lg = check_reads(tmp_path, 8)
    lg.close()
