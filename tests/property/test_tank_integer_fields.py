"""Every integer field of every TANK request, at any value its wire width holds (issue 13 item 10):
the codec decodes it or raises TankError, and the broker, sent it over a real socket, answers (or
closes the connection, TANK's answer to a malformed request, exactly when the codec refused it),
keeps serving, and logs no unhandled exception. Found this way: a sparse bundle at seq >= 2^63
poisoned the partition; a consume of partition 65535 raised ValueError."""

from __future__ import annotations

import socket
import struct
import time

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from bayou.protocols.tank import codec
from bayou.protocols.tank import messages as m
from bayou.protocols.tank.bundles import TankMessage, encode_bundle
from bayou.protocols.tank.codes import MsgId, TankError
from conftest import LiveBroker, edges, read_exactly

_HEAD = struct.Struct("<BI")
TOPIC = "prop"
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))


def uint(bits: int) -> st.SearchStrategy[int]:
    return st.sampled_from(edges(bits)) | st.integers(0, (1 << bits) - 1)


names = st.sampled_from([TOPIC, "absent"])


@st.composite
def bundles(draw: st.DrawFn) -> bytes:
    n = draw(st.integers(1, 3))
    sparse = draw(st.booleans())
    if sparse:
        first = draw(uint(64))
        gaps = draw(st.lists(uint(32), min_size=n - 1, max_size=n - 1))
        seqs = [first]
        for g in gaps:
            seqs.append(seqs[-1] + 1 + g)
        assume(seqs[-1] <= (1 << 64) - 1)
    else:
        seqs = [0] * n
    keys = st.none() | st.binary(max_size=4)
    msgs = [TankMessage(s, draw(uint(64)), draw(keys), draw(st.binary(max_size=8))) for s in seqs]
    try:
        return encode_bundle(msgs, compress=draw(st.booleans()), sparse=sparse)
    except ValueError:  # a gap or span past a u32 varint: not a bundle TANK can write
        assume(False)
        raise


seq_entries = st.builds(m.ProduceEntry, uint(16), bundles(), uint(64))  # 0x5 carries a base seq
plain_entries = st.builds(m.ProduceEntry, uint(16), bundles())


def produce_topics(entries: st.SearchStrategy[m.ProduceEntry]
                   ) -> st.SearchStrategy[tuple[m.ProduceTopic, ...]]:
    topic = st.builds(m.ProduceTopic, names, st.lists(entries, min_size=1, max_size=2).map(tuple))
    return st.lists(topic, min_size=1, max_size=2).map(tuple)


produces = (st.builds(m.Produce, uint(32), produce_topics(seq_entries), uint(16), st.just("c++"), uint(8),
                      uint(32), st.just(True))
            | st.builds(m.Produce, uint(32), produce_topics(plain_entries), uint(16), st.just("c++"), uint(8),
                        uint(32), st.just(False)))
partitions = st.lists(st.builds(m.ConsumePartition, uint(16), uint(64), uint(32)), min_size=1, max_size=3)
consumes = st.builds(m.Consume, uint(32), st.lists(st.builds(m.ConsumeTopic, names, partitions.map(tuple)),
                                                   min_size=1, max_size=2).map(tuple),
                     uint(64), uint(32), st.sampled_from([2, 3]), st.just(""), uint(8))
peers = st.builds(m.ConsumePeer, uint(16), st.lists(st.builds(m.ConsumeTopic, names, partitions.map(tuple)),
                                                    min_size=1, max_size=2).map(tuple), uint(64), uint(32))
admin = (st.builds(m.DiscoverPartitions, uint(32), names, st.lists(uint(16), max_size=3).map(tuple))
         | st.builds(m.CreateTopic, uint(32), st.just(TOPIC), uint(16))  # exists: nothing is created
         | st.builds(m.CreateTopic, uint(32), st.sampled_from(["made1", "made2"]), uint(16))
         | st.builds(m.ReloadConf, uint(32), names, uint(16))
         | st.builds(m.Status, uint(32)) | st.builds(m.DiscoverTopics, uint(32))
         | st.builds(m.DiscoverTopology, uint(32)))
