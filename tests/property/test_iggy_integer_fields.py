"""Every integer field of the Iggy requests that reach storage (ids, partition ids, offsets,
polling values, counts, expiries, sizes, message ids and timestamps), at any value its wire width
holds: the codec decodes the frame or raises IggyError, and the broker, sent the L frame over a
real socket by a logged-in client, answers with a status (0 or Iggy's error code), keeps serving
(a PING after it is answered) and logs no unhandled exception (issue 13 item 10).

Partition counts come from their whole range: the live broker's max_partitions (256) refuses the
large ones, as it does for every protocol (issue 13 item 1)."""

from __future__ import annotations

import contextlib
import socket
import struct

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command
from bayou.protocols.iggy.framing import Dialect, IggyError, encode_legacy_request
from conftest import LiveBroker, edges, read_exactly

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
_HEAD = struct.Struct("<II")
STREAM, TOPIC = "ps", "pt"


def uint(bits: int) -> st.SearchStrategy[int]:
    return st.sampled_from(edges(bits)) | st.integers(0, (1 << bits) - 1)


ids = st.sampled_from([m.Identifier(STREAM), m.Identifier(TOPIC)]) | uint(32).map(m.Identifier)
streams = st.just(m.Identifier(STREAM)) | ids
topics = st.just(m.Identifier(TOPIC)) | ids
consumers = st.builds(m.Consumer, st.sampled_from(list(m.ConsumerKind)), st.just(m.Identifier("c")) | ids)
partition_ids = st.none() | uint(32)
strategies = st.builds(m.PollingStrategy, st.sampled_from(list(m.PollingKind)), uint(64))
partitionings = (st.just(m.Partitioning.balanced()) | uint(32).map(m.Partitioning.partition)
                 | st.binary(min_size=1, max_size=8).map(m.Partitioning.messages_key))
messages = st.builds(m.Message, st.binary(min_size=1, max_size=8), uint(128), st.just(()), uint(64))

requests = (
    st.builds(m.PollMessages, consumers, streams, topics, partition_ids, strategies, uint(32), st.booleans())
    | st.builds(m.SendMessages, streams, topics, partitionings,
                st.lists(messages, min_size=1, max_size=3).map(tuple))
    | st.builds(m.SendMessages, st.just(m.Identifier(STREAM)), st.just(m.Identifier(TOPIC)), partitionings,
                st.lists(messages, min_size=1, max_size=3).map(tuple))
    | st.builds(m.StoreConsumerOffset, consumers, streams, topics, partition_ids, uint(64))
    | st.builds(m.GetConsumerOffset, consumers, streams, topics, partition_ids)
    | st.builds(m.DeleteConsumerOffset, consumers, streams, topics, partition_ids)
    | st.builds(m.CreateTopic, streams, st.just(TOPIC), uint(32), st.none() | uint(8), st.none() | uint(64),
                st.none() | uint(64), st.none() | uint(8), st.none() | uint(32))  # exists: nothing is made
    | st.builds(m.CreateTopic, streams, st.sampled_from(["t1", "t2"]), uint(32), st.none() | uint(8),
                st.none() | uint(64), st.none() | uint(64), st.none() | uint(8), st.none() | uint(32))
    | st.builds(m.UpdateTopic, streams, topics, uint(8), uint(64), uint(64), st.just(TOPIC),
                st.none() | uint(8))
    | st.builds(m.CreatePartitions, streams, topics, uint(32))
    | st.builds(m.DeletePartitions, streams, topics, uint(32))
    | st.builds(m.DeleteSegments, streams, topics, uint(32), uint(32))
    | st.builds(m.CreateConsumerGroup, streams, topics, st.sampled_from(["g1", "g2"]), st.none() | uint(32))
    | st.builds(m.CreateStream, st.sampled_from(["s1", "s2"]), st.none() | uint(32))
    | st.builds(m.GetStream, ids) | st.builds(m.GetTopic, streams, ids) | st.builds(m.GetClient, uint(32))
    | st.builds(m.GetUser, ids)
    | st.builds(m.CreatePersonalAccessToken, st.sampled_from(["tok1", "tok2"]), uint(64))
)


def exchange(s: socket.socket, code: int, payload: bytes) -> int | None:
    """One L request; the reply's status, or None when the broker closed the connection."""
    s.sendall(encode_legacy_request(code, payload))
    head = read_exactly(s, _HEAD.size)
    if head is None:
        return None
    status, length = _HEAD.unpack(head)
    body = read_exactly(s, length)
    return None if body is None else status


def login(live: LiveBroker) -> socket.socket:
    s = live.connect("iggy")
    req = m.LoginUser("iggy", "iggy")
    assert exchange(s, req.command, codec.encode_request(req, Dialect.LEGACY)) == 0
    return s


def setup(live: LiveBroker) -> None:
    if f"{STREAM}.{TOPIC}" in live.server.broker.topics:
        return
    with login(live) as s:
        for req in (m.CreateStream(STREAM), m.CreateTopic(m.Identifier(STREAM), TOPIC, 2)):
            assert exchange(s, req.command, codec.encode_request(req, Dialect.LEGACY)) == 0


@SETTINGS
@given(req=requests)
@example(req=m.SendMessages(m.Identifier(STREAM), m.Identifier(TOPIC), m.Partitioning.partition(0),
                            (m.Message(b"x", 0, (), (1 << 64) - 1),)))  # was struct.error, connection lost
def test_any_integer_in_any_field(live_broker: LiveBroker, req: m.Request) -> None:
    setup(live_broker)
    try:
        payload = codec.encode_request(req, Dialect.LEGACY)
    except (ValueError, struct.error, OverflowError):
        assume(False)  # not representable on the wire
        raise
    with contextlib.suppress(IggyError):  # the codec's error type: the broker answers a status
        codec.decode_request(Dialect.LEGACY, req.command, payload)
    s = session(live_broker)
    try:
        assert exchange(s, req.command, payload) is not None, req
        assert exchange(s, Command.PING, b"") == 0, req
    except BaseException:
        _sessions.clear()
        s.close()
        raise
    assert live_broker.errors == [], req


_sessions: dict[int, socket.socket] = {}


def session(live: LiveBroker) -> socket.socket:
    """One logged-in connection shared by the examples (a login hashes a password: slow)."""
    s = _sessions.get(id(live))
    if s is None:
        s = _sessions[id(live)] = login(live)
    return s


def test_the_broker_still_serves_iggy(live_broker: LiveBroker) -> None:
    for old in _sessions.values():
        old.close()
    _sessions.clear()
    setup(live_broker)
    with login(live_broker) as s:
        for req in (m.CreateStream("after"), m.CreateTopic(m.Identifier("after"), "t", 1),
                    m.SendMessages(m.Identifier("after"), m.Identifier("t"), m.Partitioning.partition(0),
                                   (m.Message(b"still-here"),)),
                    m.PollMessages(m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(1)),
                                   m.Identifier("after"), m.Identifier("t"), 0,
                                   m.PollingStrategy(m.PollingKind.FIRST), 10, False),
                    m.GetStats()):
            assert exchange(s, req.command, codec.encode_request(req, Dialect.LEGACY)) == 0, req
    assert live_broker.errors == []
