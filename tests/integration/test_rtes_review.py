"""Review of bayou's V1 protocol against rtes.md: one test per discrepancy found.

Each test states the rtes.md section it checks. They are expected to FAIL until the matching fix in
src/ lands; every assertion message names the section and what the reference requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bayou.server.app import BayouServer
from support.brokers import BrokerProcess, LineConn, start_inprocess
from support.oracles import fnv1a_32


def key_for(partition: int, partitions: int = 3) -> str:
    n = 0
    while fnv1a_32(f"k{n}".encode()) % partitions != partition:
        n += 1
    return f"k{n}"


@contextlib.asynccontextmanager
async def broker(data: Path, **overrides: object) -> AsyncIterator[tuple[BayouServer, LineConn]]:
    server = await start_inprocess(data, **overrides)
    conn = await LineConn.open(server.listeners["rtes"].port)
    try:
        yield server, conn
    finally:
        await conn.close()
        # A wedged broker (tests 2 and 3) may also fail its own shutdown write; that is part of the
        # same bug, so it must not mask the assertion that names it.
        with contextlib.suppress(Exception):
            await server.stop()


async def reply_or_none(conn: LineConn, line: bytes | str, timeout: float) -> str | None:
    """The reply, or None when the connection closed or nothing came back in time."""
    try:
        await conn.send(line)
        return (await conn.recv(timeout)).decode("utf-8", "surrogateescape")
    except (TimeoutError, ConnectionError):
        return None


# -- 1. integers with more than 4300 digits: connection dropped, no reply ---------------------


@pytest.mark.parametrize(("line", "expected"), [
    (b"V1|1|CONSUME|orders 0 " + b"9" * 5000, "V1|1|ERR|BAD_REQUEST|invalid offset"),  # out of range
    (b"V1|1|CONSUME|orders 0 " + b"0" * 5000 + b"1", "V1|1|OK|messages= hw=-1"),  # Atoi: 1
])
async def test_long_integer_is_parsed_like_atoi_not_a_dropped_connection(
        tmp_path: Path, line: bytes, expected: str) -> None:
    async with broker(tmp_path / "data") as (_srv, conn):
        got = await reply_or_none(conn, line, 3)
        assert got == expected, (
            "rtes.md 5 / 2 / checklist 9 and 34: integers follow Go Atoi (leading zeros fine, 64-bit "
            f"range, else `invalid <field>`) and the connection stays open; expected {expected!r}, got "
            f"{got!r} (int() raises ValueError past 4300 digits, which escapes decode and closes the "
            "connection)")


async def test_isr_csv_out_of_int64_range_is_invalid_integer_list(tmp_path: Path) -> None:
    async with broker(tmp_path / "data") as (_srv, conn):
        await conn.ask("V1|1|PRODUCE|orders a:b")
        got = await conn.ask("V1|2|ADMIN_SET_PARTITION_LEADER|orders 0 0 99999999999999999999")
        assert got == "V1|2|ERR|BAD_REQUEST|invalid integer list", (
            "rtes.md 7.12: isr_csv entries are parsed with Go Atoi (64-bit), so an out-of-range entry is "
            f"`invalid integer list`; got {got!r}")


# -- 2. invalid UTF-8 in a group or consumer id wedges every group operation ------------------


async def test_group_name_with_invalid_utf8_does_not_wedge_groups(tmp_path: Path) -> None:
    # A real broker process: the wedged in-process broker would outlive the test.
    proc = BrokerProcess(tmp_path / "data", fsync="never").start()
    try:
        conn = await LineConn.open(proc.port)
        got = await reply_or_none(conn, b"V1|1|JOIN|g\xff orders c1", 3)
        assert got == "V1|1|OK|generation=2 assigned=[0 1 2]", (
            "rtes.md 2 (work on bytes: odd bytes never cause an exception) / 6.4 / checklist 31, 34: "
            f"a JOIN whose group name holds a non-UTF-8 byte must be answered; got {got!r} "
            "(groups.json encoding raises UnicodeEncodeError and save() waits forever)")
        other = await LineConn.open(proc.port)
        got = await reply_or_none(other, "V1|2|JOIN|healthy orders c1", 3)
        assert got == "V1|2|OK|generation=2 assigned=[0 1 2]", (
            "rtes.md checklist 34: one request must not affect other requests or connections; a JOIN "
            f"to an unrelated group on another connection got {got!r}")
    finally:
        proc.kill()


# -- 3. a state file that cannot be written makes the request hang forever --------------------


async def test_state_file_write_failure_answers_err(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with broker(tmp_path / "data") as (_srv, conn):
        def disk_full(path: Path, data: bytes, **_kw: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))

        monkeypatch.setattr("bayou.broker.persist.atomic_write", disk_full)
        try:
            got = await reply_or_none(conn, "V1|1|JOIN|g orders c1", 3)
        finally:
            monkeypatch.undo()  # the disk "recovers", so shutdown can write its state
        assert got is not None and got.startswith("V1|1|ERR|"), (
            "rtes.md 2 ([R] an unexpected exception must produce an ERR response) / 9 #10 / "
            f"checklist 34: a JOIN whose groups.json write fails must get an ERR reply; got {got!r} "
            "(StateFile retries forever and save() never returns)")


# -- 4. an expiry sweep inside a failing SYNC is not persisted ---------------------------------


async def test_expiry_sweep_in_failed_sync_rewrites_groups_json(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with broker(data, group_session_timeout_ms=200) as (_srv, conn):
        assert await conn.ask("V1|1|JOIN|g orders c1") == "V1|1|OK|generation=2 assigned=[0 1 2]"
        await asyncio.sleep(0.5)  # c1 expires
        got = await conn.ask("V1|2|SYNC|g orders c1 2")
        assert got == "V1|2|ERR|GENERATION_MISMATCH|stale generation", got
        state = json.loads((data / "groups.json").read_bytes())["g"]
        assert (state["generation"], state["members"]) == (3, []), (
            "rtes.md 6.4 / 7.4 / checklist 31: groups.json is rewritten on every expiry sweep that removes "
            "someone (the sweep runs before the generation check); after the SYNC the file should hold "
            f"generation 3 and no members, but holds generation {state['generation']} and "
            f"{[m['consumer_id'] for m in state['members']]}")


# -- 5. a malformed groups.json / offsets.json stops the broker from starting -----------------


@pytest.mark.parametrize("name", ["groups.json", "offsets.json"])
async def test_unreadable_state_file_is_ignored_at_startup(tmp_path: Path, name: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / name).write_text('{"g":[1]}\n')  # Go's decoder rejects this too: unreadable
    server: BayouServer | None = None
    failure = ""
    try:
        server = await start_inprocess(data)
    except Exception as exc:
        failure = f"{type(exc).__name__}: {exc}"
    assert server is not None, (
        f"rtes.md 6.4: an unreadable {name} is logged and ignored so the state starts empty; "
        f"the broker failed to start with {failure}")
    conn = await LineConn.open(server.listeners["rtes"].port)
    try:
        assert await conn.ask("V1|1|JOIN|g orders c1") == "V1|1|OK|generation=2 assigned=[0 1 2]"
    finally:
        await conn.close()
        await server.stop()


# -- 6. pipelined CONSUMEs: replies are buffered without bound --------------------------------


async def test_pipelined_consume_replies_are_not_buffered_without_bound(tmp_path: Path) -> None:
    async with broker(tmp_path / "data") as (srv, conn):
        key = key_for(0)
        value = "x" * 60_000
        for i in range(16):  # about 1 MB per CONSUME reply
            assert (await conn.ask(f"V1|p{i}|PRODUCE|orders {key}:{value}")).startswith(f"V1|p{i}|OK|")
        reader = await LineConn.open(srv.listeners["rtes"].port)
        try:
            # 64 requests in one small write (1.3 KB), and the client never reads.
            reader.writer.write(b"".join(f"V1|{i}|CONSUME|orders 0 0\n".encode() for i in range(64)))
            await reader.writer.drain()
            peak = 0
            for _ in range(60):
                await asyncio.sleep(0.05)
                for c in srv.listeners["rtes"].connections:
                    transport = c.writer.transport
                    if not transport.is_closing():
                        peak = max(peak, transport.get_write_buffer_size())
        finally:
            reader.writer.transport.abort()
        assert peak <= 8 * 1024 * 1024, (
            "rtes.md 2 ([R] never buffer without a bound) / checklist 34: a client that pipelines "
            f"requests and does not read made the server buffer {peak / 1e6:.0f} MB of replies for one "
            "1.3 KB write (drain() is only awaited after every line of a 256 KiB read chunk)")


# -- 7. group assignment uses the topic's partition count (a deliberate departure) ------------


async def test_group_assignment_uses_the_topics_partition_count(tmp_path: Path) -> None:
    """The flux original split only the broker-wide count (3) even over a 4-partition topic, so
    partition 3 was never consumed by the group; bayou assigns every partition of the topic (README,
    departures table). Topics with the default count behave exactly as rtes.md 6.3 says."""
    async with broker(tmp_path / "data") as (_srv, conn):
        assert (await conn.ask("V1|1|ADMIN_CREATE_TOPIC|wide 4 1")).startswith("V1|1|OK|")
        assert await conn.ask("V1|2|JOIN|g wide c1") == "V1|2|OK|generation=2 assigned=[0 1 2 3]"
        assert await conn.ask("V1|3|JOIN|g wide c2") == "V1|3|OK|generation=3 assigned=[1 3]"
        assert await conn.ask("V1|4|JOIN|h orders c1") == "V1|4|OK|generation=2 assigned=[0 1 2]"


# -- 8. REPLICA_FETCH: replica id must be checked before anything partition-related ------------


async def test_replica_fetch_checks_replica_id_before_partition(tmp_path: Path) -> None:
    async with broker(tmp_path / "data") as (_srv, conn):
        got = await conn.ask("V1|1|REPLICA_FETCH|orders 7 0 0")
        assert got == "V1|1|ERR|BAD_REQUEST|invalid replica id", (
            "rtes.md 7.9 step 3: a replica id outside 1..RF-1 is `invalid replica id`; no partition "
            f"check precedes it (none exists at all in [O]); got {got!r}")


# -- 9. command names upper-cased with Python's full case mapping, not Go's ------------------


async def test_command_uppercase_is_go_simple_case_mapping(tmp_path: Path) -> None:
    async with broker(tmp_path / "data") as (_srv, conn):
        # U+FB06 (LATIN SMALL LIGATURE ST): Python upper() gives "ST", Go's ToUpper leaves it.
        got = await conn.ask("V1|1|admin_regi\ufb06er_broker|1 h 1")
        assert got == "V1|1|ERR|UNKNOWN_COMMAND|unsupported command", (
            "rtes.md 3 step 5 (Go strings.ToUpper, per-rune simple mapping): `admin_regi\\ufb06er_broker` "
            f"is not ADMIN_REGISTER_BROKER; got {got!r}")
