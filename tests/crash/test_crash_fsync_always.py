"""The durability promise under ``--fsync always``: a record acknowledged with OK survives a SIGKILL
of the broker at any moment, at exactly the offset it was acknowledged with, and the broker never
serves a torn or corrupt record after recovering.

Ten rounds: four producer threads write unique values while the broker is killed at a random moment;
the broker restarts on the same data directory and port; the whole log is then read back and checked
against everything that was acknowledged so far. The same with producers that pipeline (windows of
PRODUCE lines on one connection, served as they arrive and sharing fsyncs, server/frames.py).
"""

from __future__ import annotations

import random
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bayou.client.rtes import RtesClient, RtesClientError
from bayou.server.rtes import CONSUME_MAX_RECORDS
from support.brokers import BrokerProcess

pytestmark = pytest.mark.slow

TOPIC = "durable"
PARTITIONS = 3
ROUNDS = 10
THREADS = 4
VALUE_RE = re.compile(r"r(\d+)-t(\d+)-(\d+)\Z")
REPLY_RE = re.compile(rb"V1\|(?P<cid>[^|]+)\|OK\|messages=(?P<msgs>\S*) hw=(?P<hw>-?\d+)\Z")


@dataclass
class Ledger:
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: set[str] = field(default_factory=set)
    acked: dict[tuple[int, int], str] = field(default_factory=dict)  # (partition, offset) -> value
    errors: list[str] = field(default_factory=list)


def producer(port: int, rnd: int, tid: int, ledger: Ledger, stop: threading.Event) -> None:
    n = 0
    try:
        with RtesClient("127.0.0.1", port, timeout=10) as c:
            while not stop.is_set():
                value = f"r{rnd}-t{tid}-{n}"
                key = f"key{(tid * 7 + n) % 23}"  # spreads over the partitions
                with ledger.lock:
                    ledger.sent.add(value)
                try:
                    r = c.produce(TOPIC, key, value)
                except RtesClientError as exc:  # an ERR reply: never expected here
                    with ledger.lock:
                        ledger.errors.append(f"{value}: {exc}")
                    return
                with ledger.lock:  # acknowledged: recorded only after the OK line
                    prev = ledger.acked.setdefault((r.partition, r.offset), value)
                    if prev != value:
                        ledger.errors.append(f"offset {r.partition}/{r.offset} acknowledged twice: "
                                             f"{prev} and {value}")
                n += 1
    except OSError:  # ConnectionError, reset, timeout: the broker was killed
        return


PRODUCED_RE = re.compile(rb"V1\|(?P<cid>[^|]+)\|OK\|partition=(?P<p>\d+) offset=(?P<o>\d+) hw=-?\d+\Z")
WINDOW = 32


def pipelining_producer(port: int, rnd: int, tid: int, ledger: Ledger, stop: threading.Event) -> None:
    """Windows of ``WINDOW`` PRODUCE lines written at once on one connection, their replies read as
    they come (in order); each acknowledged value recorded with the offset its reply names."""
    n = 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            lines = sock.makefile("rb")
            while not stop.is_set():
                window = []
                for _ in range(WINDOW):
                    value = f"r{rnd}-t{tid}-{n}"
                    window.append((f"c{n}", value, f"key{(tid * 7 + n) % 23}"))
                    n += 1
                with ledger.lock:
                    ledger.sent.update(v for _c, v, _k in window)
                sock.sendall(b"".join(f"V1|{c}|PRODUCE|{TOPIC} {k}:{v}\n".encode() for c, v, k in window))
                for cid, value, _k in window:
                    raw = lines.readline()
                    if not raw.endswith(b"\n"):
                        return  # the broker was killed
                    m = PRODUCED_RE.match(raw.rstrip(b"\n"))
                    with ledger.lock:
                        if m is None or m["cid"].decode() != cid:
                            ledger.errors.append(f"{value}: reply {raw[:200]!r}")
                            return
                        key = (int(m["p"]), int(m["o"]))
                        prev = ledger.acked.setdefault(key, value)
                        if prev != value:
                            ledger.errors.append(f"offset {key} acknowledged twice: {prev} and {value}")
    except OSError:
        return


