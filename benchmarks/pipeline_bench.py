"""One connection, one message per produce request, requests pipelined: what issue 18's third row
measures ("10k msg/s at p99 <= 5 ms" under fsync=always), for every protocol whose connection is
pipelined (server/frames.py): Kafka, Cursus, TANK and Iggy's legacy binary transport; V1 is
answered one line at a time (its PRODUCE reply carries the high watermark it left) and is run for
contrast.

Prints figures; never passes or fails. A broker subprocess per fsync policy with every listener on
loopback; a raw asyncio client per protocol built on bayou's own codecs writes pre-encoded
one-message (100-byte) produce requests on one connection and reads the replies in order:

- **window**: ``--window`` requests in flight, ``--requests`` in all: msg/s, p50/p99 latency, and
  the CPU time of the broker's event-loop thread per request (from /proc: Linux only);
- **rate**: a steady ``--rate`` requests/s for ``--seconds`` (open loop: each request's latency
  counts from when it was due, so a stall is not hidden): the rate reached, p50/p99.

``--floor`` first runs the Kafka requests against ``floor_server.py`` (uvloop, a callback
protocol, a fixed reply per request, nothing decoded or stored): the part of a request's cost that
any Python asyncio server pays on this machine (the event loop, the socket reads and writes), so
the rest of bayou's figure is its own.

    .venv/bin/python benchmarks/pipeline_bench.py
    .venv/bin/python benchmarks/pipeline_bench.py --fsync always --protocols kafka,cursus
    .venv/bin/python benchmarks/pipeline_bench.py --floor --fsync never --window 1 --rate 0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bayou.protocols.cursus.framing import encode_frame as cursus_frame  # noqa: E402
from bayou.protocols.iggy import messages as im  # noqa: E402
from bayou.protocols.iggy.codec import encode_request_frame as encode_iggy  # noqa: E402
from bayou.protocols.iggy.framing import Dialect  # noqa: E402
from bayou.protocols.kafka import codec as kafka_codec  # noqa: E402
from bayou.protocols.kafka.build import build  # noqa: E402
from bayou.protocols.kafka.codes import ApiKey  # noqa: E402
from bayou.protocols.kafka.framing import RequestHeader  # noqa: E402
from bayou.protocols.tank import codec as tank_codec  # noqa: E402
from bayou.protocols.tank import messages as tm  # noqa: E402
from bayou.protocols.tank.bundles import TankMessage, encode_bundle  # noqa: E402
from bayou.records.batch import Record, encode_batch  # noqa: E402

TOPIC = "pipe"
VALUE = b"x" * 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _main_thread_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid``'s main thread so far."""
    stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_for_port(proc: subprocess.Popen[bytes], port: int, deadline: float) -> None:
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("server did not start")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)


class Floor:
    """``floor_server.py``: a fixed reply per Kafka-framed request, on a callback protocol."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("floor_server.py")),
                                      str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_port(self.proc, self.port, time.monotonic() + 30)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Broker:
    def __init__(self, fsync: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bayou-pipe-"))
        self.ports = {k: _free_port() for k in ("rtes", "cursus", "iggy", "tank", "kafka")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bayou", "serve", "--data-dir", str(self.dir / "data"),
             "--rtes", f"127.0.0.1:{self.ports['rtes']}", "--cursus", f"127.0.0.1:{self.ports['cursus']}",
             "--iggy", f"127.0.0.1:{self.ports['iggy']}", "--tank", f"127.0.0.1:{self.ports['tank']}",
             "--kafka", f"127.0.0.1:{self.ports['kafka']}", "--http", "off", "--fsync", fsync,
             "--advertised-host", "127.0.0.1", "--log-level", "warning"],
            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        for port in self.ports.values():
            _wait_for_port(self.proc, port, deadline)

    def loop_cpu(self) -> float:
        """CPU seconds of the broker's main thread (its event loop) so far."""
        return _main_thread_cpu(self.proc.pid)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the protocols: a setup, one pre-encoded request, and how to cut the reply stream ------------

