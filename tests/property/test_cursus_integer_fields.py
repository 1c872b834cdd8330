"""Every integer field Cursus carries, at any value: the text commands' numeric arguments (int64
edges, past int64, negative, not a number) and the binary batch's partition, seq range, count and
each message's offset, seq, epoch, schema and aggregate versions. The codec decodes the frame or
raises CursusError, and the broker, sent it over a real socket, answers (a reply frame, which for
a bad value is Cursus' ``ERROR: ...``) or closes the connection exactly when the codec said so,
keeps serving, and logs no unhandled exception (issue 13 item 10)."""

from __future__ import annotations

import socket
import struct

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bayou.protocols.cursus.batch import encode_batch, encode_messages
from bayou.protocols.cursus.framing import encode_frame
from bayou.records.cursus import CursusMessage
from conftest import LiveBroker, edges, read_exactly

TOPIC = "prop"
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
_U32 = struct.Struct(">I")

numbers = (st.sampled_from(edges(64, signed=True)).map(str)
           | st.integers(-(1 << 70), 1 << 70).map(str)
           | st.sampled_from(["18446744073709551615", "-9223372036854775809", "0x10", "+5", "-0", "1e3"]))
TEMPLATES = [
    "CONSUME topic={t} partition={n} offset={n} member=m group=g batch={n}",
    "CONSUME topic={t} partition={n} offset={n} member=m group=g batch={n} wait_ms={n}",
    "CONSUME {t} {n} {n}",
    "CREATE topic={t} partitions={n} replication_factor={n}",
    "COMMIT_OFFSET topic={t} partition={n} group=g offset={n}",
    "COMMIT_OFFSET topic={t} partition={n} group=g offset={n} member=m generation={n}",
    "BATCH_COMMIT topic={t} group=g member=m generation={n} P{n}:{n},P{n}:{n}",
    "FETCH_OFFSET topic={t} partition={n} group=g",
    "LIST_OFFSETS topic={t} partition={n}",
    "JOIN_GROUP topic={t} group=g member=m",
    "SYNC_GROUP topic={t} group=g member=m generation={n}",
    "HEARTBEAT topic={t} group=g member=m generation={n}",
    "LEAVE_GROUP topic={t} group=g member=m generation={n}",
    "PUBLISH topic={t} message=x producerId=p seqNum={n} epoch={n} partition={n}",
    "PUBLISH topic={t} message=x producerId=p seqNum={n} epoch={n} isIdempotent=true acks=1",
    "APPEND_STREAM topic={t} key=k version={n} schema_version={n} message=x",
    "READ_STREAM topic={t} key=k from_version={n}",
    "STREAM_VERSION topic={t} key=k",
    "SAVE_SNAPSHOT topic={t} key=k version={n} message=s",
    "READ_SNAPSHOT topic={t} key=k",
    "METADATA topic={t}",
]


@st.composite
def commands(draw: st.DrawFn) -> bytes:
    text = draw(st.sampled_from(TEMPLATES)).replace("{t}", draw(st.sampled_from([TOPIC, "absent"])))
    while "{n}" in text:
        text = text.replace("{n}", draw(numbers), 1)
    return b"\x00\x00" + text.encode()


u64 = st.sampled_from(edges(64)) | st.integers(0, (1 << 64) - 1)
i64 = st.sampled_from(edges(64, signed=True))
messages = st.builds(CursusMessage, st.binary(min_size=1, max_size=6), u64, u64, st.just(b"p"),
                     st.binary(max_size=3), i64, st.just(b""), st.sampled_from(edges(32)), u64)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    msgs = draw(st.lists(messages, min_size=1, max_size=3))
    try:
        records = encode_messages(msgs)
    except (struct.error, ValueError, OverflowError):
        assume(False)
        raise
    count = draw(st.just(len(msgs)) | st.sampled_from(edges(32, signed=True)))
    topic, partition = draw(st.sampled_from([TOPIC, "absent"])), draw(st.sampled_from(edges(32, signed=True)))
    acks = draw(st.sampled_from(["1", "0", "-1", "all"]))
    idempotent = draw(st.booleans())
    return encode_batch(topic, partition, records, count, draw(u64), draw(u64), acks, idempotent=idempotent)


def exchange(s: socket.socket, body: bytes) -> bytes | None:
    """Send one frame; its reply body, or None when the broker closed the connection."""
    s.sendall(encode_frame(body))
    head = read_exactly(s, 4)
    if head is None:
        return None
    return read_exactly(s, _U32.unpack(head)[0])


def setup(live: LiveBroker) -> None:
    if TOPIC not in live.server.broker.topics:
        live.call(live.server.broker.create_topic(TOPIC, 2))


@SETTINGS
@given(body=commands() | batches())
def test_any_integer_in_any_field(live_broker: LiveBroker, body: bytes) -> None:
    setup(live_broker)
    with live_broker.connect("cursus", timeout=70) as s:
        reply = exchange(s, body)
        if reply is not None:  # still serving: LIST answers on the same connection
            assert (exchange(s, b"\x00\x00LIST") or b"").startswith(b"OK count="), body
    assert live_broker.errors == [], body


def test_the_broker_still_serves_cursus(live_broker: LiveBroker) -> None:
    setup(live_broker)
    with live_broker.connect("cursus") as s:
        assert exchange(s, b"\x00\x00CREATE topic=after partitions=1") is not None
        msg = CursusMessage(b"still-here", 0, 1, b"p")
        reply = exchange(s, encode_batch("after", 0, encode_messages([msg]), 1, 1, 1, "1"))
        assert reply is not None and b"ERROR" not in reply
        got = exchange(s, b"\x00\x00CONSUME topic=after partition=0 offset=0 member=x group=xg")
        assert got is not None and b"still-here" in got
    assert live_broker.errors == []
