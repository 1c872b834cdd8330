"""Kafka front end benchmark: confluent-kafka (librdkafka) producing into and consuming from bayou.

Prints figures; never passes or fails. Targets from the issue (100-byte messages, loopback):
- producer, 1,000,000 messages, linger 5 ms, batches up to 1,000: >= 1,500,000 msg/s with
  fsync=never, and with fsync=always at least the TANK path's figure (measured in the same run,
  against the same broker, with tank_bench's client: ``--no-tank`` skips it);
- consumer reading the 1,000,000 back: >= 3,000,000 msg/s (and kcat, librdkafka in C, reading them
  too: what the broker serves when the client is not Python);
- end-to-end latency at a steady 10,000 msg/s (one message per produce request, linger 0, acks=1,
  a consumer long-polling with fetch.wait.max.ms 500): p99 <= 2 ms.

One broker subprocess per fsync policy (``bayou serve --kafka HOST:PORT --tank HOST:PORT``, every
other listener off). The producer is timed from its first ``produce()`` to the end of ``flush()``
(every delivery report in); the consumer from ``subscribe`` to the last message of the topic. The
latency run stamps each message with ``time.perf_counter_ns()`` (CLOCK_MONOTONIC, one clock for
the machine) at ``produce()``; the consumer, in a process of its own, measures when ``poll()`` hands
the message over.

Tansu, the Kafka-API broker in Rust the issue names as a peer: the PyPI name ``tansu`` (1.0.0) is
now an unrelated project (Soroban versioning), so no Tansu column; ``--peer HOST:PORT`` runs the
same producer and consumer workloads against any Kafka-API broker already running there.

    .venv/bin/python benchmarks/kafka_bench.py
    .venv/bin/python benchmarks/kafka_bench.py --messages 200000 --fsync never --no-tank
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(data: Path, kafka_port: int, tank_port: int, fsync: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bayou", "serve", "--data-dir", str(data), "--rtes", "off", "--cursus", "off",
         "--iggy", "off", "--http", "off", "--kafka", f"127.0.0.1:{kafka_port}",
         "--tank", f"127.0.0.1:{tank_port}", "--advertised-host", "127.0.0.1", "--fsync", fsync,
         "--log-level", "warning"],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"broker exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", kafka_port), 0.5):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("broker did not start")


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for f in futures.values():
        f.result(30)


def produce(bootstrap: str, topic: str, messages: int, size: int, batch_api: bool = False) -> float:
    """msg/s of a confluent-kafka producer: linger 5 ms, batches up to 1,000 messages; handed
    the messages one ``produce()`` call each, or (``batch_api``) 1,000 per ``produce_batch()``
    call (confluent-kafka 2.x), which takes the Python call per message out of the client."""
    # delivery reports for errors only (as kafka-producer-perf-test counts): flush() returning 0
    # says every message was acknowledged, the callback names any that failed
    failed: list[str] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 1000,
                  "batch.size": 1000 * (size + 80), "queue.buffering.max.messages": 2_000_000,
                  "queue.buffering.max.kbytes": 2_000_000, "acks": 1, "compression.type": "none",
                  "delivery.report.only.error": True, "on_delivery": report})
    value = os.urandom(size)
    chunk = [{"value": value} for _ in range(1000)]
    t0 = time.perf_counter()
    if batch_api:
        sent = 0
        while sent < messages:
            n = min(len(chunk), messages - sent)
            todo = chunk[:n]
            while todo:  # those refused for a full queue, again after a poll
                for m in todo:
                    m.pop("_error", None)
                p.produce_batch(topic, todo)
                todo = [m for m in todo if "_error" in m]
                if any(m["_error"].code() != KafkaError._QUEUE_FULL for m in todo):
                    raise SystemExit(f"produce_batch failed: {todo[0]['_error']}")
                p.poll(0.001 if todo else 0)
            sent += n
    else:
        for i in range(messages):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.001)
            if i % 10_000 == 0:
                p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left or failed:
        raise SystemExit(f"produce failed: {left} undelivered, {len(failed)} errors ({failed[:1]})")
    return messages / elapsed


def consume(bootstrap: str, topic: str, messages: int) -> float:
    """msg/s of a confluent-kafka consumer reading the topic from the start (assigned, no group join)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                  "queued.min.messages": 1_000_000, "fetch.wait.max.ms": 100})
    meta = c.list_topics(topic, timeout=30)
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.topics[topic].partitions]
    got = 0
    t0 = time.perf_counter()
    c.assign(parts)  # no group join in the figure: the partitions are read from their start
    deadline = time.monotonic() + 300
    while got < messages and time.monotonic() < deadline:
        batch = c.consume(num_messages=100_000, timeout=1.0)
        for m in batch:
            if m.error() is not None:
                raise KafkaException(m.error())
        got += len(batch)
    elapsed = time.perf_counter() - t0
    c.close()
    if got < messages:
        raise SystemExit(f"consumed {got} of {messages}")
    return messages / elapsed


