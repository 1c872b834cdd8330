"""Replication benchmark: acks=all on a 3-broker cluster (replication factor 3, a real ZooKeeper)
against acks=1 on a single node. Prints figures; never passes or fails. Targets from issue 7:
acks=all RF 3 throughput of 100 B messages in batches of 1,000 at >= 50% of single-node acks=1;
failover time over 10 rounds.

Both runs use the Cursus batch path (batches of --batch messages of --size bytes, --window
batches in flight per connection, one connection per partition, frames encoded before the clock
starts), brokers with --fsync never, everything on this machine's cores. The cluster's producer
sends each partition's batches to that partition's leader (read from ZooKeeper).

Failover: SIGKILL the leader of a partition, time until ZooKeeper names a new leader and until a
produce to it is acknowledged (acks=all), restart the killed broker, wait for a full ISR; --rounds
times. Then the same with SIGTERM (a controlled shutdown: the leader hands its partitions over
before it stops). ZooKeeper runs with Debian's defaults (tickTime 2000 ms, so sessions of at least
4 s; --tick-ms changes it) and the brokers with their default session timeout (4000 ms).

    .venv/bin/python benchmarks/cluster_bench.py
    .venv/bin/python benchmarks/cluster_bench.py --messages 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from kazoo.client import KazooClient  # noqa: E402

from bayou.protocols.cursus.batch import encode_batch  # noqa: E402
from bayou.records.cursus import CursusMessage, encode_message  # noqa: E402
from bayou.records.hashing import fnv1a_32  # noqa: E402
from support.brokers import BrokerProcess, free_port  # noqa: E402
from support.zookeeper import ZooKeeperServer  # noqa: E402

_U32 = struct.Struct(">I")
TOPIC = "bench"



def v1(port: int, line: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(line.encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf.decode().strip()


def batch_frame(partition: int, batch: int, size: int, acks: str) -> bytes:
    out = bytearray()
    payload = (b"%d-" % partition + b"x" * size)[:size]
    for i in range(batch):
        encode_message(CursusMessage(payload, 0, i + 1, b"bench-producer", b"", 1_700_000_000), out)
    body = encode_batch(TOPIC, partition, bytes(out), batch, 1, batch, acks)
    return _U32.pack(len(body)) + body


async def produce_conn(port: int, framed: bytes, batches: int, window: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
    sent = acked = 0
    try:
        while acked < batches:
            while sent < batches and sent - acked < window:
                writer.write(framed)
                sent += 1
            await writer.drain()
            (n,) = _U32.unpack(await reader.readexactly(4))
            ack = await reader.readexactly(n)
            if not ack.startswith(b'{"status":"OK"'):
                raise SystemExit(f"produce failed: {ack[:200]!r}")
            acked += 1
    finally:
        writer.close()


async def produce(ports: dict[int, int], args: argparse.Namespace, acks: str) -> float:
    per_part = args.messages // args.batch // args.partitions
    frames = {p: batch_frame(p, args.batch, args.size, acks) for p in ports}
    t0 = time.perf_counter()
    await asyncio.gather(*(produce_conn(ports[p], frames[p], per_part, args.window) for p in ports))
    return time.perf_counter() - t0


def report(label: str, msgs: int, seconds: float, size: int) -> float:
    rate = msgs / seconds
    print(f"  {label:<46} {msgs:>9,} msgs {seconds:7.2f} s {rate:>11,.0f} msg/s "
          f"{rate * size / 1e6:7.1f} MB/s", flush=True)
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=10, help="failover rounds")
    ap.add_argument("--tick-ms", type=int, default=2000, help="ZooKeeper tickTime (Debian: 2000)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bayou-cluster-bench-"))
    total = args.messages // args.batch // args.partitions * args.batch * args.partitions
    print(f"bayou replication benchmark: {total:,} messages of {args.size} B in batches of {args.batch}, "
          f"{args.partitions} partitions, fsync=never", flush=True)
    procs: list[BrokerProcess] = []
    zk = None
    try:
        for d in ("single", "b1", "b2", "b3"):
            (root / d).mkdir()
        single = BrokerProcess(root / "single" / "data", fsync="never").start()
        procs.append(single)
        assert "|OK|" in v1(single.port, f"V1|1|ADMIN_CREATE_TOPIC|{TOPIC} {args.partitions} 1")
        secs = asyncio.run(produce({p: single.cursus_port for p in range(args.partitions)}, args, "1"))
        base = report("single node, acks=1", total, secs, args.size)
        single.stop()

        zk = ZooKeeperServer(root / "zk", tick_ms=args.tick_ms, min_session_ms=None).start()
        cfg = root / "cluster.toml"
        cfg.write_text("[broker]\nreplica_lag_timeout_ms = 5000\nack_all_timeout_ms = 10000\n")
        brokers: dict[int, BrokerProcess] = {}
        for i in (1, 2, 3):
            brokers[i] = BrokerProcess(root / f"b{i}" / "data", "--config", str(cfg), "--cluster",
                                       zk.url("bench"), "--broker-id", str(i), "--replication",
                                       f"127.0.0.1:{free_port()}", "--advertised-host", "127.0.0.1",
                                       fsync="never").start(timeout=60)
            procs.append(brokers[i])
        kz = KazooClient(hosts=zk.hosts + "/bench")
        kz.start()

        def state(p: int) -> dict[str, object]:
            doc: dict[str, object] = json.loads(kz.get(f"/topics/{TOPIC}/partitions/{p}/state")[0])
            return doc

        def wait(cond: object, timeout: float) -> float:
            t0 = time.monotonic()
            while not cond():  # type: ignore[operator]
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError
                time.sleep(0.02)
            return time.monotonic() - t0

        wait(lambda: len(kz.get_children("/brokers/ids")) == 3, 30)
        assert "|OK|" in v1(brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{TOPIC} {args.partitions} 3")
        wait(lambda: all(len(state(p)["isr"]) == 3 for p in range(args.partitions)), 30)  # type: ignore[arg-type]
        leaders = {p: brokers[int(state(p)["leader"])].cursus_port  # type: ignore[call-overload]
                   for p in range(args.partitions)}
        secs = asyncio.run(produce(leaders, args, "-1"))
        repl = report("3 brokers, replication factor 3, acks=all", total, secs, args.size)
        print(f"  acks=all RF 3 / single-node acks=1: {repl / base:.0%}", flush=True)

        key0 = next(f"k{i}" for i in range(10_000) if fnv1a_32(f"k{i}".encode()) % args.partitions == 0)
        for how, sig in (("SIGKILL", signal.SIGKILL), ("SIGTERM", signal.SIGTERM)):
            elect, ack = [], []
            for _ in range(args.rounds):
                old = int(state(0)["leader"])  # type: ignore[call-overload]
                epoch = int(state(0)["leader_epoch"])  # type: ignore[call-overload]
                t0 = time.monotonic()
                proc = brokers[old].proc
                assert proc is not None
                proc.send_signal(sig)
                wait(lambda o=old, e=epoch: int(state(0)["leader_epoch"]) > e  # type: ignore[call-overload]
                     and int(state(0)["leader"]) not in (o, -1), 30)  # type: ignore[call-overload]
                elect.append(time.monotonic() - t0)
                # a V1 PRODUCE keyed for partition 0 (V1 partitions by FNV-1a of the key); each live
                # broker is tried, the partition's leader acknowledges
                live = [b for b in brokers if b != old]
                deadline = time.monotonic() + 30
                while not any("|OK|" in v1(brokers[b].port, f"V1|1|PRODUCE|{TOPIC} {key0}:x acks=all")
                              for b in live):
                    if time.monotonic() > deadline:
                        raise TimeoutError("no acks=all produce acknowledged after the failover")
                    time.sleep(0.01)
                ack.append(time.monotonic() - t0)
                proc.wait(60)
                brokers[old].start(timeout=60)
                wait(lambda: all(len(state(p)["isr"]) == 3  # type: ignore[arg-type]
                                 for p in range(args.partitions)), 60)
            if elect:
                print(f"  {how} of partition 0's leader, {args.rounds} rounds (ZooKeeper tickTime "
                      f"{args.tick_ms} ms, 4 s sessions):")
                med = sorted(elect)[len(elect) // 2]
                print(f"    new leader in ZooKeeper: min {min(elect):.2f} s, median {med:.2f} s, "
                      f"max {max(elect):.2f} s")
                print(f"    first acks=all produce acknowledged through another broker: "
                      f"min {min(ack):.2f} s, median {sorted(ack)[len(ack) // 2]:.2f} s, "
                      f"max {max(ack):.2f} s", flush=True)
        kz.stop()
    finally:
        for b in procs:
            if b.proc is not None and b.proc.poll() is None:
                b.kill()
        if zk is not None:
            zk.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
