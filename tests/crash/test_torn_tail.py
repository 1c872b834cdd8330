"""A power cut leaves a torn or corrupt tail that SIGKILL alone never produces (the page cache
survives a killed process). Simulate it between the kill and the restart: the broker must cut the
tail at the first bad batch, log the cut, keep every complete acknowledged record and continue
appending at the right offset."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from bayou.client.rtes import RtesClient
from support.brokers import BrokerProcess

pytestmark = pytest.mark.slow


def active_segment(data: Path, topic: str, partition: int) -> Path:
    return sorted((data / "topics" / topic / str(partition)).glob("*.log"))[-1]


@pytest.mark.parametrize("damage", ["half-batch", "garbage", "flipped-crc"])
def test_torn_tail_is_cut_and_logged(tmp_path: Path, damage: str) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        with RtesClient("127.0.0.1", broker.port) as c:
            acked = [c.produce("t", "user9", f"v{i}") for i in range(20)]  # all in partition 0
    finally:
        broker.kill(signal.SIGKILL)
    assert {a.partition for a in acked} == {0}
    seg = active_segment(data, "t", 0)
    size = seg.stat().st_size
    body = seg.read_bytes()
    if damage == "half-batch":
        # the first half of a copy of the last batch: a write torn mid-way
        last_len = size // 20
        with open(seg, "ab") as f:
            f.write(body[-last_len:][: last_len // 2])
        expect_records = 20
    elif damage == "garbage":
        with open(seg, "ab") as f:
            f.write(os.urandom(100))
        expect_records = 20
    else:
        # flip a byte inside the last batch's payload: its CRC no longer matches
        with open(seg, "r+b") as f:
            f.seek(size - 3)
            b = f.read(1)
            f.seek(size - 3)
            f.write(bytes([b[0] ^ 0xFF]))
        expect_records = 19

    broker = BrokerProcess(data, port=broker.port).start()
    try:
        with RtesClient("127.0.0.1", broker.port) as c:
            records, hw = c.consume("t", 0, 0)
            assert [v for _o, v in records] == [f"v{i}" for i in range(expect_records)]
            assert hw == expect_records - 1
            nxt = c.produce("t", "user9", "after")
            assert nxt.offset == expect_records
    finally:
        assert broker.stop() == 0
    cut = [json.loads(line) for line in broker.log_path.read_text().splitlines()
           if line.startswith("{") and "recovery: truncating" in line]
    assert cut, broker.log()
