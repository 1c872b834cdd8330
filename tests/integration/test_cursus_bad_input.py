"""Bad input on the Cursus protocol (cursus.md sections 2.4, 4, 6.2, 7, 8, 10, 12; checklist items
9-12, 25, 33, 38, 39, 41, 48, 59, 60).

Every test runs against a fresh in-process broker whose topic ``orders`` (3 partitions) already
holds a known batch in each partition. After the bad input it checks the exact reply (or that the
broker closed the connection, where the real broker closes it), that the same connection still
answers ``LIST`` where the protocol keeps it open, and that the stored records are unchanged
(CONSUME of every partition on a new connection returns the same bytes as before).

The last test covers the positional forms of the design documents, which bayou accepts as an
extension (the real broker rejects them).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import struct
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bayou.protocols.cursus.compression import compress_gzip
from bayou.protocols.cursus.framing import MAX_FRAME
from bayou.records.cursus import CursusMessage
from bayou.server.app import BayouServer
from support.cursus import (
    FrameConn,
    build_batch,
    cursus_port,
    envelope,
    expected_batch,
    message,
    start_cursus,
)

TOPIC = "orders"
PARTITIONS = 3
# partition -> the records produced into it before every test
SEED: dict[int, list[CursusMessage]] = {
    0: [message("a0", 1), message("a1", 2, key="k")],
    1: [message("b0", 3)],
    2: [message("c0", 4)],
}
CREATE_OK = (f"OK topic={TOPIC} partitions={PARTITIONS} cleanup_policy=delete partitioner=hash_key "
             "auth_policy=open read_acl= write_acl= retention_hours=0 retention_bytes=0")


def bad(reason: str) -> str:
    return f'ERROR: batch_decode_failed reason="{reason}"'


@dataclass
class Env:
    server: BayouServer
    port: int
    conn: FrameConn
    snapshot: list[bytes]
    topics: str  # the LIST reply before the test

    async def cmd(self, text: str | bytes, *, raw: bool = False) -> str:
        return await self.conn.command(text, raw=raw)

    async def new_conn(self) -> FrameConn:
        return await FrameConn.open(self.port)


async def consume_all(port: int) -> list[bytes]:
    """Every partition of ``orders`` from offset 0, on a new connection (so no read position and no
    committed offset of the group applies)."""
    conn = await FrameConn.open(port)
    try:
        return [await conn.ask(envelope(f"CONSUME topic={TOPIC} partition={p} offset=0 member=checker "
                                        "group=snapshot-checker")) for p in range(PARTITIONS)]
    finally:
        await conn.close()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    server = await start_cursus(tmp_path / "data")
    port = cursus_port(server)
    conn = await FrameConn.open(port)
    try:
        assert await conn.command(f"CREATE topic={TOPIC} partitions={PARTITIONS}", topic="admin") == CREATE_OK
        for p, msgs in SEED.items():
            reply = json.loads(await conn.ask(build_batch(TOPIC, p, msgs)))
            assert (reply["status"], reply["last_offset"]) == ("OK", len(msgs) - 1), reply
        snapshot = await consume_all(port)
        assert snapshot == [expected_batch(TOPIC, p, [CursusMessage(m.payload, i, m.seq_num, m.producer_id,
                                                                    m.key, m.epoch)
                                                      for i, m in enumerate(msgs)])
                            for p, msgs in SEED.items()]
        topics = await conn.command("LIST")
        yield Env(server, port, conn, snapshot, topics)
    finally:
        await conn.close()
        await server.stop()


async def assert_intact(env: Env, conn: FrameConn | None = None) -> None:
    """The connection (``env.conn`` unless given) still answers, no topic appeared or vanished, and
    the seeded records are served byte for byte as before."""
    conn = conn or env.conn
    reply = await conn.command("LIST")
    assert reply.startswith("OK count="), reply
    assert reply == env.topics
    assert await consume_all(env.port) == env.snapshot


async def assert_closed_then_intact(env: Env, conn: FrameConn) -> None:
    assert await conn.is_closed(), "the broker should have closed the connection"
    fresh = await env.new_conn()
    try:
        await assert_intact(env, fresh)
    finally:
        await fresh.close()


# -- malformed batches (cursus.md 5.1, 6.2) --------------------------------------------------------

ONE = build_batch(TOPIC, 0, [message("hello", 9)])  # header 37 bytes, then one 60-byte record
REC = 37  # where the record starts: 30 + len("orders") + len("1")
# offsets inside the record (producer id 'py-test' = 7 bytes, no key, payload 'hello')
P_LEN, K_LEN, V_LEN, E_LEN, D_LEN = 16, 25, 35, 44, 58


def patched(body: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(body)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def test_record_layout_assumed_by_the_patches() -> None:
    assert ONE[REC + P_LEN:REC + P_LEN + 9] == b"\x00\x07py-test"
    assert ONE[REC + K_LEN:REC + K_LEN + 2] == b"\x00\x00"
    assert ONE[REC + V_LEN:REC + V_LEN + 9] == b"\x00\x00\x00\x05hello"
    assert ONE[REC + E_LEN:REC + E_LEN + 2] == b"\x00\x00"
    assert ONE[REC + D_LEN:] == b"\x00\x00"


BAD_BATCHES = {
    "truncated in the partition": (b"\xba\x7c\x00\x06orders\x00\x00", bad("truncated batch header")),
    "truncated before the count": (ONE[:REC - 2], bad("truncated batch header")),
    "count larger than the frame": (build_batch(TOPIC, 0, ["x"], count=5),
                                    bad("message count 5 is larger than the frame")),
    "two records announced, one sent": (build_batch(TOPIC, 0, ["x" * 60], count=2), bad("truncated message")),
    "negative count": (build_batch(TOPIC, 0, ["x"], count=-1), bad("invalid message count -1")),
    "count above 100,000": (build_batch(TOPIC, 0, ["x"], count=100_001), bad("invalid message count 100001")),
    "producer id length past the end": (patched(ONE, REC + P_LEN, ">H", 0xFFFF),
                                        bad("producer id past the end of the frame")),
    "key length past the end": (patched(ONE, REC + K_LEN, ">H", 0xFFFF),
                                bad("key past the end of the frame")),
    "payload length past the end": (patched(ONE, REC + V_LEN, ">I", 0xFFFFFFFF),
                                    bad("payload past the end of the frame")),
    "event type length past the end": (patched(ONE, REC + E_LEN, ">H", 0x0100),
                                       bad("event type past the end of the frame")),
    "metadata length past the end": (patched(ONE, REC + D_LEN, ">H", 0x0001),
                                     bad("metadata past the end of the frame")),
    "topic not UTF-8": (b"\xba\x7c\x00\x02\xff\xfe" + ONE[10:], bad("topic is not valid UTF-8")),
    # not a batch at all (cursus.md 2.2): the first u16 read as an envelope topic length is too big
    "wrong magic BA 7D": (b"\xba\x7d" + ONE[2:], 'ERROR: decode_failed reason="invalid topic length"'),
    # cursus.md 6.2 (H)
    "no records": (build_batch(TOPIC, 0, []), 'ERROR: broker_error reason="empty batch messages"'),
    "unknown acks": (build_batch(TOPIC, 0, ["x"], acks="2"), "ERROR: invalid_acks value=2"),
    "missing topic": (build_batch("nope", 0, ["x"]), "ERROR: topic_not_found topic=nope"),
    "partition out of range": (build_batch(TOPIC, 3, ["x"]), "ERROR: partition_not_found partition=3"),
    "negative partition": (build_batch(TOPIC, -1, ["x"]), "ERROR: partition_not_found partition=-1"),
}


@pytest.mark.parametrize("case", list(BAD_BATCHES))
async def test_bad_batch(env: Env, case: str) -> None:
    body, expected = BAD_BATCHES[case]
    assert (await env.conn.ask(body)).decode("utf-8", "replace") == expected
    await assert_intact(env)


async def test_valid_record_before_a_broken_one_is_not_stored(env: Env) -> None:
    """A batch is all or nothing: the good first record of a batch whose second record is broken is
    not appended."""
    two = build_batch(TOPIC, 0, ["good", "hello"])
    second = len(two) - 60  # the second record is 'py-test' / 'hello' again: 60 bytes
    body = patched(two, second + V_LEN, ">I", 0x7FFFFFFF)
    assert (await env.conn.ask(body)).decode() == bad("payload past the end of the frame")
    await assert_intact(env)


# -- classification failures (cursus.md 2.4) ------------------------------------------------------


@pytest.mark.parametrize(("body", "expected"), [
    (b"FOO x=1", 'ERROR: decode_failed reason="invalid topic length"'),
    (b"SUBSCRIBEX orders", 'ERROR: decode_failed reason="invalid topic length"'),
    (b"EXIT", 'ERROR: decode_failed reason="invalid topic length"'),
    (b"", 'ERROR: decode_failed reason="data too short"'),
    (b"X", 'ERROR: decode_failed reason="data too short"'),
])
async def test_raw_text_that_is_no_command(env: Env, body: bytes, expected: str) -> None:
    assert (await env.conn.ask(body)).decode() == expected
    await assert_intact(env)


@pytest.mark.parametrize("body", [envelope("FOO x=1"), envelope("FOO x=1", "admin"), b"\x00\x00",
                                  envelope("hello world", "orders")])
async def test_enveloped_text_that_is_no_command_closes(env: Env, body: bytes) -> None:
    assert (await env.conn.ask(body)).decode() == "ERROR: malformed_input reason=missing_topic_or_payload"
    await assert_closed_then_intact(env, env.conn)


@pytest.mark.parametrize("raw", [True, False])
async def test_text_command_not_utf8(env: Env, raw: bool) -> None:
    """Not documented for the real broker (Go does not validate UTF-8); bayou answers decode_failed
    and creates nothing."""
    reply = await env.cmd(b"CREATE topic=\xff\xfe partitions=1", raw=raw)
    assert reply == 'ERROR: decode_failed reason="invalid utf-8"'
    await assert_intact(env)


# -- text commands with missing or bad arguments (cursus.md 4) ------------------------------------

CMD_ERRORS = [
    # 4.1 CREATE
    ("CREATE", 'ERROR: unknown_command command="CREATE"'),
    ("CREATE partitions=3", 'ERROR: missing_topic expected="CREATE topic=<name> [partitions=<N>]"'),
    ("CREATE topic=fresh partitions=0", 'ERROR: invalid_partitions reason="must be a positive integer"'),
    ("CREATE topic=fresh partitions=two", 'ERROR: invalid_partitions reason="must be a positive integer"'),
    ("CREATE topic=fresh replication_factor=0",
     'ERROR: invalid_replication_factor reason="must be a positive integer"'),
    # 4.2 DELETE
    ("DELETE name=orders", 'ERROR: missing_topic expected="DELETE topic=<name>"'),
    ("DELETE topic=nope", "ERROR: topic_not_found topic=nope"),
    # 4.3 LIST
    ("LIST topic=x", 'ERROR: unknown_command command="LIST topic=x"'),
    # 4.5 / 4.6
    ("METADATA name=orders", "ERROR: missing_topic command=METADATA"),
    ("METADATA topic=nope", "ERROR: topic_not_found topic=nope"),
    ("FIND_COORDINATOR topic=orders", "ERROR: missing_coordinator_key command=FIND_COORDINATOR"),
    # 4.8 PUBLISH
    ("PUBLISH topic=orders producerId=p", "ERROR: missing_message command=PUBLISH"),
    ("PUBLISH topic=orders producerId=p message=", "ERROR: missing_message command=PUBLISH"),
    ("PUBLISH topic=orders message=hello", "ERROR: missing_producer_id command=PUBLISH"),
    ("PUBLISH producerId=p message=hello", "ERROR: missing_topic command=PUBLISH"),
    ("PUBLISH topic=orders acks=2 producerId=p message=hello", "ERROR: invalid_acks value=2"),
    ("PUBLISH topic=orders isIdempotent=maybe producerId=p message=hello",
     "ERROR: invalid_is_idempotent value=maybe"),
    ("PUBLISH topic=nope producerId=p message=hello", "ERROR: topic_not_found topic=nope"),
    ("PUBLISH topic=orders partition=3 producerId=p message=hello", "ERROR: partition_not_found partition=3"),
    # 4.9 JOIN_GROUP
    ("JOIN_GROUP group=g member=m", "ERROR: missing_topic command=JOIN_GROUP"),
    ("JOIN_GROUP topic=orders member=m", "ERROR: missing_group command=JOIN_GROUP"),
    ("JOIN_GROUP topic=orders group=g", "ERROR: missing_member command=JOIN_GROUP"),
    ("JOIN_GROUP topic=nope group=g member=m", "ERROR: topic_not_found topic=nope"),
    # 4.10 SYNC_GROUP
    ("SYNC_GROUP topic=orders group=g member=m", "ERROR: missing_generation command=SYNC_GROUP"),
    ("SYNC_GROUP topic=orders group=g generation=1", "ERROR: missing_member command=SYNC_GROUP"),
    ("SYNC_GROUP topic=orders group=nope member=m generation=1", "ERROR: group_not_found group=nope"),
    # 4.11 HEARTBEAT
    ("HEARTBEAT topic=orders group=g member=m", "ERROR: missing_generation command=HEARTBEAT"),
    ("HEARTBEAT topic=orders group=g member=m generation=x", "ERROR: invalid_generation command=HEARTBEAT"),
    ("HEARTBEAT topic=orders member=m generation=1", "ERROR: missing_group command=HEARTBEAT"),
    # 4.12 LEAVE_GROUP
    ("LEAVE_GROUP topic=orders group=nope member=m", "ERROR: group_not_found group=nope"),
    # 4.13 FETCH_OFFSET
    ("FETCH_OFFSET partition=0 group=default-group", "ERROR: missing_topic command=FETCH_OFFSET"),
    ("FETCH_OFFSET topic=orders group=default-group", "ERROR: missing_partition command=FETCH_OFFSET"),
    ("FETCH_OFFSET topic=orders partition=0", "ERROR: missing_group command=FETCH_OFFSET"),
    ("FETCH_OFFSET topic=orders partition=x group=default-group", "ERROR: invalid_partition"),
    ("FETCH_OFFSET topic=orders partition=0 group=nope", "ERROR: group_not_found group=nope"),
    # 4.14 COMMIT_OFFSET
    ("COMMIT_OFFSET partition=0 group=default-group offset=1", "ERROR: missing_topic command=COMMIT_OFFSET"),
    ("COMMIT_OFFSET topic=orders group=default-group offset=1",
     "ERROR: missing_partition command=COMMIT_OFFSET"),
    ("COMMIT_OFFSET topic=orders partition=0 offset=1", "ERROR: missing_group command=COMMIT_OFFSET"),
    ("COMMIT_OFFSET topic=orders partition=0 group=default-group",
     "ERROR: missing_offset command=COMMIT_OFFSET"),
    ("COMMIT_OFFSET topic=orders partition=0 group=default-group offset=1 member=m",
     "ERROR: missing_generation command=COMMIT_OFFSET"),
    ("COMMIT_OFFSET topic=orders partition=0 group=default-group offset=-1", "ERROR: invalid_offset"),
    ("COMMIT_OFFSET topic=orders partition=x group=default-group offset=1", "ERROR: invalid_partition"),
    # 4.15 BATCH_COMMIT
    ("BATCH_COMMIT group=g member=m generation=1 P0:1", "ERROR: missing_topic command=BATCH_COMMIT"),
    ("BATCH_COMMIT topic=orders member=m generation=1 P0:1", "ERROR: missing_group command=BATCH_COMMIT"),
    ("BATCH_COMMIT topic=orders group=g generation=1 P0:1", "ERROR: missing_member command=BATCH_COMMIT"),
    ("BATCH_COMMIT topic=orders group=g member=m P0:1", "ERROR: missing_generation command=BATCH_COMMIT"),
    # 4.16 / 7 CONSUME
    ("CONSUME topic=orders partition=0 offset=0", "ERROR: invalid_consume_syntax"),
    ("CONSUME topic=orders partition=0 member=m", "ERROR: invalid_consume_syntax"),
    ("CONSUME topic=orders offset=0 member=m", "ERROR: invalid_consume_syntax"),
    ("CONSUME partition=0 offset=0 member=m", "ERROR: invalid_consume_syntax"),
    ("CONSUME topic=nope partition=0 offset=0 member=m",
     "ERROR: command_failed reason=\"topic 'nope' does not exist\""),
    # 4.17 / 8 STREAM: errors before streaming starts keep the connection in request mode
    ("STREAM topic=orders partition=0", "ERROR: invalid_stream_syntax"),
    ("STREAM topic=orders group=g", "ERROR: invalid_stream_syntax"),
    ("STREAM partition=0 group=g", "ERROR: invalid_stream_syntax"),
    ("STREAM topic=nope partition=0 group=g", "ERROR: command_failed reason=\"topic 'nope' does not exist\""),
]


@pytest.mark.parametrize(("text", "expected"), CMD_ERRORS, ids=[t for t, _ in CMD_ERRORS])
async def test_command_error(env: Env, text: str, expected: str) -> None:
    assert await env.cmd(text) == expected
    await assert_intact(env)


# H checks some arguments only after its topic lookup: the first failing check answers.
ERROR_ORDER = [
    ("CREATE topic=.. partitions=0", 'ERROR: invalid_topic_name topic=".." reason='),
    ("PUBLISH topic=nope producerId=p partition=x message=m", "ERROR: topic_not_found topic=nope"),
    ("PUBLISH topic=orders producerId=p partition=x message=m",
     'ERROR: invalid_partition reason="invalid partition x"'),
    ("PUBLISH topic=orders producerId=p partition=7 message=m", "ERROR: partition_not_found partition=7"),
    ("JOIN_GROUP topic=nope group=g member=m generation=x", "ERROR: topic_not_found topic=nope"),
    ("JOIN_GROUP topic=orders group=g member=m generation=x", "ERROR: invalid_generation command=JOIN_GROUP"),
    ("LIST_OFFSETS topic=nope partition=x", "ERROR: topic_not_found topic=nope"),
    ("LIST_OFFSETS topic=orders partition=x", "ERROR: invalid_partition"),
    ("APPEND_STREAM topic=nope key=k message=m", "ERROR: topic_not_found topic=nope"),
    ("APPEND_STREAM topic=orders key=k message=m", "ERROR: event_sourcing_not_enabled topic=orders"),
    ("READ_STREAM topic=nope key=k from_version=x",
     '{"status":"ERROR","error":"topic_not_found topic=nope"}'),
    ("READ_STREAM key=k", '{"status":"ERROR","error":"missing_topic"}'),
]


@pytest.mark.parametrize(("text", "expected"), ERROR_ORDER, ids=[t for t, _ in ERROR_ORDER])
async def test_argument_errors_come_in_h_order(env: Env, text: str, expected: str) -> None:
    reply = await env.cmd(text)
    assert reply.startswith(expected) if expected.endswith("reason=") else reply == expected
    await assert_intact(env)


@pytest.mark.parametrize("name", ["a/b", "..", ".", "a" * 250, "caf\u00e9"])
async def test_create_invalid_topic_name(env: Env, name: str) -> None:
    """cursus.md 4.1: ``ERROR: invalid_topic_name topic="<t>" reason="..."`` (topic Go-quoted)."""
    reply = await env.cmd(f"CREATE topic={name} partitions=1")
    assert reply.startswith(f'ERROR: invalid_topic_name topic="{name}" reason="'), (
        f"documented form is invalid_topic_name topic=\"<t>\" reason=\"...\"; got {reply!r}")
    await assert_intact(env)


async def test_create_cannot_shrink(env: Env) -> None:
    reply = await env.cmd(f"CREATE topic={TOPIC} partitions=1")
    assert reply == (f'ERROR: create_topic_failed topic={TOPIC} reason="cannot decrease partition count '
                     f"for topic '{TOPIC}': 3 -> 1\"")
    assert (await env.cmd(f"METADATA topic={TOPIC}")).startswith(f"OK topic={TOPIC} partitions=3 ")
    # the same count succeeds with the same reply and changes nothing
    assert await env.cmd(f"CREATE topic={TOPIC} partitions=3") == CREATE_OK
    await assert_intact(env)


# -- frames and compression (cursus.md 1, 12) -----------------------------------------------------


async def test_frame_above_64_mib_closes_the_connection(env: Env) -> None:
    await env.conn.send_raw((MAX_FRAME + 1).to_bytes(4, "big") + b"\x00" * 1024)
    await assert_closed_then_intact(env, env.conn)


async def test_frame_declaring_4_gib_closes_the_connection(env: Env) -> None:
    await env.conn.send_raw(b"\xff\xff\xff\xff" + envelope("LIST"))
    await assert_closed_then_intact(env, env.conn)


def gzip_zeros(size: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip container
    chunk = bytes(1 << 20)
    parts = [z.compress(chunk) for _ in range(size >> 20)]
    parts.append(z.flush())
    return b"".join(parts)


async def test_gzip_bomb_is_refused_quickly(env: Env) -> None:
    bomb = gzip_zeros(200 << 20)
    assert bomb.startswith(b"\x1f\x8b") and len(bomb) < 1 << 20
    started = time.monotonic()
    reply = (await env.conn.ask(bomb, timeout=20)).decode()
    assert reply == 'ERROR: decode_failed reason="decompressed size exceeds limit"'
    assert time.monotonic() - started < 5
    await assert_intact(env)


@pytest.mark.parametrize(("body", "reason"), [
    (b"\x1f\x8b" + b"definitely not deflate data", "gzip: "),
    (gzip.compress(ONE)[:40], "truncated gzip stream"),
    (b"\x04\x22\x4d\x18" + b"\x00" * 16, "lz4"),
    (b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x00\x04abcd", "snappy: "),
    (b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x10\x00ab",
     "snappy block past the end of the frame"),
])
async def test_garbage_after_a_compression_magic(env: Env, body: bytes, reason: str) -> None:
    """bayou detects compression per frame (decision 4); a frame that fails to decompress gets
    ``decode_failed`` and the connection stays open (H, with a configured codec, closes it)."""
    reply = (await env.conn.ask(body)).decode()
    assert reply.startswith(f'ERROR: decode_failed reason="{reason}'), reply
    await assert_intact(env)


async def test_gzip_of_a_broken_batch(env: Env) -> None:
    body = compress_gzip(build_batch(TOPIC, 0, ["x"], count=-1))
    assert (await env.conn.ask(body)).decode() == bad("invalid message count -1")
    await assert_intact(env)


# -- groups and offsets (cursus.md 4.9-4.15, 9, 10) -----------------------------------------------


async def join(env: Env, member: str, group: str = "g", topic: str = TOPIC) -> tuple[str, int, str]:
    reply = await env.cmd(f"JOIN_GROUP topic={topic} group={group} member={member}")
    m = re.fullmatch(rf"OK generation=(\d+) member=({member}-\d{{4}}) assignments=(\[[\d ]*\])", reply)
    assert m, reply
    return m[2], int(m[1]), m[3]


async def fetch(env: Env, partition: int, group: str = "g") -> str:
    return await env.cmd(f"FETCH_OFFSET topic={TOPIC} partition={partition} group={group}")


async def test_commit_offset_regression(env: Env) -> None:
    m, gen, parts = await join(env, "solo")
    assert (gen, parts) == (1, "[0 1 2]")
    commit = f"COMMIT_OFFSET topic={TOPIC} partition=0 group=g generation=1 member={m} offset="
    assert await env.cmd(commit + "2") == "OK"
    assert await env.cmd(commit + "1") == ('ERROR: offset_regression reason="offset regression group=g '
                                           f'topic={TOPIC} partition=0 current=2 got=1"')
    assert await fetch(env, 0) == "OK offset=2"
    assert await env.cmd(commit + "2") == "OK"  # an equal commit is idempotent
    assert await fetch(env, 0) == "OK offset=2"
    await assert_intact(env)


async def test_commit_offset_by_a_non_owner(env: Env) -> None:
    a, _, _ = await join(env, "consumer-a")
    b, gen, parts = await join(env, "consumer-b")
    assert (gen, parts) == (2, "[2]")  # 3 partitions, 2 members: a [0 1], b [2]
    reply = await env.cmd(f"COMMIT_OFFSET topic={TOPIC} partition=0 group=g offset=1 generation=2 member={b}")
    assert reply == f"ERROR: NOT_OWNER partition=0 member={b} group=g generation=2"
    # all or nothing: an owned entry next to a foreign one is not committed either
    reply = await env.cmd(f"BATCH_COMMIT topic={TOPIC} group=g member={b} generation=2 P2:1,P0:1")
    assert reply == f"ERROR: NOT_OWNER partition=0 member={b} group=g generation=2"
    assert [await fetch(env, p) for p in range(3)] == ["OK offset=0"] * 3
    assert await env.cmd(f"COMMIT_OFFSET topic={TOPIC} partition=0 group=g offset=1 generation=2 "
                         f"member={a}") == "OK"
    await assert_intact(env)


async def test_heartbeat_with_a_stale_generation(env: Env) -> None:
    a, _, _ = await join(env, "consumer-a")
    await join(env, "consumer-b")
    reply = await env.cmd(f"HEARTBEAT topic={TOPIC} group=g member={a} generation=1")
    assert reply == f"ERROR: GEN_MISMATCH current=2 requested=1 group=g member={a}"
    assert await env.cmd(f"HEARTBEAT topic={TOPIC} group=g member={a} generation=2") == (
        f"OK member={a} generation=2")
    # a stale commit is refused the same way
    reply = await env.cmd(f"COMMIT_OFFSET topic={TOPIC} partition=0 group=g offset=1 generation=1 member={a}")
    assert reply == f"ERROR: GEN_MISMATCH current=2 requested=1 group=g member={a}"
    assert await fetch(env, 0) == "OK offset=0"
    await assert_intact(env)


async def test_join_group_for_another_topic(env: Env) -> None:
    assert (await env.cmd("CREATE topic=other partitions=1")).startswith("OK topic=other partitions=1 ")
    env.topics = await env.cmd("LIST")
    await join(env, "first")
    reply = await env.cmd("JOIN_GROUP topic=other group=g member=second")
    assert reply == f"ERROR: topic_not_assigned_to_group expected={TOPIC} actual=other"
    reply = await env.cmd("FETCH_OFFSET topic=other partition=0 group=g")
    assert reply == f"ERROR: topic_not_assigned_to_group expected={TOPIC} actual=other"
    status = json.loads(await env.cmd("GROUP_STATUS group=g"))
    assert (status["topic_name"], status["member_count"], status["generation"]) == (TOPIC, 1, 1)
    await assert_intact(env)


@pytest.mark.parametrize(("entries", "expected"), [
    ("P0:1,P1", 'ERROR: invalid_batch_commit_entry entry="P1"'),
    ("P0:1,Px:1", 'ERROR: invalid_partition entry="Px:1"'),
    ("P0:1,P1:x", 'ERROR: invalid_offset entry="P1:x"'),
    ("P0:1,P1:-5", 'ERROR: invalid_offset entry="P1:-5"'),
    ("P0:1,P0:2", f"ERROR: duplicate_partition partition=0 group=g topic={TOPIC}"),
])
async def test_batch_commit_rejects_the_whole_batch(env: Env, entries: str, expected: str) -> None:
    """cursus.md 4.15 (H): all or nothing; the entry is Go-quoted (``entry="<e>"``)."""
    m, _, _ = await join(env, "solo")
    reply = await env.cmd(f"BATCH_COMMIT topic={TOPIC} group=g member={m} generation=1 {entries}")
    assert reply == expected, f"documented reply {expected!r}, got {reply!r}"
    assert [await fetch(env, p) for p in range(3)] == ["OK offset=0"] * 3, "nothing may be committed"
    await assert_intact(env)


async def test_batch_commit_regression_commits_nothing(env: Env) -> None:
    m, _, _ = await join(env, "solo")
    batch = f"BATCH_COMMIT topic={TOPIC} group=g member={m} generation=1 "
    assert await env.cmd(batch + "P0:2,P1:1") == "OK batched=2"
    reply = await env.cmd(batch + "P2:1,P0:1")
    assert reply.startswith('ERROR: offset_regression reason="offset regression group=g '), reply
    assert [await fetch(env, p) for p in range(3)] == ["OK offset=2", "OK offset=1", "OK offset=0"]
    await assert_intact(env)


# -- the connection after a failed STREAM, and the stream itself ----------------------------------


async def test_stream_error_keeps_request_mode(env: Env) -> None:
    assert await env.cmd(f"STREAM topic={TOPIC} partition=7 group=g") == (
        f"ERROR: command_failed reason=\"partition 7 out of range for topic '{TOPIC}' (0-2)\"")
    await assert_intact(env)


async def test_stream_ends_when_the_client_goes_away(env: Env) -> None:
    """A stream must not outlive its client: after the client closes, a new stream on the same key
    works and the broker still serves everything."""
    for _ in range(2):
        conn = await env.new_conn()
        await conn.send(envelope(f"STREAM topic={TOPIC} partition=1 group=g member=m"))
        assert await conn.recv(timeout=3) == env.snapshot[1]
        await conn.close()
    await asyncio.sleep(0.2)
    await assert_intact(env)


# -- positional forms: bayou extensions (cursus.md 3, 4.1, 4.8, 4.14, 4.16, 4.18) ------------------


@pytest.mark.parametrize("raw", [True, False])
async def test_positional_forms(env: Env, raw: bool) -> None:
    async def cmd(text: str) -> str:
        return await env.cmd(text, raw=raw)

    assert await cmd("CREATE shop 3") == CREATE_OK.replace(f"topic={TOPIC}", "topic=shop")
    assert (await cmd("METADATA topic=shop")).startswith("OK topic=shop partitions=3 ")
    # unkeyed text PUBLISH is round-robin from partition 0
    assert await cmd("PUBLISH shop hello world") == (
        '{"status":"OK","last_offset":0,"producer_epoch":0,"producer_id":"bayou-text","seq_start":0,'
        '"seq_end":0}')
    stored = CursusMessage(b"hello world", 0, 0, b"bayou-text")
    assert (await env.conn.ask(b"CONSUME shop 0 0" if raw else envelope("CONSUME shop 0 0"))) == (
        expected_batch("shop", 0, [stored]))
    assert await cmd("SUBSCRIBE shop g") == "OK topic=shop group=g subscribed=true"
    assert await cmd("COMMIT shop g 0 1") == "OK"
    assert await cmd("FETCH_OFFSET topic=shop partition=0 group=g") == "OK offset=1"
    # the original topic is untouched
    assert await consume_all(env.port) == env.snapshot
