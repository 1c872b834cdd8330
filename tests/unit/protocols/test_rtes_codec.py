"""The V1 codec without sockets: framing, envelope, arguments, replies."""

from __future__ import annotations

import pytest

from bayou.protocols.rtes import messages as m
from bayou.protocols.rtes.codec import (
    MAX_LINE,
    LineReader,
    LineTooLong,
    RtesError,
    atoi,
    decode_request,
    encode_error,
    encode_ok,
    encode_records,
    escape_value,
    fnv1a_32,
    go_list,
    parse_envelope,
)

FNV_TABLE = [  # rtes.md 6.1
    (b"", 2166136261, 1, 1),
    (b"a", 3826002220, 1, 0),
    (b"user1", 2692558073, 2, 1),
    (b"user2", 2642225216, 2, 0),
    (b"user3", 2659002835, 1, 3),
    (b"user9", 2826779025, 0, 1),
    (b"order-42", 1461995252, 2, 0),
    (b"alice", 2267157479, 2, 3),
]


@pytest.mark.parametrize(("key", "h", "p3", "p4"), FNV_TABLE)
def test_fnv1a_table(key: bytes, h: int, p3: int, p4: int) -> None:
    assert fnv1a_32(key) == h
    assert h % 3 == p3 and h % 4 == p4


def test_line_reader_whole_bytewise_and_trailing() -> None:
    data = b"V1|1|PING|\r\nV1|2|PING|\nV1|3|PI"
    assert LineReader().feed(data) == [b"V1|1|PING|", b"V1|2|PING|"]
    r = LineReader()
    got: list[bytes] = []
    for i in range(len(data)):
        got += r.feed(data[i : i + 1])
    assert got == [b"V1|1|PING|", b"V1|2|PING|"]
    assert r.eof() == b"V1|3|PI"
    assert r.eof() is None


def test_line_reader_cap() -> None:
    r = LineReader()
    assert r.feed(b"x" * MAX_LINE + b"\n") == [b"x" * MAX_LINE]
    r = LineReader()
    assert r.feed(b"x" * MAX_LINE) == []
    with pytest.raises(LineTooLong):
        r.feed(b"x")


def test_line_reader_cap_keeps_earlier_lines() -> None:
    r = LineReader()
    assert r.feed(b"V1|1|PING|\n" + b"y" * (MAX_LINE + 1)) == [b"V1|1|PING|"]
    assert r.overflowed
    with pytest.raises(LineTooLong):
        r.feed(b"")


def test_line_reader_overlong_line_with_lf() -> None:
    with pytest.raises(LineTooLong):
        LineReader().feed(b"z" * (MAX_LINE + 1) + b"\nV1|1|PING|\n")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"", "expected format V1|<correlation_id>|<command>|<args>"),
        (b"V1|1|PING", "expected format V1|<correlation_id>|<command>|<args>"),
        (b"v1|1|PING|", "unsupported version"),
        (b"V2|7|PING|", "unsupported version"),
        (b"V1| |PING|", "correlation id required"),
        (b"V1|1| |", "command required"),
    ],
)
def test_envelope_errors_use_cid_zero(line: bytes, message: str) -> None:
    with pytest.raises(RtesError) as ei:
        parse_envelope(line)
    assert ei.value.cid == "0" and ei.value.message == message


def test_envelope_trims_and_keeps_extra_pipes() -> None:
    env = parse_envelope(b"  V1| 42 | produce |orders k:a|b  ")
    assert (env.cid, env.command, env.args) == ("42", "PRODUCE", ["orders", "k:a|b"])


def test_go_whitespace_set() -> None:
    env = parse_envelope("V1|1|X|a\x0bb\u00a0c\u0085d\x1ce".encode())
    assert env.args == ["a", "b", "c", "d\x1ce"]


@pytest.mark.parametrize("token", ["1_0", "0x1", "", " 1", "\u0661", "9223372036854775808", "+", "1.0"])
def test_atoi_rejects(token: str) -> None:
    with pytest.raises(RtesError) as ei:
        atoi(token, "offset")
    assert ei.value.message == "invalid offset"


@pytest.mark.parametrize(("token", "value"), [("+2", 2), ("007", 7), ("-5", -5),
                                              ("-9223372036854775808", -(1 << 63))])
def test_atoi_accepts(token: str, value: int) -> None:
    assert atoi(token, "x") == value


def test_decode_produce_variants() -> None:
    assert decode_request(b"V1|1|PRODUCE|t user1:note:gift ACKS=ALL") == (
        "1", m.Produce("t", b"user1", b"note:gift", "all"))
    assert decode_request(b"V1|1|PRODUCE|t :v")[1] == m.Produce("t", b"", b"v", "1")
    assert decode_request(b"V1|1|PRODUCE|t k:")[1] == m.Produce("t", b"k", b"", "1")
    assert decode_request("V1|1|PRODUCE|t k:\udcff".encode("utf-8", "surrogateescape"))[1] == m.Produce(
        "t", b"k", b"\xff", "1")


