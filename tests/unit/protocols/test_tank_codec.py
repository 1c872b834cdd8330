"""The TANK codec, message by message (tank.md 4-11): round trips, every truncated prefix, trailing
bytes, unknown ids, what the encoders refuse and what the decoders refuse."""

from __future__ import annotations

import struct

import pytest

from bayou.protocols.tank import codec
from bayou.protocols.tank import messages as m
from bayou.protocols.tank.bundles import TankMessage, encode_bundle, encode_chunk_record
from bayou.protocols.tank.codes import (
    ConsumeFlag,
    CreateTopicError,
    MsgId,
    PartitionFault,
    ProduceError,
    ReloadConfError,
    TankError,
)
from bayou.protocols.tank.framing import FrameReader, encode_frame

BUNDLE = encode_bundle([TankMessage(0, 1795316756338, None, b"hello")])
SPARSE = encode_bundle([TankMessage(300, 5, None, b"only300")], sparse=True)
CHUNK = encode_chunk_record(BUNDLE) + encode_chunk_record(encode_bundle([TankMessage(0, 1, b"k", b"v")] * 3))
SPARSE_CHUNK = encode_chunk_record(SPARSE) + encode_chunk_record(BUNDLE)
LEADER = m.Endpoint(0x0100007F, 11011)
C1 = m.ConsumeTopic("vec", (m.ConsumePartition(0, 0, 134217728),))
C2 = m.ConsumeTopic("vec2", (m.ConsumePartition(0, 2**64 - 1, 1000), m.ConsumePartition(1, 5, 0)))

PRODUCE = m.Produce(1, (m.ProduceTopic("vec", (m.ProduceEntry(0, BUNDLE),)),))
PRODUCE_MULTI = m.Produce(7, (
    m.ProduceTopic("vec", (m.ProduceEntry(0, BUNDLE),)),
    m.ProduceTopic("nosuch", (m.ProduceEntry(0, BUNDLE), m.ProduceEntry(1, BUNDLE))),
    m.ProduceTopic("empty", ()),
    m.ProduceTopic("vec2", (m.ProduceEntry(0, BUNDLE), m.ProduceEntry(0, SPARSE), m.ProduceEntry(5, b""))),
), client_id="probe", required_acks=1, ack_timeout=500)
PRODUCE_SEQ = m.Produce(1, (m.ProduceTopic("sparse", (m.ProduceEntry(0, SPARSE, 300),)),), with_seqnum=True)

REQUESTS: list[m.Request] = [
    PRODUCE,
    PRODUCE_MULTI,
    PRODUCE_SEQ,
    m.Produce(2, ()),
    m.Consume(1, (C1,), max_wait=4294967295),
    m.Consume(9, (C1, C2, m.ConsumeTopic("none", ())), max_wait=5000, min_bytes=200),
    m.Consume(11, (C1,), client_version=3, op_flags=1),
    m.Consume(12, (), client_version=7, client_id="probe"),
    m.ConsumePeer(1, (C1, C2), max_wait=10, min_bytes=3),
    m.Ping(),
    m.DiscoverPartitions(1, "vec"),
    m.DiscoverPartitions(2, "vec2", (0, 1, 65535)),
    m.CreateTopic(1, "vec", 1),
    m.CreateTopic(1, "vec2", 2, "log.segment.bytes=1mb\nretention.segments.count=4\n"),
    m.CreateTopic(3, "bad.name", 0, "x" * 300),
    m.CreateTopic(4, "\udcff\udcfe", 65535),
    m.ReloadConf(1, "vec2", 9),
    m.Status(1),
    m.DiscoverTopics(1),
    m.DiscoverTopology(1, 3),
]

