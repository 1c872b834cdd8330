"""Bad input on the V1 line protocol (rtes.md sections 2-7, checklist items 2-10, 20-22).

Every test runs against a fresh in-process broker that already holds a few records. After the bad
input it checks the exact reply, that the same connection still answers PING, and that the records
produced before are still served unchanged.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bayou.server.app import BayouServer
from support.brokers import LineConn, start_inprocess
from support.oracles import fnv1a_32

EXPECTED_FORMAT = "V1|0|ERR|BAD_REQUEST|expected format V1|<correlation_id>|<command>|<args>"
MAX_LINE = 65_535  # bytes before the LF that are still accepted

# (key, value) produced to topic "orders" before every test; the keys cover all three partitions.
SEED = [("user1", "created"), ("user9", "paid"), ("a", "x:y|z"), ("user1", "shipped"), ("", "empty-key")]



@dataclass
class Env:
    server: BayouServer
    conn: LineConn
    port: int
    data: Path
    snapshot: list[bytes]


async def consume_all(conn: LineConn, topic: str = "orders", partitions: int = 3) -> list[bytes]:
    out = []
    for p in range(partitions):
        await conn.send(f"V1|snap|CONSUME|{topic} {p} 0")
        out.append(await conn.recv())
    return out


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    server = await start_inprocess(tmp_path / "data")
    port = server.listeners["rtes"].port
    conn = await LineConn.open(port)
    try:
        for i, (k, v) in enumerate(SEED):
            reply = await conn.ask(f"V1|seed{i}|PRODUCE|orders {k}:{v}")
            assert reply.startswith(f"V1|seed{i}|OK|partition="), reply
        snapshot = await consume_all(conn)
        assert all(b"messages= " not in s for s in snapshot), snapshot  # every partition holds data
        yield Env(server, conn, port, tmp_path / "data", snapshot)
    finally:
        await conn.close()
        await server.stop()


async def assert_intact(env: Env, conn: LineConn | None = None, *, exact: bool = False) -> None:
    """The connection still answers and the seeded records are unchanged (with ``exact``, nothing
    was appended either; otherwise later records may follow them)."""
    conn = conn or env.conn
    assert await conn.ask("V1|after|PING|") == "V1|after|OK"
    now = await consume_all(conn)
    if exact:
        assert now == env.snapshot
        return
    for p, (old, new) in enumerate(zip(env.snapshot, now, strict=True)):
        old_msgs = old.rsplit(b" hw=", 1)[0]
        new_msgs = new.rsplit(b" hw=", 1)[0]
        assert new_msgs == old_msgs or new_msgs.startswith(old_msgs + b","), f"partition {p}: {new[:200]!r}"


async def check(env: Env, request: bytes | str, expected: bytes | str) -> None:
    if isinstance(request, str):
        request = request.encode()
    if isinstance(expected, str):
        expected = expected.encode()
    await env.conn.send(request)
    assert await env.conn.recv() == expected, f"request {request!r}"
    await assert_intact(env, exact=not expected.startswith(b"V1|") or b"|ERR|" in expected)


# -- envelope ----------------------------------------------------------------------------------

ENVELOPES = [
    pytest.param(b"", EXPECTED_FORMAT, id="empty-line"),
    pytest.param(b"\r", EXPECTED_FORMAT, id="lone-cr"),
    pytest.param(b" \t ", EXPECTED_FORMAT, id="whitespace-only"),
    pytest.param(b"PING", EXPECTED_FORMAT, id="no-separators"),
    pytest.param(b"V1|7", EXPECTED_FORMAT, id="one-separator"),
    pytest.param(b"V1|7|PING", EXPECTED_FORMAT, id="two-separators"),
    pytest.param(b"V2|7|PING|", "V1|0|ERR|BAD_REQUEST|unsupported version", id="bad-version"),
    pytest.param(b"v1|7|PING|", "V1|0|ERR|BAD_REQUEST|unsupported version", id="lowercase-version"),
    pytest.param(b"|7|PING|", "V1|0|ERR|BAD_REQUEST|unsupported version", id="empty-version"),
    pytest.param(b"V2|||", "V1|0|ERR|BAD_REQUEST|unsupported version", id="version-checked-first"),
    pytest.param(b"V1||PING|", "V1|0|ERR|BAD_REQUEST|correlation id required", id="empty-cid"),
    pytest.param(b"V1| \t |PING|", "V1|0|ERR|BAD_REQUEST|correlation id required", id="blank-cid"),
    pytest.param(b"V1|||", "V1|0|ERR|BAD_REQUEST|correlation id required", id="cid-before-command"),
    pytest.param(b"V1|7||", "V1|0|ERR|BAD_REQUEST|command required", id="empty-command"),
    pytest.param(b"V1|7|  |x y", "V1|0|ERR|BAD_REQUEST|command required", id="blank-command"),
]


@pytest.mark.parametrize(("request_line", "expected"), ENVELOPES)
async def test_malformed_envelope(env: Env, request_line: bytes, expected: str) -> None:
    await check(env, request_line, expected)


async def test_envelope_is_trimmed_and_cid_echoed(env: Env) -> None:
    await check(env, "  V1| 42 | ping |  ", "V1|42|OK")
    await check(env, "V1|abc|Ping|ignored args", "V1|abc|OK")
    await check(env, b"V1|7|PING|\r", "V1|7|OK")
    # A cid that is not valid UTF-8 comes back byte for byte.
    await check(env, b"V1|\xff\xfe|PING|", b"V1|\xff\xfe|OK")


@pytest.mark.parametrize("request_line", [
    "V1|7|FOO|", "V1|7|PRODUCEX|orders k:v", "V1|7|CONSUM|orders 0 0", "V1|7|P ING|", "V1|7|\u0130NG|",
])
async def test_unknown_command(env: Env, request_line: str) -> None:
    await check(env, request_line, "V1|7|ERR|UNKNOWN_COMMAND|unsupported command")


# -- argument counts ---------------------------------------------------------------------------

USAGE = {
    "PRODUCE": "PRODUCE requires: <topic> <key>:<value> [acks=0|1|all]",
    "CONSUME": "CONSUME requires: <topic> <partition> <offset>",
    "JOIN": "JOIN requires: <group> <topic> <consumer_id> [assignor=round_robin|range]",
    "SYNC": "SYNC requires: <group> <topic> <consumer_id> <generation>",
    "HEARTBEAT": "HEARTBEAT requires: <group> <topic> <consumer_id> <generation>",
    "LEAVE": "LEAVE requires: <group> <topic> <consumer_id> <generation>",
    "COMMIT": "COMMIT requires: <group> <topic> <consumer_id> <generation> <partition> <offset>",
    "OFFSET": "OFFSET requires: <group> <topic> <partition>",
    "REPLICA_FETCH": "REPLICA_FETCH requires: <topic> <partition> <replica_id> <offset>",
    "SET_PARTITION_ROLE": "SET_PARTITION_ROLE requires: <topic> <partition> <leader|follower>",
    "ADMIN_CREATE_TOPIC": "ADMIN_CREATE_TOPIC requires: <topic> <partitions> <replication_factor>",
    "ADMIN_REGISTER_BROKER": "ADMIN_REGISTER_BROKER requires: <broker_id> <host> <port> [epoch]",
    "ADMIN_BROKER_HEARTBEAT": "ADMIN_BROKER_HEARTBEAT requires: <broker_id>",
    "ADMIN_SET_PARTITION_LEADER":
        "ADMIN_SET_PARTITION_LEADER requires: <topic> <partition> <leader_id> <isr_csv>",
    "ADMIN_GET_METADATA": "ADMIN_GET_METADATA requires no args",
    "ADMIN_RECONCILE_BROKER_HEALTH": "ADMIN_RECONCILE_BROKER_HEALTH requires: <timeout_ms>",
    "ADMIN_FENCE_BROKER": "ADMIN_FENCE_BROKER requires: <broker_id>",
    "ADMIN_UNFENCE_BROKER": "ADMIN_UNFENCE_BROKER requires: <broker_id>",
    "ADMIN_ELECT_TOPIC_LEADERS": "ADMIN_ELECT_TOPIC_LEADERS requires: <topic>",
    "BROKER_FETCH": "BROKER_FETCH requires: <topic> <partition> <follower_id> <offset> [max_messages]",
    "BROKER_REPLICA_ACK": "BROKER_REPLICA_ACK requires: <topic> <partition> <follower_id> <acked_offset>",
    "ADMIN_DESCRIBE_TOPIC": "ADMIN_DESCRIBE_TOPIC requires: <topic>",
    "ADMIN_DELETE_TOPIC": "ADMIN_DELETE_TOPIC requires: <topic>",
}

# Argument lists with one too few and one too many (and zero) arguments for every command.
WRONG_COUNTS = {
    "PRODUCE": ["", "orders", "orders k:v acks=1 extra"],
    "CONSUME": ["", "orders", "orders 0", "orders 0 0 0"],
    "JOIN": ["", "g", "g orders", "g orders c1 assignor=range extra"],
    "SYNC": ["", "g orders c1", "g orders c1 2 extra"],
    "HEARTBEAT": ["", "g orders c1", "g orders c1 2 extra"],
    "LEAVE": ["", "g orders c1", "g orders c1 2 extra"],
    "COMMIT": ["", "g orders c1 2 0", "g orders c1 2 0 1 extra"],
    "OFFSET": ["", "g orders", "g orders 0 extra"],
    "REPLICA_FETCH": ["", "orders 0 1", "orders 0 1 0 extra"],
    "SET_PARTITION_ROLE": ["", "orders 0", "orders 0 leader extra"],
    "ADMIN_CREATE_TOPIC": ["", "t", "t 1"],
    "ADMIN_REGISTER_BROKER": ["", "1 host", "1 host 9093 0 extra"],
    "ADMIN_BROKER_HEARTBEAT": ["", "1 2"],
    "ADMIN_SET_PARTITION_LEADER": ["", "orders 0 0", "orders 0 0 0 extra"],
    "ADMIN_GET_METADATA": ["x", "x y"],
    "ADMIN_RECONCILE_BROKER_HEALTH": ["", "1000 2"],
    "ADMIN_FENCE_BROKER": ["", "1 2"],
    "ADMIN_UNFENCE_BROKER": ["", "1 2"],
    "ADMIN_ELECT_TOPIC_LEADERS": ["", "orders extra"],
    "BROKER_FETCH": ["", "orders 0 1", "orders 0 1 0 10 extra"],
    "BROKER_REPLICA_ACK": ["", "orders 0 1", "orders 0 1 0 extra"],
    "ADMIN_DESCRIBE_TOPIC": ["", "orders extra"],
    "ADMIN_DELETE_TOPIC": ["", "orders extra"],
}


def test_every_command_has_wrong_count_cases() -> None:
    assert set(WRONG_COUNTS) == set(USAGE)


@pytest.mark.parametrize("command", sorted(USAGE))
async def test_wrong_argument_count(env: Env, command: str) -> None:
    for i, args in enumerate(WRONG_COUNTS[command]):
        # Lower-case command names are the same command, and the usage text keeps its spelling.
        name = command.lower() if i % 2 else command
        await check(env, f"V1|u{i}|{name}|{args}", f"V1|u{i}|ERR|BAD_REQUEST|{USAGE[command]}")


async def test_ping_ignores_arguments(env: Env) -> None:
    await check(env, "V1|p|PING|a b c", "V1|p|OK")


# -- integers ----------------------------------------------------------------------------------

# Tokens Go's strconv.Atoi rejects (Python's int() accepts several of them).
BAD_INTEGERS = [
    "1_0", "0x1", "0b1", "1.0", "1e3", "+", "-", "--1", "+-1", "x", "\u0661", "\uff11", "1\x1c", "\x1f1",
    str(2**63), str(-(2**63) - 1), "9" * 30,
]

# command, argument template ({} is the integer under test), field name in the error message.
INTEGER_FIELDS = [
    ("CONSUME", "orders {} 0", "partition"),
    ("CONSUME", "orders 0 {}", "offset"),
    ("SYNC", "g orders c1 {}", "generation"),
    ("HEARTBEAT", "g orders c1 {}", "generation"),
    ("LEAVE", "g orders c1 {}", "generation"),
    ("COMMIT", "g orders c1 {} 0 0", "generation"),
    ("COMMIT", "g orders c1 2 {} 0", "partition"),
    ("COMMIT", "g orders c1 2 0 {}", "offset"),
    ("OFFSET", "g orders {}", "partition"),
    ("REPLICA_FETCH", "orders {} 1 0", "partition"),
    ("REPLICA_FETCH", "orders 0 {} 0", "replica_id"),
    ("REPLICA_FETCH", "orders 0 1 {}", "offset"),
    ("SET_PARTITION_ROLE", "orders {} leader", "partition"),
    ("ADMIN_CREATE_TOPIC", "t {} 1", "partitions"),
    ("ADMIN_CREATE_TOPIC", "t 1 {}", "replication_factor"),
    ("ADMIN_REGISTER_BROKER", "{} host 9093", "broker_id"),
    ("ADMIN_REGISTER_BROKER", "1 host {}", "port"),
    ("ADMIN_REGISTER_BROKER", "1 host 9093 {}", "epoch"),
    ("ADMIN_BROKER_HEARTBEAT", "{}", "broker_id"),
    ("ADMIN_SET_PARTITION_LEADER", "orders {} 0 0", "partition"),
    ("ADMIN_SET_PARTITION_LEADER", "orders 0 {} 0", "leader_id"),
    ("ADMIN_RECONCILE_BROKER_HEALTH", "{}", "timeout_ms"),
    ("ADMIN_FENCE_BROKER", "{}", "broker_id"),
    ("ADMIN_UNFENCE_BROKER", "{}", "broker_id"),
    ("BROKER_FETCH", "orders {} 1 0", "partition"),
    ("BROKER_FETCH", "orders 0 {} 0", "follower_id"),
    ("BROKER_FETCH", "orders 0 1 {}", "offset"),
    ("BROKER_FETCH", "orders 0 1 0 {}", "max_messages"),
    ("BROKER_REPLICA_ACK", "orders {} 1 0", "partition"),
    ("BROKER_REPLICA_ACK", "orders 0 {} 0", "follower_id"),
    ("BROKER_REPLICA_ACK", "orders 0 1 {}", "acked_offset"),
]


@pytest.mark.parametrize(("command", "template", "name"), INTEGER_FIELDS,
                         ids=[f"{c}-{n}" for c, _t, n in INTEGER_FIELDS])
async def test_non_integer(env: Env, command: str, template: str, name: str) -> None:
    for i, token in enumerate(BAD_INTEGERS):
        await check(env, f"V1|n{i}|{command}|{template.format(token)}",
                    f"V1|n{i}|ERR|BAD_REQUEST|invalid {name}")


async def test_integers_parse_like_go_atoi(env: Env) -> None:
    """Signs and leading zeros are fine; the extreme int64 values parse (and are then range-checked)."""
    await check(env, "V1|1|CONSUME|orders +002 0", env.snapshot[2].replace(b"V1|snap|", b"V1|1|"))
    await check(env, "V1|2|CONSUME|orders 0 -0", env.snapshot[0].replace(b"V1|snap|", b"V1|2|"))
    hw0 = env.snapshot[0].rsplit(b" hw=", 1)[1].decode()
    await check(env, f"V1|3|CONSUME|orders 0 {2**63 - 1}", f"V1|3|OK|messages= hw={hw0}")
    await check(env, f"V1|4|CONSUME|orders {-(2**63)} 0", "V1|4|ERR|BAD_REQUEST|invalid partition")
    await check(env, "V1|5|OFFSET|g orders 007", "V1|5|OK|offset=0")


async def test_blank_integer_is_a_missing_argument(env: Env) -> None:
    """A blank cannot be an integer token: runs of whitespace collapse, so the count is short."""
    for args in ("orders  0", "orders 0 ", "orders \u00a0 0", "orders \t\x0b 0"):
        await check(env, f"V1|b|CONSUME|{args}", f"V1|b|ERR|BAD_REQUEST|{USAGE['CONSUME']}")
    await check(env, "V1|b|OFFSET|g orders ", f"V1|b|ERR|BAD_REQUEST|{USAGE['OFFSET']}")


# -- offsets and partitions --------------------------------------------------------------------

async def test_negative_consume_offset(env: Env) -> None:
    for off in ("-1", "-5", str(-(2**63))):
        await check(env, f"V1|c|CONSUME|orders 0 {off}", "V1|c|ERR|BAD_REQUEST|invalid offset")
    # Also on an empty partition of an existing topic, and on an unknown topic.
    await check(env, "V1|d|CONSUME|nosuch 0 -1", "V1|d|ERR|BAD_REQUEST|invalid offset")


async def test_negative_commit_offset(env: Env) -> None:
    c = env.conn
    assert await c.ask("V1|j|JOIN|g orders c1") == "V1|j|OK|generation=2 assigned=[0 1 2]"
    assert await c.ask("V1|k|COMMIT|g orders c1 2 0 3") == "V1|k|OK|committed=true"
    for off in ("-1", "-100"):
        await check(env, f"V1|c|COMMIT|g orders c1 2 0 {off}", "V1|c|ERR|BAD_REQUEST|invalid offset")
    # Rejected before any group check: unknown group, too.
    await check(env, "V1|c|COMMIT|nog orders c1 2 0 -1", "V1|c|ERR|BAD_REQUEST|invalid offset")
    assert await c.ask("V1|o|OFFSET|g orders 0") == "V1|o|OK|offset=3"
    offsets = (env.data / "offsets.json").read_text()
    assert "-1" not in offsets and "-100" not in offsets


@pytest.mark.parametrize("partition", ["-1", "3", "4", str(2**63 - 1)])
async def test_consume_partition_out_of_range(env: Env, partition: str) -> None:
    await check(env, f"V1|p|CONSUME|orders {partition} 0", "V1|p|ERR|BAD_REQUEST|invalid partition")


async def test_consume_partition_range_follows_topic(env: Env) -> None:
    c = env.conn
    assert (await c.ask("V1|1|ADMIN_CREATE_TOPIC|five 5 1")).startswith("V1|1|OK|topic=five partitions=5")
    await check(env, "V1|2|CONSUME|five 4 0", "V1|2|OK|messages= hw=-1")
    await check(env, "V1|3|CONSUME|five 5 0", "V1|3|ERR|BAD_REQUEST|invalid partition")


async def test_consume_unknown_topic(env: Env) -> None:
    await check(env, "V1|u|CONSUME|nosuch 0 0", "V1|u|OK|messages= hw=-1")
    await check(env, "V1|u|CONSUME|nosuch 2 17", "V1|u|OK|messages= hw=-1")
    assert not (env.data / "topics" / "nosuch").exists(), "CONSUME must not create topics"
    assert await env.conn.ask("V1|m|ADMIN_GET_METADATA|") == "V1|m|OK|topics=[orders] brokers=[0] fenced=[]"


async def test_consume_past_hw(env: Env) -> None:
    hw0 = env.snapshot[0].rsplit(b" hw=", 1)[1].decode()
    await check(env, f"V1|x|CONSUME|orders 0 {int(hw0) + 1}", f"V1|x|OK|messages= hw={hw0}")


# -- groups ------------------------------------------------------------------------------------

async def test_unknown_group(env: Env) -> None:
    for cmd, args in [("SYNC", "nog orders c1 2"), ("HEARTBEAT", "nog orders c1 2"),
                      ("LEAVE", "nog orders c1 2"), ("COMMIT", "nog orders c1 2 0 0")]:
        await check(env, f"V1|g|{cmd}|{args}", "V1|g|ERR|GENERATION_MISMATCH|group not found")
    assert await env.conn.ask("V1|o|OFFSET|nog orders 0") == "V1|o|OK|offset=0"


async def test_group_errors(env: Env) -> None:
    c = env.conn
    assert await c.ask("V1|j|JOIN|g orders c1") == "V1|j|OK|generation=2 assigned=[0 1 2]"
    mismatch = "V1|e|ERR|GENERATION_MISMATCH|"
    for cmd in ("SYNC", "HEARTBEAT", "LEAVE"):
        await check(env, f"V1|e|{cmd}|g orders c9 2", mismatch + "unknown member")
        await check(env, f"V1|e|{cmd}|g orders c1 1", mismatch + "stale generation")
        await check(env, f"V1|e|{cmd}|g orders c1 3", mismatch + "stale generation")
        await check(env, f"V1|e|{cmd}|g other c1 2", mismatch + "group not found")
    await check(env, "V1|e|COMMIT|g orders c9 2 0 1", mismatch + "unknown member")
    await check(env, "V1|e|COMMIT|g orders c1 9 0 1", mismatch + "stale generation")
    await check(env, "V1|e|COMMIT|g orders c1 2 5 1", mismatch + "partition not assigned to member")
    await check(env, "V1|e|COMMIT|g other c1 2 0 1", mismatch + "group not found")
    # None of that changed the group: the member is still there at generation 2.
    assert await c.ask("V1|s|SYNC|g orders c1 2") == "V1|s|OK|generation=2 assigned=[0 1 2]"


async def test_join_bad_assignor(env: Env) -> None:
    msg = "V1|j|ERR|BAD_REQUEST|invalid assignor; expected assignor=round_robin|range"
    for arg in ("assignor=sticky", "assignor", "strategy=range", "assignor=", "=range"):
        await check(env, f"V1|j|JOIN|g orders c1 {arg}", msg)
    assert not (env.data / "groups.json").exists() or "\"g\"" not in (env.data / "groups.json").read_text()


@pytest.mark.parametrize(("args", "message"), [
    ("newtopic 0 3 0", "invalid replica id"),
    ("newtopic 3 1 0", "invalid partition"),
])
async def test_rejected_replica_fetch_has_no_side_effects(env: Env, args: str, message: str) -> None:
    """A REPLICA_FETCH that is refused must not create the topic it names (rtes.md 7.9 checks the
    replica id before anything else; CONSUME of an unknown topic creates nothing either)."""
    await check(env, f"V1|r|REPLICA_FETCH|{args}", f"V1|r|ERR|BAD_REQUEST|{message}")
    assert not (env.data / "topics" / "newtopic").exists(), \
        f"BUG: the refused 'REPLICA_FETCH {args}' ({message}) created topic newtopic on disk"
    metadata = await env.conn.ask("V1|m|ADMIN_GET_METADATA|")
    assert metadata == "V1|m|OK|topics=[orders] brokers=[0] fenced=[]", \
        f"BUG: the refused 'REPLICA_FETCH {args}' ({message}) added topic newtopic to the metadata"


async def test_replica_fetch_errors_on_existing_topic(env: Env) -> None:
    await check(env, "V1|r|REPLICA_FETCH|orders 0 0 0", "V1|r|ERR|BAD_REQUEST|invalid replica id")
    await check(env, "V1|r|REPLICA_FETCH|orders 0 3 0", "V1|r|ERR|BAD_REQUEST|invalid replica id")
    await check(env, "V1|r|REPLICA_FETCH|orders 3 1 0", "V1|r|ERR|BAD_REQUEST|invalid partition")
    assert await env.conn.ask("V1|s|SET_PARTITION_ROLE|orders 0 follower") == \
        "V1|s|OK|topic=orders partition=0 role=follower hw=0"
    # Replica id range is checked before the role.
    await check(env, "V1|r|REPLICA_FETCH|orders 0 5 0", "V1|r|ERR|BAD_REQUEST|invalid replica id")
    await check(env, "V1|r|REPLICA_FETCH|orders 0 1 0", "V1|r|ERR|BAD_REQUEST|partition is not leader")
    await check(env, "V1|r|PRODUCE|orders user9:refused",
                "V1|r|ERR|NOT_LEADER|partition leader unavailable on this broker")


# -- topic names -------------------------------------------------------------------------------

BAD_TOPICS = ["a/b", "..", ".", "a" * 250, "ab%", "../escape", "/abs", "a\\b", "caf\u00e9", "a:b", "t\x1c"]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("topic", BAD_TOPICS, ids=lambda t: repr(t[:12]))
async def test_invalid_topic_name(env: Env, topic: str, tmp_path: Path) -> None:
    before = _tree(tmp_path)
    for template in ("PRODUCE|{} k:v", "PRODUCE|{} k:v acks=all", "CONSUME|{} 0 0", "JOIN|g {} c1",
                     "JOIN|g {} c1 assignor=range"):
        await check(env, "V1|t|" + template.format(topic), "V1|t|ERR|BAD_REQUEST|invalid topic name")
    after = _tree(tmp_path)
    # Nothing was created anywhere: not outside <data>/topics and not inside it either.
    assert after == before, sorted(after ^ before)
    assert not (tmp_path / "escape").exists() and not (tmp_path / "data" / "escape").exists()
    groups = env.data / "groups.json"
    assert not groups.exists() or '"g"' not in groups.read_text()


async def test_longest_topic_name_is_accepted(env: Env) -> None:
    name = "b" * 249
    reply = await env.conn.ask(f"V1|1|PRODUCE|{name} k:v")
    assert reply.startswith("V1|1|OK|partition="), reply
    assert (env.data / "topics" / name).is_dir()
    await assert_intact(env)


# -- values ------------------------------------------------------------------------------------

@pytest.mark.parametrize("message", ["k:a,b", "k:,", "k:x,7:y", ":a,", "k:v|,"])
async def test_value_with_comma(env: Env, message: str) -> None:
    for acks in ("", " acks=1", " acks=all", " ACKS=0"):
        await check(env, f"V1|v|PRODUCE|orders {message}{acks}",
                    "V1|v|ERR|BAD_REQUEST|value must not contain ','")


async def test_comma_in_key_is_fine(env: Env) -> None:
    """Only the value ends up in CONSUME's comma-separated list; a key may hold a comma."""
    reply = await env.conn.ask("V1|v|PRODUCE|newtopic a,b:v")
    assert reply == f"V1|v|OK|partition={fnv1a_32(b'a,b') % 3} offset=0 hw=0"
    await assert_intact(env)


