"""Every Cursus vector (tests/conformance/vectors/cursus) replayed over a real socket against a fresh
in-process broker (cursus.md checklist item 62).

For each vector the test sets up the stated preconditions through protocol requests on a separate
setup connection (CREATE, batches, JOIN_GROUP, APPEND_STREAM, SAVE_SNAPSHOT), opens a new
connection, sends ``request_hex`` and compares the reply with ``expected_response_text`` /
``expected_response_hex`` / ``expected_response_pattern``.

Random member suffixes: the vectors name members such as ``consumer-test-0042``, but the broker
picks the 4-digit suffix at JOIN_GROUP time. Where a request carries such an id and the broker checks
it (HEARTBEAT, BATCH_COMMIT, LEAVE_GROUP, COMMIT_OFFSET, SYNC_GROUP), the setup joins first, records
``vector id -> real id`` and the request is re-encoded from ``request_text`` with the real id
substituted, in the same envelope (the test first checks that re-encoding the unmodified text gives
``request_hex`` byte for byte). The same substitution is applied to the expected reply. Requests
whose member id the broker does not check (CONSUME, STREAM: H ignores it) are sent exactly.

Where bayou's answer differs from the vector on purpose, the expectation is replaced:

* 02 / 08: the vector's broker advertises ``localhost:9000``; bayou advertises ``127.0.0.1:<port>``
  (decision 7: an address the client can reach).
* 05 (acks=0): bayou answers the JSON ack instead of the bare ``OK`` (decision 1).
* 07 (gzip): bayou detects compression per frame and acks it (decision 4); the vector's reply is
  the one for a broker configured with gzip.
* 15 (LEAVE_GROUP without generation): bayou accepts it (decision 2) and answers
  ``OK group=g1 member=<m> left=true``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bayou.protocols.cursus.framing import FrameReader, encode_frame
from bayou.protocols.cursus.replies import json_ack
from bayou.server.app import BayouServer
from support.cursus import (
    EPOCH,
    FrameConn,
    build_batch,
    cursus_port,
    envelope,
    expected_batch,
    message,
    start_cursus,
)

VECTORS = Path(__file__).parent / "vectors" / "cursus"
ALL: dict[str, dict[str, Any]] = {p.stem: json.loads(p.read_text()) for p in sorted(VECTORS.glob("*.json"))}
POLICY = ("cleanup_policy=delete partitioner=hash_key auth_policy=open read_acl= write_acl= "
          "retention_hours=0 retention_bytes=0")


@dataclass
class Ctx:
    server: BayouServer
    port: int
    setup: FrameConn
    subs: dict[str, str] = field(default_factory=dict)  # member id in the vector -> real member id

    async def ok(self, text: str, *, topic: str = "") -> str:
        reply = await self.setup.command(text, topic=topic)
        assert reply.startswith("OK"), f"setup {text!r} failed: {reply!r}"
        return reply

    async def create(self, topic: str, partitions: int, extra: str = "") -> None:
        reply = await self.ok(f"CREATE topic={topic} partitions={partitions}{extra}", topic="admin")
        assert reply.startswith(f"OK topic={topic} partitions={partitions} "), reply

    async def produce(self, topic: str, partition: int, payloads: list[str]) -> None:
        reply = await self.setup.ask(build_batch(topic, partition, payloads))
        assert json.loads(reply)["status"] == "OK", reply

    async def join(self, topic: str, group: str, member: str, vector_id: str,
                   generation: int, assignments: str) -> str:
        """JOIN_GROUP as the client sends it; remembers the real id for ``vector_id``."""
        reply = await self.ok(f"JOIN_GROUP topic={topic} group={group} member={member}")
        m = re.fullmatch(rf"OK generation=(\d+) member=({re.escape(member)}-\d{{4}}) assignments=(\[.*\])",
                         reply)
        assert m, f"unexpected JOIN_GROUP reply {reply!r}"
        assert (int(m[1]), m[3]) == (generation, assignments), reply
        self.subs[vector_id] = m[2]
        return m[2]

    def sub(self, text: str) -> str:
        for fake, real in self.subs.items():
            text = text.replace(fake, real)
        return text


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Ctx]:
    server = await start_cursus(tmp_path / "data")
    port = cursus_port(server)
    setup = await FrameConn.open(port)
    try:
        yield Ctx(server, port, setup)
    finally:
        await setup.close()
        await server.stop()


# -- preconditions, per vector ------------------------------------------------------------------


async def nothing(ctx: Ctx) -> None:
    """The vector expects a fresh broker."""


def topic(name: str, partitions: int, extra: str = "") -> Callable[[Ctx], Awaitable[None]]:
    async def setup(ctx: Ctx) -> None:
        await ctx.create(name, partitions, extra)
    return setup


async def events_with_records(ctx: Ctx) -> None:
    """11/12: partition 0 of 'events' holds e0 (offset 0, seq 1) and e2 (offset 1, seq 2)."""
    await ctx.create("events", 2)
    await ctx.produce("events", 0, ["e0", "e2"])


async def events_group(ctx: Ctx) -> None:
    """consumer-test-0042 is the only member of g1 (on 'events', 2 partitions): generation 1, [0 1]."""
    await ctx.create("events", 2)
    await ctx.join("events", "g1", "consumer-test", "consumer-test-0042", 1, "[0 1]")


async def live_group(ctx: Ctx) -> None:
    """16: consumer-stream-0042 owns partition 0 of 'live' at generation 1."""
    await ctx.create("live", 1)
    await ctx.join("live", "g2", "consumer-stream", "consumer-stream-0042", 1, "[0]")


async def live_with_records(ctx: Ctx) -> None:
    """17: partition 0 of 'live' holds s0 (offset 0, seq 1) and s1 (offset 1, seq 2); g2 has no
    commit. STREAM does not check the member (H), so the group is not joined."""
    await ctx.create("live", 1)
    await ctx.produce("live", 0, ["s0", "s1"])


async def solo_two_members(ctx: Ctx) -> None:
    """18/19: g3 on 'solo' (1 partition): consumer-a-0042 [0], consumer-b-0043 [], generation 2.
    Range assignment sorts ids, so 'consumer-a-*' gets the partition whatever the suffixes."""
    await ctx.create("solo", 1)
    await ctx.join("solo", "g3", "consumer-a", "consumer-a-0042", 1, "[0]")
    await ctx.join("solo", "g3", "consumer-b", "consumer-b-0043", 2, "[]")


APPEND = ("APPEND_STREAM topic=accounts key=acct-1 version={v} event_type={t} schema_version=1 "
          "producerId=es-producer message={m}")


async def accounts_v1(ctx: Ctx) -> None:
    """21: acct-1 at version 1 (landed at partition 0 offset 0)."""
    await ctx.create("accounts", 2, " event_sourcing=true")
    reply = await ctx.ok(APPEND.format(v=1, t="Opened", m='{"owner":"ann"}'))
    assert reply == "OK version=1 offset=0 partition=0", reply


async def accounts_v2(ctx: Ctx) -> None:
    await accounts_v1(ctx)
    reply = await ctx.ok(APPEND.format(v=2, t="Deposited", m='{"amount":10}'))
    assert reply == "OK version=2 offset=1 partition=0", reply


async def accounts_v2_snapshot(ctx: Ctx) -> None:
    await accounts_v2(ctx)
    reply = await ctx.ok('SAVE_SNAPSHOT topic=accounts key=acct-1 version=2 message={"balance":10}')
    assert reply == "OK version=2 partition=0", reply


SETUP: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "01_create_topic_admin_envelope": nothing,
    "02_metadata": topic("orders", 2),
    "03_batch_acks1_unkeyed": topic("orders", 2),
    "04_batch_acks_all_keyed": topic("users", 4),
    "05_batch_acks0": topic("fire", 1),
    "06_batch_idempotent": topic("idem", 1),
    "07_batch_gzip": topic("zipped", 1),
    "08_find_coordinator": nothing,
    "09_join_group": topic("events", 2),
    "10_fetch_offset": events_group,
    "11_consume_poll": events_with_records,
    "12_consume_poll_empty": events_with_records,
    "13_heartbeat": events_group,
    "14_batch_commit": events_group,
    "15_leave_group_without_generation": events_group,
    "16_commit_offset": live_group,
    "17_stream": live_with_records,
    "18_sync_group": solo_two_members,
    "19_heartbeat_generation_mismatch": solo_two_members,
    "20_create_event_sourcing_topic": nothing,
    "21_append_stream": accounts_v1,
    "22_stream_version": accounts_v2,
    "23_save_snapshot": accounts_v2,
    "24_read_snapshot": accounts_v2_snapshot,
    "25_read_stream": accounts_v2_snapshot,
}


# -- expected replies where bayou deviates on purpose ---------------------------------------------


def expected_text(name: str, v: dict[str, Any], ctx: Ctx) -> str:
    text: str = v["expected_response_text"]
    if name == "02_metadata":
        assert "leaders=localhost:9000,localhost:9000 " in text
        return text.replace("localhost:9000", f"127.0.0.1:{ctx.port}")
    if name == "08_find_coordinator":
        assert text.endswith(" host=localhost port=9000")
        return text.replace("host=localhost port=9000", f"host=127.0.0.1 port={ctx.port}")
    if name == "05_batch_acks0":
        assert text == "OK"  # the real broker's bare OK; decision 1: the JSON ack instead
        return json_ack(0, EPOCH, "py-test", 1, 1).decode()
    if name == "15_leave_group_without_generation":
        assert text == "ERROR: missing_generation command=LEAVE_GROUP"  # H; decision 2: accept
        return ctx.sub("OK group=g1 member=consumer-test-0042 left=true")
    return ctx.sub(text)


def request_frame(v: dict[str, Any], ctx: Ctx) -> bytes:
    """``request_hex``, or, when the request names a member whose real id differs, the same command
    re-encoded with the real id (see the module docstring)."""
    frame = bytes.fromhex(v["request_hex"])
    text = v.get("request_text")
    if text is None:
        return frame
    env = v["request_envelope_topic"]
    assert encode_frame(envelope(text, env)) == frame, "re-encoding request_text must give request_hex"
    real = ctx.sub(text)
    return frame if real == text else encode_frame(envelope(real, env))


# -- side effects worth checking after the reply --------------------------------------------------


async def consume(ctx: Ctx, topic: str, partition: int, offset: int = 0) -> bytes:
    conn = await FrameConn.open(ctx.port)
    try:
        return await conn.ask(envelope(f"CONSUME topic={topic} partition={partition} offset={offset} "
                                       "member=checker group=checker"))
    finally:
        await conn.close()


async def after_create(ctx: Ctx, _v: dict[str, Any]) -> None:
    reply = await ctx.setup.command("METADATA topic=orders")
    assert reply.startswith("OK topic=orders partitions=2 "), reply


def after_produce(topic: str, partition: int, payloads: list[bytes], *, key: bytes = b"",
                  seqs: list[int] | None = None) -> Callable[[Ctx, dict[str, Any]], Awaitable[None]]:
    async def check(ctx: Ctx, _v: dict[str, Any]) -> None:
        msgs = [message(p, (seqs or [1, 2, 3])[i], key=key, offset=i) for i, p in enumerate(payloads)]
        assert await consume(ctx, topic, partition) == expected_batch(topic, partition, msgs)
    return check


async def after_batch_commit(ctx: Ctx, _v: dict[str, Any]) -> None:
    for p, off in ((0, 2), (1, 1)):
        reply = await ctx.setup.command(f"FETCH_OFFSET topic=events partition={p} group=g1")
        assert reply == f"OK offset={off}"


async def after_leave(ctx: Ctx, _v: dict[str, Any]) -> None:
    status = json.loads(await ctx.setup.command("GROUP_STATUS group=g1"))
    assert (status["generation"], status["member_count"]) == (2, 0), status


async def after_commit(ctx: Ctx, _v: dict[str, Any]) -> None:
    assert await ctx.setup.command("FETCH_OFFSET topic=live partition=0 group=g2") == "OK offset=1"


async def after_append(ctx: Ctx, _v: dict[str, Any]) -> None:
    assert await ctx.setup.command("STREAM_VERSION topic=accounts key=acct-1") == "OK version=2"


async def after_snapshot(ctx: Ctx, _v: dict[str, Any]) -> None:
    reply = await ctx.setup.command("READ_SNAPSHOT topic=accounts key=acct-1")
    assert reply == 'OK snapshot={"version":2,"payload":"{\\"balance\\":10}"}', reply


AFTER: dict[str, Callable[[Ctx, dict[str, Any]], Awaitable[None]]] = {
    "01_create_topic_admin_envelope": after_create,
    "03_batch_acks1_unkeyed": after_produce("orders", 0, [b"hello"]),
    "04_batch_acks_all_keyed": after_produce("users", 3, [b"payload-alice"], key=b"alice"),
    "05_batch_acks0": after_produce("fire", 0, [b"fire-and-forget"]),
    "06_batch_idempotent": after_produce("idem", 0, [b"m0", b"m1", b"m2"]),
    "07_batch_gzip": after_produce("zipped", 0, [b"compress me compress me compress me"]),
    "14_batch_commit": after_batch_commit,
    "15_leave_group_without_generation": after_leave,
    "16_commit_offset": after_commit,
    "21_append_stream": after_append,
    "23_save_snapshot": after_snapshot,
}


# -- the tests ------------------------------------------------------------------------------------


def test_every_vector_has_a_scenario() -> None:
    assert len(ALL) == 25
    assert set(SETUP) == set(ALL)


@pytest.mark.parametrize("name", [n for n in sorted(ALL) if n != "17_stream"])
async def test_vector(name: str, ctx: Ctx) -> None:
    v = ALL[name]
    await SETUP[name](ctx)
    conn = await FrameConn.open(ctx.port)
    try:
        await conn.send_raw(request_frame(v, ctx))
        if "expected_response_hex" in v:
            expected = bytes.fromhex(v["expected_response_hex"])
            frames = [await conn.recv() for _ in FrameReader().feed(expected)]
            assert b"".join(encode_frame(f) for f in frames).hex() == expected.hex()
        else:
            reply = await conn.recv_text()
            if "expected_response_pattern" in v:  # 09: the suffix the broker picked is random
                assert re.fullmatch(v["expected_response_pattern"], reply), reply
                fake = re.search(r" member=(\S+)", v["expected_response_text"])
                real = re.search(r" member=(\S+)", reply)
                assert fake and real
                ctx.subs[fake[1]] = real[1]
            assert reply == expected_text(name, v, ctx)
        # exactly the expected frames: nothing else follows, and the connection takes a new request
        assert await conn.command("LIST") == await ctx.setup.command("LIST")
    finally:
        await conn.close()
    if name in AFTER:
        await AFTER[name](ctx, v)


async def _start_stream(ctx: Ctx) -> tuple[FrameConn, float]:
    v = ALL["17_stream"]
    await SETUP["17_stream"](ctx)
    conn = await FrameConn.open(ctx.port)
    started = time.monotonic()
    await conn.send_raw(request_frame(v, ctx))
    first = await conn.recv(timeout=3)
    # no acknowledgement: the first frame is the batch of the stored records
    assert encode_frame(first).hex() == v["expected_response_hex"]
    return conn, started


async def test_vector_17_stream_pushes_stored_then_new_records(ctx: Ctx) -> None:
    conn, _started = await _start_stream(ctx)
    try:
        await ctx.produce("live", 0, ["s2"])  # seq 1 from a new batch, stored at offset 2
        frame = await conn.recv(timeout=3)
        while frame == b"":  # a keepalive may come first on a slow machine
            frame = await conn.recv(timeout=3)
        assert frame == expected_batch("live", 0, [message("s2", 1, offset=2)])
    finally:
        await conn.close()


@pytest.mark.slow
async def test_vector_17_stream_sends_keepalives(ctx: Ctx) -> None:
    conn, started = await _start_stream(ctx)
    try:
        frame = await conn.recv(timeout=6.5)
        assert frame == b"", f"expected the zero-length keepalive frame, got {frame!r}"
        assert time.monotonic() - started < 6.5
    finally:
        await conn.close()


async def test_vector_17_stream_connection_takes_no_more_requests(ctx: Ctx) -> None:
    """After STREAM the broker stops reading commands on that connection (cursus.md 8)."""
    conn, _started = await _start_stream(ctx)
    try:
        await conn.send(envelope("LIST"))
        with pytest.raises((ConnectionError, TimeoutError)):
            while True:
                frame = await asyncio.wait_for(conn.recv(), 1.0)
                assert frame == b"" or frame.startswith(b"STREAM_CONTROL "), frame
    finally:
        await conn.close()