PRODUCE_RESPONSES: list[tuple[m.ProduceResponse, m.Produce]] = [
    (m.ProduceResponse(1, (m.ProduceTopicResult((ProduceError.OK,)),)), PRODUCE),
    (m.ProduceResponse(1, (m.ProduceTopicResult(topic_error=ProduceError.UNKNOWN_TOPIC),)), PRODUCE),
    (m.ProduceResponse(7, (
        m.ProduceTopicResult((ProduceError.OK,)),
        m.ProduceTopicResult(topic_error=ProduceError.UNKNOWN_TOPIC),
        m.ProduceTopicResult(),
        m.ProduceTopicResult((ProduceError.OTHER_LEADER, ProduceError.READ_ONLY, ProduceError.OTHER_LEADER),
                             leaders=(LEADER, m.Endpoint(1, 2))),
    )), PRODUCE_MULTI),
    (m.ProduceResponse(7, (
        m.ProduceTopicResult((ProduceError.INVALID_SEQ_NUMS,)),
        m.ProduceTopicResult((ProduceError.SYSTEM_ERROR, ProduceError.NO_LEADER)),
        m.ProduceTopicResult(),
        m.ProduceTopicResult(topic_error=ProduceError.READ_ONLY),
    )), PRODUCE_MULTI),
    (m.ProduceResponse(1, (m.ProduceTopicResult((ProduceError.INVALID_SEQ_NUMS,)),)), PRODUCE_SEQ),
]

CONSUME_TOPICS: tuple[m.ConsumeTopicAnswer, ...] = (
    m.ConsumeTopicResult("vec", (
        m.ConsumePartitionResult(0, ConsumeFlag.OK, 1, 29, chunk=CHUNK),
        m.ConsumePartitionResult(1, ConsumeFlag.OK, 1, 29),
        m.ConsumePartitionResult(2, ConsumeFlag.BOUNDARY_FAULT, 0, 29, 5),
        m.ConsumePartitionResult(3, ConsumeFlag.SPARSE, 0, 301, chunk=SPARSE_CHUNK),
        m.ConsumePartitionResult(4, ConsumeFlag.UNKNOWN_PARTITION),
        m.ConsumePartitionResult(5, ConsumeFlag.SYSTEM_ERROR),
        m.ConsumePartitionResult(6, ConsumeFlag.NO_LEADER),
        m.ConsumePartitionResult(7, ConsumeFlag.OTHER_LEADER, leader=LEADER),
    )),
    m.ConsumeUnknownTopic("nosuch", 3),
    m.ConsumeTopicResult("empty", ()),
    m.ConsumeTopicResult("vec2", (m.ConsumePartitionResult(0, ConsumeFlag.OK, 7, 9, chunk=CHUNK),)),
)

RESPONSES: list[m.Response] = [
    m.Ping(),
    m.ConsumeResponse(1, CONSUME_TOPICS),
    m.ConsumeResponse(2, ()),
    m.ConsumeResponse(3, (m.ConsumeUnknownTopic("nosuch", 0),)),
    m.ConsumePeerResponse(CONSUME_TOPICS),
    m.ConsumePeerResponse((m.ConsumeUnknownTopic("n", 300),)),
    m.DiscoverPartitionsResponse(1, "vec", (m.DiscoveredPartition(1, 29),)),
    m.DiscoverPartitionsResponse(1, "nosuch", ()),
    m.DiscoverPartitionsResponse(1, "vec2", (
        m.DiscoveredPartition(0, 0),
        m.DiscoveredPartition(2**64 - 1, 2**64 - 1, PartitionFault.SYSTEM_ERROR),
        m.DiscoveredPartition(2**64 - 1, 2**64 - 1, PartitionFault.OTHER_LEADER, LEADER),
        m.DiscoveredPartition(2**64 - 1, 2**64 - 1, PartitionFault.NO_LEADER),
        m.DiscoveredPartition(2**64 - 1, 5),
    )),
    m.CreateTopicResponse(1, "vec", CreateTopicError.OK),
    m.CreateTopicResponse(1, "bad.name", CreateTopicError.INVALID_REQUEST),
    m.ReloadConfResponse(1, "nosuch", 0, ReloadConfError.INVALID_REQUEST),
    m.ReloadConfResponse(1, "vec2", 9, ReloadConfError.UNKNOWN_PARTITION),
    m.StatusResponse(1, 3, 4, 4, 0, 1795316746, 400),
    m.StatusResponse(1, 3, 4),
    m.StatusResponse(1, 3, 4, 4, 10, 20),
    m.StatusResponse(1, 3, 4, 4, 10, 20, 400, global_flags=9, cluster=m.StatusCluster(1, "prod", 3)),
    m.StatusResponse(1, 0, 0, cluster=m.StatusCluster(0, "", 0)),
    m.DiscoverTopicsResponse(1, (m.TopicInfo("sparse", 1), m.TopicInfo("vec", 1), m.TopicInfo("vec2", 2))),
    m.DiscoverTopicsResponse(1, ()),
    m.DiscoverTopicsResponse(1, (m.TopicInfo("a", 1, 0, 3), m.TopicInfo("b", 65535, 1, 1)),
                             cluster_aware=True),
    m.DiscoverTopologyResponse(1),
    m.DiscoverTopologyResponse(1, "prod", (m.TopologyNode(1, 3, 10, LEADER), m.TopologyNode(2, 6, 0))),
    m.DiscoverTopologyResponse(1, "", ()),
]