def consume_kcat(bootstrap: str, topic: str, messages: int) -> float | None:
    """msg/s of kcat (librdkafka in C, from Debian) reading partition 0 from the start to its end:
    what the broker serves when the client is not Python. fetch.wait.max.ms 10, so the fetch that
    finds the end waits 10 ms, not librdkafka's 500, before kcat sees it and exits. None: no kcat."""
    kcat = shutil.which("kcat")
    if kcat is None:
        return None
    t0 = time.perf_counter()
    out = subprocess.run(
        [kcat, "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
         "-f", "%o\n", "-X", "fetch.max.bytes=67108864", "-X", "max.partition.fetch.bytes=16777216",
         "-X", "queued.min.messages=1000000", "-X", "fetch.wait.max.ms=10"],
        capture_output=True, timeout=300, check=True).stdout
    elapsed = time.perf_counter() - t0
    got = out.count(b"\n")
    if got < messages:
        raise SystemExit(f"kcat read {got} of {messages}")
    return messages / elapsed


def _cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) the process has used; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


LATENCY_CONSUMER = "--latency-consumer"


def _latency_consumer(bootstrap: str, topic: str, total: int) -> None:
    """The latency run's consumer, in a process of its own (``LATENCY_CONSUMER``): a group member
    long-polling with fetch.wait.max.ms 500. Prints READY once assigned, then one JSON list of
    latencies (ms) on its last line."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "latest", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 500, "fetch.min.bytes": 1, "fetch.error.backoff.ms": 0})
    assigned = threading.Event()
    c.subscribe([topic], on_assign=lambda _c, _p: assigned.set())
    lat: list[float] = []
    told = False
    deadline = time.monotonic() + 120
    while len(lat) < total and time.monotonic() < deadline:
        m = c.poll(0.1)
        if assigned.is_set() and not told:
            print("READY", flush=True)
            told = True
        if m is None or m.error() is not None:
            continue
        now = time.perf_counter_ns()  # CLOCK_MONOTONIC: one clock for every process of the machine
        lat.append((now - int.from_bytes((m.value() or b"")[:8], "big")) / 1e6)
    c.close()
    print(json.dumps(lat), flush=True)


def latency(bootstrap: str, topic: str, rate: int, seconds: float, size: int) -> list[float]:
    """End-to-end latencies (ms) of messages produced one per request at ``rate`` msg/s.

    The consumer runs in a process of its own, as a consuming application would: in this one its
    Python loop and librdkafka's threads would share one interpreter lock with the producer's
    loop, and the figure would measure that contention. The producer sleeps until each message is
    due (a loop spinning on the clock would take a core the broker needs on a small machine)."""
    total = int(rate * seconds)
    cons = subprocess.Popen([sys.executable, __file__, LATENCY_CONSUMER, bootstrap, topic, str(total)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert cons.stdout is not None
        line = cons.stdout.readline()
        if line.strip() != "READY":
            raise SystemExit("the latency consumer got no assignment")
        time.sleep(1.0)  # the first fetch is in flight before the clock starts (its offset reset done)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
        pad = b"x" * max(0, size - 8)
        start = time.perf_counter()
        for i in range(total):
            wait = start + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            p.produce(topic, time.perf_counter_ns().to_bytes(8, "big") + pad)
            p.poll(0)
        p.flush(30)
        out, _ = cons.communicate(timeout=60)
    finally:
        if cons.poll() is None:
            cons.kill()
            cons.wait()
    lines = out.strip().splitlines()
    return [float(x) for x in json.loads(lines[-1])] if lines else []


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def bench(bootstrap: str, args: argparse.Namespace, label: str, tank_port: int | None,
          pid: int | None = None) -> None:
    topic = f"bench-{uuid.uuid4().hex[:6]}"
    _create_topic(bootstrap, topic, args.partitions)
    per = 1e6 / args.messages  # broker CPU per message, in us
    cpu = _cpu_s(pid)
    rate = produce(bootstrap, topic, args.messages, args.size)
    used, cpu = _cpu_s(pid) - cpu, _cpu_s(pid)
    print(f"  producer (linger 5 ms, batches <= 1,000)   : {rate:>12,.0f} msg/s  "
          f"{rate * args.size / 1e6:7.1f} MB/s payload"
          + (f"  broker {used * per:.2f} us/msg" if pid else ""), flush=True)
    if args.batch_api:  # into a topic of its own: the consumers below read the first one
        _create_topic(bootstrap, f"{topic}-b", args.partitions)
        brate = produce(bootstrap, f"{topic}-b", args.messages, args.size, batch_api=True)
        used, cpu = _cpu_s(pid) - cpu, _cpu_s(pid)
        print(f"  producer, produce_batch() of 1,000         : {brate:>12,.0f} msg/s  "
              f"{brate * args.size / 1e6:7.1f} MB/s payload"
              + (f"  broker {used * per:.2f} us/msg" if pid else ""), flush=True)
    crate = consume(bootstrap, topic, args.messages)
    used, cpu = _cpu_s(pid) - cpu, _cpu_s(pid)
    print(f"  consumer (from the start)                  : {crate:>12,.0f} msg/s"
          + (f"  broker {used * per:.2f} us/msg" if pid else ""), flush=True)
    if args.partitions == 1:
        krate = consume_kcat(bootstrap, topic, args.messages)
        used, cpu = _cpu_s(pid) - cpu, _cpu_s(pid)
        if krate is not None:
            print(f"  kcat consumer (C, from the start)          : {krate:>12,.0f} msg/s"
                  + (f"  broker {used * per:.2f} us/msg" if pid else ""), flush=True)
    if tank_port is not None:
        import tank_bench
        targs = argparse.Namespace(messages=args.messages, batch=1000, size=args.size, window=4,
                                   fetch=64 * 1024 * 1024)
        _produce_s, _consume_s, _nbytes, trate = tank_bench.run(tank_port, targs)
        print(f"  TANK path produce, same broker (tank_bench): {trate:>12,.0f} msg/s", flush=True)
    if args.latency_seconds > 0:
        ltopic = f"lat-{uuid.uuid4().hex[:6]}"
        _create_topic(bootstrap, ltopic, 1)
        lat = latency(bootstrap, ltopic, args.latency_rate, args.latency_seconds, args.size)
        sent = int(args.latency_rate * args.latency_seconds)
        if len(lat) < sent:
            print(f"  latency: only {len(lat):,} of {sent:,} messages arrived", flush=True)
        if lat:
            print(f"  end to end at {args.latency_rate:,} msg/s ({len(lat):,} msgs): "
                  f"p50 {statistics.median(lat):.2f} ms  p99 {_pct(lat, 0.99):.2f} ms  "
                  f"p99.9 {_pct(lat, 0.999):.2f} ms  max {max(lat):.2f} ms", flush=True)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == LATENCY_CONSUMER:
        _latency_consumer(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--fsync", action="append", help="broker fsync policies (default: never, always)")
    ap.add_argument("--latency-rate", type=int, default=10_000, help="msg/s of the latency run")
    ap.add_argument("--latency-seconds", type=float, default=5.0, help="0 skips the latency run")
    ap.add_argument("--no-tank", action="store_true", help="skip the TANK path's produce figure")
    ap.add_argument("--batch-api", action="store_true",
                    help="also run the producer through produce_batch() (1,000 messages a call)")
    ap.add_argument("--peer", metavar="HOST:PORT", help="also run against this Kafka-API broker")
    args = ap.parse_args()
    print(f"Kafka front end benchmark: {args.messages:,} messages of {args.size} B, {args.partitions} "
          f"partition(s), confluent-kafka (librdkafka), loopback, {os.cpu_count()} cores")
    for fsync in args.fsync or ["never", "always"]:
        tmp = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
        kport, tport = _free_port(), _free_port()
        proc = _start(tmp / "data", kport, tport, fsync)
        try:
            print(f"\n[bayou, fsync={fsync}]", flush=True)
            bench(f"127.0.0.1:{kport}", args, "bayou", None if args.no_tank else tport, proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            shutil.rmtree(tmp, ignore_errors=True)
    if args.peer:
        print(f"\n[peer at {args.peer}]", flush=True)
        bench(args.peer, args, "peer", None)


if __name__ == "__main__":
    main()
