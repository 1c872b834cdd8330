"""CPU instructions the broker spends per one-message produce request, per protocol front end: a
deterministic before/after figure for work on the request path (wall-clock timings on a shared VM
vary by 20-50% between identical runs; instruction counts by well under 1%).

Prints figures; never passes or fails. Each protocol is run in a child process of this script
(``--child PROTOCOL N``) under valgrind's cachegrind (``--cache-sim=no``: its "I refs" only): an
in-process broker (fsync=never, no sockets) with the protocol's service object, a 1-partition
topic made through the protocol, and one pre-encoded one-message (100-byte value, acks=1) produce
request served 200 times as warm-up and then N times, by the same code. The child is run with
N=0 and N=``--requests``: the difference over N is what one request costs, start-up and set-up
cancelling out. The child checks that its partition stored every request's record (warm-up and
measured), so a refused request cannot pass as a cheap one. ``--wall`` (the default) also runs the
child once without valgrind and prints the wall time per request, for reference only.

What each figure covers: the function the protocol's connection loop (server/frames.py's
``serve_frames``) calls per frame, once the frame is split from the byte stream, without the socket
write (frame splitting and the write are not counted):

- **kafka**: ``KafkaService.answer(frame, session, advertised)`` (decode, Produce handler, append,
  the response frame; metering included);
- **cursus**: ``CursusService.handle(body, state)`` then ``encode_frame`` of its reply (what
  ``cursus_handler``'s per-frame ``handle`` does), for ``PUBLISH topic=.. acks=1 producerId=..
  message=<100 bytes>``;
- **tank**: ``codec.decode_request(msg_id, payload)`` then ``TankService.handle(conn, request)``
  (what ``tank_handler``'s per-frame ``handle`` does); the reply goes to ``TankConnection.send``,
  whose writer here is a stub (``write`` keeps the bytes, ``drain`` returns);
- **iggy**: ``IggyService.handle_legacy(session, frame)`` then ``_metered`` and ``meter.record``
  (what ``_serve``'s per-frame ``handle`` does), for a legacy-transport SendMessages after a login;
- **v1**: ``RtesService.handle_line(line)`` for ``V1|<cid>|PRODUCE|topic k:<100 bytes>``;
- **kafka-fetch**: kafka's produce, then a consumer's Fetch v11 of that record (max_wait 0, the
  frame built beforehand as a client would): its figure minus kafka's is what one fetch of the
  newest record costs, the other half of a waiting consumer's end-to-end path.

``--socket`` measures whole broker subprocesses instead, served through a socket one request at a
time (pipeline_bench.py's client and requests; the client's setup, its login and topic, made in
both runs and so subtracted), and ``floor_server.py`` (a fixed reply per request) beside them: what
the connection layer adds to the handler's figure. The kernel's work (the loopback send, which
runs the client's receive too) is not counted by valgrind.

Needs valgrind (``apt-get install valgrind``). The children run with PYTHONHASHSEED=0 and
OPENBLAS_NUM_THREADS=1 (numpy's BLAS threads spin for a time-dependent while: without it a child's
count varies by ~20 M instructions), ``--jobs`` at a time (the counts do not depend on it). Run
twice, the figures agree to well under 1%; a source file changed between a protocol's two children
spoils its figure.

    .venv/bin/python benchmarks/request_instructions.py
    .venv/bin/python benchmarks/request_instructions.py --protocols kafka,cursus --requests 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bayou.broker import Broker, BrokerConfig  # noqa: E402
from bayou.storage import LogConfig  # noqa: E402
from bayou.storage.config import FsyncPolicy  # noqa: E402

TOPIC = "pipe"
VALUE = b"x" * 100
WARMUP = 200
PROTOCOLS = ("kafka", "cursus", "tank", "iggy", "v1", "kafka-fetch")

Step = Callable[[], Awaitable[None]]


# -- the child: one protocol's service, one pre-encoded request, served WARMUP + N times ----------

class _Writer:
    """A StreamWriter stand-in for the services that write their own replies (TANK)."""

    def __init__(self) -> None:
        self.last: bytes = b""

    def write(self, data: bytes) -> None:
        self.last = data

    async def drain(self) -> None:
        return None


class _Conn:
    """A Connection stand-in: what the services read of one (its peer, its writer)."""

    def __init__(self) -> None:
        self.peer = "127.0.0.1:40000"
        self.writer = _Writer()
        self.busy = 0


async def _kafka(b: Broker) -> tuple[str, Step]:
    from bayou.protocols.kafka import codec
    from bayou.protocols.kafka.build import build
    from bayou.protocols.kafka.codes import ApiKey
    from bayou.protocols.kafka.framing import FrameReader, RequestHeader
    from bayou.records.batch import Record, encode_batch
    from bayou.server.kafka import KafkaService
    from bayou.server.kafka_context import Advertised, Session

    svc = KafkaService(b)
    session = Session("127.0.0.1:40000")
    where = Advertised(0, "localhost", 9092)

    def frame(key: ApiKey, version: int, **fields: Any) -> bytes:
        body = build(codec.request_schema(key, version), **fields)
        (one,) = FrameReader().feed(codec.encode_request(RequestHeader(key, version, 0, "bench", False, 0),
                                                         body))
        return one

    await svc.answer(frame(ApiKey.CREATE_TOPICS, 4, timeout=10000, topics=[
        {"name": TOPIC, "num_partitions": 1, "replication_factor": 1}]), session, where)
    batch = encode_batch([Record(value=VALUE, timestamp=int(time.time() * 1000))])
    produce = frame(ApiKey.PRODUCE, 7, acks=1, timeout=30000,
                    topic_data=[{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}])

    async def step() -> None:
        await svc.answer(produce, session, where)
    return TOPIC, step


async def _kafka_fetch(b: Broker) -> tuple[str, Step]:
    """kafka's produce, then a consumer's Fetch v11 of that record at its offset (max_wait 0), as
    a waiting consumer's next fetch reads a record just appended: minus kafka's row, a fetch."""
    from bayou.protocols.kafka import codec
    from bayou.protocols.kafka.build import build
    from bayou.protocols.kafka.codes import ApiKey
    from bayou.protocols.kafka.framing import RequestHeader
    from bayou.server.kafka import KafkaService
    from bayou.server.kafka_context import Advertised, Session

    topic, produce = await _kafka(b)
    svc = KafkaService(b)
    session = Session("127.0.0.1:40001")
    where = Advertised(0, "localhost", 9092)
    head = RequestHeader(ApiKey.FETCH, 11, 0, "bench", False, 0)
    schema = codec.request_schema(ApiKey.FETCH, 11)
    frames = {}  # offset -> the Fetch frame (built up front: kio's build is a client's cost)

    def fetch(offset: int) -> bytes:
        body = build(schema, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                     session_id=0, session_epoch=-1, rack_id="", topics=[{"topic": topic, "partitions": [
                         {"partition": 0, "fetch_offset": offset, "current_leader_epoch": -1,
                          "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}])
        return codec.encode_request(head, body)[4:]

    log = b.partition(topic, 0).log

    async def step() -> None:
        await produce()
        offset = log.next_offset - 1
        frame = frames.pop(offset, None) or fetch(offset)
        reply = await svc.answer(frame, session, where)
        data = reply if isinstance(reply, bytes | bytearray) else b"".join(reply or ())
        if VALUE not in data:
            raise SystemExit(f"Fetch of offset {offset} returned no record: {reply!r}")

    for offset in range(WARMUP + 20_000):
        frames[offset] = fetch(offset)
    return topic, step


async def _cursus(b: Broker) -> tuple[str, Step]:
    from bayou.protocols.cursus.framing import encode_frame
    from bayou.server.cursus import Advertised, ConnState, CursusService

    svc = CursusService(b, Advertised("localhost", 9000))
    state = ConnState()
    reply = await svc.handle(f"CREATE topic={TOPIC} partitions=1".encode(), state)
    if not isinstance(reply, bytes) or reply.startswith(b"ERROR"):
        raise SystemExit(f"Cursus CREATE refused: {reply!r}")
    body = f"PUBLISH topic={TOPIC} acks=1 producerId=bench message=".encode() + VALUE

    async def step() -> None:
        reply = await svc.handle(body, state)
        if reply is not None:
            _ = [encode_frame(r) for r in reply] if isinstance(reply, list) else encode_frame(reply)
    return TOPIC, step


async def _tank(b: Broker) -> tuple[str, Step]:
    from bayou.protocols.tank import codec
    from bayou.protocols.tank import messages as tm
    from bayou.protocols.tank.bundles import TankMessage, encode_bundle
    from bayou.protocols.tank.framing import FrameReader
    from bayou.server.tank import TankConnection, TankService

    svc = TankService(b)
    conn = TankConnection(_Conn())  # type: ignore[arg-type]

    def frame(req: Any) -> Any:
        (one,) = FrameReader().feed(codec.encode_request_frame(req))
        return one

    create = frame(tm.CreateTopic(1, TOPIC, 1, ""))
    await svc.handle(conn, codec.decode_request(create.msg_id, create.payload))
    bundle = encode_bundle([TankMessage(0, int(time.time() * 1000), None, VALUE)], compress=False)
    produce = frame(tm.Produce(1, (tm.ProduceTopic(TOPIC, (tm.ProduceEntry(0, bundle),)),), required_acks=1))

    async def step() -> None:
        await svc.handle(conn, codec.decode_request(produce.msg_id, produce.payload))
    return TOPIC, step


async def _iggy(b: Broker) -> tuple[str, Step]:
    from bayou.protocols.iggy import messages as im
    from bayou.protocols.iggy.codec import encode_request_frame
    from bayou.protocols.iggy.framing import Dialect, LegacyFrameReader
    from bayou.server.iggy.service import IggyService, _metered

    svc = IggyService(b, port=8090)
    svc.serve_authorizer()  # as server/app.py does
    await svc.start()
    session = svc.open_session(_Conn())  # type: ignore[arg-type]

    def frame(req: Any) -> Any:
        (one,) = LegacyFrameReader().feed(encode_request_frame(req, Dialect.LEGACY))
        return one

    for req in (im.LoginUser("iggy", "iggy"), im.CreateStream(TOPIC),
                im.CreateTopic(im.Identifier(TOPIC), TOPIC, 1)):
        reply = await svc.handle_legacy(session, frame(req))
        if reply[:4] != b"\0\0\0\0":
            raise SystemExit(f"Iggy {type(req).__name__} refused: {reply[:4].hex()}")
    send = frame(im.SendMessages(im.Identifier(TOPIC), im.Identifier(TOPIC), im.Partitioning.balanced(),
                                 (im.Message(VALUE),)))

    async def step() -> None:
        started = time.perf_counter()
        reply = await svc.handle_legacy(session, send)
        command, failed = _metered(send, reply)
        svc.meter.record(command, started, failed)
    return "", step


async def _v1(b: Broker) -> tuple[str, Step]:
    from bayou.server.rtes import RtesService

    svc = RtesService(b)
    reply = await svc.handle_line(f"V1|0|ADMIN_CREATE_TOPIC|{TOPIC} 1 1".encode())
    if b"|OK" not in reply:
        raise SystemExit(f"V1 ADMIN_CREATE_TOPIC refused: {reply!r}")
    line = f"V1|1|PRODUCE|{TOPIC} k:".encode() + VALUE

    async def step() -> None:
        await svc.handle_line(line)
    return TOPIC, step


SETUPS: dict[str, Callable[[Broker], Awaitable[tuple[str, Step]]]] = {
    "kafka": _kafka, "cursus": _cursus, "tank": _tank, "iggy": _iggy, "v1": _v1,
    "kafka-fetch": _kafka_fetch}


def _stored(b: Broker, topic: str) -> dict[str, int]:
    """Records stored per topic (partition 0); ``topic`` empty: every topic the protocol made."""
    names = [topic] if topic else [t for t in b.list_topics() if not t.startswith("__")]
    return {t: b.partition(t, 0).log.next_offset for t in names}


async def child(protocol: str, n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bayou-ri-") as tmp:
        b = Broker(BrokerConfig(data_dir=Path(tmp) / "d", log=LogConfig(fsync=FsyncPolicy("never"))))
        await b.start()
        try:
            topic, step = await SETUPS[protocol](b)
            for _ in range(WARMUP):
                await step()
            started = time.perf_counter()
            for _ in range(n):
                await step()
            took = time.perf_counter() - started
            stored = _stored(b, topic)
        finally:
            await b.stop()
    if sum(stored.values()) != WARMUP + n:
        raise SystemExit(f"{protocol}: {WARMUP + n} produce requests stored {stored} records: "
                         "a request failed")
    print(json.dumps({"stored": stored, "seconds": took}), flush=True)


# -- the parent: each child under valgrind with N=0 and N=--requests ------------------------------

_CHILD_ENV = {"PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT / "src"), "OPENBLAS_NUM_THREADS": "1",
              "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _run_child(protocol: str, n: int, valgrind: bool) -> tuple[int, float]:
    """(instructions, seconds of the measured loop) of one child run; instructions 0 without valgrind."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", protocol, str(n)]
    if valgrind:
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *cmd]
    # numpy (imported by bayou.records.v2columns) starts OpenBLAS threads that spin for a while:
    # millions of instructions that vary with timing, unless there are none
    env = dict(os.environ, **_CHILD_ENV)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"{protocol} child (N={n}) failed with status {proc.returncode}:\n{tail}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    refs = 0
    if valgrind:
        lines = [ln for ln in proc.stderr.splitlines() if re.search(r"\bI\s+refs:", ln)]
        if not lines:
            raise SystemExit(f"{protocol} child (N={n}): no 'I refs:' line from valgrind")
        refs = int(lines[-1].split()[-1].replace(",", ""))
    return refs, float(result["seconds"])