def _decode_resp(msg_id: int, payload: bytes, request: m.Request | None = None) -> m.Response:
    return codec.decode_response(msg_id, payload, request=request)


# -- requests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_round_trip(req: m.Request) -> None:
    msg_id, payload = codec.encode_request(req)
    assert codec.decode_request(msg_id, payload) == req
    frame = codec.encode_request_frame(req)
    assert frame == encode_frame(msg_id, payload)
    (got,) = FrameReader().feed(frame)
    assert codec.decode_request(got.msg_id, got.payload) == req


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_prefixes_and_trailing_bytes(req: m.Request) -> None:
    msg_id, payload = codec.encode_request(req)
    for cut in range(len(payload)):
        try:
            shorter = codec.decode_request(msg_id, payload[:cut])
        except TankError as exc:
            assert exc.close
            continue
        assert isinstance(req, m.DiscoverPartitions)  # only its optional id list may be cut short
        assert codec.encode_request(shorter) == (msg_id, payload[:cut])
    with pytest.raises(TankError) as err:
        codec.decode_request(msg_id, payload + b"\x00")
    assert err.value.close
    frame = encode_frame(msg_id, payload)
    for cut in range(len(frame)):
        assert FrameReader().feed(frame[:cut]) == []


def test_request_bytes_are_tank_cli_layouts() -> None:
    assert codec.encode_request(PRODUCE)[1].hex() == (
        "0200" "01000000" "03632b2b" "00" "00000000" "01" "03766563" "01" "0000" "10") + BUNDLE.hex()
    msg_id, payload = codec.encode_request(PRODUCE_SEQ)
    assert msg_id == MsgId.PRODUCE_WITH_SEQNUM
    assert payload.endswith(bytes([len(SPARSE)]) + struct.pack("<Q", 300) + SPARSE)
    assert codec.encode_request(m.Consume(1, (C1,)))[1].hex() == (
        "0200" "01000000" "00" "0000000000000000" "00000000" "01" "03766563" "01" "0000" "0000000000000000"
        "00000008")
    v3 = codec.encode_request(m.Consume(11, (C1,), client_version=3, op_flags=1))[1]
    assert v3[2 + 4 + 1 + 8 + 4] == 1 and len(v3) == 40
    assert codec.encode_request(m.CreateTopic(1, "vec", 1))[1].hex() == "01000000" "03766563" "0100" "00"
    ids = codec.encode_request(m.DiscoverPartitions(1, "v", (1, 2)))[1]
    assert ids.hex() == "01000000" "0176" "0100" "0200"
    assert codec.encode_request(m.Status(5)) == (0x0A, b"\x05\x00\x00\x00")
    assert codec.encode_request(m.Ping()) == (3, b"")


