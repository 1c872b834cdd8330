"""The V1 server end to end: pipelining, half-close, concurrency, the CONSUME cap, restarts,
consumer groups as the SDK drives them, the ADMIN_* commands and the connection limit."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bayou.broker import BrokerConfig
from bayou.client.rtes import RtesClient
from bayou.server.app import BayouServer, ServerConfig
from bayou.server.rtes import CONSUME_MAX_RECORDS
from bayou.storage import FsyncPolicy, LogConfig
from support.brokers import BrokerProcess, LineConn, start_inprocess
from support.oracles import fnv1a_32

CONSUME_RE = re.compile(rb"V1\|(?P<cid>[^|]*)\|OK\|messages=(?P<msgs>\S*) hw=(?P<hw>-?\d+)\Z")



def key_for(partition: int, partitions: int = 3, prefix: str = "k") -> str:
    """The first key ``<prefix><n>`` that hashes to ``partition``."""
    n = 0
    while fnv1a_32(f"{prefix}{n}".encode()) % partitions != partition:
        n += 1
    return f"{prefix}{n}"


def parse_consume(reply: bytes | str) -> tuple[list[tuple[int, str]], int]:
    if isinstance(reply, str):
        reply = reply.encode()
    m = CONSUME_RE.match(reply)
    assert m, f"unparseable CONSUME reply {reply[:200]!r}"
    records = []
    for item in m["msgs"].split(b",") if m["msgs"] else []:
        off, sep, value = item.partition(b":")
        assert sep and off.isdigit(), item
        records.append((int(off), value.decode()))
    return records, int(m["hw"])


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[BayouServer]:
    srv = await start_inprocess(tmp_path / "data")
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def conn(server: BayouServer) -> AsyncIterator[LineConn]:
    c = await LineConn.open(server.listeners["rtes"].port)
    try:
        yield c
    finally:
        await c.close()


def port_of(server: BayouServer) -> int:
    return server.listeners["rtes"].port


# -- framing -----------------------------------------------------------------------------------

async def test_pipelining_replies_in_order(conn: LineConn) -> None:
    lines, expected = [], []
    offsets = [0, 0, 0]
    for i in range(300):
        kind = i % 5
        if kind in (0, 1):
            key = f"key{i}"
            p = fnv1a_32(key.encode()) % 3
            lines.append(f"V1|{i}|PRODUCE|orders {key}:v{i}")
            expected.append(f"V1|{i}|OK|partition={p} offset={offsets[p]} hw={offsets[p]}")
            offsets[p] += 1
        elif kind == 2:
            lines.append(f"V1|{i}|PING|")
            expected.append(f"V1|{i}|OK")
        elif kind == 3:
            lines.append(f"V1|{i}|BOGUS|")
            expected.append(f"V1|{i}|ERR|UNKNOWN_COMMAND|unsupported command")
        else:
            lines.append(f"V1|{i}|CONSUME|orders 0 {offsets[0]}")
            expected.append(f"V1|{i}|OK|messages= hw={offsets[0] - 1}")
    lines.insert(150, "garbage")
    expected.insert(150, "V1|0|ERR|BAD_REQUEST|expected format V1|<correlation_id>|<command>|<args>")
    conn.writer.write("".join(line + "\n" for line in lines).encode())
    await conn.writer.drain()
    got = [(await conn.recv()).decode() for _ in expected]
    assert got == expected


async def test_pipelined_lines_split_across_writes(conn: LineConn) -> None:
    blob = b"".join(f"V1|{i}|PING|\r\n".encode() for i in range(50))
    for i in range(0, len(blob), 7):  # boundaries land inside lines and between CR and LF
        conn.writer.write(blob[i:i + 7])
        await conn.writer.drain()
    assert [await conn.recv() for _ in range(50)] == [f"V1|{i}|OK".encode() for i in range(50)]


async def test_half_close_answers_final_line(server: BayouServer) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", port_of(server))
    w.write(b"V1|1|PING|\nV1|2|PRODUCE|orders a:last")
    w.write_eof()
    data = await asyncio.wait_for(r.read(), 10)
    assert data == b"V1|1|OK\nV1|2|OK|partition=1 offset=0 hw=0\n"
    w.close()
    # The final line had a CR before the half-close: it is dropped as usual.
    r, w = await asyncio.open_connection("127.0.0.1", port_of(server))
    w.write(b"V1|3|CONSUME|orders 1 0\r")
    w.write_eof()
    assert await asyncio.wait_for(r.read(), 10) == b"V1|3|OK|messages=0:last hw=0\n"
    w.close()
    # Half-close with nothing pending: the server just closes.
    r, w = await asyncio.open_connection("127.0.0.1", port_of(server))
    w.write(b"V1|4|PING|\n")
    w.write_eof()
    assert await asyncio.wait_for(r.read(), 10) == b"V1|4|OK\n"
    w.close()


# -- concurrency and acks=all ------------------------------------------------------------------

async def test_acks_all_wait_does_not_block_other_connections(server: BayouServer, conn: LineConn) -> None:
    other = await LineConn.open(port_of(server))
    try:
        start = time.monotonic()
        await conn.send("V1|1|PRODUCE|orders a:waiting acks=all")
        reply = asyncio.ensure_future(conn.recv(timeout=10))
        # the record is appended (and visible: hw = last offset, rtes.md 6.2) while the produce
        # waits for followers that never come; the other connection is served meanwhile
        deadline = time.monotonic() + 5
        while (got := await other.ask("V1|c|CONSUME|orders 1 0")) != "V1|c|OK|messages=0:waiting hw=0":
            assert time.monotonic() < deadline, got
            await asyncio.sleep(0.01)
        for i in range(5):
            assert await other.ask(f"V1|p{i}|PING|") == f"V1|p{i}|OK"
        assert not reply.done(), "the other connection was served only after the acks=all wait"
        assert await reply == b"V1|1|ERR|REPLICATION_TIMEOUT|acks=all timeout"
        elapsed = time.monotonic() - start
        assert elapsed >= 1.9, elapsed  # it waited the ack-all timeout (2 s)
        # The record stays appended and the connection keeps working.
        assert await conn.ask("V1|2|PRODUCE|orders a:next") == "V1|2|OK|partition=1 offset=1 hw=1"
    finally:
        await other.close()


async def test_acks_all_succeeds_with_replica_fetch(server: BayouServer, conn: LineConn) -> None:
    other = await LineConn.open(port_of(server))
    try:
        start = time.monotonic()
        await conn.send("V1|1|PRODUCE|orders a:replicated acks=all")
        reply = asyncio.ensure_future(conn.recv(timeout=5))
        fetches = []
        while not reply.done() and time.monotonic() - start < 3:
            fetches.append(await other.ask("V1|f|REPLICA_FETCH|orders 1 1 0"))
            await asyncio.sleep(0.02)
        assert await reply == b"V1|1|OK|partition=1 offset=0 hw=0"
        assert time.monotonic() - start < 1.5, "acks=all should finish as soon as the follower caught up"
        # The report that completed it saw the follower in sync (its hw may still exclude the
        # record while the record's fsync is in flight); once acknowledged, hw covers it.
        assert re.fullmatch(r"V1\|f\|OK\|replica=1 acked_offset=0 hw=(-1|0) isr=\[0 1\] "
                            r"under_replicated=false", fetches[-1]), fetches
        assert await other.ask("V1|g|REPLICA_FETCH|orders 1 1 0") == \
            "V1|g|OK|replica=1 acked_offset=0 hw=0 isr=[0 1] under_replicated=false"
        # The follower is now in sync at offset 0: the next acks=all needs a new report, and gets it.
        await conn.send("V1|2|PRODUCE|orders a:second acks=all")
        reply = asyncio.ensure_future(conn.recv(timeout=5))
        while not reply.done():
            await other.ask("V1|f|REPLICA_FETCH|orders 1 2 1")
            await asyncio.sleep(0.02)
        assert await reply == b"V1|2|OK|partition=1 offset=1 hw=1"
    finally:
        await other.close()


async def test_many_concurrent_connections(server: BayouServer) -> None:
    async def client(i: int) -> list[str]:
        c = await LineConn.open(port_of(server))
        try:
            return [await c.ask(f"V1|{i}-{n}|PRODUCE|shared c{i}:v{n}") for n in range(20)]
        finally:
            await c.close()

    results = await asyncio.gather(*(client(i) for i in range(20)))
    seen: set[tuple[int, int]] = set()
    for replies in results:
        for r in replies:
            m = re.fullmatch(r"V1\|\d+-\d+\|OK\|partition=(\d) offset=(\d+) hw=\d+", r)
            assert m, r
            seen.add((int(m[1]), int(m[2])))
    assert len(seen) == 400, "every produce got its own offset"
    for p in range(3):
        offs = sorted(o for q, o in seen if q == p)
        assert offs == list(range(len(offs)))


# -- the CONSUME cap ---------------------------------------------------------------------------

async def test_consume_cap_and_resume(tmp_path: Path) -> None:
    total = CONSUME_MAX_RECORDS + 50
    assert CONSUME_MAX_RECORDS == 10_000
    srv = await start_inprocess(tmp_path / "data", log=LogConfig(fsync=FsyncPolicy("never")))
    c = await LineConn.open(port_of(srv))
    try:
        key = key_for(2)
        c.writer.write(b"".join(f"V1|{i}|PRODUCE|big {key}:value-{i}\n".encode() for i in range(total)))
        await c.writer.drain()
        for i in range(total):
            assert await c.recv() == f"V1|{i}|OK|partition=2 offset={i} hw={i}".encode()
        records, hw = parse_consume(await c.ask("V1|c1|CONSUME|big 2 0"))
        assert hw == total - 1
        assert len(records) == CONSUME_MAX_RECORDS
        assert records == [(i, f"value-{i}") for i in range(CONSUME_MAX_RECORDS)]
        records, hw = parse_consume(await c.ask(f"V1|c2|CONSUME|big 2 {records[-1][0] + 1}"))
        assert hw == total - 1
        assert records == [(i, f"value-{i}") for i in range(CONSUME_MAX_RECORDS, total)]
        # From the middle: the cap counts from the requested offset.
        records, _ = parse_consume(await c.ask("V1|c3|CONSUME|big 2 5000"))
        assert [o for o, _v in records] == list(range(5000, total))
    finally:
        await c.close()
        await srv.stop()


async def test_consume_byte_cap_and_resume(tmp_path: Path) -> None:
    """Large values: a reply stops near CONSUME_MAX_BYTES; resuming from last + 1 gets the rest."""
    srv = await start_inprocess(tmp_path / "data", log=LogConfig(fsync=FsyncPolicy("never")))
    c = await LineConn.open(port_of(srv))
    try:
        value = "v" * 65_000
        c.writer.write(b"".join(f"V1|{i}|PRODUCE|large k:{i:03d}{value}\n".encode() for i in range(100)))
        await c.writer.drain()
        for i in range(100):
            assert (await c.recv()).startswith(f"V1|{i}|OK|".encode())
        p = fnv1a_32(b"k") % 3
        got: list[tuple[int, str]] = []
        replies = 0
        while not got or got[-1][0] < 99:
            start = got[-1][0] + 1 if got else 0
            reply = await c.ask(f"V1|c|CONSUME|large {p} {start}")
            assert len(reply) < 5 * 1024 * 1024
            records, hw = parse_consume(reply)
            assert hw == 99 and records and records[0][0] == start
            got.extend(records)
            replies += 1
        assert replies >= 2, "100 x 65 kB must not fit in one reply"
        assert got == [(i, f"{i:03d}{value}") for i in range(100)]
    finally:
        await c.close()
        await srv.stop()


# -- restarts (real subprocess) ----------------------------------------------------------------

def _produce_and_commit(port: int) -> dict[int, list[tuple[int, str]]]:
    produced: dict[int, list[tuple[int, str]]] = {0: [], 1: [], 2: []}
    with RtesClient("127.0.0.1", port) as c:
        for i in range(30):
            r = c.produce("orders", f"user{i}", f"event-{i}")
            assert r.offset == len(produced[r.partition])
            produced[r.partition].append((r.offset, f"event-{i}"))
        assert c.request("JOIN", "analytics", "orders", "c1", "assignor=range") == \
            "generation=2 assigned=[0 1 2]"
        assert c.request("SYNC", "analytics", "orders", "c1", "2") == "generation=2 assigned=[0 1 2]"
        assert c.request("COMMIT", "analytics", "orders", "c1", "2", "0", "4") == "committed=true"
        assert c.request("COMMIT", "analytics", "orders", "c1", "2", "2", "7") == "committed=true"
    return produced


def _check_after_restart(port: int, produced: dict[int, list[tuple[int, str]]], data: Path) -> None:
    with RtesClient("127.0.0.1", port) as c:
        for p, recs in produced.items():
            records, hw = c.consume("orders", p, 0)
            assert hw == len(recs) - 1, f"hw of partition {p} was not restored: {hw}"
            assert records == recs
        # New records continue the offsets.
        for p in range(3):
            r = c.produce("orders", key_for(p, prefix="after"), "after-restart")
            assert (r.partition, r.offset, r.hw) == (p, len(produced[p]), len(produced[p]))
        assert c.offset("analytics", "orders", 0) == 4
        assert c.offset("analytics", "orders", 2) == 7
        assert c.offset("analytics", "orders", 1) == 0
        # The group is back with its generation, assignor and member.
        assert c.request("SYNC", "analytics", "orders", "c1", "2") == "generation=2 assigned=[0 1 2]"
        assert c.request("JOIN", "analytics", "orders", "c2") == "generation=3 assigned=[2]"
    groups = json.loads((data / "groups.json").read_text())
    assert groups["analytics"]["topic"] == "orders"
    assert groups["analytics"]["assignor"] == "range"
    offsets = json.loads((data / "offsets.json").read_text())
    assert offsets["analytics"]["orders"] == {"0": 4, "2": 7}


def test_restart_after_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        produced = _produce_and_commit(broker.port)
        assert broker.stop() == 0, broker.log()
        assert (data / ".clean_shutdown").exists()
        groups = json.loads((data / "groups.json").read_text())
        assert groups["analytics"]["generation"] == 2
        assert [m["consumer_id"] for m in groups["analytics"]["members"]] == ["c1"]
        broker.start()
        assert not (data / ".clean_shutdown").exists(), "the marker is consumed at start-up"
        _check_after_restart(broker.port, produced, data)
        assert broker.stop() == 0
    finally:
        broker.stop()


def test_restart_after_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        produced = _produce_and_commit(broker.port)
        assert broker.kill() != 0
        assert not (data / ".clean_shutdown").exists()
        broker.start()
        _check_after_restart(broker.port, produced, data)
        assert broker.stop() == 0
    finally:
        broker.stop()
    assert "no clean-shutdown marker" in broker.log()


def test_second_broker_on_same_data_dir_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        with RtesClient("127.0.0.1", broker.port) as c:
            c.produce("orders", "a", "before")
        second = subprocess.run(
            [sys.executable, "-m", "bayou", "serve", "--data-dir", str(data), "--rtes", "127.0.0.1:0",
             "--cursus", "off", "--http", "off"],
            capture_output=True, timeout=30, text=True)
        assert second.returncode != 0
        assert "in use" in second.stderr, second.stderr
        # The first broker is unaffected, and its data too.
        with RtesClient("127.0.0.1", broker.port) as c:
            c.ping()
            assert c.consume("orders", 1, 0) == ([(0, "before")], 0)
        assert broker.stop() == 0
    finally:
        broker.stop()


def test_sigterm_finishes_in_flight_request(tmp_path: Path) -> None:
    """Graceful stop: a request being served (an acks=all wait) still gets its answer."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s, \
                socket.create_connection(("127.0.0.1", broker.port), timeout=10) as idle:
            s.sendall(b"V1|1|PRODUCE|orders a:v acks=all\n")
            time.sleep(0.3)
            assert idle.sendall(b"V1|i|PING|\n") is None and idle.recv(100) == b"V1|i|OK\n"
            broker.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(1000)
                assert chunk, "connection closed before the in-flight request was answered"
                data += chunk
            assert data == b"V1|1|ERR|REPLICATION_TIMEOUT|acks=all timeout\n"
            assert idle.recv(100) == b"", "idle connections are closed on shutdown"
        assert broker.proc.wait(20) == 0, broker.log()  # type: ignore[union-attr]
        assert (tmp_path / "data" / ".clean_shutdown").exists()
        broker.start()
        with RtesClient("127.0.0.1", broker.port) as c:
            assert c.consume("orders", 1, 0) == ([(0, "v")], 0)
    finally:
        broker.stop()