async def test_message_without_colon_and_bad_acks(env: Env) -> None:
    await check(env, "V1|m|PRODUCE|orders novalue", "V1|m|ERR|BAD_REQUEST|message must be key:value")
    for acks in ("acks=2", "acks=", "ack=1", "acks", "world", "acks=al"):
        await check(env, f"V1|m|PRODUCE|orders k:v {acks}",
                    "V1|m|ERR|BAD_REQUEST|invalid ack mode; expected acks=0|1|all")


async def test_invalid_utf8_value_round_trips(env: Env) -> None:
    c = env.conn
    p = fnv1a_32(b"k") % 3
    await c.send(b"V1|5|PRODUCE|orders k:\xff\xfe")
    reply = await c.recv()
    hw = int(env.snapshot[p].rsplit(b" hw=", 1)[1])
    assert reply == f"V1|5|OK|partition={p} offset={hw + 1} hw={hw + 1}".encode()
    await c.send(f"V1|6|CONSUME|orders {p} {hw + 1}")
    assert await c.recv() == f"V1|6|OK|messages={hw + 1}:".encode() + b"\xff\xfe" + f" hw={hw + 1}".encode()
    # The old records of that partition are still there, in front of the new one.
    await c.send(f"V1|7|CONSUME|orders {p} 0")
    full = await c.recv()
    old = env.snapshot[p].replace(b"V1|snap|", b"V1|7|").rsplit(b" hw=", 1)[0]
    assert full.startswith(old + b"," + f"{hw + 1}:".encode() + b"\xff\xfe hw=")
    assert await c.ask("V1|after|PING|") == "V1|after|OK"