def test_large_create_topic_config_uses_a_varint_length() -> None:
    payload = codec.encode_request(m.CreateTopic(1, "t", 1, "k=" + "v" * 200 + "\n"))[1]
    assert payload[4 + 2 + 2 : 4 + 2 + 2 + 2] == b"\xcb\x01"  # 203


@pytest.mark.parametrize("msg_id", [0x00, 0x04, 0x0D, 0x42, 0xFF])
def test_unknown_and_obsolete_ids_close(msg_id: int) -> None:
    with pytest.raises(TankError) as err:
        codec.decode_request(msg_id, b"\x01\x00")
    assert err.value.close


def test_ping_with_a_payload_is_malformed() -> None:
    with pytest.raises(TankError):
        codec.decode_request(MsgId.PING, b"\x00")


@pytest.mark.parametrize("payload", [
    struct.pack("<HIB", 2, 1, 0) + struct.pack("<QI", 0, 0) + b"\x01" + b"\x01a" + b"\x01" + b"\x00" * 13,
    struct.pack("<HIB", 2, 1, 0) + struct.pack("<QI", 0, 0) + b"\x01" + b"\x01a" + b"\xff",  # 255 entries
])
def test_consume_entries_must_fit(payload: bytes) -> None:
    with pytest.raises(TankError):
        codec.decode_request(MsgId.CONSUME, payload)


def test_produce_bundle_past_the_payload() -> None:
    _, payload = codec.encode_request(PRODUCE)
    with pytest.raises(TankError):
        codec.decode_request(MsgId.PRODUCE, payload[:-1])
    bad_len = payload[:-len(BUNDLE) - 1] + b"\xff\xff\xff\xff\xff" + BUNDLE
    with pytest.raises(TankError):
        codec.decode_request(MsgId.PRODUCE, bad_len)


def test_produce_0x5_carries_base_seq() -> None:
    _, plain = codec.encode_request(PRODUCE)
    with_seq = plain[: -len(BUNDLE)] + struct.pack("<Q", 9) + BUNDLE
    as_seq = codec.decode_request(MsgId.PRODUCE_WITH_SEQNUM, with_seq)
    assert isinstance(as_seq, m.Produce) and as_seq.with_seqnum
    assert [e.base_seq for _, e in as_seq.entries()] == [9]
    assert list(PRODUCE_MULTI.entries())[3] == ("vec2", m.ProduceEntry(0, BUNDLE))


def test_request_encoder_refusals() -> None:
    with pytest.raises(ValueError):
        codec.encode_request(m.Consume(1, (C1,), op_flags=1))
    with pytest.raises(ValueError):
        codec.encode_request(m.Produce(1, (m.ProduceTopic("t", (m.ProduceEntry(0, BUNDLE, 5),)),)))
    with pytest.raises(ValueError):
        codec.encode_request(m.ReloadConf(1, "x" * 256, 0))
    with pytest.raises(struct.error):
        codec.encode_request(m.Consume(1, tuple([C1] * 256)))
    with pytest.raises(struct.error):
        codec.encode_request(m.Status(-1))


# -- responses ----------------------------------------------------------------------------------


@pytest.mark.parametrize("resp", RESPONSES, ids=lambda r: type(r).__name__)
def test_response_round_trip(resp: m.Response) -> None:
    msg_id, payload = codec.encode_response(resp)
    assert msg_id == resp.MSG_ID
    assert _decode_resp(msg_id, payload) == resp
    assert codec.encode_response_frame(resp) == encode_frame(msg_id, payload)


@pytest.mark.parametrize(("resp", "req"), PRODUCE_RESPONSES)
def test_produce_response_round_trip(resp: m.ProduceResponse, req: m.Produce) -> None:
    msg_id, payload = codec.encode_response(resp)
    assert msg_id == MsgId.PRODUCE
    assert _decode_resp(msg_id, payload, req) == resp
    for cut in range(len(payload)):
        with pytest.raises(TankError):
            _decode_resp(msg_id, payload[:cut], req)
    with pytest.raises(TankError):
        _decode_resp(msg_id, payload + b"\x00", req)


