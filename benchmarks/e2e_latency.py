"""End-to-end latency at a steady rate: how long after a producer sends a message a consumer
waiting on the broker has it (issue 18, item 3 and the first row of its table).

Prints figures; never passes or fails. One producer connection sends one 100-byte message per
request at a steady ``--rate`` (open loop: requests are written when due, whatever the
replies; the rate reached is printed, so a producer that fell behind shows); one consumer
connection waits on the broker the way the protocol's clients do, and each message's latency
runs from when it was written to when its bytes reached the consumer. The consumer runs in a
process of its own, as a consuming application would (``--one-process``: on the producer's event
loop, as before stop 31, where the two share one core's worth of Python); the stamps are
CLOCK_MONOTONIC (``time.perf_counter_ns``), one clock for every process of the machine. Every
message names its index and its send time, so a consumer
needs no protocol decoding: it finds the stamps in what it reads (records travel uncompressed
on every path below) and asks for the next offset after the highest index it saw.

Consumers, each behind a producer of its own protocol:

- **kafka fetch**: Fetch v11 long poll (max_wait 500 ms, min_bytes 1), the next offset each time
  (its frames and the producer's built once through kio, then patched per request: kio's build
  is this script's cost, 25-30 us a request, not a Kafka client's);
- **cursus stream**: STREAM, the broker pushes batch frames;
- **cursus consume**: CONSUME with wait_ms=500, the next offset each time;
- **tank consume**: TANK's long-polling consume (max_wait 500 ms, min_bytes 1), the next
  sequence each time (a TANK sequence is the offset + 1);
- **redis xread** (``--peers``): XREAD BLOCK 500 from the last entry id, behind XADD;
- **nats jetstream** (``--peers``): a JetStream push consumer (deliver_subject, no acks) behind
  JetStream publishes with acknowledgement; delivered after the message is stored.

Iggy has no server-side wait (its clients poll on a timer) and V1 has none either: neither is
run. ``benchmarks/peers.py`` runs the same workload in its table.

    .venv/bin/python benchmarks/e2e_latency.py
    .venv/bin/python benchmarks/e2e_latency.py --rate 10000 --consumers kafka,cursus-stream
    .venv/bin/python benchmarks/e2e_latency.py --peers  # with Redis and NATS (make bench-peers installs them)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from pipeline_bench import Broker  # noqa: E402

from bayou.protocols.cursus.framing import encode_frame as cursus_frame  # noqa: E402
from bayou.protocols.kafka import codec as kafka_codec  # noqa: E402
from bayou.protocols.kafka.build import build  # noqa: E402
from bayou.protocols.kafka.codes import ApiKey  # noqa: E402
from bayou.protocols.kafka.framing import RequestHeader  # noqa: E402
from bayou.protocols.tank import codec as tank_codec  # noqa: E402
from bayou.protocols.tank import messages as tm  # noqa: E402
from bayou.protocols.tank.bundles import TankMessage, encode_bundle  # noqa: E402
from bayou.records.batch import Record, encode_batch  # noqa: E402

SIZE = 100
TOPIC = "lat"
WAIT_MS = 500
STAMP = re.compile(rb"@(\d{10}):(\d{19})@")


def value(i: int, sent_ns: int) -> bytes:
    stamp = b"@%010d:%019d@" % (i, sent_ns)
    return stamp + b"x" * (SIZE - len(stamp))


@dataclass
class Seen:
    """What the consumer has received: each index once, its latency from when it was sent."""

    total: int
    latencies: list[float] = field(default_factory=list)
    next_index: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # the consumer is waiting
    _got: set[int] = field(default_factory=set)

    def scan(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        for m in STAMP.finditer(data):
            i = int(m.group(1))
            if i in self._got:
                continue
            self._got.add(i)
            self.latencies.append((now - int(m.group(2))) / 1e9)
            self.next_index = max(self.next_index, i + 1)
        if len(self._got) >= self.total:
            self.done.set()


Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _sized(r: asyncio.StreamReader, fmt: str = ">I") -> bytes:
    (n,) = struct.unpack(fmt, await r.readexactly(4))
    return await r.readexactly(n)


class System:
    """A producer and a consumer of one protocol. ``consume`` runs until cancelled."""

    name = ""
    port_key = ""

    async def setup(self, conn: Conn) -> None:
        pass

    def produce(self, i: int, v: bytes) -> bytes:
        raise NotImplementedError

    async def consume(self, conn: Conn, seen: Seen) -> None:
        raise NotImplementedError


class KafkaFetch(System):
    """Kafka's Produce v7 and Fetch v11. Each frame is built once through kio as a template, then
    a request is that template with its correlation id, batch or fetch offset written in: kio's
    build costs 25-30 us a request here, which a real client (librdkafka, the Java client) does
    not spend, and which on two cores shared with the broker showed in this row's latency."""

    name, port_key = "kafka fetch", "kafka"
    SENTINEL = 0x0123456789ABCDEF  # the template's fetch offset, found by its bytes

    def __init__(self) -> None:
        self.cid = 0
        self._produce: tuple[bytearray, int] | None = None  # template, where its batch starts
        self._fetch: tuple[bytearray, int] | None = None  # template, where its offset is

    def _frame(self, key: ApiKey, version: int, **fields: object) -> bytes:
        self.cid += 1
        body = build(kafka_codec.request_schema(key, version), **fields)
        return kafka_codec.encode_request(RequestHeader(key, version, self.cid, "e2e", False, 0), body)

    def _stamped(self, template: bytearray) -> bytearray:
        """The template with the next correlation id (after the size, the api key and version)."""
        self.cid += 1
        struct.pack_into(">i", template, 8, self.cid)
        return template

    async def setup(self, conn: Conn) -> None:
        r, w = conn
        w.write(self._frame(ApiKey.CREATE_TOPICS, 4, timeout=10000, topics=[
            {"name": TOPIC, "num_partitions": 1, "replication_factor": 1}]))
        await _sized(r)

    def produce(self, i: int, v: bytes) -> bytes:
        batch = encode_batch([Record(value=v, timestamp=int(time.time() * 1000))])
        if self._produce is None or len(batch) != len(self._produce[0]) - self._produce[1]:
            frame = bytearray(self._frame(ApiKey.PRODUCE, 7, acks=1, timeout=30000, topic_data=[
                {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]))
            self._produce = (frame, len(frame) - len(batch))  # the records are the body's last field
            return bytes(frame)
        template, at = self._produce
        template[at:] = batch
        return bytes(self._stamped(template))

    def _fetch_frame(self, offset: int) -> bytes:
        if self._fetch is None:
            frame = bytearray(self._frame(
                ApiKey.FETCH, 11, replica_id=-1, max_wait=WAIT_MS, min_bytes=1, max_bytes=1 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                topics=[{"topic": TOPIC, "partitions": [
                    {"partition": 0, "fetch_offset": self.SENTINEL, "current_leader_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]))
            self._fetch = (frame, frame.index(struct.pack(">q", self.SENTINEL)))
        template, at = self._fetch
        struct.pack_into(">q", template, at, offset)
        return bytes(self._stamped(template))

    async def consume(self, conn: Conn, seen: Seen) -> None:
        r, w = conn
        while True:
            w.write(self._fetch_frame(seen.next_index))
            seen.scan(await _sized(r))


class CursusStream(System):
    name, port_key = "cursus stream", "cursus"

    async def setup(self, conn: Conn) -> None:
        r, w = conn
        w.write(cursus_frame(f"CREATE topic={TOPIC} partitions=1".encode()))
        await _sized(r)

    def produce(self, i: int, v: bytes) -> bytes:
        return cursus_frame(f"PUBLISH topic={TOPIC} acks=1 producerId=e2e message={v.decode()}".encode())

    async def consume(self, conn: Conn, seen: Seen) -> None:
        r, w = conn
        w.write(cursus_frame(f"STREAM topic={TOPIC} partition=0 group=e2e offset=0".encode()))
        while True:
            frame = await _sized(r)
            if frame.startswith(b"ERROR"):
                raise SystemExit(f"STREAM refused: {frame[:200]!r}")
            seen.scan(frame)


class CursusConsume(CursusStream):
    name = "cursus consume"

    async def consume(self, conn: Conn, seen: Seen) -> None:
        r, w = conn
        while True:
            w.write(cursus_frame(f"CONSUME topic={TOPIC} partition=0 offset={seen.next_index} "
                                 f"member=e2e wait_ms={WAIT_MS}".encode()))
            frame = await _sized(r)
            if frame.startswith(b"ERROR"):
                raise SystemExit(f"CONSUME refused: {frame[:200]!r}")
            seen.scan(frame)


class TankConsume(System):
    name, port_key = "tank consume", "tank"

    async def _reply(self, r: asyncio.StreamReader) -> bytes:
        while True:
            msg_id, n = struct.unpack("<BI", await r.readexactly(5))
            payload = await r.readexactly(n)
            if msg_id != 0x03:  # the broker's ping on accept
                return payload

    async def setup(self, conn: Conn) -> None:
        r, w = conn
        w.write(tank_codec.encode_request_frame(tm.CreateTopic(1, TOPIC, 1, "")))
        await self._reply(r)

    def produce(self, i: int, v: bytes) -> bytes:
        bundle = encode_bundle([TankMessage(0, int(time.time() * 1000), None, v)], compress=False)
        return tank_codec.encode_request_frame(tm.Produce(
            i & 0xFFFFFFFF, (tm.ProduceTopic(TOPIC, (tm.ProduceEntry(0, bundle),)),), required_acks=1))

    async def consume(self, conn: Conn, seen: Seen) -> None:
        r, w = conn
        rid = 0
        while True:
            rid += 1
            w.write(tank_codec.encode_request_frame(tm.Consume(
                rid, (tm.ConsumeTopic(TOPIC, (tm.ConsumePartition(0, seen.next_index + 1, 1 << 20),)),),
                max_wait=WAIT_MS, min_bytes=1)))
            seen.scan(await self._reply(r))


# -- the peers -------------------------------------------------------------------------------------

def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


async def _resp_value(r: asyncio.StreamReader) -> object:
    """One RESP2 value: bytes, int, None or a list."""
    line = (await r.readline())[:-2]
    kind, rest = line[:1], line[1:]
    if kind == b"$":
        return None if rest == b"-1" else (await r.readexactly(int(rest) + 2))[:-2]
    if kind == b"*":
        return None if rest == b"-1" else [await _resp_value(r) for _ in range(int(rest))]
    if kind == b":":
        return int(rest)
    if kind == b"-":
        raise SystemExit(f"redis: {rest[:200]!r}")
    return rest


class RedisXread(System):
    name = "redis xread"

    def produce(self, i: int, v: bytes) -> bytes:
        return _resp(b"XADD", TOPIC.encode(), b"*", b"v", v)

    async def consume(self, conn: Conn, seen: Seen) -> None:
        r, w = conn
        last = b"0"
        while True:
            w.write(_resp(b"XREAD", b"COUNT", b"10000", b"BLOCK", str(WAIT_MS).encode(), b"STREAMS",
                          TOPIC.encode(), last))
            reply = await _resp_value(r)
            if not isinstance(reply, list):
                continue  # nil: the block timed out
            entries = reply[0][1]
            seen.scan(b"".join(e[1][1] for e in entries))
            last = entries[-1][0]


class NatsJetStream(System):
    name = "nats jetstream"
    stream = TOPIC.upper()

    async def _msg(self, r: asyncio.StreamReader) -> tuple[bytes, bytes]:
        """The next message: (its subscription id, its body)."""
        while True:
            line = await r.readline()
            if line.startswith(b"MSG"):
                parts = line.split()  # MSG <subject> <sid> [reply-to] <size>
                return parts[2], (await r.readexactly(int(parts[-1]) + 2))[:-2]
            if line.startswith(b"-ERR"):
                raise SystemExit(f"nats: {line[:200]!r}")

    async def _request(self, conn: Conn, inbox: bytes, subject: str, body: dict[str, object]) -> bytes:
        r, w = conn
        data = json.dumps(body).encode()
        w.write(b"PUB %s %s.setup %d\r\n%s\r\n" % (subject.encode(), inbox, len(data), data))
        _subject, reply = await self._msg(r)
        return reply

    async def _connect(self, conn: Conn) -> None:
        r, w = conn
        await r.readline()  # INFO
        w.write(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n')

    async def setup(self, conn: Conn) -> None:
        await self._connect(conn)
        conn[1].write(b"SUB _INBOX.p.* 1\r\n")
        await self._request(conn, b"_INBOX.p", f"$JS.API.STREAM.CREATE.{self.stream}",
                            {"name": self.stream, "subjects": [TOPIC], "storage": "file"})

    def produce(self, i: int, v: bytes) -> bytes:
        return b"PUB %s _INBOX.p.ack %d\r\n%s\r\n" % (TOPIC.encode(), len(v), v)

    async def consume(self, conn: Conn, seen: Seen) -> None:
        r, w = conn
        await self._connect(conn)
        w.write(b"SUB _INBOX.c.* 1\r\nSUB e2e.deliver 2\r\n")
        created = await self._request(conn, b"_INBOX.c", f"$JS.API.CONSUMER.CREATE.{self.stream}", {
            "stream_name": self.stream,
            "config": {"deliver_subject": "e2e.deliver", "ack_policy": "none", "deliver_policy": "all"}})
        if b'"error"' in created:
            raise SystemExit(f"nats consumer: {created[:300]!r}")
        seen.ready.set()
        while True:
            sid, body = await self._msg(r)
            if sid == b"2":
                seen.scan(body)


SYSTEMS: dict[str, Callable[[], System]] = {
    "kafka": KafkaFetch, "cursus-stream": CursusStream, "cursus-consume": CursusConsume,
    "tank": TankConsume, "redis": RedisXread, "nats": NatsJetStream}


# -- the run ---------------------------------------------------------------------------------------

async def _drain(r: asyncio.StreamReader) -> None:
    while await r.read(1 << 16):
        pass


CONSUMER = "--consumer-process"  # argv[1] of the consumer's own process
SETTLE_S = 35.0  # how long the consumer waits for the last messages after the producer's run


async def _consume(system: System, port: int, seen: Seen) -> tuple[asyncio.Task[None], Conn]:
    """Start ``system``'s consumer; return once its first wait is in place."""
    conn = await asyncio.open_connection("127.0.0.1", port)
    task = asyncio.create_task(system.consume(conn, seen))
    if not isinstance(system, NatsJetStream):
        seen.ready.set()
    await asyncio.wait_for(seen.ready.wait(), 10)
    await asyncio.sleep(0.1)  # the consumer's first wait is in place
    return task, conn


async def _stop(tasks: list[asyncio.Task[None]], conns: list[Conn]) -> None:
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            await task
    for _r, cw in conns:
        cw.close()


def consumer_process(name: str, port: int, total: int, seconds: float) -> None:
    """The consumer in a process of its own (``CONSUMER``): prints READY once waiting, then the
    latencies (JSON, seconds) on its last line."""
    async def go() -> list[float]:
        seen = Seen(total)
        task, conn = await _consume(SYSTEMS[name](), port, seen)
        print("READY", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(seen.done.wait(), seconds + SETTLE_S)
        await _stop([task], [conn])
        return seen.latencies
    print(json.dumps(asyncio.run(go())), flush=True)


async def run(system: System, port: int, rate: int, seconds: float,
              own_process: bool = True) -> tuple[Seen, float]:
    """(what the consumer saw, the rate the producer reached)."""
    total = int(rate * seconds)
    seen = Seen(total)
    producer = await asyncio.open_connection("127.0.0.1", port)
    await system.setup(producer)
    proc = None
    loop = asyncio.get_running_loop()
    if own_process:
        name = next(k for k, v in SYSTEMS.items() if v is type(system))
        argv = [sys.executable, __file__, CONSUMER, name, str(port), str(total), str(seconds)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        line = await asyncio.wait_for(loop.run_in_executor(None, proc.stdout.readline), 30)
        if line.strip() != b"READY":
            raise SystemExit(f"the consumer process did not start: {line!r}")
        tasks: list[asyncio.Task[None]] = []
        conns = [producer]
    else:
        consumer, consumer_conn = await _consume(system, port, seen)
        tasks, conns = [consumer], [producer, consumer_conn]
    drain = asyncio.create_task(_drain(producer[0]))
    w = producer[1]
    start = time.perf_counter() + 0.05
    i = 0
    try:
        while i < total:
            k = min(total, int((time.perf_counter() - start) * rate) + 1)
            while i < k:  # every message due by now, each stamped with when it was sent
                w.write(system.produce(i, value(i, time.perf_counter_ns())))
                i += 1
            await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        reached = total / (time.perf_counter() - start)
        if proc is not None:
            out, _err = await loop.run_in_executor(None, proc.communicate, None, seconds + SETTLE_S + 30)
            lines = out.strip().splitlines()
            seen.latencies = json.loads(lines[-1]) if lines else []
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(seen.done.wait(), 30)
        return seen, reached
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        await _stop([*tasks, drain], conns)


def _pct(lat: list[float], q: float) -> float:
    s = sorted(lat)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


def figures(seen: Seen, reached: float) -> str:
    lat = seen.latencies
    if not lat:
        return "nothing received"
    return (f"{reached:>7,.0f} msg/s sent   received {len(lat):,} of {seen.total:,}   "
            f"p50 {_pct(lat, 0.5):6.2f} ms   p99 {_pct(lat, 0.99):7.2f} ms   "
            f"p99.9 {_pct(lat, 0.999):7.2f} ms   max {max(lat) * 1000:7.1f} ms")


def measure(system: System, port: int, rate: int, seconds: float,
            own_process: bool = True) -> tuple[Seen, float]:
    return asyncio.run(run(system, port, rate, seconds, own_process))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--consumers", default="kafka,cursus-stream,cursus-consume,tank")
    ap.add_argument("--fsync", default="never", help="the broker's fsync policy")
    ap.add_argument("--rate", type=int, default=10_000, help="messages/s")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--peers", action="store_true", help="also Redis and NATS (started on free ports)")
    ap.add_argument("--one-process", action="store_true",
                    help="the consumer on the producer's event loop (as before stop 31)")
    args = ap.parse_args()
    names = args.consumers.split(",") + (["redis", "nats"] if args.peers else [])
    print(f"one {SIZE}-byte message per request at a steady {args.rate:,}/s for {args.seconds:g} s; "
          f"latency from when each message was sent to when the waiting consumer had it "
          f"(bayou fsync={args.fsync})")
    for rnd in range(args.rounds):
        for name in names:
            system = SYSTEMS[name]()
            if name in ("redis", "nats"):
                import peers
                server = (peers.start_redis if name == "redis" else peers.start_nats)("never")
                try:
                    got = figures(*measure(system, server.port, args.rate, args.seconds,
                                           not args.one_process))
                    print(f"round {rnd + 1} {system.name:<16} {got}", flush=True)
                finally:
                    server.stop()
                continue
            broker = Broker(args.fsync)
            try:
                port = broker.ports[system.port_key]
                got = figures(*measure(system, port, args.rate, args.seconds, not args.one_process))
                print(f"round {rnd + 1} {system.name:<16} {got}", flush=True)
            finally:
                broker.stop()


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == CONSUMER:
        consumer_process(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    else:
        main()
