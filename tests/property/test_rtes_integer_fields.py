"""Every integer argument of every V1 command, at any value (int64 edges, past int64, negative,
huge): the codec decodes the line or raises RtesError, and the broker, sent the line over a real
socket, answers ``V1|<cid>|OK|...`` or ``V1|<cid>|ERR|<CODE>|...`` (issue 13 item 10), keeps
serving, and logs no unhandled exception."""

from __future__ import annotations

import contextlib
import re
import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayou.protocols.rtes.codec import RtesError, decode_request
from conftest import LiveBroker, edges

TOPIC = "prop"
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
REPLY = re.compile(r"V1\|77\|(OK|ERR\|[A-Z_]+)(\||$)")

numbers = (st.sampled_from(edges(64, signed=True)).map(str)
           | st.integers(-(1 << 70), 1 << 70).map(str)
           | st.sampled_from(["18446744073709551615", "-9223372036854775809", "99999999999999999999999",
                              "0x10", "+5", "-0", "007", "1e3", ""]))
T = (TOPIC, "absent")
TEMPLATES = [
    "CONSUME|{t} {n} {n}",
    "SYNC|g {t} c {n}", "HEARTBEAT|g {t} c {n}", "LEAVE|g {t} c {n}",
    "COMMIT|g {t} c {n} {n} {n}",
    "OFFSET|g {t} {n}",
    "REPLICA_FETCH|{t} {n} {n} {n}",
    "SET_PARTITION_ROLE|{t} {n} leader",
    "ADMIN_CREATE_TOPIC|prop {n} {n}",  # exists: nothing is created whatever the counts
    "ADMIN_CREATE_TOPIC|made1 {n} {n}", "ADMIN_CREATE_TOPIC|made2 {n} 1",  # past max_partitions: refused
    "ADMIN_REGISTER_BROKER|{n} 127.0.0.1 {n} {n}",
    "ADMIN_BROKER_HEARTBEAT|{n}",
    "ADMIN_SET_PARTITION_LEADER|{t} {n} {n} {n},{n}",
    "ADMIN_RECONCILE_BROKER_HEALTH|{n}",
    "ADMIN_FENCE_BROKER|{n}", "ADMIN_UNFENCE_BROKER|{n}",
    "BROKER_FETCH|{t} {n} {n} {n} {n}",
    "BROKER_FETCH|{t} {n} {n} {n}",
    "BROKER_REPLICA_ACK|{t} {n} {n} {n}",
]


@st.composite
def lines(draw: st.DrawFn) -> str:
    template = draw(st.sampled_from(TEMPLATES))
    out = template.replace("{t}", draw(st.sampled_from(T)))
    while "{n}" in out:
        out = out.replace("{n}", draw(numbers), 1)
    return "V1|77|" + out


def ask(s: socket.socket, line: str) -> str:
    s.sendall(line.encode() + b"\n")
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {line!r}")
        buf += chunk
    return buf.decode()[:-1]


def setup(live: LiveBroker) -> None:
    if TOPIC not in live.server.broker.topics:
        live.call(live.server.broker.create_topic(TOPIC, 2))


@SETTINGS
@given(line=lines())
def test_any_integer_in_any_argument(live_broker: LiveBroker, line: str) -> None:
    setup(live_broker)
    with contextlib.suppress(RtesError):
        decode_request(line.encode())
    with live_broker.connect("rtes") as s:
        reply = ask(s, line)
        assert REPLY.match(reply), (line, reply)
        assert ask(s, "V1|78|PING|") == "V1|78|OK"
    assert live_broker.errors == [], line


def test_the_broker_still_serves_v1(live_broker: LiveBroker) -> None:
    setup(live_broker)
    with live_broker.connect("rtes") as s:
        assert ask(s, "V1|1|ADMIN_CREATE_TOPIC|after 1 1").startswith("V1|1|OK")
        assert ask(s, "V1|2|PRODUCE|after k:still-here").startswith("V1|2|OK|partition=0 offset=0")
        assert ask(s, "V1|3|CONSUME|after 0 0").startswith("V1|3|OK|messages=0:still-here")
    assert live_broker.errors == []