@pytest.mark.parametrize("resp", RESPONSES, ids=lambda r: type(r).__name__)
def test_response_prefixes_and_trailing_bytes(resp: m.Response) -> None:
    msg_id, payload = codec.encode_response(resp)
    for cut in range(len(payload)):
        try:
            shorter = _decode_resp(msg_id, payload[:cut])
        except TankError:
            continue
        assert isinstance(shorter, m.StatusResponse)  # only its optional tail may be cut short
        assert codec.encode_response(shorter) == (msg_id, payload[:cut])
    with pytest.raises(TankError):
        _decode_resp(msg_id, payload + b"\x00")


def test_produce_response_bytes() -> None:
    resp = PRODUCE_RESPONSES[2][0]
    payload = codec.encode_response(resp)[1]
    assert payload.hex() == ("07000000" "00" "ff" "fc" "7f000001" "032b" "fe" "fc" "01000000" "0200")


def test_produce_response_needs_its_request() -> None:
    with pytest.raises(ValueError):
        _decode_resp(MsgId.PRODUCE, b"\x01\x00\x00\x00\x00")
    with pytest.raises(ValueError):
        _decode_resp(MsgId.PRODUCE, b"\x01\x00\x00\x00\x00", m.Status(1))


@pytest.mark.parametrize(("payload", "req"), [
    ("01000000" "05", PRODUCE),  # not a produce code
    ("01000000" "00" "00" "ff", m.Produce(1, (m.ProduceTopic("t", (m.ProduceEntry(0, BUNDLE),) * 3),))),
    ("01000000" "fc" "7f0000", PRODUCE),  # leader cut
])
def test_produce_response_refusals(payload: str, req: m.Produce) -> None:
    with pytest.raises(TankError):
        _decode_resp(MsgId.PRODUCE, bytes.fromhex(payload), req)


def test_produce_response_encoder_refusals() -> None:
    bad = [
        m.ProduceTopicResult(topic_error=ProduceError.OK),
        m.ProduceTopicResult((ProduceError.OK,), topic_error=ProduceError.UNKNOWN_TOPIC),
        m.ProduceTopicResult((ProduceError.UNKNOWN_TOPIC,)),
        m.ProduceTopicResult((ProduceError.READ_ONLY,)),
        m.ProduceTopicResult((ProduceError.OK, ProduceError.UNKNOWN_TOPIC)),
        m.ProduceTopicResult((0x05,)),
        m.ProduceTopicResult((ProduceError.OTHER_LEADER,)),
        m.ProduceTopicResult((ProduceError.OK,), leaders=(LEADER,)),
    ]
    for t in bad:
        with pytest.raises(ValueError):
            codec.encode_response(m.ProduceResponse(1, (t,)))


def test_consume_response_layout() -> None:
    payload = codec.encode_response(m.ConsumeResponse(1, (
        m.ConsumeTopicResult("vec", (m.ConsumePartitionResult(0, ConsumeFlag.OK, 1, 29, chunk=CHUNK),)),)))[1]
    (hdr_len,) = struct.unpack_from("<I", payload)
    assert hdr_len == 4 + 1 + 4 + 1 + 2 + 1 + 8 + 8 + 4 == 33
    assert payload[4 + hdr_len :] == CHUNK
    assert payload[4 + 4 + 1 + 4 + 1 + 2 + 1 + 16 : 4 + hdr_len] == struct.pack("<I", len(CHUNK))
    unknown = codec.encode_response(m.ConsumeResponse(1, (m.ConsumeUnknownTopic("nosuch", 1),)))[1]
    assert unknown.hex() == "0f000000" "01000000" "01" "066e6f73756368" "01" "ffff"
    fault = codec.encode_response(m.ConsumeResponse(1, (m.ConsumeTopicResult("vec", (
        m.ConsumePartitionResult(0, ConsumeFlag.BOUNDARY_FAULT, 0, 29, 1),)),)))[1]
    assert fault[-(8 + 8 + 4 + 8) :] == struct.pack("<QQIQ", 0, 29, 0, 1)
    sparse = codec.encode_response(m.ConsumeResponse(1, (m.ConsumeTopicResult("s", (
        m.ConsumePartitionResult(0, ConsumeFlag.SPARSE, 0, 301, chunk=SPARSE_CHUNK),)),)))[1]
    assert struct.unpack_from("<I", sparse)[0] == 4 + 1 + 2 + 1 + 2 + 1 + 8 + 4
    peer = codec.encode_response(m.ConsumePeerResponse((m.ConsumeUnknownTopic("n", 2),)))[1]
    assert peer.hex() == "08000000" "0100" "016e" "0200" "ffff"


