"""Incremental fetch sessions (KIP-227) on bayou's Kafka front end: what they save a consumer of
many partitions. Prints figures; never passes or fails.

kafka-python (which uses sessions by default) reads a topic of ``--partitions`` partitions
that receives ``--rate`` messages/s spread over them, once with sessions and once without
(``enable_incremental_fetch_sessions``), alternating, against one broker subprocess
(fsync=never). Each run reports the broker's CPU time per Fetch request and in total, the Fetch
requests it answered (from /metrics), and its CPU per record delivered. The broker's CPU
includes the producer's requests, the same in both runs.

    .venv/bin/python benchmarks/kafka_sessions_bench.py
    .venv/bin/python benchmarks/kafka_sessions_bench.py --partitions 256 --rate 2000 --seconds 10
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import kafka  # noqa: E402

from support.brokers import BrokerProcess  # noqa: E402
from support.http import scrape, total, value  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pid(b: BrokerProcess) -> int:
    assert b.proc is not None
    return b.proc.pid


def run(b: BrokerProcess, partitions: int, rate: int, seconds: float, sessions: bool) -> dict[str, float]:
    bootstrap = f"127.0.0.1:{b.port}"
    topic = f"fs-{uuid.uuid4().hex[:8]}"
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([kafka.admin.NewTopic(topic, partitions, 1)])
    admin.close()
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=topic,
                                   auto_offset_reset="earliest", fetch_max_wait_ms=500,
                                   enable_incremental_fetch_sessions=sessions)
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        consumer.poll(100)
        if time.monotonic() > deadline:
            raise SystemExit("no assignment")
    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        p = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
        start = time.perf_counter()
        i = 0
        while not stop.is_set():
            wait = start + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            p.send(topic, b"x" * 100, partition=i % partitions)
            i += 1
        p.flush(30)
        sent[0] = i
        p.close()

    fetches0 = total(scrape(b.http_port), "bayou_requests_total", protocol="kafka", request="FETCH")
    cpu0 = _cpu_seconds(_pid(b))
    t = threading.Thread(target=produce)
    t.start()
    got = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got += sum(len(r) for r in consumer.poll(100).values())
    stop.set()
    t.join()
    deadline = time.monotonic() + 30
    while got < sent[0] and time.monotonic() < deadline:
        got += sum(len(r) for r in consumer.poll(100).values())
    cpu = _cpu_seconds(_pid(b)) - cpu0
    samples = scrape(b.http_port)
    fetches = total(samples, "bayou_requests_total", protocol="kafka", request="FETCH") - fetches0
    held = value(samples, "bayou_kafka_fetch_session_partitions")
    consumer.close()
    if got < sent[0]:
        raise SystemExit(f"read {got} of {sent[0]}")
    return {"fetches": fetches, "cpu": cpu, "records": got, "held": held}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=128)
    ap.add_argument("--rate", type=int, default=1000, help="messages/s over all partitions")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"kafka-python {kafka.__version__} reading {args.partitions} partitions, {args.rate:,} msg/s "
          f"of 100 B, {args.seconds:g} s per run, fsync=never, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="fs-bench-") as tmp:
        b = BrokerProcess(Path(tmp) / "data", fsync="never").start(timeout=90)
        try:
            for r in range(args.rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                for sessions in order:
                    f = run(b, args.partitions, args.rate, args.seconds, sessions)
                    label = "sessions   " if sessions else "no sessions"
                    per_fetch = f["cpu"] / max(1, f["fetches"]) * 1e6
                    per_record = f["cpu"] / max(1, f["records"]) * 1e6
                    print(f"round {r + 1} {label}: {f['records']:>8,.0f} records  "
                          f"{f['fetches']:>6,.0f} fetches  broker CPU {f['cpu']:5.2f} s "
                          f"({per_fetch:6.0f} us/fetch, {per_record:5.0f} us/record)", flush=True)
        finally:
            with contextlib.suppress(Exception):
                b.stop()


if __name__ == "__main__":
    main()
