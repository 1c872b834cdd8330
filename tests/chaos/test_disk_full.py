"""Disk full (issue 13 item 8): every write that fails is an error reply for that request, never
a dead protocol; deleting a topic makes room at once; a graceful stop on a full disk still leaves
the clean-shutdown marker.

The subprocess test runs a broker on a tmpfs of a few MiB mounted for it (root only; skipped with
the reason otherwise); the unit tests inject OSError(ENOSPC) into the writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.broker import BrokerConfig
from bayou.broker.broker import Broker
from bayou.errors import StorageError
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Status
from bayou.records.batch import encode_batch
from bayou.records.model import Record
from bayou.storage import store as store_module
from bayou.storage.config import LogConfig
from bayou.storage.log import PartitionLog
from bayou.storage.store import CLEAN_MARKER
from support.brokers import BrokerProcess, LineConn
from support.iggy import LegacyConn, legacy_login

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def batch(value: bytes) -> bytes:
    return encode_batch([Record(value, key=b"k", timestamp=1_000)])


# -- unit: injected ENOSPC ---------------------------------------------------------------------


def test_append_on_a_full_disk_is_an_error_and_the_log_stays_usable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = PartitionLog(tmp_path / "p", LogConfig())
    lg.append(batch(b"before"))
    real_write = os.write
    full = {"on": True}

    def write(fd: int, data: bytes | memoryview) -> int:
        if full["on"]:
            raise ENOSPC
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(StorageError):
        lg.append(batch(b"lost"))
    assert lg.next_offset == 1
    full["on"] = False
    info = lg.append(batch(b"after"))
    assert info.base_offset == 1
    assert [r.value for r in lg.read_records(0, 10)] == [b"before", b"after"]


def test_roll_on_a_full_disk_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = PartitionLog(tmp_path / "p", LogConfig(segment_bytes=128))
    lg.append(batch(b"x" * 100))
    real_open = os.open

    def no_new_files(path: object, flags: int, *a: object) -> int:
        if flags & os.O_CREAT:
            raise ENOSPC
        return real_open(path, flags, *a)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", no_new_files)
    with pytest.raises(StorageError):
        lg.append(batch(b"y" * 100))  # needs a new segment file
    monkeypatch.setattr(os, "open", real_open)
    assert lg.append(batch(b"z" * 100)).base_offset == 1


async def test_topic_creation_on_a_full_disk_is_a_storage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path))
    await b.start()
    try:
        def full(*_a: object, **_k: object) -> None:
            raise ENOSPC

        monkeypatch.setattr(store_module, "atomic_write", full)
        with pytest.raises(StorageError):
            await b.create_topic("t", 2)
        assert "t" not in b.topics
        monkeypatch.undo()
        await b.create_topic("t", 2)
    finally:
        await b.stop()


async def test_graceful_stop_on_a_full_disk_leaves_the_clean_marker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path))
    await b.start()
    await b.create_topic("t", 1)
    await b.produce("t", 0, batch(b"v"))
    from bayou.broker import persist

    def full(*_a: object, **_k: object) -> None:
        raise ENOSPC

    monkeypatch.setattr(persist, "atomic_write", full)  # groups.json, offsets.json cannot be written
    await b.stop()
    assert (tmp_path / CLEAN_MARKER).exists()


# -- a broker subprocess on a small filesystem -------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", f"bayou-{uuid.uuid4().hex[:8]}",
                        str(mnt)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


async def _fill(conn: LineConn, topic: str, value: str) -> None:
    """Produce ``value`` until the disk is full: three refusals, each naming the lack of space."""
    errors = 0
    for i in range(200):
        r = await conn.ask(f"V1|{i}|PRODUCE|{topic} k:{value}")
        if not r.startswith(f"V1|{i}|OK"):
            assert r.startswith(f"V1|{i}|ERR|"), r
            assert "space" in r.lower(), r
            errors += 1
            if errors >= 3:
                return
    raise AssertionError("the disk never filled")


def test_broker_on_a_full_disk_answers_errors_and_recovers(small_fs: Path) -> None:
    b = BrokerProcess(small_fs / "data", fsync="always").start()
    try:
        value = "x" * 60_000

        async def scenario() -> None:
            conn = await LineConn.open(b.port)
            try:
                for name in ("keep", "big"):
                    assert (await conn.ask(f"V1|c|ADMIN_CREATE_TOPIC|{name} 1 1")).startswith("V1|c|OK")
                await _fill(conn, "big", value)
                # the protocol is alive on the same connection and on a new one, and the others listen
                assert (await conn.ask("V1|p|PING|")).startswith("V1|p|OK")
                other = await LineConn.open(b.port)
                assert (await other.ask("V1|q|PING|")).startswith("V1|q|OK")
                await other.close()
                for port in (b.cursus_port, b.iggy_port, b.tank_port):
                    socket.create_connection(("127.0.0.1", port), timeout=5).close()
                # deleting a topic makes room at once
                assert (await conn.ask("V1|d|ADMIN_DELETE_TOPIC|big")).startswith("V1|d|OK")
                r = await conn.ask(f"V1|k|PRODUCE|keep k:{value}")
                assert r.startswith("V1|k|OK"), r
                # fill it again for the shutdown
                for i in range(200):
                    if not (await conn.ask(f"V1|{i}|PRODUCE|keep k:{value}")).startswith(f"V1|{i}|OK"):
                        break
            finally:
                await conn.close()

        asyncio.run(scenario())
        code = b.kill(signal.SIGTERM)
        assert code == 0, b.log()
        assert (small_fs / "data" / CLEAN_MARKER).exists(), b.log()
        assert "cannot start" not in b.log(), b.log()
    finally:
        with contextlib.suppress(Exception):
            b.stop()


def _fill_up(directory: Path) -> None:
    """Take what space is left with a file of its own."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, bytes(4096)):
                pass
    finally:
        os.close(fd)