def test_consume_header_with_chunk_lengths() -> None:
    entries = [p for t in CONSUME_TOPICS if isinstance(t, m.ConsumeTopicResult) for p in t.partitions]
    lengths = [len(p.chunk) for p in entries]
    bare = tuple(t if isinstance(t, m.ConsumeUnknownTopic) else m.ConsumeTopicResult(t.name, tuple(
        m.ConsumePartitionResult(p.partition, p.flags, p.base_seq, p.hwmark, p.first_available, p.leader)
        for p in t.partitions)) for t in CONSUME_TOPICS)
    full = codec.encode_response(m.ConsumeResponse(4, CONSUME_TOPICS))[1]
    head = codec.encode_consume_header(4, bare, lengths)
    assert full == head + b"".join(p.chunk for p in entries)
    framed = codec.encode_consume_header(4, bare, lengths, framed=True)
    assert framed[:5] == struct.pack("<BI", 2, len(full)) and framed[5:] == head
    assert codec.encode_consume_header(4, CONSUME_TOPICS) == head
    peer_full = codec.encode_response(m.ConsumePeerResponse(CONSUME_TOPICS))[1]
    peer_head = codec.encode_consume_peer_header(bare, lengths, framed=True)
    assert peer_head[:5] == struct.pack("<BI", 9, len(peer_full))
    assert peer_full.startswith(peer_head[5:])
    with pytest.raises(ValueError, match="fewer"):
        codec.encode_consume_header(4, bare, lengths[:-1])
    with pytest.raises(ValueError, match="more"):
        codec.encode_consume_header(4, bare, [*lengths, 0])
    with pytest.raises(ValueError, match="no chunk"):
        codec.encode_consume_header(4, bare, [1] * len(lengths))


@pytest.mark.parametrize("entry", [
    m.ConsumePartitionResult(0, 0x02),
    m.ConsumePartitionResult(0, ConsumeFlag.OTHER_LEADER),
    m.ConsumePartitionResult(0, ConsumeFlag.OK, leader=LEADER),
    m.ConsumePartitionResult(0, ConsumeFlag.UNKNOWN_PARTITION, chunk=b"x"),
    m.ConsumePartitionResult(0xFFFF),
])
def test_consume_encoder_refusals(entry: m.ConsumePartitionResult) -> None:
    with pytest.raises(ValueError):
        codec.encode_response(m.ConsumeResponse(1, (m.ConsumeTopicResult("t", (entry,)),)))


@pytest.mark.parametrize("payload", [
    "0a000000" "01000000" "01" "0174" "01" "0000" "02",  # errorOrFlags 0x02
    "0a000000" "01000000" "01" "0174" "01" "0000" "fa",
    "ff000000" "01000000" "00",  # header length past the payload
    "05000000" "01000000" "00" "00",  # header shorter than its contents would need
    "21000000" "01000000" "01" "0174" "01" "0000" "00" "0100000000000000" "1d00000000000000" "05000000"
    "aabbcc",  # chunk past the payload
])
def test_consume_response_refusals(payload: str) -> None:
    with pytest.raises(TankError):
        _decode_resp(MsgId.CONSUME, bytes.fromhex(payload))


