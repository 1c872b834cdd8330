"""Integrity on read: every read path checks what it serves, damage quarantines the partition
(readable below the damage, offline from it), and loading a damaged segment never fails the log."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from bayou.errors import CorruptStorage
from bayou.records import decode_records, iter_batches
from bayou.records.batch import HEADER_SIZE
from bayou.storage import PartitionLog
from bayou.storage.integrity import first_bad_batch
from bayou.storage.segment import ScanResult
from support.damage import SMALL_SEGMENTS, batch, build, flip, sealed_victim

CFG = SMALL_SEGMENTS


def values(data: bytes) -> list[bytes]:
    return [r.value for p, _h in iter_batches(data) for r in decode_records(data, p)]


def test_crc_damage_in_a_sealed_segment_is_never_served(tmp_path: Path) -> None:
    where = build(tmp_path)
    seg_path, pos, base = sealed_victim(where)
    flip(seg_path, pos + HEADER_SIZE + 8)  # inside the records: only the CRC tells
    lg = PartitionLog(tmp_path, CFG, recover=False)  # a clean start does not scan sealed segments
    assert lg.damage is None
    res = lg.read(0, 1 << 20)  # the read that meets it gets the good batches before it
    assert values(res.data) == [f"v{i}-{j}".encode() for i in range(2) for j in range(3)]
    assert res.next_offset == base
    assert lg.damage is not None
    assert (lg.damage.path, lg.damage.position, lg.damage.offset) == (seg_path, pos, base)
    assert "CRC mismatch" in lg.damage.reason
    with pytest.raises(CorruptStorage, match=r"offline: damaged data in 0+\.log position"):
        lg.read(base, 1 << 20)
    with pytest.raises(CorruptStorage):
        lg.read(base + 20, 1 << 20)  # later segments too: readable up to the damage only
    with pytest.raises(CorruptStorage):
        lg.locate(base, 1 << 20)
    with pytest.raises(CorruptStorage):
        lg.append(batch(99))
    assert lg.offline_reason is not None and lg.offline_reason.startswith(seg_path.name)
    lg.close()


def test_read_from_the_damaged_offset_quarantines_at_once(tmp_path: Path) -> None:
    where = build(tmp_path)
    seg_path, pos, base = sealed_victim(where)
    flip(seg_path, pos + HEADER_SIZE + 3)
    lg = PartitionLog(tmp_path, CFG, recover=False)
    with pytest.raises(CorruptStorage):
        lg.read(base + 1, 100)
    assert lg.damage is not None and lg.damage.offset == base
    assert values(lg.read(0, 1 << 20).data)  # below the damage still served
    lg.close()


def test_damaged_base_offset_outside_the_crc_is_caught(tmp_path: Path) -> None:
    """The CRC does not cover the base offset: the offset check does."""
    where = build(tmp_path)
    seg_path, pos, base = sealed_victim(where)
    flip(seg_path, pos + 7, 0x01)  # the low byte of base_offset
    lg = PartitionLog(tmp_path, CFG, recover=False)
    res = lg.read(0, 1 << 20)
    assert res.next_offset == base
    assert lg.damage is not None and "offset gap" in lg.damage.reason
    lg.close()


def test_broken_length_in_a_sealed_segment_quarantines_at_load(tmp_path: Path) -> None:
    """A broken length field used to fail the whole start ("torn batch"); now the partition
    opens quarantined, readable below the damage."""
    where = build(tmp_path)
    first_seg = where[0][0]
    last_in_first = [w for w in where if w[0] == first_seg][-1]
    seg_path, pos, base = last_in_first  # after the last index point: seen by the load itself
    with open(seg_path, "r+b") as f:
        f.seek(pos + 8)
        f.write(struct.pack(">i", 1 << 30))
    lg = PartitionLog(tmp_path, CFG, recover=False)
    assert lg.damage is not None
    assert (lg.damage.path, lg.damage.position, lg.damage.offset) == (seg_path, pos, base)
    assert "torn batch" in lg.damage.reason
    assert len(values(lg.read(0, 1 << 20, max_offset=base).data)) == base
    with pytest.raises(CorruptStorage):
        lg.read(base, 1 << 20)
    assert os.path.getsize(seg_path) > pos  # quarantine cuts nothing
    lg.close()


def test_locate_passes_bytes_through_but_read_batch_checks_them(tmp_path: Path) -> None:
    where = build(tmp_path)
    seg_path, pos, base = sealed_victim(where)
    flip(seg_path, pos + HEADER_SIZE + 8)
    lg = PartitionLog(tmp_path, CFG, recover=False)
    span = lg.locate(base, 1 << 20)
    assert span is not None and span.batches[0][1].base_offset == base  # zero-copy: unchecked
    with pytest.raises(CorruptStorage):
        span.read_batch(*span.batches[0])  # a converting reader checks
    assert lg.damage is not None and lg.damage.offset == base
    with pytest.raises(CorruptStorage):
        lg.locate(base, 1 << 20)
    lg.close()


def test_locate_checks_lengths_and_offsets(tmp_path: Path) -> None:
    where = build(tmp_path)
    seg_path, pos, base = sealed_victim(where)
    flip(seg_path, pos + 7, 0x02)  # base offset of the third batch
    lg = PartitionLog(tmp_path, CFG, recover=False)
    span = lg.locate(0, 1 << 20)  # walks from batch 0 over the damaged header
    assert span is not None and span.next_offset == base
    assert lg.damage is not None and lg.damage.offset == base
    # A reader that goes on in the file itself (TANK's gather) is told where to stop.
    assert span.limit == base
    unlimited = lg.locate(0, 1 << 20, max_offset=3)
    assert unlimited is not None and unlimited.limit == 3
    lg.close()


def test_offset_for_timestamp_never_decodes_damage(tmp_path: Path) -> None:
    where = build(tmp_path)
    seg_path, pos, base = sealed_victim(where)
    flip(seg_path, pos + HEADER_SIZE + 8)
    lg = PartitionLog(tmp_path, CFG, recover=False)
    with pytest.raises(CorruptStorage):
        lg.offset_for_timestamp(1000 + 10 * (base // 3))
    assert lg.offset_for_timestamp(1000) == 0
    lg.close()


def test_retention_of_the_damaged_segment_brings_the_partition_back(tmp_path: Path) -> None:
    where = build(tmp_path)
    seg_path, pos, _base = sealed_victim(where)
    flip(seg_path, pos + HEADER_SIZE + 8)
    lg = PartitionLog(tmp_path, CFG, recover=False)
    lg.scrub()
    assert lg.damage is not None
    lg.delete_oldest_segments(1)
    assert lg.damage is None
    info = lg.append(batch(100))
    assert values(lg.read(info.base_offset, 1 << 20).data) == [b"v100-0", b"v100-1", b"v100-2"]
    lg.close()


def test_a_clean_segment_is_never_quarantined_and_a_wrong_index_is_rebuilt(tmp_path: Path) -> None:
    build(tmp_path)
    lg = PartitionLog(tmp_path, CFG, recover=False)
    seg = lg.segments[0]
    assert lg.check_segment(seg) is None
    # An index entry that points into the middle of a batch (well-formed, wrong): reads through
    # it fail their header walk, the check finds the log clean and rebuilds the index.
    idx = seg.index.path
    data = bytearray(idx.read_bytes())
    rel, p = struct.unpack_from(">II", data, 16)
    struct.pack_into(">II", data, 16, rel, p + 5)
    idx.write_bytes(bytes(data))
    lg.close()
    lg = PartitionLog(tmp_path, CFG, recover=False)
    assert lg.read(rel, 1 << 20).start_offset == rel
    assert lg.damage is None
    lg.close()


def test_first_bad_batch() -> None:
    b1 = bytearray(batch(1))
    struct.pack_into(">q", b1, 0, 3)
    assert first_bad_batch(batch(0) + b1) is None  # offsets follow: 0..2, then 3
    assert first_bad_batch(batch(0) + batch(1)) == (len(batch(0)), "offset gap: batch starts 0, "
                                                                   "expected 3")
    bad = bytearray(batch(0))
    bad[-1] ^= 1
    assert first_bad_batch(bytes(bad)) == (0, "CRC mismatch (offset 0)")
    assert first_bad_batch(batch(0)[:-1]) == (0, "torn batch")


def test_a_scan_that_raced_with_a_change_never_quarantines(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """check_segment's scan runs outside the lock; an error it reports for bytes that were then
    being appended, or across a truncation, is confirmed under the lock and dropped."""
    where = build(tmp_path)
    lg = PartitionLog(tmp_path, CFG, recover=False)
    seg = lg.active
    real_scan = seg.scan
    good_pos = where[-1][1]

    def scan_seeing_a_torn_append(*args: object, **kw: object) -> ScanResult:
        r = real_scan(0, seg.base_offset, verify=True)
        return ScanResult(good_pos, where[-1][2], r.max_timestamp, r.batches, "torn batch (in flight)")

    monkeypatch.setattr(seg, "scan", scan_seeing_a_torn_append)
    assert lg.check_segment(seg) is None  # the batch there is whole and good under the lock

    def scan_racing_a_truncation(*args: object, **kw: object) -> ScanResult:
        lg.truncate_to(where[-2][2])
        return ScanResult(good_pos, where[-1][2], -1, 0, "CRC mismatch (stale bytes)")

    monkeypatch.setattr(seg, "scan", scan_racing_a_truncation)
    assert lg.check_segment(seg) is None
    assert lg.damage is None
    lg.close()