def test_iggy_starts_on_a_full_disk_and_writes_its_files_once_there_is_room(small_fs: Path) -> None:
    """A broker restarted on a full disk: Iggy's start-up creates its catalog (with the topics V1
    made) and its users file (both deleted here), and both writes fail. The listener still serves
    (PING, login with the root user from memory); a change that needs the catalog written is
    answered with Iggy's error; once a topic is deleted the files are written without another
    request."""
    data = small_fs / "data"
    b = BrokerProcess(data, fsync="always").start()
    iggy_dir = data / "iggy"

    async def fill() -> None:
        conn = await LineConn.open(b.port)
        for name in ("keep", "big"):
            assert (await conn.ask(f"V1|c|ADMIN_CREATE_TOPIC|{name} 1 1")).startswith("V1|c|OK")
        await _fill(conn, "big", "x" * 60_000)
        await conn.close()

    async def scenario() -> None:
        iggy = await LegacyConn.open(b.iggy_port)
        await iggy.ping()
        await iggy.login()
        assert await iggy.status(m.CreateStream("made-while-full")) == Status.ERROR
        await iggy.ping()
        other = await legacy_login(b.iggy_port)
        await other.ping()
        await other.close()
        conn = await LineConn.open(b.port)
        assert (await conn.ask("V1|d|ADMIN_DELETE_TOPIC|big")).startswith("V1|d|OK")
        await conn.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        catalog, users = iggy_dir / "catalog.json", iggy_dir / "users.json"
        while not (users.exists() and catalog.exists() and b"made-while-full" in catalog.read_bytes()):
            assert loop.time() < deadline, f"the Iggy files were not written: {b.log()}"
            await asyncio.sleep(0.1)
        assert b'"keep"' in catalog.read_bytes()
        await iggy.ping()
        await iggy.close()

    try:
        asyncio.run(fill())
        assert b.stop() == 0, b.log()
        for name in ("users.json", "catalog.json"):  # Iggy's start writes both anew
            (iggy_dir / name).unlink(missing_ok=True)
        _fill_up(small_fs)
        b.start()
        asyncio.run(scenario())
        assert "connection handler failed" not in b.log(), b.log()
        assert "cannot write the Iggy users file at start" in b.log(), b.log()
        assert "cannot write the Iggy catalog" in b.log(), b.log()
    finally:
        b.stop()
