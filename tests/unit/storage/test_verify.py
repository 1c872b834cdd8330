"""`bayou verify`: finds damage in segments and indexes with file and position, changes nothing
without --repair, and repairs the way crash recovery does."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from bayou.cli import main
from bayou.errors import StorageError
from bayou.records import decode_records, iter_batches
from bayou.records.batch import HEADER_SIZE
from bayou.storage import PartitionLog, Store
from bayou.storage.verify import EXIT_CLEAN, EXIT_DAMAGED, EXIT_REPAIRED, verify_data_dir
from support.damage import SMALL_SEGMENTS, batch, build, flip, sealed_victim


def data_dir(tmp_path: Path) -> tuple[Path, list[tuple[Path, int, int]]]:
    root = tmp_path / "data"
    topics = root / "topics"
    where = build(topics / "t" / "0")
    build(topics / "t" / "1")
    build(topics / "u" / "0", batches=5)
    return root, where


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != ".lock":
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


def test_a_clean_directory_verifies_clean(tmp_path: Path) -> None:
    root, _ = data_dir(tmp_path)
    report = verify_data_dir(root)
    assert report.exit_code == EXIT_CLEAN and report.findings == []
    assert report.partitions == 3 and report.segments >= 7


def test_damage_is_reported_with_file_and_position_and_nothing_changes(tmp_path: Path) -> None:
    root, where = data_dir(tmp_path)
    seg_path, pos, base = sealed_victim(where)
    flip(seg_path, pos + HEADER_SIZE + 8)
    idx = root / "topics" / "t" / "1" / "00000000000000000000.index"
    raw = bytearray(idx.read_bytes())
    rel, p = struct.unpack_from(">II", raw, 8)
    struct.pack_into(">II", raw, 8, rel, p + 3)  # well-formed, pointing into a batch
    idx.write_bytes(bytes(raw))
    before = digest(root)
    report = verify_data_dir(root)
    assert report.exit_code == EXIT_DAMAGED
    found = {(f.path, f.position) for f in report.findings}
    assert found == {(seg_path, pos), (idx, None)}
    crc = next(f for f in report.findings if f.path == seg_path)
    assert "CRC mismatch" in crc.problem and f"offset {base}" in crc.problem
    assert crc.lines(root)[0].startswith(f"DAMAGED topics/t/0/{seg_path.name} position {pos}: ")
    assert digest(root) == before  # checking never writes


def test_repair_cuts_at_the_first_bad_batch_and_keeps_later_segments(tmp_path: Path) -> None:
    root, where = data_dir(tmp_path)
    seg_path, pos, base = sealed_victim(where)
    with open(seg_path, "r+b") as f:  # a broken length field: what used to stop the broker
        f.seek(pos + 8)
        f.write(struct.pack(">i", 1 << 29))
    last_offset = where[-1][2] + 2
    report = verify_data_dir(root, repair=True)
    assert report.exit_code == EXIT_REPAIRED
    assert [(f.path, f.position) for f in report.findings] == [(seg_path, pos)]
    assert seg_path.stat().st_size == pos
    assert verify_data_dir(root).exit_code == EXIT_CLEAN
    lg = PartitionLog(seg_path.parent, SMALL_SEGMENTS, recover=False)
    assert lg.damage is None
    offsets = []
    offset = 0
    while offset < lg.next_offset:
        res = lg.read(offset, 1 << 20)
        offsets += [r.offset for q, _h in iter_batches(res.data) for r in decode_records(res.data, q)]
        offset = res.next_offset
    assert offsets[: base] == list(range(base))  # everything before the damage
    assert offsets[-1] == last_offset  # later segments kept: their offsets are never reused
    assert lg.append(batch(99)).base_offset == last_offset + 1
    lg.close()


def test_repair_rebuilds_a_damaged_index(tmp_path: Path) -> None:
    root, _ = data_dir(tmp_path)
    idx = root / "topics" / "u" / "0" / "00000000000000000000.index"
    idx.write_bytes(idx.read_bytes() + b"\x01\x02")  # a torn entry
    report = verify_data_dir(root, repair=True)
    assert report.exit_code == EXIT_REPAIRED
    assert report.findings[0].path == idx and "torn entry" in report.findings[0].problem
    assert verify_data_dir(root).exit_code == EXIT_CLEAN


def test_a_running_broker_is_never_verified(tmp_path: Path) -> None:
    root, _ = data_dir(tmp_path)
    store = Store(root)
    store.open()
    try:
        with pytest.raises(StorageError, match="in use"):
            verify_data_dir(root)
    finally:
        store.close()
    with pytest.raises(StorageError, match="not a bayou data directory"):
        verify_data_dir(tmp_path / "nowhere")


def test_cli_exit_codes(tmp_path: Path) -> None:
    root, where = data_dir(tmp_path)
    runner = CliRunner()
    ok = runner.invoke(main, ["verify", "--data-dir", str(root)])
    assert ok.exit_code == 0, ok.output
    assert "0 damaged" in ok.output
    seg_path, pos, _base = sealed_victim(where)
    flip(seg_path, pos + HEADER_SIZE + 8)
    bad = runner.invoke(main, ["verify", "--data-dir", str(root)])
    assert bad.exit_code == 4
    assert f"DAMAGED topics/t/0/{seg_path.name} position {pos}: CRC mismatch" in bad.output
    fixed = runner.invoke(main, ["verify", "--data-dir", str(root), "--repair"])
    assert fixed.exit_code == 1
    assert f"REPAIRED topics/t/0/{seg_path.name}: cut at position {pos}" in fixed.output
    assert runner.invoke(main, ["verify", "--data-dir", str(root)]).exit_code == 0
    missing = runner.invoke(main, ["verify", "--data-dir", str(tmp_path / "none")])
    assert missing.exit_code == 8


def test_partitions_never_written_to_verify_clean(tmp_path: Path) -> None:
    """A partition nobody wrote to holds an empty log and no index files after a clean stop:
    nothing is damaged (this was reported as 'index entries out of order or past the log')."""
    root = tmp_path / "data"
    build(root / "topics" / "t" / "0")
    build(root / "topics" / "e" / "0", batches=0)  # opened and closed empty, like a fresh partition
    for p in (root / "topics" / "e" / "0").glob("*index"):
        p.unlink()
    assert [p.stat().st_size for p in (root / "topics" / "e" / "0").glob("*.log")] == [0]
    report = verify_data_dir(root)
    assert report.exit_code == EXIT_CLEAN and report.findings == [], report.findings
