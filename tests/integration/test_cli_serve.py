"""``bayou serve`` after an unclean stop: a rich progress bar of the crash recovery (partitions
validated of the total, bytes validated) on stderr when stderr is a terminal (a real pty), and
nothing but the usual log lines when it is not, or when the last stop was clean."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from bayou.client import Client
from support.brokers import BrokerProcess, free_port
from support.cli import TerminalProcess
from support.http import get, wait_for

pytestmark = pytest.mark.slow

TOPICS = 4
PARTITIONS = 100  # per topic: 400 partitions to validate
VALUE = b"v" * 2000
PER_PARTITION = 10


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory left by a SIGKILLed broker: 400 partitions, 20 kB of records in each."""
    data = tmp_path_factory.mktemp("crashed") / "data"
    broker = BrokerProcess(data, fsync="never").start(timeout=60)  # a loaded machine starts slowly
    try:
        with Client(f"127.0.0.1:{broker.iggy_port}") as c:
            for t in range(TOPICS):
                c.create_topic(f"r{t}", PARTITIONS)
                for p in range(PARTITIONS):
                    c.send(f"r{t}", p, [VALUE] * PER_PARTITION)
    finally:
        broker.kill(signal.SIGKILL)
    return data


def copy_of(data: Path, tmp_path: Path) -> Path:
    """Each test recovers its own copy: a recovered broker stopped cleanly leaves a clean directory."""
    return Path(shutil.copytree(data, tmp_path / "data"))


def test_recovery_draws_a_progress_bar_on_a_terminal(crashed: Path, tmp_path: Path) -> None:
    data = copy_of(crashed, tmp_path)
    http = free_port()
    args = ["serve", "--data-dir", str(data), "--rtes", f"127.0.0.1:{free_port()}", "--cursus", "off",
            "--iggy", "off", "--tank", "off", "--http", f"127.0.0.1:{http}", "--fsync", "never",
            "--log-format", "text"]
    with TerminalProcess(args, "stderr") as term:
        shown = term.wait_for("recovered:", 120)
        wait_for(lambda: get(http, "/ready")[0] == 200, 30, "/ready after recovery")
        assert term.stop() == 0, term.shown()
    total = TOPICS * PARTITIONS
    assert f"{total}/{total}" in shown, shown  # rich's MofN column: every partition validated
    assert "━" in shown, shown  # rich's bar
    assert "recovering: " in shown, shown  # drawn while the partitions were validated, not only at the end
    size_mb = TOPICS * PARTITIONS * PER_PARTITION * len(VALUE) / 1e6
    validated = [float(x.split(" MB validated")[0].rsplit(" ", 1)[-1])
                 for x in shown.split("recovered: ")[1:]]
    assert validated and validated[-1] >= size_mb, shown  # the records' bytes and their batch headers
    assert "validated 400 partitions" in shown, shown  # the log line, still shown with the bar

    # stopped cleanly, the next start validates nothing and draws nothing
    with TerminalProcess(args, "stderr") as term:
        shown = term.wait_for("bayou ready", 120)
        assert term.stop() == 0, term.shown()
    assert "opened 400 partitions" in shown and "(clean shutdown)" in shown, shown
    assert "recovering" not in shown and "recovered:" not in shown and "━" not in shown, shown


def test_no_bar_without_a_terminal(crashed: Path, tmp_path: Path) -> None:
    data = copy_of(crashed, tmp_path)
    broker = BrokerProcess(data, fsync="never").start(timeout=120)  # stderr to a file
    try:
        wait_for(lambda: get(broker.http_port, "/ready")[0] == 200, 30, "/ready after recovery")
    finally:
        assert broker.stop() == 0, broker.log()
    log = broker.log_path.read_text()
    assert '"validated 400 partitions' in log, log[-3000:]  # it did recover after the unclean stop
    assert "recovering" not in log and "recovered:" not in log and "━" not in log, log[-3000:]
    assert "\x1b[" not in log, log[-3000:]  # no terminal control sequences at all
