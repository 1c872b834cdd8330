"""Sparse batches (ATTR_SPARSE): a batch placed past the log end leaves a gap of offsets, and may
hold fewer records than its offset span; recovery accepts such a gap only when the batch is marked
sparse inside its CRC (TANK's sparse bundles, tank.md §3.4, §4.2)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from bayou.errors import CorruptRecord, InvalidConfig, OffsetOutOfRange
from bayou.records import Record, batch_crc, encode_batch, iter_batches
from bayou.records.batch import ATTR_FORMAT_SHIFT, ATTR_SPARSE, decode_header
from bayou.records.tank import FORMAT_TANK
from bayou.storage import LogConfig, PartitionLog

CFG = LogConfig(segment_bytes=4096, index_interval_bytes=64)


def dense(n: int, tag: bytes = b"d") -> bytes:
    return encode_batch([Record(tag + str(i).encode(), timestamp=1000 + i) for i in range(n)])


def sparse(n: int, span: int, tag: bytes = b"s") -> bytes:
    """``n`` records spread over ``span`` offsets, marked sparse (CRC refreshed): the bit with
    TANK's payload format, the only one that is sparse (the storage layer never decodes it)."""
    buf = bytearray(dense(n, tag))
    attrs = struct.unpack_from(">h", buf, 21)[0]
    struct.pack_into(">h", buf, 21, attrs | ATTR_SPARSE | (FORMAT_TANK << ATTR_FORMAT_SHIFT))
    struct.pack_into(">i", buf, 23, span - 1)
    struct.pack_into(">I", buf, 17, batch_crc(buf, 0, len(buf)))
    return bytes(buf)


def headers(lg: PartitionLog) -> list[tuple[int, int, int]]:
    res = lg.read(lg.log_start_offset, 1 << 20)
    return [(h.base_offset, h.last_offset, h.record_count) for _p, h in iter_batches(res.data)]


def test_sparse_batch_leaves_a_gap(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path / "p", CFG)
    lg.append(dense(3))
    info = lg.append(sparse(4, 10), at_offset=99)
    assert (info.base_offset, info.last_offset) == (99, 108)
    assert lg.next_offset == 109
    lg.append(dense(1))  # continues after the sparse batch's span
    assert headers(lg) == [(0, 2, 3), (99, 108, 4), (109, 109, 1)]
    # a read at an offset inside the gap starts at the batch that holds higher offsets
    res = lg.read(50, 1 << 20)
    assert next(iter_batches(res.data))[1].base_offset == 99
    lg.close()


@pytest.mark.parametrize("clean", [True, False])
def test_gap_survives_reopen_and_recovery(tmp_path: Path, clean: bool) -> None:
    lg = PartitionLog(tmp_path / "p", CFG)
    lg.append(dense(2))
    lg.append(sparse(2, 5), at_offset=10)
    lg.append(dense(2))
    lg.flush()
    if clean:
        lg.close()
    again = PartitionLog(tmp_path / "p", CFG, recover=True)
    assert again.next_offset == 17
    assert headers(again) == [(0, 1, 2), (10, 14, 2), (15, 16, 2)]
    assert again.truncated_bytes == 0
    again.close()


def test_unmarked_gap_is_cut_by_recovery(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path / "p", CFG)
    lg.append(dense(2))
    lg.append(dense(2))
    lg.flush()
    data = bytearray((tmp_path / "p" / "00000000000000000000.log").read_bytes())
    second = decode_header(data).size
    struct.pack_into(">q", data, second, 40)  # a damaged base offset: not sparse, so not a gap
    (tmp_path / "p" / "00000000000000000000.log").write_bytes(bytes(data))
    again = PartitionLog(tmp_path / "p", CFG, recover=True)
    assert again.next_offset == 2 and again.truncated_bytes > 0
    again.close()


def test_placement_rules(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path / "p", CFG)
    lg.append(dense(5))
    with pytest.raises(OffsetOutOfRange):
        lg.append(sparse(1, 1), at_offset=4)  # below the log end
    with pytest.raises(CorruptRecord):
        lg.append(dense(1), at_offset=9)  # only sparse batches leave gaps
    bad = bytearray(dense(3))
    struct.pack_into(">i", bad, 23, 7)  # span 8, 3 records, not marked sparse
    struct.pack_into(">I", bad, 17, batch_crc(bad, 0, len(bad)))
    with pytest.raises(CorruptRecord):
        lg.append(bytes(bad))
    assert lg.next_offset == 5
    lg.append(sparse(1, 1), at_offset=5)  # no gap is fine too
    assert lg.next_offset == 6
    lg.close()


def test_huge_jump_starts_a_new_segment(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path / "p", CFG)
    lg.append(dense(2))
    far = 1 << 40
    lg.append(sparse(1, 1), at_offset=far)
    assert lg.next_offset == far + 1
    assert [s.base_offset for s in lg.segments] == [0, far]
    data = lg.read(far, 1 << 20).data
    assert [h.base_offset for _p, h in iter_batches(data)] == [far]
    lg.close()
    again = PartitionLog(tmp_path / "p", CFG)
    assert again.next_offset == far + 1
    again.close()


def test_retention_by_segment_count_applies_as_segments_roll(tmp_path: Path) -> None:
    lg = PartitionLog(tmp_path / "p", LogConfig(segment_bytes=64, retention_segments=2))
    for _ in range(6):
        lg.append(dense(1))  # every batch is over 64 bytes: each one rolls
    assert len(lg.segments) == 2
    assert lg.log_start_offset == 4 and lg.next_offset == 6
    lg.close()


def test_retention_segments_must_keep_two() -> None:
    with pytest.raises(InvalidConfig):
        LogConfig(retention_segments=1)


def test_the_first_batch_base_of_a_log_that_starts_with_a_gap(tmp_path: Path) -> None:
    """TANK's first available sequence when the first bundle was placed past the log start."""
    lg = PartitionLog(tmp_path / "p", LogConfig())
    lg.append(sparse(2, 4), at_offset=7)
    assert lg.log_start_offset == 0 and lg.first_batch_base() == 7
    lg.truncate_to(0)  # cut back to nothing, then another bundle further on
    lg.append(sparse(1, 1), at_offset=12)
    assert lg.first_batch_base() == 12
    lg.close()
