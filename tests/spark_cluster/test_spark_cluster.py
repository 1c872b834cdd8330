"""The README's "Run on a cluster" walkthrough, run for real: spark-submit to a standalone master
with two workers, bayou shipped as dist/bayou.zip to executors whose Python lacks bayou.

Each test checks where the work ran (the application is in the master's list of completed
applications, and its tasks were started by executors in the workers' work directories, not by a
local-mode driver) and the exact output (record counts, no duplicates, exactly-once across a
driver killed mid-stream and restarted from its checkpoint)."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from pathlib import Path

import pytest
from sparkcluster import (
    StandaloneCluster,
    Submission,
    kill_group,
    run_submit,
    start_submit,
    submit_cmd,
    wait_for,
)

from bayou.client import Client

# Each test is a few spark-submit runs of 20-60 s on an idle 2-core machine; the bounds leave room
# for a loaded one.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
SUBMIT_TIMEOUT = 600

Record = tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...]]


def records(bootstrap: str, topic: str) -> list[Record]:
    """Every (key, value, headers) ``topic`` holds, partition by partition."""
    out: list[Record] = []
    with Client(bootstrap) as client:
        for po in client.describe_topic(topic).partitions:
            offset = po.earliest
            while offset < po.latest:
                batch = client.fetch_arrow(topic, po.partition, offset, 10_000)
                if batch.num_rows == 0:
                    break
                for row in batch.select(["key", "value", "headers"]).to_pylist():
                    headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
                    out.append((row["key"], row["value"], headers))
                offset = batch.column("offset")[-1].as_py() + 1
    return out


def count(bootstrap: str, topic: str) -> int:
    with Client(bootstrap) as client:
        if topic not in client.list_topics():
            return 0
        return sum(p.latest - p.earliest for p in client.describe_topic(topic).partitions)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    with Client(bootstrap) as client:
        if topic not in client.list_topics():
            client.create_topic(topic, partitions)
        for p in range(partitions):
            values = [f"{tag}-{p}-{i}".encode() for i in range(per_partition)]
            keys = [f"k{p}".encode()] * per_partition
            headers = [[("origin", f"{tag}{p}".encode())] for _ in range(per_partition)]
            client.send(topic, p, values, keys=keys, headers=headers)


def assert_ran_on_workers(cluster: StandaloneCluster, sub: Submission, *, both: bool) -> list[int]:
    """The application ran on the cluster: the master lists it as finished, both workers launched
    an executor for it, and executors started its tasks (on both workers if ``both``)."""
    assert "Starting executor ID driver" not in sub.out  # local mode's in-driver executor
    app_id = sub.app_id
    app = wait_for(lambda: cluster.completed_app(app_id), 60, f"{app_id} among completed applications")
    assert app["state"] in ("FINISHED", "KILLED"), app
    for i in range(2):
        assert list((cluster.work_dir(i) / app_id).glob("*/stderr")), f"no executor of {app_id} on worker {i}"
    tasks = cluster.tasks_run(app_id)
    assert sum(tasks) > 0, tasks
    if both:
        assert all(tasks), tasks
    return tasks


def test_batch_read_and_write(cluster: StandaloneCluster, broker: str, package: Path,
                              executor_python: Path, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    source, target = f"batch-src-{run}", f"batch-dst-{run}"
    produce(broker, source, 3, 1000, "b")
    cmd = submit_cmd(cluster, package, executor_python, "batch_copy.py",
                     "--bootstrap", broker, "--source", source, "--target", target)
    sub = run_submit(cmd, package, tmp_path, tmp_path / "batch.log", SUBMIT_TIMEOUT)
    assert sub.returncode == 0, sub.out[-3000:]
    assert f"read 3000 records from {source}, wrote 3000 records to {target}" in sub.out
    assert_ran_on_workers(cluster, sub, both=False)
    got, sent = records(broker, target), records(broker, source)
    assert len(got) == 3000
    assert Counter(got) == Counter(sent)  # same keys, values and headers, nothing twice


def test_stream_restart_from_checkpoint_is_exactly_once(
        cluster: StandaloneCluster, broker: str, package: Path, executor_python: Path,
        tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    source, target = f"stream-src-{run}", f"stream-dst-{run}"
    checkpoint = tmp_path / "checkpoint"
    produce(broker, source, 3, 400, "s1")

    # Run 1: 60 records per micro-batch; the driver is killed (SIGKILL) once some are written.
    args = ["--bootstrap", broker, "--source", source, "--target", target,
            "--checkpoint", str(checkpoint), "--max-offsets-per-trigger", "60"]
    log1 = tmp_path / "stream-1.log"
    proc = start_submit(submit_cmd(cluster, package, executor_python, "stream_copy.py", *args,
                                   "--trigger", "500 milliseconds"), package, tmp_path, log1)
    try:
        def dead() -> str | None:
            code = proc.poll()
            return None if code is None else f"spark-submit exited with {code}: {log1.read_text()[-3000:]}"

        wait_for(lambda: count(broker, target) >= 60, SUBMIT_TIMEOUT,
                 "the first micro-batches in the target", dead)
    finally:
        kill_group(proc)
    written = count(broker, target)
    assert 60 <= written < 1200, written  # killed mid-stream
    sub1 = Submission(list(proc.args), proc.returncode, log1.read_text(errors="replace"), log1)
    assert_ran_on_workers(cluster, sub1, both=False)

    # Make the restart replay a batch whose records are already in the target: if the kill fell
    # between batches, forget the last batch's commit (a crash after the sink, before the commit).
    planned = max(int(f.name) for f in (checkpoint / "offsets").iterdir() if f.name.isdigit())
    commit = checkpoint / "commits" / str(planned)
    if commit.exists():
        commit.unlink()
        (checkpoint / "commits" / f".{planned}.crc").unlink(missing_ok=True)

    # Run 2: more records, Trigger.AvailableNow from the same checkpoint.
    produce(broker, source, 3, 100, "s2")
    cmd2 = submit_cmd(cluster, package, executor_python, "stream_copy.py", *args, "--available-now")
    sub2 = run_submit(cmd2, package, tmp_path, tmp_path / "stream-2.log", SUBMIT_TIMEOUT)
    assert sub2.returncode == 0, sub2.out[-3000:]
    batches = [int(b) for b in re.findall(r"^micro-batch (\d+): \d+ records", sub2.out, re.M)]
    assert batches and batches[0] == planned, (planned, batches)  # the replay happened
    assert_ran_on_workers(cluster, sub2, both=False)

    got, sent = records(broker, target), records(broker, source)
    assert len(sent) == 1500
    assert len(got) == 1500, f"{len(got) - 1500} duplicates" if len(got) > 1500 else len(got)
    assert Counter(got) == Counter(sent)


def test_reference_pipeline(cluster: StandaloneCluster, broker: str, package: Path,
                            executor_python: Path, tmp_path: Path) -> None:
    cmd = submit_cmd(cluster, package, executor_python, "pipeline.py", "--bootstrap", broker,
                     "--events", "20000", "--checkpoint", str(tmp_path / "cp"),
                     "--output", str(tmp_path / "out"), "--duration", "400")
    sub = run_submit(cmd, package, tmp_path, tmp_path / "pipeline.log", SUBMIT_TIMEOUT)
    assert sub.returncode == 0, sub.out[-4000:]
    assert re.search(r"bayou pipeline run \w+: OK", sub.out), sub.out[-4000:]
    produced = re.search(r"events produced +(\d+)", sub.out)
    expected = re.search(r"windows expected +(\d+)", sub.out)
    in_bayou = re.search(r"windows in bayou +(\d+)", sub.out)
    in_parquet = re.search(r"windows in parquet +(\d+)", sub.out)
    assert produced and expected and in_bayou and in_parquet
    assert int(produced.group(1)) == 20000
    assert int(expected.group(1)) == int(in_bayou.group(1)) == int(in_parquet.group(1)) > 0
    assert_ran_on_workers(cluster, sub, both=True)
