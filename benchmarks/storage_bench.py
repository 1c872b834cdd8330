"""Storage engine throughput: sequential append, sequential read, and group-commit fsync appends.

Runs in process on a temporary directory and prints figures; it never passes or fails on time.

    .venv/bin/python benchmarks/storage_bench.py [--records N] [--batch N] [--value-size B] [--appenders N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from bayou.records import Record, encode_batch
from bayou.storage import FsyncPolicy, LogConfig, PartitionLog
from bayou.storage import segment as segment_module

MIB = 1024 * 1024


def make_batch(batch: int, value_size: int) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([Record(os.urandom(value_size), key=None, timestamp=now) for _ in range(batch)])


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def bench_append(path: Path, records: int, batch: int, value_size: int) -> PartitionLog:
    config = LogConfig(fsync=FsyncPolicy("never"), segment_bytes=1 << 30)
    log = PartitionLog(path, config)
    data = make_batch(batch, value_size)
    appends = records // batch
    t0 = time.perf_counter()
    for _ in range(appends):
        log.append(data)
    elapsed = time.perf_counter() - t0
    n = appends * batch
    size = appends * len(data)
    print(f"append  (fsync=never): {n:,} records of {value_size} B in batches of {batch:,} "
          f"({len(data):,} B each) in {elapsed:.2f} s")
    print(f"    {rate(n, elapsed):,.0f} records/s   {rate(size / MIB, elapsed):,.1f} MiB/s   "
          f"{rate(appends, elapsed):,.0f} batches/s   segments: {len(log.segments)}")
    return log


def bench_read(log: PartitionLog, value_size: int, read_bytes: int = MIB) -> None:
    offset = log.log_start_offset
    end = log.next_offset
    count = 0
    size = 0
    reads = 0
    t0 = time.perf_counter()
    while offset < end:
        res = log.read(offset, read_bytes)
        count += res.record_count
        size += len(res.data)
        reads += 1
        offset = res.next_offset
    elapsed = time.perf_counter() - t0
    assert count == end - log.log_start_offset, (count, end)
    print(f"read    ({read_bytes // 1024} KiB reads): {count:,} records, {size / MIB:,.1f} MiB "
          f"in {reads:,} reads, {elapsed:.2f} s")
    print(f"    {rate(count, elapsed):,.0f} records/s   {rate(size / MIB, elapsed):,.1f} MiB/s")


def bench_group_commit(path: Path, appenders: int, batch: int, value_size: int, total: int,
                       seconds: float) -> None:
    config = LogConfig(fsync=FsyncPolicy("always"), segment_bytes=1 << 30)
    log = PartitionLog(path, config)
    data = make_batch(batch, value_size)

    # Count fsync rounds: each Segment.sync is one fsync of the log file (plus its indexes).
    syncs = 0
    sync_lock = threading.Lock()
    original_sync = segment_module.Segment.sync

    def counting_sync(self: segment_module.Segment) -> None:
        nonlocal syncs
        with sync_lock:
            syncs += 1
        original_sync(self)

    segment_module.Segment.sync = counting_sync  # type: ignore[method-assign]
    per_thread = max(1, total // batch // appenders)
    done_records = [0] * appenders
    sync_calls = [0] * appenders
    latencies: list[float] = []
    lat_lock = threading.Lock()
    start = threading.Barrier(appenders + 1)
    deadline = 0.0

    def worker(i: int) -> None:
        mine: list[float] = []
        start.wait()
        for _ in range(per_thread):
            if time.perf_counter() > deadline:
                break
            t = time.perf_counter()
            info = log.append(data)
            log.sync_to(info.last_offset + 1)
            mine.append(time.perf_counter() - t)
            done_records[i] += info.record_count
            sync_calls[i] += 1
        with lat_lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(appenders)]
    try:
        for t in threads:
            t.start()
        deadline = time.perf_counter() + seconds
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
    finally:
        segment_module.Segment.sync = original_sync  # type: ignore[method-assign]
    n = sum(done_records)
    calls = sum(sync_calls)
    assert log.durable_offset == log.next_offset == n
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else 0.0
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000 if latencies else 0.0
    print(f"append+sync_to (fsync=always, {appenders} threads): {n:,} records in {calls:,} batches "
          f"of {batch:,}, {elapsed:.2f} s" + ("  (stopped by the time limit)" if n < per_thread * batch
                                                 * appenders else ""))
    print(f"    {rate(n, elapsed):,.0f} records/s   {rate(calls * len(data) / MIB, elapsed):,.1f} MiB/s   "
          f"fsync rounds: {syncs:,}   sync_to calls per fsync: {calls / max(syncs, 1):.2f}")
    print(f"    append+sync latency: p50 {p50:.2f} ms   p99 {p99:.2f} ms")
    log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="records for the append/read runs")
    ap.add_argument("--batch", type=int, default=1_000, help="records per batch")
    ap.add_argument("--value-size", type=int, default=100, help="bytes per record value")
    ap.add_argument("--appenders", type=int, default=8, help="threads in the fsync=always run")
    ap.add_argument("--sync-records", type=int, default=400_000, help="records in the fsync=always run")
    ap.add_argument("--sync-seconds", type=float, default=10.0, help="time limit of the fsync=always run")
    ap.add_argument("--dir", type=Path, default=None, help="parent directory for the temporary data")
    args = ap.parse_args()
    if args.records < args.batch or args.batch < 1 or args.appenders < 1 or args.value_size < 0:
        ap.error("need records >= batch >= 1, appenders >= 1, value-size >= 0")

    with tempfile.TemporaryDirectory(prefix="bayou-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        print(f"data directory: {root}")
        log = bench_append(root / "seq", args.records, args.batch, args.value_size)
        log.flush()
        bench_read(log, args.value_size)
        log.close()
        bench_group_commit(root / "sync", args.appenders, args.batch, args.value_size, args.sync_records,
                           args.sync_seconds)


if __name__ == "__main__":
    main()
