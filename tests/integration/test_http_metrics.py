"""The broker's HTTP port (issue 16 items 1-3): /metrics after known traffic on V1, Cursus and
Iggy, /health and /ready, promtool's lint, and bad input answered with 4xx, against a real
``bayou serve`` subprocess."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from bayou.client import Client
from support.brokers import BrokerProcess
from support.cluster import v1
from support.cursus import FrameConn
from support.http import get, get_json, scrape, scrape_text, total, value, wait_for


@pytest.fixture
def broker(tmp_path: Path):  # type: ignore[no-untyped-def]
    b = BrokerProcess(tmp_path / "data").start()
    try:
        yield b
    finally:
        b.stop()


async def _cursus_publish(port: int, topic: str, n: int) -> list[str]:
    conn = await FrameConn.open(port)
    try:
        replies = [await conn.command(f"PUBLISH topic={topic} acks=1 producerId=p partition=0 message=c{i}")
                   for i in range(n)]
        replies.append(await conn.command("NO_SUCH_COMMAND x"))
        return replies
    finally:
        await conn.close()


def test_metrics_after_known_traffic(broker: BrokerProcess) -> None:
    port = broker.http_port
    assert "|OK|" in v1(broker.port, "V1|1|ADMIN_CREATE_TOPIC|orders 3 1")
    # V1: 5 produces to partition p (key "a"), one unknown command, one consume of everything
    produced = [v1(broker.port, f"V1|{i}|PRODUCE|orders a:v{i}") for i in range(5)]
    assert all("|OK|" in r for r in produced), produced
    p_v1 = int(produced[0].split("partition=")[1].split()[0])
    assert p_v1 == 1  # fnv1a("a") % 3: the other protocols write partitions 0 and 2
    assert "|ERR|" in v1(broker.port, "V1|9|BOGUS|x")
    # Cursus: 4 publishes to partition 0 and one unknown command
    replies = asyncio.run(_cursus_publish(broker.cursus_port, "orders", 4))
    assert all('"status":"OK"' in r for r in replies[:4]) and replies[4].startswith("ERROR"), replies
    # Iggy (the SDK): 3 records to partition 2, a group commit at offset 1 of partition 2
    with Client(f"127.0.0.1:{broker.iggy_port}", username="iggy", password="iggy") as c:
        c.send("orders", 2, [b"i0", b"i1", b"i2"])
        c.commit("g1", "orders", {2: 1})
    consumed = v1(broker.port, f"V1|20|CONSUME|orders {p_v1} 0")
    assert consumed.count(":v") == 5, consumed

    s = scrape(port)
    assert value(s, "bayou_requests_total", protocol="rtes", request="Produce") == 5
    assert value(s, "bayou_requests_total", protocol="rtes", request="Consume") == 1
    assert value(s, "bayou_request_errors_total", protocol="rtes", request="Produce") == 0
    assert value(s, "bayou_request_errors_total", protocol="rtes", request="unknown") == 1
    assert value(s, "bayou_requests_total", protocol="cursus", request="PUBLISH") == 4
    assert value(s, "bayou_request_errors_total", protocol="cursus", request="unknown") == 1
    assert value(s, "bayou_requests_total", protocol="iggy", request="SEND_MESSAGES") >= 1
    assert value(s, "bayou_request_errors_total", protocol="iggy", request="SEND_MESSAGES") == 0
    rtes_requests = total(s, "bayou_requests_total", protocol="rtes")
    assert value(s, "bayou_request_duration_seconds_count", protocol="rtes") == rtes_requests
    assert value(s, "bayou_request_duration_seconds_bucket", protocol="rtes", le="+Inf") == rtes_requests

    # per topic: every record in, what V1 consumed out; the bytes in are the stored bytes
    assert value(s, "bayou_topic_records_in_total", topic="orders") == 5 + 4 + 3
    assert value(s, "bayou_topic_bytes_in_total", topic="orders") == total(
        s, "bayou_partition_size_bytes", topic="orders")
    assert value(s, "bayou_topic_records_out_total", topic="orders") == 5
    assert value(s, "bayou_topic_bytes_out_total", topic="orders") > 0
    assert value(s, "bayou_topic_partitions", topic="orders") == 3
    ends = {p: value(s, "bayou_partition_log_end_offset", topic="orders", partition=p) for p in range(3)}
    assert ends == {0: 4, 1: 5, 2: 3}, ends
    for p in range(3):
        assert value(s, "bayou_partition_log_start_offset", topic="orders", partition=p) == 0
        assert value(s, "bayou_partition_segments", topic="orders", partition=p) == 1
        assert value(s, "bayou_partition_high_watermark", topic="orders", partition=p) == ends[p]
    # the group's commit and lag on partition 2 (log end 3 + whatever else hashed there)
    groups = {dict(lbl)["group"] for n, lbl in s if n == "bayou_consumer_group_committed_offset"}
    (group,) = groups
    committed = value(s, "bayou_consumer_group_committed_offset", group=group, topic="orders", partition=2)
    assert group == "iggy.orders.g1" and committed == 1  # the Iggy front end's name for group g1
    assert value(s, "bayou_consumer_group_lag", group=group, topic="orders", partition=2) == 3 - 1
    assert value(s, "bayou_consumer_group_lag_sum", group=group, topic="orders") == 2
    # storage: every produce under fsync=always waited for a group commit
    assert value(s, "bayou_log_fsync_duration_seconds_count") >= 1
    assert value(s, "bayou_log_group_commit_records_sum") >= 12
    assert value(s, "bayou_recovery_done") == 1
    assert value(s, "bayou_ready") == 1
    assert value(s, "bayou_inflight_request_bytes_max") == 512 * 1024 * 1024
    assert value(s, "process_open_fds") > 0


def test_open_connections_per_protocol(broker: BrokerProcess) -> None:
    socks = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(3)]
    try:
        wait_for(lambda: value(scrape(broker.http_port), "bayou_connections", protocol="rtes") == 3, 10,
                 "three open V1 connections")
        assert value(scrape(broker.http_port), "bayou_connections", protocol="tank") == 0
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: value(scrape(broker.http_port), "bayou_connections", protocol="rtes") == 0, 10,
             "the V1 connections gone")


def test_health_and_ready(broker: BrokerProcess) -> None:
    assert get_json(broker.http_port, "/health") == (200, {"status": "alive"})
    assert get_json(broker.http_port, "/ready") == (200, {"ready": True, "status": "ready"})


def _many_partitions(data: Path, topic: str, partitions: int) -> None:
    """A data directory whose one topic has ``partitions`` empty partitions (written directly: a
    broker opens them all at start)."""
    tdir = data / "topics" / topic
    tdir.mkdir(parents=True)
    (tdir / "topic.json").write_text(f'{{"name": "{topic}", "partitions": {partitions}, "config": {{}}}}')


def test_ready_is_503_until_recovery_is_done(tmp_path: Path) -> None:
    """The HTTP port opens before the logs: /health is 200 and /ready 503 with the recovery's
    progress while 2,000 partitions are opened, then 200."""
    data = tmp_path / "data"
    _many_partitions(data, "wide", 2_000)
    b = BrokerProcess(data)
    b.start(wait=False)
    try:
        early = wait_for(lambda: _try_get_json(b.http_port, "/ready"), 30, "the HTTP port")
        assert isinstance(early, tuple)
        status, doc = early
        assert status == 503, doc
        assert doc["status"] == "recovering" and doc["ready"] is False, doc
        assert doc["partitions_total"] in (0, 2_000), doc
        assert get_json(b.http_port, "/health") == (200, {"status": "alive"})
        wait_for(lambda: get_json(b.http_port, "/ready")[0] == 200, 60, "/ready 200")
        s = scrape(b.http_port)
        assert value(s, "bayou_recovery_partitions") == 2_000
        assert value(s, "bayou_recovery_partitions_done") == 2_000
        assert value(s, "bayou_ready") == 1
    finally:
        b.stop()


def _try_get_json(port: int, path: str) -> tuple[int, dict[str, object]] | None:
    try:
        return get_json(port, path)
    except OSError:
        return None


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bayou.toml"
    path.write_text(text)
    return path


def test_bad_requests_get_4xx_never_a_traceback(broker: BrokerProcess) -> None:
    port = broker.http_port
    assert get(port, "/nope")[0] == 404
    assert get(port, "/metrics?x=1")[0] == 200
    for raw in (b"\x00\x01\x02 garbage\r\n\r\n", b"GET /metrics HTTP/9.9\r\n\r\n",
                b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n",
                b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"b" * 20_000 + b"\r\n\r\n",
                b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
                b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"):
        reply = _raw(port, raw)
        status = int(reply.split(b" ", 2)[1])
        assert 400 <= status < 500, reply[:200]
        assert b"Traceback" not in reply
    s = scrape(port)
    assert value(s, "bayou_requests_total", protocol="http", request="/metrics") >= 1
    assert value(s, "bayou_request_errors_total", protocol="http", request="unknown") >= 1
    assert get(port, "/health")[0] == 200  # still serving
    assert "Traceback" not in broker.log()


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out:
                break
        return out


def test_http_connections_are_bounded_like_every_listener(tmp_path: Path) -> None:
    """The shared admission: with max_connections_per_ip = 2 and two V1 connections open, the
    HTTP port refuses a third connection from the same address; a silent or slow HTTP client is
    closed after idle_timeout_s."""
    cfg = _config(tmp_path, "max_connections_per_ip = 2\nidle_timeout_s = 1.0\nrequest_timeout_s = 1.0\n")
    b = BrokerProcess(tmp_path / "data", "--config", str(cfg)).start()
    try:
        held: list[socket.socket] = []

        def ping(s: socket.socket, i: int) -> bool:
            try:
                s.sendall(b"V1|p%d|PING|\n" % i)
                return s.recv(100).startswith(b"V1|p%d|OK" % i)
            except OSError:
                return False

        def hold_one() -> bool:
            # the probes of the start may still hold a slot for a moment: a refused connection
            # (closed at once) is retried until two are open and answering
            s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
            if ping(s, len(held)):
                held.append(s)
                return True
            s.close()
            return False

        for _ in range(2):
            wait_for(hold_one, 10, "a V1 connection accepted")

        def refused() -> bool:
            # the held connections must stay open: each check pings on them first, so the 1 s
            # idle timeout never closes them (under load a check can take longer than that)
            assert all(ping(s, i) for i, s in enumerate(held)), "a held connection was closed"
            return "refused" in _closed_reply(b.http_port)

        wait_for(refused, 10, "the HTTP connection refused")
        for s in held:
            s.close()
        wait_for(lambda: _try_get_json(b.http_port, "/health"), 10, "/health once the slots are free")
        with socket.create_connection(("127.0.0.1", b.http_port), timeout=10) as s:
            s.sendall(b"GET /metr")  # never completed
            started = time.monotonic()
            assert s.recv(100) == b""
            assert time.monotonic() - started < 5
        wait_for(lambda: "no complete request in time" in b.log(), 10, "the closing logged")
    finally:
        b.stop()


def test_an_http_connection_closed_without_a_request_frees_its_slot(tmp_path: Path) -> None:
    """A client that connects to the HTTP port and closes without a request (a port check, a
    load balancer's TCP probe) gives its per-address slot back at once, as on every other port:
    with max_connections_per_ip = 2 and a long idle timeout, three such connections in a row
    leave room for two V1 connections right after."""
    cfg = _config(tmp_path, "max_connections_per_ip = 2\nidle_timeout_s = 60.0\n")
    b = BrokerProcess(tmp_path / "data", "--config", str(cfg)).start()
    try:
        wait_for(lambda: _try_get_json(b.http_port, "/health"), 10, "/health answering")
        for _ in range(3):
            socket.create_connection(("127.0.0.1", b.http_port), timeout=5).close()
        held: list[socket.socket] = []
        try:
            def two_open() -> bool:
                s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
                try:
                    s.sendall(b"V1|p|PING|\n")
                    if s.recv(100).startswith(b"V1|p|OK"):
                        held.append(s)
                        return len(held) == 2
                except OSError:
                    pass
                s.close()
                return False

            # well within the 60 s idle timeout the old code held the slots for
            wait_for(two_open, 10, "two V1 connections admitted")
        finally:
            for s in held:
                s.close()
    finally:
        b.stop()


def _closed_reply(port: int) -> str:
    """'refused' when the server closes a new connection before answering a request."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            return "answered" if s.recv(100) else "refused"
    except (ConnectionError, TimeoutError):
        return "refused"


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian's prometheus package; make test installs it)")
def test_promtool_check_metrics(broker: BrokerProcess) -> None:
    v1(broker.port, "V1|1|PRODUCE|lint k:v")
    text = scrape_text(broker.http_port)
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_text_logs_carry_the_structured_fields(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", "--log-format", "text").start()
    try:
        wait_for(lambda: "bayou ready" in b.log(), 10, "the ready line")
        log = b.log()
        assert f"listening protocol=rtes host=127.0.0.1 port={b.port}" in log, log
        assert f"listening protocol=http host=127.0.0.1 port={b.http_port}" in log, log
    finally:
        b.stop()


def test_recovery_reports_what_it_validated_and_cut(tmp_path: Path) -> None:
    """After a kill and a torn tail (100 bytes of garbage after the last batch), the start-up logs
    what it validated, how long it took and what it cut, and /metrics carries the same."""
    data = tmp_path / "data"
    b = BrokerProcess(data, "--log-format", "text").start()
    try:
        for i in range(3):
            assert "|OK|" in v1(b.port, f"V1|{i}|PRODUCE|torn a:v{i}")
    finally:
        b.kill()
    (segment,) = [p for p in (data / "topics" / "torn").glob("*/*.log") if p.stat().st_size]
    stored = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(b"\xee" * 100)
    b.start()
    try:
        s = scrape(b.http_port)
        assert value(s, "bayou_recovery_truncated_bytes") == 100
        assert value(s, "bayou_recovery_validated_bytes") == stored
        assert value(s, "bayou_recovery_partitions_done") == value(s, "bayou_recovery_partitions") == 3
        log = b.log()
        assert "cut 100 bytes of torn or corrupt tail" in log, log
        assert "validated 3 partitions of 1 topics in " in log, log
        assert f"validated_bytes={stored} " in log and "cut_bytes=100 cut_partitions=1" in log, log
    finally:
        b.stop()
