"""SDK benchmark: bayou.client against a broker subprocess on loopback. Prints figures; never
passes or fails. Target from issue 6: the SDK producer at >= 500,000 msg/s of 100-byte messages.

Phases (each reports msg/s, MB/s and the CPU seconds of this process and of the broker):
  producer       Producer.send() per record (batching by size and linger, sticky partitions)
  producer-keyed Producer.send() with a key per record (xxHash32 partitioning, key headers)
  producer-lz4   Producer(compression="lz4"); producer-zstd likewise (batches compressed on the wire)
  client-send    Client.send() of ready batches (--batch values a call): the column-wise path
  fetch-arrow    Client.fetch_arrow() of everything back, --batch records a call
  consumer       Consumer.poll() records (Python objects per record) of partition 0, fetch-ahead on
  newest         the newest message's latency: one message per ms, a consumer at the log end

Run alone (--only), in a process of their own:
  newest         as above (--newest-partitions: the sender goes round them, the consumer has all)
  send           Client.send() of --messages values, --batch a call, into one partition: wall,
                 this process's CPU and minor page faults per send (a process that has not
                 warmed its heap, as an application that only sends, or a Spark sink task)
  consume-all    a Consumer assigned every partition (--partitions) reading --messages records
                 from the start, at max_poll_records 500 and --batch

    .venv/bin/python benchmarks/sdk_bench.py
    .venv/bin/python benchmarks/sdk_bench.py --messages 200000 --fsync always --profile producer
    .venv/bin/python benchmarks/sdk_bench.py --only consume-all --partitions 4
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bayou.client import Client, Consumer, Producer, TopicPartition  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _report(name: str, n: int, size: int, wall: float, cpu_self: float, cpu_broker: float) -> None:
    rate = n / wall
    print(f"{name:15s} {n:>10,d} msgs {wall:7.2f} s {rate:>12,.0f} msg/s {rate * size / 1e6:8.1f} MB/s"
          f"   cpu: sdk {cpu_self:5.2f} s, broker {cpu_broker:5.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--fsync", default="never", help="broker fsync policy (always|never|interval:MS)")
    ap.add_argument("--bootstrap", help="use a running broker's Iggy listener instead of starting one")
    ap.add_argument("--profile", metavar="PHASE", help="run PHASE under pyinstrument and print the profile")
    ap.add_argument("--only", choices=["newest", "send", "consume-all"], help="run only this phase")
    ap.add_argument("--newest-partitions", type=int, default=1,
                    help="partitions of the newest-message topic: the sender goes round them, the "
                         "consumer is assigned all of them")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bayou-sdk-bench-"))
    proc = None
    if args.bootstrap:
        boot, broker_pid = args.bootstrap, None
    else:
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "bayou", "serve", "--data-dir", str(tmp / "data"),
                                 "--rtes", "off", "--cursus", "off", "--tank", "off", "--http", "off",
                                 "--iggy", f"127.0.0.1:{port}", "--fsync", args.fsync,
                                 "--log-level", "warning"],
                                env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
        boot, broker_pid = f"127.0.0.1:{port}", proc.pid
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    print(f"bayou SDK benchmark: {args.messages:,} messages of {args.size} B, {args.partitions} partitions, "
          f"fsync={args.fsync}")
    n, size = args.messages, args.size
    value = b"x" * size
    try:
        client = Client(boot)

        def phase(name: str, fn: object) -> None:
            prof = None
            if args.profile == name:
                from pyinstrument import Profiler

                prof = Profiler()
                prof.start()
            b0 = _cpu(broker_pid) if broker_pid else 0.0
            c0 = time.process_time()
            t0 = time.perf_counter()
            count = fn()  # type: ignore[operator]
            wall = time.perf_counter() - t0
            _report(name, count, size, wall, time.process_time() - c0,
                    (_cpu(broker_pid) - b0) if broker_pid else 0.0)
            if prof is not None:
                prof.stop()
                print(prof.output_text(unicode=True, color=False))

        def produce_plain() -> int:
            client.create_topic("bench-producer", args.partitions)
            with Producer(boot, linger_ms=5, batch_size=1 << 20, max_batch_records=args.batch) as p:
                send = p.send
                for _ in range(n):
                    send("bench-producer", value)
            return n

        def produce_compressed(codec: str) -> int:
            topic = f"bench-{codec}"
            client.create_topic(topic, args.partitions)
            with Producer(boot, linger_ms=5, batch_size=1 << 20, max_batch_records=args.batch,
                          compression=codec) as p:
                send = p.send
                for _i in range(n):
                    send(topic, value)
            return n

        def produce_keyed() -> int:
            client.create_topic("bench-keyed", args.partitions)
            keys = [b"user-%04d" % i for i in range(1000)]
            m = n // 4
            with Producer(boot, linger_ms=5, batch_size=1 << 20, max_batch_records=args.batch) as p:
                send = p.send
                for i in range(m):
                    send("bench-keyed", value, key=keys[i % 1000])
            return m

        def client_send() -> int:
            client.create_topic("bench-send", args.partitions)
            values = [value] * args.batch
            sent = 0
            part = 0
            while sent < n:
                client.send("bench-send", part, values)
                sent += len(values)
                part = (part + 1) % args.partitions
            return sent

        def fetch() -> int:
            got = 0
            for part in range(args.partitions):
                end = client.latest_offset("bench-send", part)
                pos = 0
                while pos < end:
                    b = client.fetch_arrow("bench-send", part, pos, args.batch)
                    got += b.num_rows
                    pos = b.column(4)[b.num_rows - 1].as_py() + 1
            return got

        def consume() -> int:
            m = n // args.partitions  # all of partition 0 (client-send spread n over the partitions)
            with Consumer(boot, max_poll_records=args.batch) as c:
                c.assign([TopicPartition("bench-send", 0)])
                c.seek(TopicPartition("bench-send", 0), 0)
                got = 0
                while got < m:
                    got += len(c.poll(1000))
            return got

        def newest() -> None:
            """The newest message's latency: one message every 1 ms for 3 s (Client.send, its send
            time in the value), a Consumer polling at the log end in a thread; from send to the
            record returned by poll()."""
            parts = args.newest_partitions
            client.create_topic("bench-newest", parts)
            lat: list[float] = []
            total = 3000
            done = threading.Event()

            def consume_newest() -> None:
                with Consumer(boot, auto_offset_reset="latest") as c:
                    c.assign([TopicPartition("bench-newest", p) for p in range(parts)])
                    c.poll(10)  # the position: the log end
                    ready.set()
                    while len(lat) < total and not done.is_set():
                        for r in c.poll(1000):
                            lat.append(time.perf_counter() - float(r.value or b"0"))

            ready = threading.Event()
            t = threading.Thread(target=consume_newest)
            t.start()
            ready.wait(20)
            sender = Client(boot)
            start = time.perf_counter()
            for i in range(total):
                time.sleep(max(0.0, start + i / 1000 - time.perf_counter()))
                sender.send("bench-newest", i % parts, [repr(time.perf_counter()).encode()])
            t.join(10)
            done.set()
            sender.close()
            lat.sort()
            if lat:
                p50, p99 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
                where = f" over {parts} partitions" if parts > 1 else ""
                print(f"{'newest message':<15} {len(lat):>10,} of {total:,} at 1,000/s{where}: from send to "
                      f"poll() p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {lat[-1] * 1000:.1f} ms", flush=True)

        def send_alone() -> None:
            client.create_topic("bench-send-alone", 1)
            values = [value] * args.batch
            sends = max(1, n // args.batch)
            for _ in range(20):  # warm-up: the connection, the topic, the broker's segment
                client.send("bench-send-alone", 0, values)
            faults, cpu, broker = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time(),
                                   _cpu(broker_pid) if broker_pid else 0.0)
            start = time.perf_counter()
            for _ in range(sends):
                client.send("bench-send-alone", 0, values)
            wall = time.perf_counter() - start
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            _report("send", sends * args.batch, size, wall, time.process_time() - cpu,
                    (_cpu(broker_pid) - broker) if broker_pid else 0.0)
            print(f"{'':<15} {faults / sends:,.0f} page faults of this process a send", flush=True)

        def consume_all() -> None:
            client.create_topic("bench-consume-all", args.partitions)
            values = [value] * args.batch
            for i in range(max(1, n // args.batch)):
                client.send("bench-consume-all", i % args.partitions, values)
            tps = [TopicPartition("bench-consume-all", p) for p in range(args.partitions)]
            for max_poll in (500, args.batch):
                def read(max_poll: int = max_poll) -> int:
                    with Consumer(boot, max_poll_records=max_poll) as c:
                        c.assign(tps)
                        for tp in tps:
                            c.seek(tp, 0)
                        got = 0
                        while got < n:
                            got += len(c.poll(1000))
                    return got
                phase(f"consume-{max_poll}", read)

        only = {"newest": newest, "send": send_alone, "consume-all": consume_all}
        if args.only:
            only[args.only]()
            return
        phase("producer", produce_plain)
        phase("producer-keyed", produce_keyed)
        phase("producer-lz4", lambda: produce_compressed("lz4"))
        phase("producer-zstd", lambda: produce_compressed("zstd"))
        phase("client-send", client_send)
        phase("fetch-arrow", fetch)
        phase("consumer", consume)
        newest()
        client.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(20)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
