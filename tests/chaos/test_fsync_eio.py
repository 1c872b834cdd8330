"""A failed fsync (EIO) in a real broker process under ``--fsync always``: the produce it covered
is refused, the partition goes offline (appends refused, ``bayou_partition_offline`` 1, reads go
on), a graceful stop leaves no clean-shutdown marker, and a restart recovers the partition and
takes appends again, with every acknowledged record in place.

The EIO is injected into the subprocess by a ``sitecustomize`` module on its PYTHONPATH: while a
trigger file exists, the next fsync of a segment file (``*.log``) fails once with EIO, as a disk's
writeback error would be reported, and the trigger is removed.
"""

from __future__ import annotations

import os
import re
import time
import urllib.request
from pathlib import Path

import pytest

from bayou.client.rtes import RtesClient, RtesClientError
from bayou.storage.store import CLEAN_MARKER
from support.brokers import BrokerProcess

SITECUSTOMIZE = '''
import errno
import os

_trigger = os.environ.get("BAYOU_TEST_FSYNC_EIO")
if _trigger:
    _real_fsync = os.fsync

    def _fsync(fd):
        if os.path.exists(_trigger):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.endswith(".log"):  # a segment file
                os.unlink(_trigger)
                raise OSError(errno.EIO, "Input/output error (injected)")
        return _real_fsync(fd)

    os.fsync = _fsync
'''


def _offline_gauge(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(r'^bayou_partition_offline\{topic="eio",partition="0"\} (\S+)$', text, re.MULTILINE)
    assert m is not None, "no offline gauge for eio/0"
    return m.group(1)


def test_a_failed_fsync_takes_the_partition_offline_until_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    trigger = tmp_path / "fail-next-fsync"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("BAYOU_TEST_FSYNC_EIO", str(trigger))
    broker = BrokerProcess(tmp_path / "data", fsync="always").start()
    try:
        with RtesClient("127.0.0.1", broker.port) as c:
            c.create_topic("eio", 1)
            first = c.produce("eio", "k", "acknowledged-before")
            assert first.offset == 0
            trigger.touch()
            with pytest.raises(RtesClientError) as failed:
                c.produce("eio", "k", "its-fsync-fails")
            assert "fsync failed" in failed.value.message and "Input/output" in failed.value.message
            assert not trigger.exists()  # the injected failure happened, once
            with pytest.raises(RtesClientError, match=r"offline: an fsync failed .*restart the broker"):
                c.produce("eio", "k", "refused-while-offline")
            records, _hw = c.consume("eio", 0, 0)  # reads go on
            assert records[0] == (0, "acknowledged-before")
            c.ping()  # and so does the connection
        assert _offline_gauge(broker.http_port) == "1"
        broker.stop()  # a graceful stop: the flush fails, so no clean marker is left
        assert not (tmp_path / "data" / CLEAN_MARKER).exists()
        assert "offline" in broker.log()
        broker.start()
        with RtesClient("127.0.0.1", broker.port) as c:
            after = c.produce("eio", "k", "after-restart")
            records, _hw = c.consume("eio", 0, 0)
        values = [v for _o, v in records]
        # the acknowledged record is in place; the one whose fsync failed was written before its
        # fsync and may be back (never acknowledged: a client retries it); the refused one is not
        assert values[0] == "acknowledged-before" and values[-1] == "after-restart"
        assert set(values[1:-1]) <= {"its-fsync-fails"}
        assert after.offset == len(values) - 1
        deadline = time.monotonic() + 10
        while _offline_gauge(broker.http_port) != "0":
            assert time.monotonic() < deadline, "the partition stayed offline after the restart"
            time.sleep(0.05)
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill()