requests = produces | consumes | peers | admin

PROBE_ID = 0xFEEDFACE


def frame(msg_id: int, payload: bytes) -> bytes:
    return _HEAD.pack(msg_id, len(payload)) + payload


def alive_after(s: socket.socket, deadline: float) -> bool:
    """Read frames until the Status probe's answer (True) or the connection closes (False)."""
    s.settimeout(max(0.1, deadline - time.monotonic()))
    while True:
        head = read_exactly(s, _HEAD.size)
        if head is None:
            return False
        msg_id, size = _HEAD.unpack(head)
        payload = read_exactly(s, size)
        if payload is None:
            return False
        if msg_id == MsgId.STATUS and payload[:4] == PROBE_ID.to_bytes(4, "little"):
            return True


def setup(live: LiveBroker) -> None:
    if TOPIC not in live.server.broker.topics:
        live.call(live.server.broker.create_topic(TOPIC, 2))


@SETTINGS
@given(req=requests)
@example(req=m.Produce(1, (m.ProduceTopic(TOPIC, (m.ProduceEntry(1, encode_bundle(
    [TankMessage(1 << 63, 0, None, b"x")], sparse=True), 1 << 63),)),), with_seqnum=True))  # poisoned the log
@example(req=m.Produce(1, (m.ProduceTopic(TOPIC, (m.ProduceEntry(1, encode_bundle(
    [TankMessage(1, 0, None, b"x"), TankMessage(1 << 32, 0, None, b"y")], sparse=True)),)),)))  # int32 delta
@example(req=m.Consume(1, (m.ConsumeTopic(TOPIC, (m.ConsumePartition(0xFFFF, 0, 100),)),)))  # ValueError
def test_any_integer_in_any_field(live_broker: LiveBroker, req: m.Request) -> None:
    setup(live_broker)
    try:
        msg_id, payload = codec.encode_request(req)
    except (ValueError, struct.error, OverflowError):
        assume(False)  # not representable on the wire
        raise
    try:
        codec.decode_request(msg_id, payload)
        decodes = True
    except TankError:
        decodes = False
    with live_broker.connect("tank") as s:
        s.sendall(frame(msg_id, payload) + frame(MsgId.STATUS, PROBE_ID.to_bytes(4, "little")))
        assert alive_after(s, time.monotonic() + 20) == decodes, req
    assert live_broker.errors == [], req


def test_the_broker_still_serves_tank(live_broker: LiveBroker) -> None:
    """After every example above: a new topic takes a produce and serves it back."""
    with live_broker.connect("tank") as s:
        bundle = encode_bundle([TankMessage(0, 5, None, b"still-here")])
        for req in (m.CreateTopic(1, "after", 1),
                    m.Produce(2, (m.ProduceTopic("after", (m.ProduceEntry(0, bundle),)),)),
                    m.Consume(3, (m.ConsumeTopic("after", (m.ConsumePartition(0, 1, 1000),)),))):
            s.sendall(frame(*codec.encode_request(req)))
            while True:
                head = read_exactly(s, _HEAD.size)
                assert head is not None
                msg_id, size = _HEAD.unpack(head)
                payload = read_exactly(s, size)
                assert payload is not None
                if msg_id != MsgId.PING:
                    break
            resp = codec.decode_response(msg_id, payload, request=req)
            if isinstance(resp, m.ProduceResponse):
                assert resp.topics[0].errors == (0,)
            if isinstance(resp, m.ConsumeResponse):
                t = resp.topics[0]
                assert isinstance(t, m.ConsumeTopicResult) and b"still-here" in t.partitions[0].chunk
    assert live_broker.errors == []
