"""The cost of the per-request authorization check (issue 14): produce throughput in batches of
1,000 records of 100 bytes, through the broker API, for three principals in interleaved rounds:

* ``system``: bayou's own work, no check at all (the check-free baseline);
* ``anonymous, all``: today's default (``[security] anonymous = "all"``), the fast path;
* ``user, per-topic grant``: an Iggy user allowed to send to this one topic only, so every
  produce looks the user up in the user store (revocation applies per request), resolves the
  topic to its Iggy (stream, topic) ids in the catalog and walks the permission chains.

It runs in one process with no network (the broker, Iggy's user store and catalog as ``bayou
serve`` wires them, fsync never), which makes the check's share as large as it can be: over a
socket each batch also costs its read and decode. Target: the user's check under 3 % of produce
throughput. Prints figures; never passes or fails.

    .venv/bin/python benchmarks/authz_bench.py
    .venv/bin/python benchmarks/authz_bench.py --batches 300 --rounds 9
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


async def _round(broker: Broker, principal: Principal, batch: bytes, batches: int) -> float:
    """Records per second for ``batches`` produces made as ``principal``."""

    async def run() -> float:
        bind_caller(Caller(principal))
        start = time.perf_counter()
        for _ in range(batches):
            await broker.produce(TOPIC, 0, batch)
        return batches * 1000 / (time.perf_counter() - start)

    return await asyncio.get_running_loop().create_task(run())


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = BrokerConfig(data_dir=Path(tmp) / "data", log=LogConfig(fsync=FsyncPolicy.parse("never")))
        broker = Broker(cfg)
        await broker.start()
        iggy = IggyService(broker, port=0)  # its user store and catalog, as bayou serve wires them
        broker.authorizer.configure(anonymous="all", resolver=iggy.resolve_topic, users=iggy.user_permissions)
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
        rates: dict[str, list[float]] = {name: [] for name in principals}
        for p in principals.values():  # warm-up
            await _round(broker, p, batch, max(1, args.batches // 10))
        for _ in range(args.rounds):
            for name, p in principals.items():
                rates[name].append(await _round(broker, p, batch, args.batches))

        async def checks() -> float:
            bind_caller(Caller(writer))
            n = 100_000
            start = time.perf_counter()
            for _ in range(n):
                broker.authorize("send", TOPIC)
            return (time.perf_counter() - start) / n * 1e9

        per_check_ns = await asyncio.get_running_loop().create_task(checks())
        await broker.stop()

    base = statistics.median(rates["system (no check)"])
    print(f"produce, batches of 1,000 x 100 B records, {args.batches} batches per round, "
          f"{args.rounds} interleaved rounds, {args.other_topics + 1} Iggy topics in the catalog")
    for name, r in rates.items():
        med = statistics.median(r)
        print(f"  {name:<24} {med:>12,.0f} records/s (median; min {min(r):,.0f}, max {max(r):,.0f})"
              f"  {100 * (base - med) / base:+.2f} % cost vs no check")
    print(f"  one check of the per-topic user: {per_check_ns:,.0f} ns "
          f"(= {100 * per_check_ns * 1e-9 * base / 1000:.3f} % of a 1,000-record batch's time)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--other-topics", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
