"""TANK benchmark: produce N messages in bundles, then consume them back (zero-copy path).

Prints figures; never passes or fails. Targets from the issue: >= 2,000,000 msg/s produce of
100-byte messages in bundles of 1,000, and consume at >= 1 GB/s through the zero-copy path.

A broker subprocess (``bayou serve --tank``, fsync never, then always) and a raw pipelined client
built on bayou's TANK codec, the way tank-cli's ``bm p2b`` works: every Produce request carries up
to 86 bundle entries for one partition (the bundle is encoded once, before the clock starts, so
the client only writes bytes and reads acks; --window requests in flight). Consume then asks for
--fetch bytes at a time from seq 1 to the end; the broker sends the stored bundles straight from
the segment files with os.sendfile. MB/s and GB/s count chunk bytes as they come off the wire.

    .venv/bin/python benchmarks/tank_bench.py
    .venv/bin/python benchmarks/tank_bench.py --messages 200000 --fsync never
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bayou.protocols.tank import codec  # noqa: E402
from bayou.protocols.tank import messages as m  # noqa: E402
from bayou.protocols.tank.bundles import TankMessage, encode_bundle  # noqa: E402

TOPIC = "bench"
_HEAD = struct.Struct("<BI")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(data: Path, port: int, fsync: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bayou", "serve", "--data-dir", str(data), "--rtes", "off", "--cursus", "off",
         "--iggy", "off", "--http", "off", "--tank", f"127.0.0.1:{port}", "--fsync", fsync,
         "--log-level", "warning"],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("broker did not start")


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def send(self, req: object) -> None:
        msg_id, payload = codec.encode_request(req)  # type: ignore[arg-type]
        self.sock.sendall(_HEAD.pack(msg_id, len(payload)) + payload)

    def frame(self) -> tuple[int, memoryview]:
        while True:
            while len(self.buf) < 5:
                self._fill()
            msg_id, size = _HEAD.unpack_from(self.buf)
            while len(self.buf) < 5 + size:
                self._fill(5 + size - len(self.buf))
            payload = memoryview(bytes(self.buf[5 : 5 + size]))
            del self.buf[: 5 + size]
            if msg_id != 3:
                return msg_id, payload

    def read_frame_into(self, view: memoryview) -> int:
        """Read the next non-ping frame's payload into ``view``; returns its size."""
        while True:
            head = bytearray(5)
            self._exact(memoryview(head))
            msg_id, size = _HEAD.unpack(head)
            self._exact(view[:size])
            if msg_id != 3:
                return int(size)

    def _exact(self, view: memoryview) -> None:
        got = 0
        if self.buf:
            n = min(len(self.buf), len(view))
            view[:n] = self.buf[:n]
            del self.buf[:n]
            got = n
        while got < len(view):
            n = self.sock.recv_into(view[got:])
            if not n:
                raise ConnectionError("closed")
            got += n

    def _fill(self, want: int = 1 << 20) -> None:
        data = self.sock.recv(max(want, 1 << 20))
        if not data:
            raise ConnectionError("closed")
        self.buf += data


def run(port: int, args: argparse.Namespace) -> tuple[float, float, int, float]:
    c = Conn(port)
    c.send(m.CreateTopic(1, TOPIC, 1, "log.segment.bytes=256mb\n"))
    c.frame()
    payload = os.urandom(args.size)
    bundle = encode_bundle([TankMessage(0, 0, None, payload) for _ in range(args.batch)], compress=False)
    bundles = args.messages // args.batch
    per_request = 86  # what tank-cli bm p2b puts in one request
    requests = []
    left, rid = bundles, 0
    while left:
        n = min(per_request, left)
        rid += 1
        req = m.Produce(rid, (m.ProduceTopic(TOPIC, tuple(m.ProduceEntry(0, bundle) for _ in range(n))),))
        msg_id, body = codec.encode_request(req)
        requests.append(_HEAD.pack(msg_id, len(body)) + body)
        left -= n
    t0 = time.perf_counter()
    inflight = 0
    for frame in requests:
        c.sock.sendall(frame)
        inflight += 1
        if inflight >= args.window:
            msg_id, resp = c.frame()
            assert msg_id == 1 and not any(resp[4:]), "produce error"
            inflight -= 1
    while inflight:
        msg_id, resp = c.frame()
        assert msg_id == 1 and not any(resp[4:]), "produce error"
        inflight -= 1
    produce_s = time.perf_counter() - t0

    seq, got_bytes, total = 1, 0, bundles * args.batch
    record = len(bundle) + len(codec_varint(len(bundle)))
    sink = bytearray(args.fetch + (1 << 20))
    view = memoryview(sink)
    t0 = time.perf_counter()
    while seq <= total:
        c.send(m.Consume(9, (m.ConsumeTopic(TOPIC, (m.ConsumePartition(0, seq, args.fetch),)),)))
        size = c.read_frame_into(view)  # the response lands in one preallocated buffer
        header_len = int.from_bytes(view[:4], "little")
        chunk = size - 4 - header_len
        if not chunk:
            break
        got_bytes += chunk  # whole bundles of args.batch messages each
        seq += chunk // record * args.batch
    consume_s = time.perf_counter() - t0
    c.sock.close()
    return produce_s, consume_s, got_bytes, total / produce_s


def codec_varint(n: int) -> bytes:
    from bayou.records.tank import write_varint
    return write_varint(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--window", type=int, default=4, help="produce requests in flight")
    ap.add_argument("--fetch", type=int, default=64 * 1024 * 1024, help="consume fetch size")
    ap.add_argument("--fsync", action="append", help="broker fsync policies (default: never, always)")
    args = ap.parse_args()
    print(f"TANK benchmark: {args.messages:,} messages of {args.size} B in bundles of {args.batch:,}, "
          f"86 bundles per request, loopback, {os.cpu_count()} cores")
    for fsync in args.fsync or ["never", "always"]:
        tmp = Path(tempfile.mkdtemp(prefix="tank-bench-"))
        port = _free_port()
        proc = _start(tmp / "data", port, fsync)
        try:
            produce_s, consume_s, nbytes, rate = run(port, args)
        finally:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            shutil.rmtree(tmp, ignore_errors=True)
        n = args.messages
        print(f"\n[fsync={fsync}]")
        print(f"  produce : {rate:>12,.0f} msg/s  {n * args.size / produce_s / 1e6:8.1f} MB/s payload")
        print(f"  consume : {n / consume_s:>12,.0f} msg/s  {nbytes / consume_s / 1e9:8.2f} GB/s on the wire "
              f"({nbytes / 1e6:.0f} MB in {consume_s:.3f} s, zero-copy)")


if __name__ == "__main__":
    main()