async def test_invalid_utf8_key_hashes_its_bytes(env: Env) -> None:
    c = env.conn
    for i, key in enumerate([b"\xff", b"\xc3", b"\x80\x80", "\u00e9".encode()]):
        p = fnv1a_32(key) % 3
        await c.send(b"V1|" + str(i).encode() + b"|PRODUCE|fresh " + key + b":v" + str(i).encode())
        assert (await c.recv()).startswith(f"V1|{i}|OK|partition={p} ".encode()), key
    await assert_intact(env)


# -- line length -------------------------------------------------------------------------------

async def test_longest_line_is_accepted(env: Env) -> None:
    c = env.conn
    prefix = b"V1|big|PRODUCE|orders big:"
    line = prefix + b"v" * (MAX_LINE - len(prefix))
    assert len(line) == MAX_LINE
    reply = await c.ask(line)
    assert reply.startswith("V1|big|OK|partition="), reply[:100]
    p = fnv1a_32(b"big") % 3
    off = int(reply.split("offset=")[1].split()[0])
    await c.send(f"V1|r|CONSUME|orders {p} {off}")
    assert await c.recv() == f"V1|r|OK|messages={off}:".encode() + b"v" * (MAX_LINE - len(prefix)) + \
        f" hw={off}".encode()
    # 65,535 bytes counting a CR before the LF are accepted too (the CR is dropped).
    ping = b"V1|cr|PING|"
    assert await c.ask(ping + b" " * (MAX_LINE - len(ping) - 1) + b"\r") == "V1|cr|OK"
    # Exactly at the cap, pipelined after other lines in one write.
    c.writer.write(b"V1|a|PING|\n" + ping + b"x" * (MAX_LINE - len(ping)) + b"\nV1|b|PING|\n")
    assert [await c.recv() for _ in range(3)] == [b"V1|a|OK", b"V1|cr|OK", b"V1|b|OK"]
    await assert_intact(env)


