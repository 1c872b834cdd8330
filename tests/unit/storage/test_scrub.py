"""The background scrub: finds damage no reader asked for, at a bounded rate, and can be stopped."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bayou.records.batch import HEADER_SIZE
from bayou.storage import PartitionLog
from bayou.storage.scrub import Scrubber, ScrubStopped, Throttler
from support.damage import SMALL_SEGMENTS as CFG
from support.damage import build, flip, sealed_victim


def test_scrub_finds_and_reports_damage_in_a_sealed_segment(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    good_dir, bad_dir = tmp_path / "t" / "0", tmp_path / "t" / "1"
    build(good_dir)
    where = build(bad_dir)
    seg_path, pos, base = sealed_victim(where)
    flip(seg_path, pos + HEADER_SIZE + 8)
    logs = [("t/0", PartitionLog(good_dir, CFG, recover=False)),
            ("t/1", PartitionLog(bad_dir, CFG, recover=False))]
    scrubber = Scrubber(lambda: logs, 64 << 20)
    with caplog.at_level("INFO", logger="bayou.storage"):
        report = scrubber.run_pass()
    assert report.partitions == 2
    assert len(report.quarantined) == 1 and report.quarantined[0].startswith("t/1: ")
    assert logs[0][1].damage is None
    damage = logs[1][1].damage
    assert damage is not None and (damage.path, damage.position, damage.offset) == (seg_path, pos, base)
    text = caplog.text
    assert str(seg_path) in text and f"position {pos}" in text  # logged with file and position
    # The next pass does not report it again.
    assert scrubber.run_pass().quarantined == ()
    for _n, lg in logs:
        lg.close()


def test_throttler_holds_the_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    class FakeEvent(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            assert timeout is not None
            slept.append(timeout)
            now[0] += timeout
            return False

    t = Throttler(1000, FakeEvent(), clock=lambda: now[0])
    t(500)  # 500 bytes at once at 1000 B/s: half a second ahead
    t(1000)
    assert slept == [pytest.approx(0.5), pytest.approx(1.0)]
    assert now[0] == pytest.approx(1.5)  # 1500 bytes took 1.5 s
    now[0] += 10  # an idle spell earns no burst: the next read waits again
    t(1000)
    assert slept[-1] == pytest.approx(1.0)


def test_a_stopped_scrub_ends_its_pass_within_one_read(tmp_path: Path) -> None:
    build(tmp_path)
    lg = PartitionLog(tmp_path, CFG, recover=False)
    scrubber = Scrubber(lambda: [("t/0", lg)], 100)  # 100 B/s: a pass would take minutes
    done = threading.Event()
    out: list[object] = []

    def run() -> None:
        out.append(scrubber.run_pass())
        done.set()

    threading.Thread(target=run, daemon=True).start()
    t0 = time.monotonic()
    scrubber.stop()
    assert done.wait(5.0)
    assert time.monotonic() - t0 < 2.0
    lg.close()
    stop = threading.Event()
    stop.set()
    with pytest.raises(ScrubStopped):
        Throttler(100, stop)(1)