def test_sigterm_under_pipelined_load_keeps_acknowledged(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    acked: list[tuple[int, int, str]] = []
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            s.sendall(b"".join(f"V1|{i}|PRODUCE|load key{i % 7}:v{i}\n".encode() for i in range(2000)))
            buf = b""
            while len(buf.split(b"\n")) < 50:
                buf += s.recv(65536)
            broker.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            while chunk := s.recv(65536):
                buf += chunk
        lines = buf.split(b"\n")
        assert lines[-1] == b"", "every reply is a whole line"
        for i, line in enumerate(lines[:-1]):
            m = re.fullmatch(rb"V1\|(\d+)\|OK\|partition=(\d) offset=(\d+) hw=\d+", line)
            assert m and int(m[1]) == i, line
            acked.append((int(m[2]), int(m[3]), f"v{i}"))
        assert broker.proc.wait(20) == 0, broker.log()  # type: ignore[union-attr]
        broker.start()
        with RtesClient("127.0.0.1", broker.port) as c:
            for p in range(3):
                records, hw = c.consume("load", p, 0)
                assert [o for o, _v in records] == list(range(hw + 1))
                log = dict(records)
                for q, off, value in acked:
                    if q == p:
                        assert log.get(off) == value
    finally:
        broker.stop()


# -- consumer groups as the SDK drives them ----------------------------------------------------

class SdkConsumer:
    """The reference SDK consumer's wire pattern (rtes.md section 8), without the sleeps."""

    def __init__(self, conn: LineConn, group: str, topic: str, member: str) -> None:
        self.conn, self.group, self.topic, self.member = conn, group, topic, member
        self.generation = 0
        self.assigned: list[int] = []
        self.seen: list[tuple[int, int, str]] = []
        self._cid = 0

    async def call(self, command: str, args: str) -> tuple[bool, str]:
        self._cid += 1
        cid = f"{self.member}-{self._cid}"
        reply = await self.conn.ask(f"V1|{cid}|{command}|{args}")
        head = f"V1|{cid}|"
        assert reply.startswith(head), reply
        body = reply[len(head):]
        if body.startswith("OK|"):
            return True, body[3:]
        assert body.startswith("ERR|GENERATION_MISMATCH|"), reply
        return False, body

    async def join(self) -> None:
        ok, payload = await self.call("JOIN", f"{self.group} {self.topic} {self.member} assignor=round_robin")
        assert ok
        gen = int(payload.split("generation=")[1].split()[0])
        ok, payload = await self.call("SYNC", f"{self.group} {self.topic} {self.member} {gen}")
        assert ok, payload
        self.generation = int(payload.split("generation=")[1].split()[0])
        inner = payload[payload.index("[") + 1:payload.index("]")]
        self.assigned = [int(x) for x in inner.split()]

    async def heartbeat(self) -> bool:
        ok, _ = await self.call("HEARTBEAT", f"{self.group} {self.topic} {self.member} {self.generation}")
        return ok

    async def poll(self) -> int:
        """One pass over the assignment; rejoins first when the heartbeat says so."""
        if not await self.heartbeat():
            await self.join()
        got = 0
        for p in self.assigned:
            ok, payload = await self.call("OFFSET", f"{self.group} {self.topic} {p}")
            start = int(payload.split("offset=")[1])
            ok, payload = await self.call("CONSUME", f"{self.topic} {p} {start}")
            records, _hw = parse_consume(f"V1|x|OK|{payload}")
            if not records:
                continue
            assert records[0][0] == start
            self.seen.extend((p, o, v) for o, v in records)
            got += len(records)
            nxt = records[-1][0] + 1
            ok, payload = await self.call(
                "COMMIT", f"{self.group} {self.topic} {self.member} {self.generation} {p} {nxt}")
            if not ok:
                await self.join()
                return got
            assert payload == "committed=true"
        return got

    async def leave(self) -> None:
        ok, payload = await self.call("LEAVE", f"{self.group} {self.topic} {self.member} {self.generation}")
        assert ok and payload == "left=true"


async def test_sdk_consumer_loop_two_members_and_rebalance(server: BayouServer, conn: LineConn) -> None:
    produced: list[tuple[int, int, str]] = []

    async def produce(n: int, tag: str) -> None:
        for i in range(n):
            reply = await conn.ask(f"V1|p|PRODUCE|events user{i}:{tag}-{i}")
            m = re.fullmatch(r"V1\|p\|OK\|partition=(\d) offset=(\d+) hw=\d+", reply)
            assert m, reply
            produced.append((int(m[1]), int(m[2]), f"{tag}-{i}"))

    await produce(30, "a")
    c1 = SdkConsumer(await LineConn.open(port_of(server)), "grp", "events", "c1")
    c2 = SdkConsumer(await LineConn.open(port_of(server)), "grp", "events", "c2")
    try:
        await c1.join()
        assert (c1.generation, c1.assigned) == (2, [0, 1, 2])
        await c2.join()
        assert (c2.generation, c2.assigned) == (3, [1])
        # c1's heartbeat sees the new generation and it rejoins inside poll(): sorted [c1 c2] -> c1 [0 2].
        await c1.poll()
        assert (c1.generation, c1.assigned) == (3, [0, 2])
        await c2.poll()
        assert {p for p, _o, _v in c1.seen} <= {0, 2} and {p for p, _o, _v in c2.seen} <= {1}
        assert sorted(c1.seen + c2.seen) == sorted(produced), "the two members split the records exactly"
        assert await c1.poll() == 0 and await c2.poll() == 0, "committed offsets: nothing is read twice"

        await produce(30, "b")
        await c2.poll()
        await produce(15, "c")  # c2 never sees these: it leaves first
        await c2.leave()
        await c1.poll()  # heartbeat -> stale generation -> rejoin -> all partitions
        assert (c1.generation, c1.assigned) == (4, [0, 1, 2])
        while await c1.poll():
            pass
        everything = c1.seen + c2.seen
        assert sorted(everything) == sorted(produced)
        assert len(everything) == len(set(everything)), "no record was delivered twice"
        for p in range(3):
            n = sum(1 for q, _o, _v in produced if q == p)
            assert await conn.ask(f"V1|o|OFFSET|grp events {p}") == f"V1|o|OK|offset={n}"
    finally:
        await c1.conn.close()
        await c2.conn.close()


async def test_session_expiry(tmp_path: Path) -> None:
    srv = await start_inprocess(tmp_path / "data", group_session_timeout_ms=300)
    c1 = await LineConn.open(port_of(srv))
    c2 = await LineConn.open(port_of(srv))
    try:
        assert await c1.ask("V1|1|JOIN|g orders c1") == "V1|1|OK|generation=2 assigned=[0 1 2]"
        assert await c2.ask("V1|1|JOIN|g orders c2") == "V1|1|OK|generation=3 assigned=[1]"
        assert await c1.ask("V1|2|SYNC|g orders c1 3") == "V1|2|OK|generation=3 assigned=[0 2]"
        start = time.monotonic()
        # c1 keeps heartbeating; c2 stays silent. Once c2's session is over, c1's heartbeat fails.
        reply = ""
        while time.monotonic() - start < 3:
            reply = await c1.ask("V1|h|HEARTBEAT|g orders c1 3")
            if reply != "V1|h|OK|heartbeat=ok":
                break
            await asyncio.sleep(0.05)
        elapsed = time.monotonic() - start
        assert reply == "V1|h|ERR|GENERATION_MISMATCH|stale generation"
        assert elapsed >= 0.25, f"c2 expired too early ({elapsed:.3f} s)"
        assert await c1.ask("V1|3|SYNC|g orders c1 4") == "V1|3|OK|generation=4 assigned=[0 1 2]"
        assert await c1.ask("V1|4|HEARTBEAT|g orders c1 4") == "V1|4|OK|heartbeat=ok"
        # The expired member is unknown now; joining again makes it a new member.
        assert await c2.ask("V1|5|HEARTBEAT|g orders c2 4") == "V1|5|ERR|GENERATION_MISMATCH|unknown member"
        assert await c2.ask("V1|6|JOIN|g orders c2") == "V1|6|OK|generation=5 assigned=[1]"
    finally:
        await c1.close()
        await c2.close()
        await srv.stop()


# -- ADMIN_* (flux-era) and bayou extensions ---------------------------------------------------

async def test_admin_create_topic_sets_partition_count(conn: LineConn) -> None:
    reply = await conn.ask("V1|1|ADMIN_CREATE_TOPIC|wide 5 1")
    assert re.fullmatch(r"V1\|1\|OK\|topic=wide partitions=5 replication_factor=1 term=1 index=\d+", reply)
    for key in ("alice", "user3", "user9", "a", ""):
        p = fnv1a_32(key.encode()) % 5
        reply = await conn.ask(f"V1|2|PRODUCE|wide {key}:v")
        assert reply.startswith(f"V1|2|OK|partition={p} "), (key, reply)
    assert await conn.ask("V1|3|CONSUME|wide 4 0") == "V1|3|OK|messages=0:v hw=0"  # alice -> 4 of 5
    assert await conn.ask("V1|4|CONSUME|wide 5 0") == "V1|4|ERR|BAD_REQUEST|invalid partition"
    # Same definition again is fine; a different partition count is refused.
    assert (await conn.ask("V1|5|ADMIN_CREATE_TOPIC|wide 5 1")).startswith("V1|5|OK|topic=wide partitions=5")
    reply = await conn.ask("V1|6|ADMIN_CREATE_TOPIC|wide 4 1")
    assert reply.startswith("V1|6|ERR|BAD_REQUEST|"), reply
    assert await conn.ask("V1|7|ADMIN_CREATE_TOPIC|bad 0 1") == "V1|7|ERR|BAD_REQUEST|partitions must be > 0"
    assert await conn.ask("V1|8|ADMIN_CREATE_TOPIC|bad 1 0") == \
        "V1|8|ERR|BAD_REQUEST|replication factor must be > 0"
    assert await conn.ask("V1|9|ADMIN_CREATE_TOPIC|a/b 1 1") == "V1|9|ERR|BAD_REQUEST|invalid topic name"
    assert await conn.ask("V1|m|ADMIN_GET_METADATA|") == "V1|m|OK|topics=[wide] brokers=[0] fenced=[]"


async def test_admin_set_partition_leader(conn: LineConn) -> None:
    assert (await conn.ask("V1|1|ADMIN_CREATE_TOPIC|orders 3 1")).startswith("V1|1|OK|")
    key = key_for(1)
    assert await conn.ask(f"V1|2|PRODUCE|orders {key}:one") == "V1|2|OK|partition=1 offset=0 hw=0"
    reply = await conn.ask("V1|3|ADMIN_SET_PARTITION_LEADER|orders 1 7 7,0")
    assert re.fullmatch(r"V1\|3\|OK\|topic=orders partition=1 leader=7 isr=\[7 0\] term=1 index=\d+", reply)
    assert await conn.ask(f"V1|4|PRODUCE|orders {key}:refused") == \
        "V1|4|ERR|NOT_LEADER|partition leader unavailable on this broker"
    # Other partitions are unaffected, CONSUME is still served, nothing was appended.
    assert (await conn.ask(f"V1|5|PRODUCE|orders {key_for(0)}:p0")).startswith("V1|5|OK|partition=0 ")
    assert await conn.ask("V1|6|CONSUME|orders 1 0") == "V1|6|OK|messages=0:one hw=0"
    reply = await conn.ask("V1|7|ADMIN_SET_PARTITION_LEADER|orders 1 0 0")
    assert reply.startswith("V1|7|OK|topic=orders partition=1 leader=0 isr=[0] ")
    assert await conn.ask(f"V1|8|PRODUCE|orders {key}:two") == "V1|8|OK|partition=1 offset=1 hw=1"
    # Errors.
    assert await conn.ask("V1|9|ADMIN_SET_PARTITION_LEADER|nosuch 0 0 0") == \
        "V1|9|ERR|BAD_REQUEST|topic not found: nosuch"
    assert await conn.ask("V1|9|ADMIN_SET_PARTITION_LEADER|orders 3 0 0") == \
        "V1|9|ERR|BAD_REQUEST|partition not found: topic=orders partition=3"
    assert await conn.ask("V1|9|ADMIN_SET_PARTITION_LEADER|orders -1 0 0") == \
        "V1|9|ERR|BAD_REQUEST|partition must be >= 0"
    assert await conn.ask("V1|9|ADMIN_SET_PARTITION_LEADER|orders 0 -2 0") == \
        "V1|9|ERR|BAD_REQUEST|leader id must be >= -1"
    assert await conn.ask("V1|9|ADMIN_SET_PARTITION_LEADER|orders 0 0 0,x") == \
        "V1|9|ERR|BAD_REQUEST|invalid integer list"


async def test_admin_brokers_fencing_and_metadata(conn: LineConn) -> None:
    def ok(reply: str, payload_re: str) -> None:
        assert re.fullmatch(r"V1\|\w+\|OK\|" + payload_re, reply), reply

    ok(await conn.ask("V1|r1|ADMIN_REGISTER_BROKER|1 host1 9093"),
       r"broker_id=1 host=host1 port=9093 term=1 index=\d+")
    ok(await conn.ask("V1|r2|ADMIN_REGISTER_BROKER|2 host2 9094 3"),
       r"broker_id=2 host=host2 port=9094 term=1 index=\d+")
    ok(await conn.ask("V1|h|ADMIN_BROKER_HEARTBEAT|1"), r"broker_id=1 heartbeat=ok term=1 index=\d+")
    assert await conn.ask("V1|h|ADMIN_BROKER_HEARTBEAT|9") == "V1|h|ERR|BAD_REQUEST|broker not found: 9"
    assert await conn.ask("V1|h|ADMIN_BROKER_HEARTBEAT|-1") == \
        "V1|h|ERR|BAD_REQUEST|invalid broker heartbeat command"
    assert await conn.ask("V1|m|ADMIN_GET_METADATA|") == "V1|m|OK|topics=[] brokers=[0 1 2] fenced=[]"
    ok(await conn.ask("V1|f|ADMIN_FENCE_BROKER|2"), r"broker_id=2 fenced=true term=1 index=\d+")
    assert await conn.ask("V1|f|ADMIN_FENCE_BROKER|9") == "V1|f|ERR|BAD_REQUEST|broker not found: 9"
    assert await conn.ask("V1|f|ADMIN_FENCE_BROKER|-1") == "V1|f|ERR|BAD_REQUEST|broker id must be >= 0"
    assert await conn.ask("V1|m|ADMIN_GET_METADATA|") == "V1|m|OK|topics=[] brokers=[0 1 2] fenced=[2]"
    # Re-registering keeps the fence.
    ok(await conn.ask("V1|r3|ADMIN_REGISTER_BROKER|2 host2 9095"), r"broker_id=2 host=host2 port=9095 .*")
    assert await conn.ask("V1|m|ADMIN_GET_METADATA|") == "V1|m|OK|topics=[] brokers=[0 1 2] fenced=[2]"
    ok(await conn.ask("V1|u|ADMIN_UNFENCE_BROKER|2"), r"broker_id=2 fenced=false term=1 index=\d+")
    assert await conn.ask("V1|m|ADMIN_GET_METADATA|") == "V1|m|OK|topics=[] brokers=[0 1 2] fenced=[]"
    assert await conn.ask("V1|r|ADMIN_REGISTER_BROKER|-1 h 1") == \
        "V1|r|ERR|BAD_REQUEST|broker id must be >= 0"
    assert await conn.ask("V1|r|ADMIN_REGISTER_BROKER|3 h 0") == \
        "V1|r|ERR|BAD_REQUEST|broker port must be > 0"
    # The metadata index only grows.
    idx = [int(r.rsplit("index=", 1)[1]) for r in [await conn.ask("V1|h|ADMIN_BROKER_HEARTBEAT|1")
                                                   for _ in range(3)]]
    assert idx[0] < idx[1] < idx[2]


async def test_admin_reconcile_broker_health(conn: LineConn) -> None:
    assert (await conn.ask("V1|1|ADMIN_REGISTER_BROKER|1 h1 9093")).startswith("V1|1|OK|")
    assert (await conn.ask("V1|2|ADMIN_REGISTER_BROKER|2 h2 9094")).startswith("V1|2|OK|")
    assert await conn.ask("V1|3|ADMIN_RECONCILE_BROKER_HEALTH|60000") == "V1|3|OK|reconciled=0"
    await asyncio.sleep(0.4)
    assert (await conn.ask("V1|4|ADMIN_BROKER_HEARTBEAT|1")).startswith("V1|4|OK|")
    # Broker 2 has been silent for longer than 200 ms: fenced. Broker 0 (this one) never is.
    assert await conn.ask("V1|5|ADMIN_RECONCILE_BROKER_HEALTH|200") == "V1|5|OK|reconciled=1"
    assert await conn.ask("V1|6|ADMIN_GET_METADATA|") == "V1|6|OK|topics=[] brokers=[0 1 2] fenced=[2]"
    assert await conn.ask("V1|7|ADMIN_RECONCILE_BROKER_HEALTH|200") == "V1|7|OK|reconciled=0"
    assert (await conn.ask("V1|8|ADMIN_BROKER_HEARTBEAT|2")).startswith("V1|8|OK|")
    assert await conn.ask("V1|9|ADMIN_RECONCILE_BROKER_HEALTH|200") == "V1|9|OK|reconciled=1"
    assert await conn.ask("V1|a|ADMIN_GET_METADATA|") == "V1|a|OK|topics=[] brokers=[0 1 2] fenced=[]"
    assert await conn.ask("V1|b|ADMIN_RECONCILE_BROKER_HEALTH|0") == \
        "V1|b|ERR|BAD_REQUEST|timeout must be > 0"


async def test_admin_elect_topic_leaders_after_fencing(conn: LineConn) -> None:
    assert (await conn.ask("V1|1|ADMIN_CREATE_TOPIC|orders 3 2")).startswith("V1|1|OK|")
    assert (await conn.ask("V1|2|ADMIN_REGISTER_BROKER|1 h1 9093")).startswith("V1|2|OK|")
    key = key_for(0)
    assert (await conn.ask("V1|3|ADMIN_SET_PARTITION_LEADER|orders 0 1 1,0")).startswith("V1|3|OK|")
    assert await conn.ask(f"V1|4|PRODUCE|orders {key}:x") == \
        "V1|4|ERR|NOT_LEADER|partition leader unavailable on this broker"
    # Nothing to elect while broker 1 is alive.
    assert await conn.ask("V1|5|ADMIN_ELECT_TOPIC_LEADERS|orders") == "V1|5|OK|topic=orders elected_changes=0"
    assert (await conn.ask("V1|6|ADMIN_FENCE_BROKER|1")).startswith("V1|6|OK|broker_id=1 fenced=true")
    assert await conn.ask("V1|7|ADMIN_GET_METADATA|") == "V1|7|OK|topics=[orders] brokers=[0 1] fenced=[1]"
    assert await conn.ask("V1|8|ADMIN_ELECT_TOPIC_LEADERS|orders") == "V1|8|OK|topic=orders elected_changes=1"
    assert await conn.ask(f"V1|9|PRODUCE|orders {key}:x") == "V1|9|OK|partition=0 offset=0 hw=0"
    assert await conn.ask("V1|a|ADMIN_ELECT_TOPIC_LEADERS|orders") == "V1|a|OK|topic=orders elected_changes=0"
    assert await conn.ask("V1|b|ADMIN_ELECT_TOPIC_LEADERS|nosuch") == \
        "V1|b|ERR|BAD_REQUEST|topic not found: nosuch"


async def test_admin_describe_and_delete_topic(server: BayouServer, conn: LineConn, tmp_path: Path) -> None:
    assert (await conn.ask("V1|1|ADMIN_CREATE_TOPIC|logs 2 1 retention.ms=3600000")).startswith("V1|1|OK|")
    k0, k1 = key_for(0, 2), key_for(1, 2)
    for i in range(3):
        assert (await conn.ask(f"V1|p|PRODUCE|logs {k1}:v{i}")).startswith("V1|p|OK|partition=1 ")
    reply = await conn.ask("V1|2|ADMIN_DESCRIBE_TOPIC|logs")
    m = re.fullmatch(r"V1\|2\|OK\|topic=logs partitions=2 replication_factor=1 log_start=\[0 0\] "
                     r"log_end=\[0 3\] hw=\[-1 2\] size_bytes=\[0 (\d+)\] roles=\[leader leader\] "
                     r"status=\[ok ok\] "
                     r"config=retention.ms=3600000", reply)
    assert m and int(m[1]) > 0, reply
    assert await conn.ask("V1|3|ADMIN_DESCRIBE_TOPIC|nosuch") == \
        "V1|3|ERR|BAD_REQUEST|topic not found: nosuch"
    # A follower role shows up in the description.
    assert await conn.ask("V1|4|SET_PARTITION_ROLE|logs 0 follower") == \
        "V1|4|OK|topic=logs partition=0 role=follower hw=-1"
    assert "roles=[follower leader]" in await conn.ask("V1|5|ADMIN_DESCRIBE_TOPIC|logs")
    reply = await conn.ask("V1|6|ADMIN_DELETE_TOPIC|logs")
    assert re.fullmatch(r"V1\|6\|OK\|topic=logs deleted=true term=1 index=\d+", reply), reply
    assert not (tmp_path / "data" / "topics" / "logs").exists()
    assert await conn.ask("V1|7|ADMIN_DELETE_TOPIC|logs") == "V1|7|ERR|BAD_REQUEST|topic not found: logs"
    assert await conn.ask("V1|8|ADMIN_GET_METADATA|") == "V1|8|OK|topics=[] brokers=[0] fenced=[]"
    assert await conn.ask("V1|9|CONSUME|logs 1 0") == "V1|9|OK|messages= hw=-1"
    # Producing again recreates the topic with the defaults, from offset 0.
    reply = await conn.ask(f"V1|a|PRODUCE|logs {k0}:fresh")
    assert reply == f"V1|a|OK|partition={fnv1a_32(k0.encode()) % 3} offset=0 hw=0"
    assert "partitions=3 " in await conn.ask("V1|b|ADMIN_DESCRIBE_TOPIC|logs")


async def test_set_partition_role(conn: LineConn) -> None:
    key = key_for(2)
    assert await conn.ask(f"V1|1|PRODUCE|orders {key}:a") == "V1|1|OK|partition=2 offset=0 hw=0"
    assert await conn.ask("V1|2|SET_PARTITION_ROLE|orders 2 FOLLOWER") == \
        "V1|2|OK|topic=orders partition=2 role=follower hw=0"
    assert await conn.ask(f"V1|3|PRODUCE|orders {key}:b") == \
        "V1|3|ERR|NOT_LEADER|partition leader unavailable on this broker"
    assert await conn.ask("V1|4|REPLICA_FETCH|orders 2 1 0") == "V1|4|ERR|BAD_REQUEST|partition is not leader"
    assert await conn.ask("V1|5|CONSUME|orders 2 0") == "V1|5|OK|messages=0:a hw=0"
    assert await conn.ask("V1|6|SET_PARTITION_ROLE|orders 2 boss") == "V1|6|ERR|BAD_REQUEST|invalid role"
    assert await conn.ask("V1|7|SET_PARTITION_ROLE|orders 2 leader") == \
        "V1|7|OK|topic=orders partition=2 role=leader hw=0"
    assert await conn.ask(f"V1|8|PRODUCE|orders {key}:b") == "V1|8|OK|partition=2 offset=1 hw=1"
    assert await conn.ask("V1|9|SET_PARTITION_ROLE|orders 3 leader") == \
        "V1|9|ERR|BAD_REQUEST|partition not found: topic=orders partition=3"


# -- connection limit --------------------------------------------------------------------------

async def test_max_connections(tmp_path: Path) -> None:
    cfg = ServerConfig(broker=BrokerConfig(data_dir=tmp_path / "data"),
                       listeners={"rtes": ("127.0.0.1", 0)}, max_connections=3)
    srv = BayouServer(cfg)
    await srv.start()
    conns: list[LineConn] = []
    try:
        for i in range(3):
            c = await LineConn.open(port_of(srv))
            conns.append(c)
            assert await c.ask(f"V1|{i}|PING|") == f"V1|{i}|OK"
        extra = await LineConn.open(port_of(srv))
        try:
            await extra.send("V1|x|PING|")
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                await extra.recv(timeout=5)
        finally:
            await extra.close()
        for i, c in enumerate(conns):
            assert await c.ask(f"V1|again{i}|PING|") == f"V1|again{i}|OK"
        # Closing one frees a slot.
        await conns.pop().close()
        deadline = time.monotonic() + 5
        while True:
            c = await LineConn.open(port_of(srv))
            try:
                await c.send("V1|y|PING|")
                if await c.recv(timeout=5) == b"V1|y|OK":
                    conns.append(c)
                    break
            except (ConnectionError, asyncio.IncompleteReadError):
                await c.close()
                assert time.monotonic() < deadline, "the freed slot was never reused"
                await asyncio.sleep(0.02)
    finally:
        for c in conns:
            await c.close()
        await srv.stop()


async def test_stop_answers_in_flight_and_refuses_new(tmp_path: Path) -> None:
    srv = await start_inprocess(tmp_path / "data")
    port = port_of(srv)
    c = await LineConn.open(port)
    assert await c.ask("V1|1|PRODUCE|orders a:v") == "V1|1|OK|partition=1 offset=0 hw=0"
    await c.close()
    await srv.stop()
    assert (tmp_path / "data" / ".clean_shutdown").exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