def _send_and_read_all(port: int, *pieces: bytes) -> bytes:
    """Send ``pieces`` on a fresh raw socket, then read until the server closes it.

    Raw sockets, because the server closes while the client may still be sending: the kernel then
    answers with a reset, and asyncio's StreamReader drops lines it had already buffered.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            for piece in pieces:
                sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        while True:
            try:
                got = sock.recv(65536)
            except ConnectionResetError:
                break
            if not got:
                break
            data += got
        return data


TOO_LONG = b"V1|0|ERR|BAD_REQUEST|line too long\n"


@pytest.mark.parametrize("size", [MAX_LINE + 1, MAX_LINE + 2, 200_000])
async def test_over_long_line_closes_connection(env: Env, size: int) -> None:
    # Earlier lines in the same write are answered first; then the error; then the server closes.
    payload = b"V1|1|PING|\nV1|2|PING|\n" + b"V1|3|PING|" + b"x" * (size - 10)
    data = await asyncio.to_thread(_send_and_read_all, env.port, payload)
    assert data == b"V1|1|OK\nV1|2|OK\n" + TOO_LONG
    # The seed connection and new connections are still served.
    await assert_intact(env, exact=True)
    fresh = await LineConn.open(env.port)
    try:
        await assert_intact(env, fresh, exact=True)
    finally:
        await fresh.close()


async def test_over_long_line_with_lf(env: Env) -> None:
    """65,536 bytes before the LF is one byte too many, even when the LF is in the same write;
    the lines after it are never answered."""
    payload = b"V1|1|PING|\n" + b"V1|2|PING|" + b"x" * (MAX_LINE + 1 - 10) + b"\nV1|3|PING|\n"
    data = await asyncio.to_thread(_send_and_read_all, env.port, payload)
    assert data == b"V1|1|OK\n" + TOO_LONG
    await assert_intact(env, exact=True)


async def test_over_long_line_in_small_pieces(env: Env) -> None:
    """The cap holds when the line trickles in: the server never buffers past it."""
    pieces = [b"V1|1|PING|\n"] + [b"y" * 4096] * 40
    data = await asyncio.to_thread(_send_and_read_all, env.port, *pieces)
    assert data == b"V1|1|OK\n" + TOO_LONG
    await assert_intact(env, exact=True)


async def test_over_long_line_half_closed(env: Env) -> None:
    """An unterminated over-long tail at half-close is refused too, not processed as a line."""

    def run() -> bytes:
        with socket.create_connection(("127.0.0.1", env.port), timeout=10) as sock:
            sock.sendall(b"V1|1|PING|\nV1|2|PRODUCE|orders k:" + b"z" * MAX_LINE)
            sock.shutdown(socket.SHUT_WR)
            data = b""
            while got := sock.recv(65536):
                data += got
            return data

    data = await asyncio.to_thread(run)
    assert data == b"V1|1|OK\n" + TOO_LONG
    await assert_intact(env, exact=True)


# -- whitespace --------------------------------------------------------------------------------

@pytest.mark.parametrize("sep", ["\t", "\x0b", "\x0c", "\u00a0", "\u0085", "\u1680", "\u2000", "\u200a",
                                 "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", " \t\x0b "])
async def test_go_whitespace_splits_arguments(env: Env, sep: str) -> None:
    c = env.conn
    reply = await c.ask(f"V1|w|PRODUCE|{sep}orders{sep}k:ws{sep}acks=1{sep}")
    p = fnv1a_32(b"k") % 3
    assert reply.startswith(f"V1|w|OK|partition={p} "), reply
    off = int(reply.split("offset=")[1].split()[0])
    assert await c.ask(f"V1|r|CONSUME|orders{sep}{p}{sep}{off}") == f"V1|r|OK|messages={off}:ws hw={off}"
    await assert_intact(env)


@pytest.mark.parametrize("char", ["\x1c", "\x1d", "\x1e", "\x1f", "\u200b", "\u180e", "\ufeff"])
async def test_other_characters_do_not_split(env: Env, char: str) -> None:
    """Python's str.split() also splits on U+001C..U+001F; Go (and so V1) does not."""
    # Not a separator between a topic and its message: one argument only.
    await check(env, f"V1|u|PRODUCE|orders{char}k:v", f"V1|u|ERR|BAD_REQUEST|{USAGE['PRODUCE']}")
    c = env.conn
    p = fnv1a_32(b"k") % 3
    reply = await c.ask(f"V1|w|PRODUCE|orders k:a{char}b")
    assert reply.startswith(f"V1|w|OK|partition={p} "), f"{char!r} must not split a value: {reply}"
    off = int(reply.split("offset=")[1].split()[0])
    await c.send(f"V1|r|CONSUME|orders {p} {off}")
    assert await c.recv() == f"V1|r|OK|messages={off}:a{char}b hw={off}".encode()
    await assert_intact(env)