class Proto:
    name = ""
    port_key = ""

    async def setup(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        pass

    def request(self, i: int) -> bytes:
        raise NotImplementedError

    async def reply(self, r: asyncio.StreamReader) -> None:
        raise NotImplementedError


async def _sized(r: asyncio.StreamReader, fmt: str = ">I") -> bytes:
    (n,) = struct.unpack(fmt, await r.readexactly(4))
    return await r.readexactly(n)


class Kafka(Proto):
    name, port_key = "kafka", "kafka"

    def __init__(self) -> None:
        batch = encode_batch([Record(value=VALUE, timestamp=int(time.time() * 1000))])
        body = build(kafka_codec.request_schema(ApiKey.PRODUCE, 7), acks=1, timeout=30000,
                     topic_data=[{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}])
        header = RequestHeader(ApiKey.PRODUCE, 7, 0, "pipe-bench", False, 0)
        self.frame = bytearray(kafka_codec.encode_request(header, body))

    async def setup(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        body = build(kafka_codec.request_schema(ApiKey.CREATE_TOPICS, 4), timeout=10000, topics=[
            {"name": TOPIC, "num_partitions": 1, "replication_factor": 1}])
        w.write(kafka_codec.encode_request(RequestHeader(ApiKey.CREATE_TOPICS, 4, 0, "pipe-bench", False, 0),
                                           body))
        await _sized(r)

    def request(self, i: int) -> bytes:
        struct.pack_into(">i", self.frame, 8, i & 0x7FFFFFFF)  # the correlation id
        return bytes(self.frame)

    async def reply(self, r: asyncio.StreamReader) -> None:
        await _sized(r)


class Cursus(Proto):
    name, port_key = "cursus", "cursus"

    async def setup(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(cursus_frame(f"CREATE topic={TOPIC} partitions=1".encode()))
        await _sized(r)

    def request(self, i: int) -> bytes:
        text = f"PUBLISH topic={TOPIC} acks=1 producerId=bench message={VALUE.decode()}"
        return cursus_frame(text.encode())

    async def reply(self, r: asyncio.StreamReader) -> None:
        body = await _sized(r)
        if body.startswith(b"ERROR"):
            raise SystemExit(f"Cursus refused: {body[:200]!r}")


class Tank(Proto):
    name, port_key = "tank", "tank"

    def __init__(self) -> None:
        self.bundle = encode_bundle([TankMessage(0, int(time.time() * 1000), None, VALUE)], compress=False)

    async def setup(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(tank_codec.encode_request_frame(tm.CreateTopic(1, TOPIC, 1, "")))
        await self.reply(r)

    def request(self, i: int) -> bytes:
        return tank_codec.encode_request_frame(tm.Produce(
            i & 0xFFFFFFFF, (tm.ProduceTopic(TOPIC, (tm.ProduceEntry(0, self.bundle),)),), required_acks=1))

    async def reply(self, r: asyncio.StreamReader) -> None:
        while True:
            msg_id, n = struct.unpack("<BI", await r.readexactly(5))
            await r.readexactly(n)
            if msg_id != 0x03:  # the broker's ping on accept
                return


class Iggy(Proto):
    """Iggy's legacy binary transport (what the 0.8 SDKs speak): a login first."""

    name, port_key = "iggy", "iggy"

    def __init__(self) -> None:
        self.send = encode_iggy(im.SendMessages(im.Identifier(TOPIC), im.Identifier(TOPIC),
                                                im.Partitioning.balanced(), (im.Message(VALUE),)),
                                Dialect.LEGACY)

    async def setup(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for req in (im.LoginUser("iggy", "iggy"), im.CreateStream(TOPIC),
                    im.CreateTopic(im.Identifier(TOPIC), TOPIC, 1)):
            w.write(encode_iggy(req, Dialect.LEGACY))
            await self._status(r)  # the stream and topic may exist already (a second run)

    @staticmethod
    async def _status(r: asyncio.StreamReader) -> int:
        status, n = struct.unpack("<II", await r.readexactly(8))
        await r.readexactly(n)
        return int(status)

    def request(self, i: int) -> bytes:
        return self.send

    async def reply(self, r: asyncio.StreamReader) -> None:
        status = await self._status(r)
        if status:
            raise SystemExit(f"iggy SEND_MESSAGES status {status}")


class V1(Proto):
    name, port_key = "v1 (not pipelined)", "rtes"

    async def setup(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(f"V1|0|ADMIN_CREATE_TOPIC|{TOPIC} 1 1\n".encode())  # or it exists (another protocol made it)
        await r.readline()

    def request(self, i: int) -> bytes:
        return f"V1|{i}|PRODUCE|{TOPIC} k:{VALUE.decode()}\n".encode()

    async def reply(self, r: asyncio.StreamReader) -> None:
        line = await r.readline()
        if b"|OK|" not in line:
            raise SystemExit(f"V1 refused: {line[:200]!r}")


PROTOCOLS: dict[str, Callable[[], Proto]] = {"kafka": Kafka, "cursus": Cursus, "tank": Tank, "iggy": Iggy,
                                             "v1": V1}


# -- the two workloads -----------------------------------------------------------------------------

def _pct(lat: list[float], q: float) -> float:
    lat = sorted(lat)
    return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000


Result = tuple[float, list[float]]  # (msg/s, latencies in s)


async def window_run(port: int, proto: Proto, requests: int, window: int) -> Result:
    """``requests`` one-message produce requests, ``window`` in flight on one connection."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    await proto.setup(r, w)
    sent: deque[float] = deque()
    lat: list[float] = []
    started = time.perf_counter()
    credit = asyncio.Semaphore(window)

    async def write() -> None:
        for i in range(requests):
            await credit.acquire()
            sent.append(time.perf_counter())
            w.write(proto.request(i))

    writer = asyncio.create_task(write())
    for _ in range(requests):
        await proto.reply(r)
        lat.append(time.perf_counter() - sent.popleft())
        credit.release()
    await writer
    took = time.perf_counter() - started
    w.close()
    return requests / took, lat


async def rate_run(port: int, proto: Proto, rate: int, seconds: float) -> Result:
    """A steady ``rate`` requests/s for ``seconds`` on one connection (open loop: each latency
    counts from when its request was due)."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    await proto.setup(r, w)
    total = int(rate * seconds)
    due: deque[float] = deque()
    lat: list[float] = []
    start = time.perf_counter() + 0.05

    async def write() -> None:
        i = 0
        while i < total:
            now = time.perf_counter()
            k = min(total, int((now - start) * rate) + 1)
            while i < k:  # every request due by now, each stamped with when it was due
                due.append(start + i / rate)
                w.write(proto.request(i))
                i += 1
            await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))

    writer = asyncio.create_task(write())
    for _ in range(total):
        await proto.reply(r)
        lat.append(time.perf_counter() - due.popleft())
    await writer
    took = time.perf_counter() - start
    w.close()
    return total / took, lat


def _figures(result: Result, with_max: bool = False) -> str:
    rate, lat = result
    out = f"{rate:>9,.0f} msg/s   p50 {_pct(lat, 0.5):6.2f} ms   p99 {_pct(lat, 0.99):7.2f} ms"
    return out + (f"   (max {max(lat) * 1000:.1f} ms)" if with_max else "")


def _run(coro: Coroutine[Any, Any, Result], timeout: float, with_max: bool = False) -> str:
    async def bounded() -> str:
        try:
            return _figures(await asyncio.wait_for(coro, timeout), with_max)
        except TimeoutError:
            return f"no answer within {timeout:g} s"
    return asyncio.run(bounded())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fsync", default="always,never", help="comma-separated broker fsync policies")
    ap.add_argument("--protocols", default="kafka,cursus,tank,iggy,v1")
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--window", type=int, default=64, help="requests in flight (window run)")
    ap.add_argument("--rate", type=int, default=10_000, help="requests/s (rate run; 0 skips it)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one run may take")
    ap.add_argument("--floor", action="store_true",
                    help="first the same Kafka requests against floor_server.py (a fixed reply per "
                         "request): the event loop's and the kernel's share of a request's cost")
    ap.add_argument("--profile", metavar="FILE",
                    help="record the broker with py-spy (.svg: a flame graph; .txt: collapsed stacks)")
    args = ap.parse_args()
    print(f"one connection, one {len(VALUE)}-byte message per produce request, pipelined "
          f"(window {args.window}; steady {args.rate:,}/s for {args.seconds:g} s)")
    if args.floor:
        floor = Floor()
        try:
            cpu = _main_thread_cpu(floor.proc.pid)
            got = _run(window_run(floor.port, Kafka(), args.requests, args.window), args.timeout)
            cpu = (_main_thread_cpu(floor.proc.pid) - cpu) / args.requests * 1e6
            print(f"{'floor':<12} {'fixed reply':<20} window: {got}   loop {cpu:4.0f} us/request", flush=True)
            if args.rate:
                got = _run(rate_run(floor.port, Kafka(), args.rate, args.seconds), args.timeout,
                           with_max=True)
                print(f"{'floor':<12} {'fixed reply':<20} rate:   {got}", flush=True)
        finally:
            floor.stop()
    for fsync in args.fsync.split(","):
        broker = Broker(fsync)
        spy = None
        if args.profile:
            spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking",
                                    "-r", "500", "-o", f"{fsync}-{args.profile}", "-p", str(broker.proc.pid),
                                    "-f", "raw" if args.profile.endswith(".txt") else "flamegraph"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for name in args.protocols.split(","):
                proto = PROTOCOLS[name]()
                port = broker.ports[proto.port_key]
                cpu = broker.loop_cpu()
                got = _run(window_run(port, proto, args.requests, args.window), args.timeout)
                cpu = (broker.loop_cpu() - cpu) / args.requests * 1e6
                print(f"fsync={fsync:<6} {proto.name:<20} window: {got}   loop {cpu:4.0f} us/request",
                      flush=True)
                if args.rate:
                    proto = PROTOCOLS[name]()
                    got = _run(rate_run(port, proto, args.rate, args.seconds), args.timeout, with_max=True)
                    print(f"fsync={fsync:<6} {proto.name:<20} rate:   {got}", flush=True)
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            broker.stop()
    _ = statistics  # figures are percentiles of the sorted samples


if __name__ == "__main__":
    main()
