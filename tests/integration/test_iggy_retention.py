"""Iggy's per-topic message expiry and maximum topic size, enforced by bayou's retention: whole
sealed segments go (never the active one), and polling First then starts at the first message
left (iggy.md E.6). The 0.9 client sends both, and the segment size, as CREATE_TOPIC options."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.iggy import iggy_port, poll, send, start_iggy, vsr_login

from bayou.protocols.iggy import messages as m

pytestmark = pytest.mark.asyncio


def u64(name: str, value: int) -> m.UserHeader:
    return m.UserHeader.of(name, m.HeaderKind.UINT64, value)


async def _topic(tmp_path: Path, options: tuple[m.UserHeader, ...]):  # type: ignore[no-untyped-def]
    server = await start_iggy(tmp_path / "data")
    conn = await vsr_login(iggy_port(server))
    await conn.call(m.CreateStream("s"))
    details = await conn.call(m.CreateTopic(m.Identifier("s"), "t", 1, options=options))
    return server, conn, details


async def _send_batches(conn, n: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        await conn.call(send("s", "t", 0, [b"%03d-" % i + b"x" * 200 for _ in range(5)]))


async def test_message_expiry_deletes_sealed_segments(tmp_path: Path) -> None:
    server, conn, details = await _topic(tmp_path, (u64("message_expiry", 200_000),  # 0.2 s
                                                    u64("segment_size", 1024)))
    try:
        assert details.topic.message_expiry == 200_000
        cfg = server.broker.describe_topic("s.t").config
        assert cfg["retention.ms"] == "200" and cfg["segment.bytes"] == "1024"
        await _send_batches(conn, 6)  # each batch is over 1 KiB: every batch seals a segment
        before = server.broker.describe_topic("s.t").partitions[0]
        assert before.segments >= 6
        await asyncio.sleep(0.4)
        assert await server.broker.run_retention() >= 5
        after = server.broker.describe_topic("s.t").partitions[0]
        assert after.segments == 1 and after.log_start_offset > 0
        first = await conn.call(poll("s", "t", 0, kind=m.PollingKind.FIRST))
        assert first.messages[0].offset == after.log_start_offset
        assert len(first.messages) == after.log_end_offset - after.log_start_offset
        # the active segment is never deleted, expired or not
        await asyncio.sleep(0.3)
        await server.broker.run_retention()
        assert server.broker.describe_topic("s.t").partitions[0].log_end_offset == before.log_end_offset
    finally:
        await conn.close()
        await server.stop()


async def test_max_topic_size_deletes_the_oldest_segments(tmp_path: Path) -> None:
    server, conn, details = await _topic(tmp_path, (u64("max_topic_size", 4096), u64("segment_size", 1024)))
    try:
        assert details.topic.max_topic_size == 4096
        await _send_batches(conn, 12)
        assert await server.broker.run_retention() > 0
        part = server.broker.describe_topic("s.t").partitions[0]
        assert part.size_bytes <= 4096 + 2048  # at most the limit plus the sealed + active tail
        first = await conn.call(poll("s", "t", 0, kind=m.PollingKind.FIRST, count=1))
        assert first.messages[0].offset == part.log_start_offset > 0
        assert first.messages[0].payload.startswith(b"%03d-" % (part.log_start_offset // 5))
    finally:
        await conn.close()
        await server.stop()


async def test_never_expire_and_unlimited(tmp_path: Path) -> None:
    server, conn, _details = await _topic(tmp_path, (u64("message_expiry", 2**64 - 1),
                                                     u64("max_topic_size", 2**64 - 1)))
    try:
        cfg = server.broker.describe_topic("s.t").config
        assert cfg["retention.ms"] == "-1" and cfg["retention.bytes"] == "-1"
    finally:
        await conn.close()
        await server.stop()