# -- --socket: a broker subprocess under valgrind, driven through a socket ------------------------

def _socket_run(protocol: str, n: int) -> int:
    """Instructions (cachegrind I refs) of a whole broker subprocess (``floor``: floor_server.py)
    that served ``n`` one-message produce requests of ``protocol`` one at a time (window 1, so no
    coalescing, which a valgrind-slowed broker would see more of), pipeline_bench.py's client
    and requests; with ``n`` 0 only the client's setup (login, topic) is made."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import pipeline_bench as pb

    tmp = Path(tempfile.mkdtemp(prefix="bayou-ri-sock-"))
    try:
        ports = {k: pb._free_port() for k in ("rtes", "cursus", "iggy", "tank", "kafka")}
        if protocol == "floor":
            cmd = [sys.executable, str(Path(__file__).with_name("floor_server.py")), str(ports["kafka"])]
        else:
            cmd = [sys.executable, "-m", "bayou", "serve", "--data-dir", str(tmp / "data"), "--http", "off",
                   "--fsync", "never", "--advertised-host", "127.0.0.1", "--log-level", "warning",
                   *(arg for k, port in ports.items() for arg in (f"--{k}", f"127.0.0.1:{port}"))]
        log = tmp / "valgrind.txt"
        proc = subprocess.Popen(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                                 "--cachegrind-out-file=/dev/null", f"--log-file={log}", *cmd],
                                env=dict(os.environ, **_CHILD_ENV), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            proto = pb.PROTOCOLS["kafka" if protocol == "floor" else protocol]()
            port = ports[proto.port_key]
            pb._wait_for_port(proc, port, time.monotonic() + 600)
            asyncio.run(pb.window_run(port, proto, n, 1))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(600)
        refs = re.findall(r"\bI\s+refs:\s+([\d,]+)", log.read_text())
        if not refs:
            raise SystemExit(f"{protocol} (socket, N={n}): no 'I refs:' line from valgrind")
        return int(refs[-1].replace(",", ""))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocols", default=",".join(PROTOCOLS),
                    help="comma-separated: " + ",".join(PROTOCOLS))
    ap.add_argument("--requests", type=int, default=3000, help="measured requests per protocol")
    ap.add_argument("--wall", action=argparse.BooleanOptionalAction, default=True,
                    help="also the wall time per request of a plain (non-valgrind) child run")
    ap.add_argument("--jobs", type=int, default=2, help="children run at a time")
    ap.add_argument("--socket", action="store_true",
                    help="instead: whole broker subprocesses under valgrind, served through a socket "
                         "one request at a time, and floor_server.py for comparison")
    ap.add_argument("--child", nargs=2, metavar=("PROTOCOL", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        asyncio.run(child(args.child[0], int(args.child[1])))
        return
    protocols = [p for p in args.protocols.split(",") if p]
    unknown = [p for p in protocols if p not in SETUPS]
    if unknown:
        raise SystemExit(f"unknown protocol(s) {', '.join(unknown)}; known: {', '.join(PROTOCOLS)}")
    if args.requests <= 0:
        raise SystemExit("--requests must be positive")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found: install it (apt-get install valgrind)")
    if args.socket:
        protocols = [p for p in protocols if p != "kafka-fetch"]  # produce requests only
        print(f"instructions per one-message ({len(VALUE)}-byte) produce request of a broker subprocess "
              f"served through a socket one at a time, fsync=never ({args.requests:,} requests; "
              "cachegrind I refs, user space only)", flush=True)
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            runs = {(p, n): pool.submit(_socket_run, p, n) for p in ("floor", *protocols)
                    for n in (0, args.requests)}
            for p in ("floor", *protocols):
                per = (runs[p, args.requests].result() - runs[p, 0].result()) / args.requests
                print(f"{p if p != 'floor' else 'floor (fixed reply)':<20} {per:>12,.0f}", flush=True)
        return
    print(f"instructions per one-message ({len(VALUE)}-byte) produce request, in process, fsync=never, "
          f"acks=1 ({args.requests:,} requests after {WARMUP} warm-up; cachegrind I refs)", flush=True)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        runs = {(p, n): pool.submit(_run_child, p, n, True) for p in protocols for n in (0, args.requests)}
        per = {p: (runs[p, args.requests].result()[0] - runs[p, 0].result()[0]) / args.requests
               for p in protocols}
    # the plain runs after the valgrind ones, one at a time: nothing else of ours on the CPUs
    wall = {p: _run_child(p, args.requests, False)[1] / args.requests * 1e6 for p in protocols} \
        if args.wall else {}
    print(f"{'protocol':<10} {'instructions/request':>21}" + (f" {'wall us/request':>16}" if wall else ""))
    for p in protocols:
        print(f"{p:<10} {per[p]:>21,.0f}" + (f" {wall[p]:>16.1f}" if wall else ""))

if __name__ == "__main__":
    main()