def test_other_response_refusals() -> None:
    cases = [
        (MsgId.DISCOVER_PARTITIONS, "01000000" "0174" "0100" + "ff" * 16 + "00"),  # fault byte 0
        (MsgId.CREATE_TOPIC, "01000000" "0174" "03"),
        (MsgId.RELOAD_CONF, "01000000" "0174" "0000" "04"),
        (MsgId.STATUS, "01000000" "00" "02" "00000000" "00000000"),  # cluster-aware byte 2
        (MsgId.STATUS, "01000000" "00" "00" "00000000" "00000000" "01000000"),  # half a tail
        (MsgId.DISCOVER_TOPICS, "01000000" "ffffffff" "00"),
        (MsgId.DISCOVER_TOPOLOGY, "01000000" "ffff" "00"),
        (MsgId.PING, "00"),
        (MsgId.PRODUCE_WITH_SEQNUM, "01000000"),  # never a response id
        (0x04, ""),
        (0x42, ""),
    ]
    for msg_id, payload in cases:
        with pytest.raises(TankError):
            _decode_resp(msg_id, bytes.fromhex(payload), PRODUCE)


def test_other_response_encoder_refusals() -> None:
    bad: list[m.Response] = [
        m.DiscoverPartitionsResponse(1, "t", (m.DiscoveredPartition(2**64 - 1, 2**64 - 1),)),
        m.DiscoverPartitionsResponse(1, "t", (m.DiscoveredPartition(1, 2, leader=LEADER),)),
        m.DiscoverPartitionsResponse(1, "t", (m.DiscoveredPartition(fault=PartitionFault.OTHER_LEADER),)),
        m.DiscoverPartitionsResponse(1, "t", (m.DiscoveredPartition(fault=PartitionFault.NO_LEADER,
                                                                    leader=LEADER),)),
        m.DiscoverPartitionsResponse(1, "t", (m.DiscoveredPartition(fault=0x00),)),
        m.CreateTopicResponse(1, "t", 3),
        m.ReloadConfResponse(1, "t", 0, 4),
        m.StatusResponse(1, 1, 1, 1),
        m.StatusResponse(1, 1, 1, version=400),
        m.DiscoverTopicsResponse(1, (m.TopicInfo("t", 1, 1, 3),)),
        m.DiscoverTopologyResponse(1, None, (m.TopologyNode(1, 0, 0),)),
        m.DiscoverTopologyResponse(1, "c", (m.TopologyNode(1, 1, 0),)),
        m.DiscoverTopologyResponse(1, "c", (m.TopologyNode(1, 0, 0, LEADER),)),
    ]
    for resp in bad:
        with pytest.raises(ValueError):
            codec.encode_response(resp)


def test_admin_response_bytes() -> None:
    assert codec.encode_response(m.DiscoverTopologyResponse(1))[1].hex() == "01000000ffff"
    assert codec.encode_response(m.StatusResponse(1, 3, 4, 4, 0, 1795316746, 400))[1].hex() == (
        "01000000" "00" "00" "03000000" "04000000" "04000000" "00000000" + struct.pack("<I", 1795316746).hex()
        + "90010000")
    assert codec.encode_response(m.DiscoverPartitionsResponse(1, "nosuch", ()))[1].hex() == (
        "01000000" "066e6f7375636800" "00")
    exists = m.CreateTopicResponse(1, "vec", CreateTopicError.ALREADY_EXISTS)
    assert codec.encode_response(exists)[1].hex() == "01000000" "03766563" "01"


def test_dispatch_tables_cover_every_message() -> None:
    assert set(codec.REQUEST_DECODERS) == set(MsgId) - {MsgId.REG_REPLICA}
    assert set(codec.RESPONSE_DECODERS) == set(MsgId) - {MsgId.REG_REPLICA, MsgId.PRODUCE_WITH_SEQNUM}
    assert {type(r) for r in REQUESTS} == set(codec.REQUEST_ENCODERS)
    assert {type(r) for r in RESPONSES} | {m.ProduceResponse} == set(codec.RESPONSE_ENCODERS)
