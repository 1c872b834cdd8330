"""The cost of the per-request authorization check (issue 14): produce throughput in batches of
1,000 records of 100 bytes, through the broker API, for three principals in interleaved rounds:

* ``system``: bayou's own work, no check at all (the check-free baseline);
* ``anonymous, all``: today's default (``[security] anonymous = "all"``), the fast path;
* ``user, per-topic grant``: an Iggy user allowed to send to this one topic only, so every
  produce looks the user up in the user store (revocation applies per request), resolves the
  topic to its Iggy (stream, topic) ids in the catalog and walks the permission chains.

It runs in one process with no network (the broker, Iggy's user store and catalog as ``bayou
serve`` wires them, fsync never), which makes the check's share as large as it can be: over a
socket each batch also costs its read and decode. The principals take turns batch by batch and
each one's median batch time is reported, so a shared machine's load falls on all three alike.
Target: the user's check under 3 % of produce throughput. Prints figures; never passes or fails.

    .venv/bin/python benchmarks/authz_bench.py
    .venv/bin/python benchmarks/authz_bench.py --batches 5000 --other-topics 1000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bayou.broker import Broker, BrokerConfig  # noqa: E402
from bayou.broker.authz import (  # noqa: E402
    ANONYMOUS,
    SYSTEM,
    Caller,
    Permissions,
    Principal,
    StreamPermissions,
    TopicPermissions,
    bind_caller,
)
from bayou.records.batch import encode_batch  # noqa: E402
from bayou.records.model import Record  # noqa: E402
from bayou.server.iggy import IggyService  # noqa: E402
from bayou.storage.config import FsyncPolicy, LogConfig  # noqa: E402

TOPIC = "bench.t"


async def _measure(broker: Broker, principals: list[Principal], batch: bytes, batches: int
                   ) -> list[list[float]]:
    """Seconds per produce, per principal: the principals take turns batch by batch, so the
    load of a shared machine falls on each of them alike."""

    async def run() -> list[list[float]]:
        caller = Caller(SYSTEM)
        bind_caller(caller)
        times: list[list[float]] = [[] for _ in principals]
        clock = time.perf_counter
        for _ in range(batches):
            for i, p in enumerate(principals):
                caller.principal = p
                start = clock()
                await broker.produce(TOPIC, 0, batch)
                times[i].append(clock() - start)
        return times

    return await asyncio.get_running_loop().create_task(run())


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = BrokerConfig(data_dir=Path(tmp) / "data", log=LogConfig(fsync=FsyncPolicy.parse("never")))
        broker = Broker(cfg)
        await broker.start()
        iggy = IggyService(broker, port=0)  # its user store and catalog, as bayou serve wires them
        iggy.serve_authorizer()
        await broker.create_topic(TOPIC, 1)
        stream = iggy.catalog.add_stream("bench", 0)
        for n in range(args.other_topics):  # a catalog of realistic size around it
            other = iggy.catalog.add_stream(f"s{n}", 0)
            iggy.catalog.add_topic(other, "t", f"s{n}.t", 0)
        topic = iggy.catalog.add_topic(stream, "t", TOPIC, 0)
        grant = Permissions(streams=(StreamPermissions(stream.id, topics=(
            TopicPermissions(topic.id, send_messages=True),)),))
        user = iggy.users.create_user("writer", "pw-writer", permissions=grant)
        writer = Principal.login(user.id, user.username)
        batch = encode_batch([Record(b"x" * 100, None, 1_700_000_000_000)] * 1000)
        principals = {"system (no check)": SYSTEM, "anonymous, all": ANONYMOUS,
                      "user, per-topic grant": writer}
        await _measure(broker, list(principals.values()), batch, max(1, args.batches // 10))  # warm-up
        times = await _measure(broker, list(principals.values()), batch, args.batches)
        rates = {name: 1000 / statistics.median(t) for name, t in zip(principals, times, strict=True)}
        means = {name: 1000 * len(t) / sum(t) for name, t in zip(principals, times, strict=True)}

        async def checks() -> float:
            bind_caller(Caller(writer))
            n = 100_000
            start = time.perf_counter()
            for _ in range(n):
                broker.authorize("send", TOPIC)
            return (time.perf_counter() - start) / n * 1e9

        per_check_ns = await asyncio.get_running_loop().create_task(checks())
        await broker.stop()

    base = rates["system (no check)"]
    print(f"produce, batches of 1,000 x 100 B records, {args.batches} batches per principal taken in "
          f"turns, {args.other_topics + 1} Iggy topics in the catalog")
    for name, rate in rates.items():
        print(f"  {name:<24} {rate:>12,.0f} records/s (median batch; mean {means[name]:,.0f})"
              f"  {100 * (base - rate) / base:+.2f} % vs no check")
    print(f"  one check of the per-topic user: {per_check_ns:,.0f} ns "
          f"(= {100 * per_check_ns * 1e-9 * base / 1000:.2f} % of a 1,000-record batch's median time)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--other-topics", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