def test_decode_errors_carry_request_cid() -> None:
    with pytest.raises(RtesError) as ei:
        decode_request(b"V1|77|NOPE|")
    assert (ei.value.cid, ei.value.code, ei.value.message) == ("77", "UNKNOWN_COMMAND", "unsupported command")
    with pytest.raises(RtesError) as ei:
        decode_request(b"V1|78|JOIN|g t c assignor=sticky")
    assert ei.value.cid == "78"


def test_decode_every_command() -> None:
    cases = {
        b"CONSUME|t 1 2": m.Consume("t", 1, 2),
        b"JOIN|g t c assignor=RANGE": m.Join("g", "t", "c", "range"),
        b"SYNC|g t c 3": m.Sync("g", "t", "c", 3),
        b"HEARTBEAT|g t c 3": m.Heartbeat("g", "t", "c", 3),
        b"LEAVE|g t c 3": m.Leave("g", "t", "c", 3),
        b"COMMIT|g t c 3 1 9": m.Commit("g", "t", "c", 3, 1, 9),
        b"OFFSET|g t 1": m.Offset("g", "t", 1),
        b"REPLICA_FETCH|t 1 2 3": m.ReplicaFetch("t", 1, 2, 3),
        b"SET_PARTITION_ROLE|t 1 Follower": m.SetPartitionRole("t", 1, "follower"),
        b"PING|anything": m.Ping(),
        b"ADMIN_CREATE_TOPIC|t 2 1 retention.ms=5": m.AdminCreateTopic("t", 2, 1, (("retention.ms", "5"),)),
        b"ADMIN_REGISTER_BROKER|1 h 9 2": m.AdminRegisterBroker(1, "h", 9, 2),
        b"ADMIN_BROKER_HEARTBEAT|1": m.AdminBrokerHeartbeat(1),
        b"ADMIN_SET_PARTITION_LEADER|t 0 1 1,,2": m.AdminSetPartitionLeader("t", 0, 1, (1, 2)),
        b"ADMIN_GET_METADATA|": m.AdminGetMetadata(),
        b"ADMIN_RECONCILE_BROKER_HEALTH|5": m.AdminReconcileBrokerHealth(5),
        b"ADMIN_FENCE_BROKER|1": m.AdminFenceBroker(1, True),
        b"ADMIN_UNFENCE_BROKER|1": m.AdminFenceBroker(1, False),
        b"ADMIN_ELECT_TOPIC_LEADERS|t": m.AdminElectTopicLeaders("t"),
        b"BROKER_FETCH|t 0 1 0": m.BrokerFetch("t", 0, 1, 0, 100),
        b"BROKER_REPLICA_ACK|t 0 1 5": m.BrokerReplicaAck("t", 0, 1, 5),
        b"ADMIN_DESCRIBE_TOPIC|t": m.AdminDescribeTopic("t"),
        b"ADMIN_DELETE_TOPIC|t": m.AdminDeleteTopic("t"),
    }
    for tail, msg in cases.items():
        assert decode_request(b"V1|1|" + tail) == ("1", msg)


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"ADMIN_CREATE_TOPIC|t 0 1", "partitions must be > 0"),
        (b"ADMIN_CREATE_TOPIC|t 1 0", "replication factor must be > 0"),
        (b"ADMIN_REGISTER_BROKER|-1 h 9", "broker id must be >= 0"),
        (b"ADMIN_REGISTER_BROKER|1 h 0", "broker port must be > 0"),
        (b"ADMIN_BROKER_HEARTBEAT|-1", "invalid broker heartbeat command"),
        (b"ADMIN_SET_PARTITION_LEADER|t -1 0 0", "partition must be >= 0"),
        (b"ADMIN_SET_PARTITION_LEADER|t 0 -2 0", "leader id must be >= -1"),
        (b"ADMIN_SET_PARTITION_LEADER|t 0 0 a", "invalid integer list"),
        (b"ADMIN_GET_METADATA|x", "ADMIN_GET_METADATA requires no args"),
        (b"ADMIN_RECONCILE_BROKER_HEALTH|0", "timeout must be > 0"),
        (b"BROKER_FETCH|t 0 1 0 0", "max_messages must be > 0"),
        (b"BROKER_FETCH|t 0 1 -1", "invalid offset"),
        (b"SET_PARTITION_ROLE|t 0 observer", "invalid role"),
    ],
)
def test_flux_argument_errors(tail: bytes, message: str) -> None:
    with pytest.raises(RtesError) as ei:
        decode_request(b"V1|5|" + tail)
    assert (ei.value.code, ei.value.message) == ("BAD_REQUEST", message)


def test_replies() -> None:
    assert encode_ok("9") == b"V1|9|OK\n"
    assert encode_ok("9", "a=1") == b"V1|9|OK|a=1\n"
    assert encode_error("0", "BAD_REQUEST", "x|y") == b"V1|0|ERR|BAD_REQUEST|x|y\n"
    assert go_list([]) == "[]" and go_list([0, 1, 2]) == "[0 1 2]"
    assert encode_records([(0, b"created"), (1, b"note:gift")]) == b"0:created,1:note:gift"


def test_escape_only_touches_line_breaking_bytes() -> None:
    assert escape_value(b"plain:value|x") == b"plain:value|x"
    assert escape_value(b"a,b c\nd") == b"a%2Cb%20c%0Ad"
