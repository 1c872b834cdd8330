"""Every TANK vector (tests/conformance/vectors/tank, copied from shared/vectors/tank) against the
codec alone.

For each vector: ``request_hex`` splits into frames; every client frame decodes (except the probes
the real broker closes on, which raise ``TankError(close=True)``) and re-encodes to the captured
frame byte for byte. ``response_hex`` splits into frames; every server frame decodes with
``decode_response`` (a produce response with its request, matched by request id) and re-encodes
byte for byte. Then the facts tank.md states about particular vectors: seqs of the chunks, the
bundles tank-cli builds, error groups, the header-only consume encoder.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import cramjam
import pytest

from bayou.protocols.tank import codec
from bayou.protocols.tank import messages as m
from bayou.protocols.tank.bundles import (
    decode_bundle,
    decode_bundle_header,
    decode_chunk,
    encode_bundle,
    iter_chunk,
)
from bayou.protocols.tank.codes import ConsumeFlag, MsgId, ProduceError, TankError
from bayou.protocols.tank.framing import PING_FRAME, Frame, FrameReader, encode_frame

VECTORS = Path(__file__).parent / "vectors" / "tank"
ALL: dict[str, dict[str, Any]] = {p.stem: json.loads(p.read_text()) for p in sorted(VECTORS.glob("*.json"))}
CLOSING_PROBES = {"unknown_msgid_0x4_probe": 1}  # vector -> index of the frame the broker closes on


def _frames(hex_text: str) -> list[Frame]:
    data = bytes.fromhex(hex_text)
    reader = FrameReader()
    frames = reader.feed(data)
    assert reader.buffered == 0
    return frames


def _requests(name: str) -> list[m.Request]:
    out: list[m.Request] = []
    for i, f in enumerate(_frames(ALL[name]["request_hex"])):
        if CLOSING_PROBES.get(name) == i:
            continue
        out.append(codec.decode_request(f.msg_id, f.payload))
    return out


def _by_request_id(name: str) -> dict[int, m.Request]:
    return {r.request_id: r for r in _requests(name) if hasattr(r, "request_id")}


def _responses(name: str) -> list[m.Response]:
    reqs = _by_request_id(name)
    out: list[m.Response] = []
    for f in _frames(ALL[name]["response_hex"]):
        rid = int.from_bytes(f.payload[:4], "little") if len(f.payload) >= 4 else -1
        out.append(codec.decode_response(f.msg_id, f.payload, request=reqs.get(rid)))
    return out


def _only(name: str, cls: type) -> Any:
    found = [r for r in _responses(name) if isinstance(r, cls)]
    assert len(found) == 1, found
    return found[0]


def test_all_vectors_present() -> None:
    assert len(ALL) == 66


@pytest.mark.parametrize("name", sorted(ALL))
def test_request_frames_decode_and_reencode_exactly(name: str) -> None:
    frames = _frames(ALL[name]["request_hex"])
    stream = bytes.fromhex(ALL[name]["request_hex"])
    assert b"".join(encode_frame(f.msg_id, f.payload) for f in frames) == stream
    for i, f in enumerate(frames):
        if CLOSING_PROBES.get(name) == i:
            with pytest.raises(TankError) as err:
                codec.decode_request(f.msg_id, f.payload)
            assert err.value.close
            continue
        req = codec.decode_request(f.msg_id, f.payload)
        assert codec.encode_request(req) == (f.msg_id, f.payload)
        assert codec.encode_request_frame(req) == encode_frame(f.msg_id, f.payload)


@pytest.mark.parametrize("name", sorted(ALL))
def test_response_frames_decode_and_reencode_exactly(name: str) -> None:
    frames = _frames(ALL[name]["response_hex"])
    assert encode_frame(frames[0].msg_id, frames[0].payload) == PING_FRAME  # the accept-time ping
    reqs = _by_request_id(name)
    for f in frames:
        rid = int.from_bytes(f.payload[:4], "little") if len(f.payload) >= 4 else -1
        resp = codec.decode_response(f.msg_id, f.payload, request=reqs.get(rid))
        assert codec.encode_response(resp) == (f.msg_id, f.payload)
        assert codec.encode_response_frame(resp) == encode_frame(f.msg_id, f.payload)


@pytest.mark.parametrize("name", sorted(ALL))
def test_streams_fed_byte_by_byte(name: str) -> None:
    for key in ("request_hex", "response_hex"):
        data = bytes.fromhex(ALL[name][key])
        reader = FrameReader()
        got: list[Frame] = []
        for i in range(len(data)):
            got += reader.feed(data[i : i + 1])
        assert got == _frames(ALL[name][key])
        assert reader.buffered == 0


@pytest.mark.parametrize("name", sorted(ALL))
def test_consume_headers_from_lengths_match(name: str) -> None:
    """The sendfile path: header from entries + chunk lengths, then the chunks, is the frame."""
    for f in _frames(ALL[name]["response_hex"]):
        if f.msg_id not in (MsgId.CONSUME, MsgId.CONSUME_PEER):
            continue
        resp = codec.decode_response(f.msg_id, f.payload)
        assert isinstance(resp, m.ConsumeResponse | m.ConsumePeerResponse)
        entries = [p for t in resp.topics if isinstance(t, m.ConsumeTopicResult) for p in t.partitions]
        lengths = [len(p.chunk) for p in entries]
        bare = tuple(t if isinstance(t, m.ConsumeUnknownTopic) else _without_chunks(t) for t in resp.topics)
        if isinstance(resp, m.ConsumeResponse):
            head = codec.encode_consume_header(resp.request_id, bare, lengths, framed=True)
        else:
            head = codec.encode_consume_peer_header(bare, lengths, framed=True)
        assert head + b"".join(p.chunk for p in entries) == encode_frame(f.msg_id, f.payload)
        (hdr_len,) = struct.unpack_from("<I", f.payload)
        assert len(head) == 5 + 4 + hdr_len  # the header length covers the header only


def _without_chunks(t: m.ConsumeTopicResult) -> m.ConsumeTopicResult:
    return m.ConsumeTopicResult(t.name, tuple(
        m.ConsumePartitionResult(p.partition, p.flags, p.base_seq, p.hwmark, p.first_available, p.leader)
        for p in t.partitions))


# -- what tank.md says about particular vectors ------------------------------------------------


def _unsnappy(data: bytes) -> bytes:
    return bytes(cramjam.snappy.decompress_raw(data))


def _produce_bundle(name: str, index: int = 0) -> m.ProduceEntry:
    req = _requests(name)[index]
    assert isinstance(req, m.Produce)
    return next(e for _, e in req.entries())


@pytest.mark.parametrize("name", [
    "produce_single", "produce_bundle_3msgs", "produce_keys", "produce_snappy", "produce_16msgs_varint_count",
    "produce_sparse_consecutive_0x5", "produce_sparse_gaps_0x5", "produce_sparse_single_0x5",
    "produce_sparse_stale_seq_0x5", "produce_plain_after_sparse", "produce_unknown_topic", "bm_p2b_default",
    "bm_p2b_c200_B1",
])
def test_encode_bundle_is_what_tank_cli_sends(name: str) -> None:
    for req in _requests(name):
        assert isinstance(req, m.Produce)
        for _, e in req.entries():
            header = decode_bundle_header(e.bundle)
            msgs = decode_bundle(e.bundle, 1)
            assert encode_bundle(msgs, sparse=header.sparse) == e.bundle


@pytest.mark.parametrize("name", ["bm_p2b_c100_B10", "bm_p2b_c20_B10_R"])
def test_bm_snappy_bundles_differ_only_in_the_snappy_block(name: str) -> None:
    """TANK's bundled C++ Snappy and cramjam choose different (equally valid) matches for these
    repetitive message sets, so only the decompressed message set is byte-identical."""
    for req in _requests(name):
        assert isinstance(req, m.Produce)
        for _, e in req.entries():
            assert e.bundle[0] == 0x29  # Snappy, count 10
            msgs = decode_bundle(e.bundle, 1)
            assert len(msgs) == 10 and {x.timestamp for x in msgs} == {0}
            ours = encode_bundle(msgs)
            assert ours[0] == 0x29
            assert ours != e.bundle
            assert _unsnappy(ours[1:]) == _unsnappy(e.bundle[1:]) == encode_bundle(msgs, compress=False)[1:]


def test_worked_examples_of_section_3_5() -> None:
    assert _produce_bundle("produce_bundle_3msgs").bundle.hex() == (
        "0c000eb13701a2010000036f6e65020374776f02057468726565")
    e = _produce_bundle("produce_sparse_gaps_0x5")
    assert e.base_seq == 200
    assert e.bundle.hex() == "".join([
        "50", "c800000000000000", "08", "00323d3801a201000004", "73323030", "020204", "73323033",
        "020204", "73323036", "0204", "73323039"])
    assert [x.seq for x in decode_bundle(e.bundle, 0)] == [200, 203, 206, 209]


def test_produce_keys_and_snappy() -> None:
    msgs = decode_bundle(_produce_bundle("produce_keys").bundle, 5)
    assert [(x.seq, x.key, x.value) for x in msgs] == [(5, b"k1", b"v1"), (6, b"k2", b"v2")]
    e = _produce_bundle("produce_snappy")
    header = decode_bundle_header(e.bundle)
    assert (header.codec, header.count, header.header_size) == (1, 20, 2)
    msgs = decode_bundle(e.bundle, 7)
    assert [x.seq for x in msgs] == list(range(7, 27))
    assert all(len(x.value) == 104 and x.key is None for x in msgs)
    assert bytes(cramjam.snappy.compress_raw(_unsnappy(e.bundle[2:]))) == e.bundle[2:]


@pytest.mark.parametrize(("name", "seqs"), [
    ("consume_sparse_from_first", [100, 101, 102, 103, 200, 203, 206, 209, 300, 301]),
    ("consume_sparse_middle", [200, 203, 206, 209, 300, 301]),
    ("consume_from_first", list(range(1, 30))),
    ("consume_from_middle", list(range(2, 30))),
    ("consume_from_middle_compressed", list(range(7, 30))),
    ("consume_v3_opflags_probe", [30, 31, 32, 33, 34]),
    ("consume_tail_minbytes", [32, 33]),
    ("consume_tail_wakeup", [30, 31]),
    ("bm_p2c_default", [322]),
    ("consume_peer_0x9_probe", [33, 34]),
])
def test_chunk_seqs(name: str, seqs: list[int]) -> None:
    resp = next(r for r in _responses(name) if isinstance(r, m.ConsumeResponse | m.ConsumePeerResponse))
    (topic,) = resp.topics
    assert isinstance(topic, m.ConsumeTopicResult)
    (p,) = topic.partitions
    sparse = p.flags == ConsumeFlag.SPARSE
    assert [x.seq for x in decode_chunk(p.chunk, p.base_seq, sparse_first=sparse)] == seqs
    assert p.hwmark >= seqs[-1]
    assert sum(b.end - b.offset for b in iter_chunk(p.chunk, p.base_seq, sparse_first=sparse)) == len(p.chunk)


def test_consume_sparse_entry_has_no_base() -> None:
    resp = next(r for r in _responses("consume_sparse_from_first") if isinstance(r, m.ConsumeResponse))
    (topic,) = resp.topics
    assert isinstance(topic, m.ConsumeTopicResult)
    assert topic.partitions[0] == m.ConsumePartitionResult(0, ConsumeFlag.SPARSE, 0, 301, 0, None,
                                                           topic.partitions[0].chunk)
    assert len(topic.partitions[0].chunk) == 132


def test_consume_faults() -> None:
    first = _responses("consume_boundary_past_end")[1]
    assert first == m.ConsumeResponse(1, (m.ConsumeTopicResult("vec", (m.ConsumePartitionResult(
        0, ConsumeFlag.BOUNDARY_FAULT, 0, 29, 1),)),))
    assert _only("consume_unknown_topic", m.ConsumeResponse) == m.ConsumeResponse(
        1, (m.ConsumeUnknownTopic("nosuch", 1),))
    assert _only("consume_unknown_partition", m.ConsumeResponse) == m.ConsumeResponse(
        1, (m.ConsumeTopicResult("vec", (m.ConsumePartitionResult(5, ConsumeFlag.UNKNOWN_PARTITION),)),))
    assert _only("consume_empty_partition", m.ConsumeResponse) == m.ConsumeResponse(
        1, (m.ConsumeTopicResult("vec2", (m.ConsumePartitionResult(1),)),))


def test_consume_multi_topic_probe() -> None:
    (req,) = _requests("consume_multi_topic_probe")
    assert isinstance(req, m.Consume)
    assert [(t.name, [p.partition for p in t.partitions]) for t in req.topics] == [
        ("vec", [0]), ("nosuch", [0]), ("vec2", [0, 1, 7])]
    resp = _only("consume_multi_topic_probe", m.ConsumeResponse)
    vec, nosuch, vec2 = resp.topics
    assert nosuch == m.ConsumeUnknownTopic("nosuch", 1)
    assert isinstance(vec, m.ConsumeTopicResult) and isinstance(vec2, m.ConsumeTopicResult)
    assert [len(p.chunk) for p in vec.partitions + vec2.partitions] == [356, 21, 21, 0]
    assert vec2.partitions[2] == m.ConsumePartitionResult(7, ConsumeFlag.UNKNOWN_PARTITION)


def test_consume_request_versions() -> None:
    (v3,) = _requests("consume_v3_opflags_probe")
    assert isinstance(v3, m.Consume) and (v3.client_version, v3.op_flags, v3.request_id) == (3, 1, 11)
    req = _requests("consume_from_first")[0]
    assert req == m.Consume(1, (m.ConsumeTopic("vec", (m.ConsumePartition(0, 0, 134217728),)),),
                            max_wait=4294967295)
    (peer,) = _requests("consume_peer_0x9_probe")
    assert peer == m.ConsumePeer(1, (m.ConsumeTopic("vec", (m.ConsumePartition(0, 33, 1000),)),))


def test_produce_multi_topic_error_groups() -> None:
    (req,) = _requests("produce_multi_topic_probe")
    assert isinstance(req, m.Produce)
    assert [(t.name, [e.partition for e in t.entries]) for t in req.topics] == [
        ("vec", [0]), ("nosuch", [0, 1]), ("vec2", [0, 1, 5])]
    frames = _frames(ALL["produce_multi_topic_probe"]["response_hex"])
    assert frames[1].payload[4:].hex() == "00ff000001"
    resp = _only("produce_multi_topic_probe", m.ProduceResponse)
    assert resp == m.ProduceResponse(7, (
        m.ProduceTopicResult((ProduceError.OK,)),
        m.ProduceTopicResult(topic_error=ProduceError.UNKNOWN_TOPIC),
        m.ProduceTopicResult((ProduceError.OK, ProduceError.OK, ProduceError.UNKNOWN_PARTITION)),
    ))


def test_produce_with_seqnum_is_answered_with_0x1() -> None:
    (req,) = _requests("produce_sparse_stale_seq_0x5")
    assert isinstance(req, m.Produce) and req.with_seqnum and req.msg_id == MsgId.PRODUCE_WITH_SEQNUM
    resp = _only("produce_sparse_stale_seq_0x5", m.ProduceResponse)
    assert resp.topics == (m.ProduceTopicResult((ProduceError.INVALID_SEQ_NUMS,)),)
    assert codec.encode_response(resp)[0] == MsgId.PRODUCE


def test_bm_p2b_entries_per_frame() -> None:
    reqs = _requests("bm_p2b_c200_B1")
    assert [len(r.topics[0].entries) for r in reqs if isinstance(r, m.Produce)] == [86, 86, 28]
    assert [len(r.payload) for r in _frames(ALL["bm_p2b_c200_B1"]["request_hex"])] == [9827, 9827, 3215]


def test_bm_p2c_consume_answered_before_produce() -> None:
    resps = _responses("bm_p2c_default")
    assert [type(r) for r in resps] == [m.Ping, m.ConsumeResponse, m.ProduceResponse]


def test_admin_responses() -> None:
    assert _only("status", m.StatusResponse) == m.StatusResponse(1, 3, 4, 4, 0, 1795316746, 400)
    assert _only("discover_topics", m.DiscoverTopicsResponse) == m.DiscoverTopicsResponse(1, (
        m.TopicInfo("sparse", 1), m.TopicInfo("vec", 1), m.TopicInfo("vec2", 2)))
    assert _only("discover_topology", m.DiscoverTopologyResponse) == m.DiscoverTopologyResponse(1)
    two_empty = _only("discover_partitions_two_empty", m.DiscoverPartitionsResponse)
    assert two_empty == m.DiscoverPartitionsResponse(1, "vec2", (m.DiscoveredPartition(0, 0),) * 2)
    assert _only("discover_partitions_unknown_topic", m.DiscoverPartitionsResponse).partitions == ()
    assert _only("create_topic_invalid_name", m.CreateTopicResponse) == m.CreateTopicResponse(
        1, "bad.name", 10)
    assert _only("reload_config_unknown_topic", m.ReloadConfResponse) == m.ReloadConfResponse(
        1, "nosuch", 0, 11)
    (create,) = _requests("create_topic_with_config")
    assert create == m.CreateTopic(1, "vec2", 2, "log.segment.bytes=1mb\nretention.segments.count=4\n")


def test_unknown_msgid_probe() -> None:
    frames = _frames(ALL["unknown_msgid_0x4_probe"]["request_hex"])
    assert [f.msg_id for f in frames] == [MsgId.PING, MsgId.REG_REPLICA]
    assert codec.decode_request(frames[0].msg_id, frames[0].payload) == m.Ping()
    assert _responses("unknown_msgid_0x4_probe") == [m.Ping()]


def test_idle_probe_is_just_the_ping() -> None:
    assert ALL["idle_connection_probe"]["request_hex"] == ""
    assert bytes.fromhex(ALL["idle_connection_probe"]["response_hex"]) == PING_FRAME
