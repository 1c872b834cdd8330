"""Issue 13 items 6 and 7 with real broker subprocesses: a flipped byte in a sealed segment is
never served (V1, Cursus, Iggy with its checksum-checking client, TANK), the scrub finds what a
zero-copy TANK read passes through, a damaged segment no longer stops the broker (the partition
is quarantined and shown offline, every other topic serves), and `bayou verify` finds the damage
and `--repair` fixes it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bayou.protocols.cursus.batch import decode_head, decode_messages
from bayou.protocols.iggy import messages as im
from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, decode_chunk, encode_bundle
from bayou.records.batch import iter_batches
from support.brokers import BrokerProcess, LineConn
from support.cursus import FrameConn, envelope
from support.damage import flip
from support.iggy import IggyStatusError, ident, legacy_login, poll
from support.tank import TankConn

pytestmark = pytest.mark.asyncio

RECORDS = 40
SMALL = "segment.bytes=1024 index.interval.bytes=1"  # several sealed segments per partition


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def broker(tmp_path: Path, scrub_ms: int = 0) -> BrokerProcess:
    cfg = tmp_path / f"bayou-{scrub_ms}.toml"
    cfg.write_text(f"[broker]\nscrub_interval_ms = {scrub_ms}\nscrub_bytes_per_second = 67108864\n")
    return BrokerProcess(tmp_path / "data", "--config", str(cfg), "--log-format", "text")


async def v1(b: BrokerProcess, line: str) -> str:
    c = await LineConn.open(b.port)
    try:
        return await c.ask(line)
    finally:
        await c.close()


async def create(b: BrokerProcess, topic: str, config: str = SMALL) -> None:
    assert (await v1(b, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 1 {config}")).startswith("V1|1|OK")


async def produce_v1(b: BrokerProcess, topic: str, n: int = RECORDS) -> None:
    c = await LineConn.open(b.port)
    for i in range(n):
        assert (await c.ask(f"V1|{i}|PRODUCE|{topic} k:value-{i:04d} acks=1")).startswith(f"V1|{i}|OK")
    await c.close()


async def produce_tank(b: BrokerProcess, topic: str, n: int = RECORDS) -> None:
    c = await TankConn.open(b.tank_port)
    for i in range(n):
        bundle = encode_bundle([TankMessage(0, 1_700_000_000_000 + i, b"k", f"value-{i:04d}".encode())])
        resp = await c.call(tm.Produce(i, (tm.ProduceTopic(topic, (tm.ProduceEntry(0, bundle),)),)))
        assert isinstance(resp, tm.ProduceResponse) and resp.topics[0].errors == (0,)
    await c.close()


def batches(b: BrokerProcess, topic: str) -> list[tuple[Path, int, int, int]]:
    """(segment file, position, size, base offset) of every stored batch of partition 0."""
    out = []
    for seg in sorted((b.data_dir / "topics" / topic / "0").glob("*.log")):
        data = seg.read_bytes()
        out += [(seg, p, h.size, h.base_offset) for p, h in iter_batches(data)]
    return out


def damage_sealed(b: BrokerProcess, topic: str, victim: int = 2) -> tuple[Path, int, int]:
    """Flip a byte inside the records of batch ``victim`` of the first (sealed) segment."""
    stored = batches(b, topic)
    seg, pos, size, base = stored[victim]
    assert seg == stored[0][0] and stored[-1][0] != seg, "the victim must be in a sealed segment"
    flip(seg, pos + size - 4)
    return seg, pos, base


async def tank_consume(b: BrokerProcess, topic: str, seq: int) -> tm.ConsumePartitionResult:
    c = await TankConn.open(b.tank_port)
    try:
        resp = await c.call(tm.Consume(7, (tm.ConsumeTopic(topic, (tm.ConsumePartition(0, seq, 1 << 20),)),)))
    finally:
        await c.close()
    assert isinstance(resp, tm.ConsumeResponse)
    t = resp.topics[0]
    assert isinstance(t, tm.ConsumeTopicResult)
    return t.partitions[0]


async def describe_status(b: BrokerProcess, topic: str) -> str:
    reply = await v1(b, f"V1|9|ADMIN_DESCRIBE_TOPIC|{topic}")
    assert reply.startswith("V1|9|OK|"), reply
    return reply.split(" status=", 1)[1].split(" config=", 1)[0]


def full_log(b: BrokerProcess) -> str:
    return b.log_path.read_text(errors="replace")


def values_of(reply: str) -> list[str]:
    msgs = reply.split("messages=", 1)[1].split(" hw=", 1)[0]
    return [m.split(":", 1)[1] for m in msgs.split(",") if m]


async def test_flipped_byte_in_a_sealed_segment_is_never_served(tmp_path: Path) -> None:
    b = broker(tmp_path).start()
    try:
        await create(b, "dmg")
        await create(b, "healthy")
        await produce_v1(b, "dmg")
        await produce_v1(b, "healthy", 5)
    finally:
        assert b.stop() == 0
    seg, _pos, base = damage_sealed(b, "dmg")
    b = broker(tmp_path).start()  # scrub off: the reads alone must catch it
    try:
        # V1: the consume that reaches the damage gets the storage error, not the bytes.
        reply = await v1(b, f"V1|2|CONSUME|dmg 0 {base}")
        assert reply.startswith("V1|2|ERR|STORAGE_ERROR|partition dmg/0 is offline: damaged data in "
                                f"{seg.name} position"), reply
        assert "CRC mismatch" in reply
        below = await v1(b, "V1|3|CONSUME|dmg 0 0")
        assert below.startswith("V1|3|ERR|STORAGE_ERROR"), below  # it reads on up to the hw
        # Cursus: the good records below the damage, then the error.
        c = await FrameConn.open(b.cursus_port)
        body = await c.ask(envelope("CONSUME topic=dmg partition=0 offset=0 member=m group=g batch=100"))
        got = decode_messages(body, decode_head(body))
        assert [m.payload for m in got] == [f"value-{i:04d}".encode() for i in range(base)]
        err = await c.command(f"CONSUME topic=dmg partition=0 offset={base} member=m group=g batch=100")
        assert err.startswith("ERROR: storage_error reason=") and "offline" in err, err
        await c.close()
        # Iggy, whose client checks every message checksum: the error, never a re-checksummed value.
        iggy = await legacy_login(b.iggy_port)
        with pytest.raises(IggyStatusError) as info:
            await iggy.call(poll("default", "dmg", 0, value=base, count=10))
        assert info.value.status == 4011  # CannotReadMessage
        good = await iggy.call(poll("default", "dmg", 0, value=0, count=base))
        assert [m.payload for m in good.messages] == [f"value-{i:04d}".encode() for i in range(base)]
        await iggy.close()
        # TANK (records converted from another protocol are checked before conversion): 0xfb.
        assert (await tank_consume(b, "dmg", base + 1)).flags == 0xFB
        # The partition is quarantined and says so; every other topic serves; no append lands.
        status = await describe_status(b, "dmg")
        assert status.startswith(f"[offline:{seg.name}%20position%20"), status
        assert (await describe_status(b, "healthy")) == "[ok]"
        assert (await v1(b, "V1|4|PRODUCE|dmg k:new acks=1")).startswith("V1|4|ERR|STORAGE_ERROR")
        assert values_of(await v1(b, "V1|5|CONSUME|healthy 0 0")) == [f"value-{i:04d}" for i in range(5)]
        assert f"quarantined: damaged data in {seg} position" in full_log(b)
        cli = subprocess.run([sys.executable, "-m", "bayou", "topic", "describe", "dmg",
                              "-b", f"127.0.0.1:{b.port}"], capture_output=True, text=True, timeout=30)
        assert cli.returncode == 0, cli.stderr
        assert "offline" in cli.stdout and f"{seg.name} position" in cli.stdout, cli.stdout
    finally:
        assert b.stop() == 0


async def test_scrub_finds_what_zero_copy_tank_reads_pass_through(tmp_path: Path) -> None:
    b = broker(tmp_path).start()
    try:
        await create(b, "zc")
        await produce_tank(b, "zc")
    finally:
        assert b.stop() == 0
    seg, pos, base = damage_sealed(b, "zc")
    b = broker(tmp_path, scrub_ms=200).start()
    try:
        async def offline() -> bool:
            return (await describe_status(b, "zc")).startswith("[offline:")

        await eventually(offline, "the scrub to quarantine zc/0")
        assert f"quarantined: damaged data in {seg} position {pos}" in full_log(b)
        assert "scrub pass" in full_log(b)
        assert (await tank_consume(b, "zc", base + 1)).flags == 0xFB
        first = await tank_consume(b, "zc", 1)  # below the damage: served, never past it
        assert first.flags == 0
        got = decode_chunk(first.chunk, first.base_seq, sparse_first=False)
        assert got and all(m.seq <= base for m in got)
    finally:
        assert b.stop() == 0


async def test_damaged_segments_no_longer_stop_the_broker_and_verify_repairs_them(tmp_path: Path) -> None:
    b = broker(tmp_path).start()
    try:
        await create(b, "sealed")
        await create(b, "active", "segment.bytes=1048576")
        await create(b, "healthy")
        for t in ("sealed", "active", "healthy"):
            await produce_v1(b, t)
    finally:
        assert b.stop() == 0  # a clean stop: no recovery at the next start
    stored = batches(b, "sealed")
    seg, pos, _size, base = stored[len([x for x in stored if x[0] == stored[0][0]]) - 1]
    with open(seg, "r+b") as f:  # a broken length field in the last batch of a sealed segment
        f.seek(pos + 8)
        f.write((1 << 30).to_bytes(4, "big"))
    active = batches(b, "active")
    a_seg, a_pos, _a_size, a_base = active[len(active) // 2]
    flip(a_seg, a_pos + 16)  # the magic byte of a batch in the middle of the active segment
    b = broker(tmp_path).start()  # before: "torn batch" ended the start for every topic
    try:
        assert (await describe_status(b, "sealed")).startswith(f"[offline:{seg.name}%20position%20{pos}")
        assert (await describe_status(b, "active")).startswith(f"[offline:{a_seg.name}%20position%20{a_pos}")
        assert (await describe_status(b, "healthy")) == "[ok]"
        # Cursus DESCRIBE says so too; Iggy's topic records have no status field: the log names it.
        c = await FrameConn.open(b.cursus_port)
        sealed = json.loads(await c.command("DESCRIBE topic=sealed"))["partitions"][0]
        assert sealed["status"] == "offline", sealed
        assert sealed["reason"].startswith(f"{seg.name} position {pos}"), sealed
        assert json.loads(await c.command("DESCRIBE topic=healthy"))["partitions"][0]["status"] == "online"
        await c.close()
        iggy = await legacy_login(b.iggy_port)
        details = await iggy.call(im.GetTopic(ident("default"), ident("active")))
        assert details.topic.name == "active"
        await iggy.close()
        assert f"partition 0 is offline: {a_seg.name} position {a_pos}" in full_log(b)  # before the reply
        # V1 CONSUME reads on to the high watermark, which lies past the damage: the error.
        assert (await v1(b, "V1|1|CONSUME|sealed 0 0")).startswith("V1|1|ERR|STORAGE_ERROR")
        c = await FrameConn.open(b.cursus_port)
        body = await c.ask(envelope("CONSUME topic=sealed partition=0 offset=0 member=m group=g batch=100"))
        assert [m.payload for m in decode_messages(body, decode_head(body))] == [
            f"value-{i:04d}".encode() for i in range(base)]  # readable up to the damage
        await c.close()
        assert values_of(await v1(b, "V1|2|CONSUME|active 0 0")) == [f"value-{i:04d}" for i in range(a_base)]
        assert (await v1(b, "V1|3|PRODUCE|healthy k:more acks=1")).startswith("V1|3|OK|partition=0 offset=40")
        assert (await v1(b, "V1|4|PRODUCE|active k:more acks=1")).startswith("V1|4|ERR|STORAGE_ERROR")
    finally:
        assert b.stop() == 0
    verify = [sys.executable, "-m", "bayou", "verify", "--data-dir", str(b.data_dir)]
    found = subprocess.run(verify, capture_output=True, text=True, timeout=60)
    assert found.returncode == 4, found.stdout + found.stderr
    assert f"DAMAGED topics/sealed/0/{seg.name} position {pos}: torn batch" in found.stdout
    assert f"DAMAGED topics/active/0/{a_seg.name} position {a_pos}: bad batch magic" in found.stdout
    repaired = subprocess.run([*verify, "--repair"], capture_output=True, text=True, timeout=60)
    assert repaired.returncode == 1, repaired.stdout + repaired.stderr
    assert subprocess.run(verify, capture_output=True, timeout=60).returncode == 0
    b = broker(tmp_path).start()
    try:
        assert (await describe_status(b, "sealed")) == "[ok]"
        assert (await describe_status(b, "active")) == "[ok]"
        after = values_of(await v1(b, "V1|1|CONSUME|sealed 0 0"))
        # Records before the damage and in later segments are kept; only the cut ones are gone.
        assert after[:base] == [f"value-{i:04d}" for i in range(base)]
        assert after[-1] == f"value-{RECORDS - 1:04d}"
        assert (await v1(b, "V1|2|PRODUCE|sealed k:more acks=1")).startswith(
            f"V1|2|OK|partition=0 offset={RECORDS}")  # no offset handed out twice
        assert (await v1(b, "V1|3|PRODUCE|active k:more acks=1")).startswith(
            f"V1|3|OK|partition=0 offset={a_base}")  # the active segment was cut, as recovery does
    finally:
        assert b.stop() == 0