def read_partition(client: RtesClient, partition: int) -> tuple[list[tuple[int, str]], int]:
    """Every record of one partition, in CONSUME-sized steps; each reply must parse strictly."""
    out: list[tuple[int, str]] = []
    offset = 0
    hw = -1
    while True:
        raw = client.raw(f"V1|read-{partition}-{offset}|CONSUME|{TOPIC} {partition} {offset}".encode())
        m = REPLY_RE.match(raw)
        assert m, f"unparseable CONSUME reply: {raw[:300]!r}"
        hw = int(m["hw"])
        batch = []
        for item in m["msgs"].split(b",") if m["msgs"] else []:
            off, sep, value = item.partition(b":")
            assert sep and off.isdigit(), f"corrupt record item {item[:100]!r}"
            text = value.decode("utf-8")
            assert VALUE_RE.match(text), f"corrupt value at {partition}/{off.decode()}: {value[:100]!r}"
            batch.append((int(off), text))
        assert len(batch) <= CONSUME_MAX_RECORDS
        out.extend(batch)
        if not batch or batch[-1][0] >= hw:
            break
        offset = batch[-1][0] + 1
    return out, hw


def verify(port: int, ledger: Ledger, when: str) -> int:
    with ledger.lock:
        acked = dict(ledger.acked)
        sent = set(ledger.sent)
    total = 0
    seen: set[str] = set()
    with RtesClient("127.0.0.1", port, timeout=30) as c:
        for p in range(PARTITIONS):
            records, hw = read_partition(c, p)
            offsets = [o for o, _v in records]
            assert offsets == list(range(len(records))), f"{when}: offsets of partition {p} not contiguous"
            assert hw == len(records) - 1, f"{when}: partition {p} hw={hw} but {len(records)} records"
            log = dict(records)
            for (q, off), value in acked.items():
                if q != p:
                    continue
                assert log.get(off) == value, \
                    f"{when}: acknowledged {value} at {p}/{off} is {log.get(off, 'missing')}"
            for _o, v in records:
                assert v not in seen, f"{when}: value {v} appears twice"
                seen.add(v)
                assert v in sent, f"{when}: value {v} was never sent"
            total += len(records)
    return total


@pytest.mark.parametrize("produce", [producer, pipelining_producer], ids=["one-by-one", "pipelined"])
def test_acknowledged_records_survive_sigkill(tmp_path: Path, produce: object) -> None:
    rng = random.Random(20240601)
    data = tmp_path / "data"
    broker = BrokerProcess(data, fsync="always").start()
    ledger = Ledger()
    started = time.monotonic()
    try:
        for rnd in range(ROUNDS):
            stop = threading.Event()
            threads = [threading.Thread(target=produce, args=(broker.port, rnd, t, ledger, stop),
                                        daemon=True) for t in range(THREADS)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.2, 0.8))
            broker.kill()  # SIGKILL mid-production
            stop.set()
            for t in threads:
                t.join(15)
                assert not t.is_alive(), "a producer did not notice the broker was gone"
            assert not ledger.errors, ledger.errors
            assert not (data / ".clean_shutdown").exists()
            broker.start()
            verify(broker.port, ledger, f"after round {rnd}")
        total = verify(broker.port, ledger, "at the end")
        assert broker.stop() == 0, broker.log()
        # A clean restart changes nothing either.
        broker.start()
        assert verify(broker.port, ledger, "after a clean restart") == total
        assert broker.stop() == 0
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill()
    log = broker.log_path.read_text(errors="replace")
    # Every restart after a kill noticed it; torn tails (when a kill cut one) were reported.
    assert log.count("no clean-shutdown marker") >= ROUNDS
    cuts = log.count("torn or corrupt tail")
    print(f"{len(ledger.acked)} acknowledged of {len(ledger.sent)} sent, {total} in the log, "
          f"{cuts} torn tail(s) recovered, {time.monotonic() - started:.1f} s")
    assert len(ledger.acked) > ROUNDS * THREADS, "the producers hardly got anything through"
    assert total >= len(ledger.acked)
