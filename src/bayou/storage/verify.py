"""``bayou verify``: check a stopped broker's data directory, every segment and index, with the
recovery scanner (``Segment.scan``: lengths, offsets, CRCs); with ``repair``, cut each damaged
segment at its first bad batch and rebuild its indexes, exactly as crash recovery does
(``Segment.truncate_to_position``, ``Segment.rebuild_indexes``).

A repaired sealed segment keeps the segments after it: their records keep their offsets and the
log has a gap where the damaged records were (consumers skip it as they skip compacted offsets);
no offset is ever handed out twice. Verifying changes nothing on disk; the directory lock is
taken, so a running broker is never checked or repaired under its feet.

Exit codes follow fsck: 0 clean, 1 damage found and all of it repaired, 4 damage left (found
without ``repair``, or not repairable), 8 the check could not run.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bayou.errors import InvalidConfig, StorageError
from bayou.storage.config import LogConfig, apply_overrides
from bayou.storage.index import OffsetIndex, TimeIndex
from bayou.storage.segment import LOG_SUFFIX, Segment

EXIT_CLEAN = 0
EXIT_REPAIRED = 1
EXIT_DAMAGED = 4
EXIT_ERROR = 8

_MAX_REL = 0xFFFFFFFF


@dataclass(slots=True)
class Finding:
    path: Path
    position: int | None  # where in the file (None: the whole file)
    problem: str
    repaired: str | None = None  # what --repair did, or None when it was left

    def lines(self, root: Path) -> list[str]:
        where = self.path.relative_to(root) if self.path.is_relative_to(root) else self.path
        at = "" if self.position is None else f" position {self.position}"
        out = [f"DAMAGED {where}{at}: {self.problem}"]
        if self.repaired is not None:
            out.append(f"REPAIRED {where}: {self.repaired}")
        return out


@dataclass(slots=True)
class VerifyReport:
    root: Path
    partitions: int = 0
    segments: int = 0
    bytes_checked: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if not self.findings:
            return EXIT_CLEAN
        if all(f.repaired is not None for f in self.findings):
            return EXIT_REPAIRED
        return EXIT_DAMAGED

    def summary(self) -> str:
        repaired = sum(f.repaired is not None for f in self.findings)
        return (f"verified {self.partitions} partitions, {self.segments} segments, "
                f"{self.bytes_checked} bytes: {len(self.findings)} damaged, {repaired} repaired")


def _partitions(root: Path) -> Iterator[tuple[Path, LogConfig]]:
    topics = root / "topics"
    if not topics.is_dir():
        return
    for tdir in sorted(topics.iterdir()):
        if not tdir.is_dir():
            continue
        cfg = LogConfig()
        try:
            raw = json.loads((tdir / "topic.json").read_text())
            cfg = apply_overrides(cfg, {str(k): str(v) for k, v in raw.get("config", {}).items()
                                        if str(k) in ("index.interval.bytes",)})
        except (OSError, ValueError, TypeError, AttributeError, InvalidConfig):
            pass  # the default interval; the broker reports an unreadable topic.json itself
        for pdir in sorted((p for p in tdir.iterdir() if p.is_dir() and p.name.isdigit()),
                           key=lambda p: int(p.name)):
            yield pdir, cfg


def _index_problem(seg: Segment) -> str | None:
    """Why ``seg``'s indexes do not describe its log (None: they do). A torn file is reported
    before loading, so checking never rewrites anything."""
    present = []
    for path, entry in ((seg.index.path, OffsetIndex.entry_size),
                        (seg.time_index.path, TimeIndex.entry_size)):
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            if seg.size:
                return f"{path.name} is missing"
            present.append(False)  # an empty segment (a partition never written to) needs none
            continue
        if size % entry:
            return f"{path.name} ends in a torn entry"
        present.append(True)
    if ((present[0] and not seg.index.load(seg.size, _MAX_REL))
            or (present[1] and not seg.time_index.load(_MAX_REL))):
        return "index entries out of order or past the log"
    if not seg.indexes_match_log():
        return "index entries do not point at the batches they name"
    return None


def _check_partition(pdir: Path, cfg: LogConfig, repair: bool, report: VerifyReport) -> None:
    bases = sorted(int(p.name[: -len(LOG_SUFFIX)]) for p in pdir.glob("*" + LOG_SUFFIX)
                   if p.name[: -len(LOG_SUFFIX)].isdigit())
    report.partitions += 1
    prev_end: int | None = None
    for base in bases:
        seg = Segment(pdir, base, cfg.index_interval_bytes)
        try:
            report.segments += 1
            if prev_end is not None and base < prev_end:
                report.findings.append(Finding(
                    seg.path, None, f"starts at offset {base}, inside the previous segment "
                                    f"(which ends at {prev_end})"))
            result = seg.scan(0, seg.base_offset, verify=True)
            report.bytes_checked += result.valid_end
            seg.max_timestamp = result.max_timestamp
            if result.error is not None:
                finding = Finding(seg.path, result.valid_end, result.error)
                report.findings.append(finding)
                if repair:
                    cut = seg.size - result.valid_end
                    seg.truncate_to_position(result.valid_end)
                    seg.rebuild_indexes(0)
                    seg.sync()
                    finding.repaired = (f"cut at position {result.valid_end} ({cut} bytes), "
                                        f"indexes rebuilt; offsets from {result.next_offset} "
                                        "to the next segment are gone")
            else:
                problem = _index_problem(seg)
                if problem is not None:
                    finding = Finding(seg.index.path, None, problem)
                    report.findings.append(finding)
                    if repair:
                        seg.rebuild_indexes(0)
                        seg.sync()
                        finding.repaired = "indexes rebuilt from the log"
            prev_end = result.next_offset
        finally:
            seg.close()


def verify_data_dir(data_dir: Path, *, repair: bool = False,
                    progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Check (and with ``repair``, repair) every partition of ``data_dir``. Raises StorageError
    when the directory is missing or a broker holds it."""
    root = Path(data_dir)
    if not (root / "topics").is_dir():
        raise StorageError(f"{root} is not a bayou data directory (no topics/)")
    lock = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageError(f"{root} is in use by a running broker: stop it first") from None
        report = VerifyReport(root)
        for pdir, cfg in _partitions(root):
            if progress is not None:
                progress(str(pdir.relative_to(root)))
            try:
                _check_partition(pdir, cfg, repair, report)
            except OSError as exc:
                report.findings.append(Finding(pdir, None, f"cannot be read: {exc}"))
        return report
    finally:
        os.close(lock)
