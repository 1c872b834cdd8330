"""Every Kafka vector (tests/conformance/vectors/kafka, captured from confluent-kafka, kafka-python,
aiokafka and kcat by capture.py) against the codec alone: each request frame decodes at the API and
version the client sent, with the fields the capture script asked for (topics, partitions, groups,
record batches that bayou.records reads back to the keys, values, headers and timestamps produced);
each request and each response the client accepted re-encodes byte for byte; every truncated prefix
reports "need more" or the protocol error; feeding byte by byte equals feeding whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bayou.protocols.kafka import codec
from bayou.protocols.kafka.codes import SUPPORTED, ApiKey, VersionRange
from bayou.protocols.kafka.framing import FrameReader, KafkaError
from bayou.records.batch import HEADER_SIZE, decode_records, iter_batches, verify_batch
from bayou.records.compression import Compression

VECTORS = Path(__file__).parent / "vectors" / "kafka"
SESSIONS: dict[str, dict[str, Any]] = {p.stem: json.loads(p.read_text())
                                       for p in sorted(VECTORS.glob("*.json"))}
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat")


def _served(session: dict[str, Any]) -> MappingProxyType[ApiKey, VersionRange]:
    return MappingProxyType({ApiKey(int(k)): VersionRange(lo, hi)
                             for k, (lo, hi) in session["served"].items()})


def _frames() -> Iterator[tuple[str, int, dict[str, Any]]]:
    for name, session in SESSIONS.items():
        for i, frame in enumerate(session["frames"]):
            yield name, i, frame


FRAMES = list(_frames())
IDS = [f"{name}-{i}-{f['api_key']}v{f['api_version']}" for name, i, f in FRAMES]


def _decode(name: str, frame: dict[str, Any]) -> codec.Request:
    return codec.decode_request(bytes.fromhex(frame["request_hex"]), _served(SESSIONS[name]))


def _requests(name: str, key: ApiKey) -> list[codec.Request]:
    return [_decode(name, f) for f in SESSIONS[name]["frames"]
            if f["api_key"] == key and "note" not in f]


def test_every_client_was_captured() -> None:
    assert set(CLIENTS) <= set(SESSIONS)
    for name in CLIENTS:
        kinds = {f["api_key"] for f in SESSIONS[name]["frames"]}
        assert {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH} <= kinds, name
    for name in ("confluent-kafka", "kafka-python", "aiokafka"):
        kinds = {f["api_key"] for f in SESSIONS[name]["frames"]}
        assert {ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
                ApiKey.OFFSET_FETCH, ApiKey.OFFSET_COMMIT, ApiKey.LEAVE_GROUP} <= kinds, name


def test_the_served_table_covers_every_captured_version() -> None:
    for name in CLIENTS:
        for f in SESSIONS[name]["frames"]:
            assert f["api_version"] in SUPPORTED[ApiKey(f["api_key"])], (name, f["api_key"])


@pytest.mark.parametrize(("name", "index", "frame"), FRAMES, ids=IDS)
def test_request_decodes_and_reencodes(name: str, index: int, frame: dict[str, Any]) -> None:
    raw = bytes.fromhex(frame["request_hex"])
    if "note" in frame:
        pytest.skip("refused or specially answered: see the fallback test")
    req = _decode(name, frame)
    assert (req.header.api_key, req.header.api_version) == (frame["api_key"], frame["api_version"])
    assert req.header.client_id  # every one of these clients names itself
    assert req.header.flexible == codec.request_is_flexible(frame["api_key"], frame["api_version"])
    again = codec.encode_request(req.header, req.body)
    assert again[4:] == raw[:len(raw) - req.trailing]
    if req.trailing:  # librdkafka's all-topics Metadata v13 (see the README)
        assert req.header.api_key == ApiKey.METADATA and req.header.client_id == "rdkafka"
        assert req.body.topics is None  # type: ignore[union-attr]


@pytest.mark.parametrize(("name", "index", "frame"), FRAMES, ids=IDS)
def test_response_the_client_accepted_reencodes(name: str, index: int, frame: dict[str, Any]) -> None:
    if frame["response_hex"] is None:
        pytest.skip("no response (acks=0)")
    raw = bytes.fromhex(frame["response_hex"])
    key, version = frame["api_key"], frame["api_version"]
    if "note" in frame:  # the ApiVersions fallback is always a v0 response
        version = 0
    correlation_id, body = codec.decode_response(raw, key, version)
    assert correlation_id == int.from_bytes(bytes.fromhex(frame["request_hex"])[4:8], "big")
    header = codec.decode_request(bytes.fromhex(frame["request_hex"]),
                                  _served(SESSIONS[name])).header if "note" not in frame else None
    if header is not None:
        assert codec.encode_response(header, body)[4:] == raw


@pytest.mark.parametrize(("name", "index", "frame"), FRAMES, ids=IDS)
def test_truncated_and_split_frames(name: str, index: int, frame: dict[str, Any]) -> None:
    raw = bytes.fromhex(frame["request_hex"])
    wire = len(raw).to_bytes(4, "big") + raw
    whole = FrameReader().feed(wire + wire[:3])
    assert whole == [raw]
    reader = FrameReader()
    got: list[bytes] = []
    for i in range(len(wire)):
        got += reader.feed(wire[i:i + 1])
        assert got == ([] if i < len(wire) - 1 else [raw])
    trailing = 0 if "note" in frame else _decode(name, frame).trailing
    served = _served(SESSIONS[name])
    for n in range(len(raw)):
        try:
            codec.decode_request(raw[:n], served)
        except KafkaError as exc:
            assert exc.close or exc.reply is not None
        else:
            assert n >= len(raw) - trailing, f"a {n}-byte prefix decoded"


def test_apiversions_fallback() -> None:
    session = SESSIONS["confluent-kafka-apiversions-fallback"]
    served = _served(session)
    first, second = session["frames"][0], session["frames"][1]
    assert (first["api_key"], first["api_version"]) == (ApiKey.API_VERSIONS, 3)
    with pytest.raises(KafkaError) as info:
        codec.decode_request(bytes.fromhex(first["request_hex"]), served)
    assert not info.value.close
    assert info.value.reply is not None
    assert info.value.reply[4:].hex() == first["response_hex"]
    _, body = codec.decode_response(info.value.reply[4:], ApiKey.API_VERSIONS, 0)
    assert body.error_code == ErrorCode.unsupported_version  # type: ignore[attr-defined]
    own = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}  # type: ignore[attr-defined]
    assert own[ApiKey.API_VERSIONS] == (0, 2)
    # librdkafka asked again at v0 and went on to Metadata
    assert (second["api_key"], second["api_version"]) == (ApiKey.API_VERSIONS, 0)
    assert any(f["api_key"] == ApiKey.METADATA for f in session["frames"][2:])


XERIAL = b"\x82SNAPPY\x00"  # snappy-java's stream framing, which Kafka's brokers read too


def _batches(name: str) -> Iterator[tuple[Any, Any, int, Any]]:
    """(request body, partition data, position, header) of every batch a client produced."""
    for req in _requests(name, ApiKey.PRODUCE):
        for topic in req.body.topic_data:  # type: ignore[union-attr]
            assert topic.name == "vectors"
            for part in topic.partition_data:
                assert part.index in (0, 1)
                for pos, h in iter_batches(part.records):
                    verify_batch(part.records, pos)
                    yield req.body, part, pos, h


def _xerial(part: Any, pos: int, h: Any) -> bool:
    return bool(h.compression == Compression.SNAPPY
                and part.records[pos + HEADER_SIZE:pos + HEADER_SIZE + 8] == XERIAL)


def _produced(name: str) -> list[tuple[Any, Any, Any]]:
    """(request body, partition data, decoded records) of every produce vector of a client
    (xerial-framed snappy batches included)."""
    return [(body, part, decode_records(part.records, pos)) for body, part, pos, _h in _batches(name)]


def _codecs(name: str) -> set[int]:
    found = set()
    for req in _requests(name, ApiKey.PRODUCE):
        for topic in req.body.topic_data:  # type: ignore[union-attr]
            for part in topic.partition_data:
                for _pos, h in iter_batches(part.records):
                    found.add(h.compression)
    return found


def test_confluent_kafka_produce() -> None:
    produced = _produced("confluent-kafka")
    records = {r.key: r for _b, _p, recs in produced for r in recs}
    for i in range(20):
        r = records[b"k%d" % i]
        assert r.value == b"value-%d" % i
        assert r.headers == (("h", b"v%d" % i),)
        assert r.timestamp == 1700000000000 + i
    assert {b"gzip", b"snappy", b"lz4"} <= set(records)
    assert _codecs("confluent-kafka") == {Compression.ZSTD, Compression.GZIP, Compression.SNAPPY,
                                          Compression.LZ4}
    idempotent = [b for b, _p, recs in produced if recs[0].key == b"k0"]
    assert idempotent and idempotent[0].acks == -1


def test_confluent_kafka_idempotent_batches_carry_the_producer_id() -> None:
    (init,) = _requests("confluent-kafka", ApiKey.INIT_PRODUCER_ID)
    assert init.body.transactional_id is None  # type: ignore[union-attr]
    sequences: dict[int, list[int]] = {}
    for req in _requests("confluent-kafka", ApiKey.PRODUCE):
        for part in req.body.topic_data[0].partition_data:  # type: ignore[union-attr]
            for _pos, h in iter_batches(part.records):
                if h.producer_id >= 0:
                    assert h.producer_id == 1001 and h.producer_epoch == 0
                    sequences.setdefault(part.index, []).append(h.base_sequence)
    assert sequences and all(seqs[0] == 0 for seqs in sequences.values())


def test_kafka_python_produce_every_codec() -> None:
    produced = _produced("kafka-python")
    values = {r.value for _b, _p, recs in produced for r in recs}
    for name in ("gzip", "snappy", "lz4", "zstd", "None"):
        assert b"kafka-python %s 0|" % name.encode() * 20 in values
    assert all(r.key == b"kp" and r.headers == (("h", b"1"),)
               for _b, _p, recs in produced for r in recs)
    assert _codecs("kafka-python") == {Compression.NONE, Compression.GZIP, Compression.SNAPPY,
                                       Compression.LZ4, Compression.ZSTD}


def test_python_clients_frame_snappy_as_xerial() -> None:
    """kafka-python and aiokafka frame snappy as snappy-java does (a magic header, then
    length-prefixed raw blocks); librdkafka sends one raw block. Kafka's brokers read both."""
    for name, xerial in (("kafka-python", True), ("aiokafka", True), ("confluent-kafka", False)):
        snappy = [_xerial(part, pos, h) for _b, part, pos, h in _batches(name)
                  if h.compression == Compression.SNAPPY]
        assert snappy and all(x == xerial for x in snappy), name


@pytest.mark.parametrize(("name", "value"), [("kafka-python", b"kafka-python snappy 0|" * 20),
                                            ("aiokafka", b"snappy" * 10)])
def test_xerial_snappy_records_decode(name: str, value: bytes) -> None:
    part, pos = next((part, pos) for _b, part, pos, h in _batches(name) if _xerial(part, pos, h))
    assert decode_records(part.records, pos)[0].value == value


def test_aiokafka_produce() -> None:
    produced = _produced("aiokafka")
    values = {r.value for _b, _p, recs in produced for r in recs}
    assert {b"aiokafka %d" % i for i in range(5)} <= values
    assert {b"snappy" * 10, b"lz4" * 10, b"zstd" * 10} <= values
    assert _codecs("aiokafka") == {Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
                                   Compression.ZSTD}


def test_kcat_produce_keys_and_headers() -> None:
    produced = _produced("kcat")
    records = [r for _b, _p, recs in produced for r in recs]
    assert [(r.key, r.value) for r in records] == [(b"k1", b"v1"), (b"k2", b"v2")]
    assert all(r.headers == (("h", b"v"),) for r in records)


@pytest.mark.parametrize("name", CLIENTS)
def test_fetch_requests_and_the_records_served(name: str) -> None:
    fetches = _requests(name, ApiKey.FETCH)
    assert fetches
    for req in fetches:
        body: Any = req.body
        assert getattr(body, "replica_id", -1) == -1  # a consumer (v15+ moved it to replica_state)
        assert body.max_bytes > 0 and body.isolation_level in (0, 1)
        for topic in body.topics:
            assert topic.topic == "vectors"
            assert {p.partition for p in topic.partitions} <= {0, 1}
            assert all(p.fetch_offset >= 0 and p.partition_max_bytes > 0 for p in topic.partitions)
    served = [f for f in SESSIONS[name]["frames"] if f["api_key"] == ApiKey.FETCH]
    batches = 0
    for f in served:
        _, resp = codec.decode_response(bytes.fromhex(f["response_hex"]), ApiKey.FETCH,
                                        f["api_version"])
        for topic in resp.responses:  # type: ignore[attr-defined]
            for part in topic.partitions:
                for pos, _h in iter_batches(part.records or b""):
                    verify_batch(part.records, pos)
                    batches += 1
    assert batches > 0


@pytest.mark.parametrize("name", ("confluent-kafka", "kafka-python", "aiokafka"))
def test_group_requests(name: str) -> None:
    group = {"confluent-kafka": "ck-group", "kafka-python": "kp-group", "aiokafka": "ak-group"}[name]
    joins = _requests(name, ApiKey.JOIN_GROUP)
    assert joins
    for req in joins:
        body: Any = req.body
        assert body.group_id == group and body.protocol_type == "consumer"
        assert body.protocols and all(p.metadata for p in body.protocols)
    syncs = _requests(name, ApiKey.SYNC_GROUP)
    assert any(s.body.assignments for s in syncs)  # type: ignore[union-attr]  # the leader's
    commits = _requests(name, ApiKey.OFFSET_COMMIT)
    assert commits
    for req in commits:
        body = req.body
        generation = getattr(body, "generation_id_or_member_epoch", None)
        assert body.group_id == group
        assert (body.generation_id if generation is None else generation) >= 1
        offsets = [p.committed_offset for t in body.topics for p in t.partitions]
        assert offsets and all(o > 0 for o in offsets)
    for req in _requests(name, ApiKey.FIND_COORDINATOR):
        body = req.body
        keys = list(getattr(body, "coordinator_keys", ()) or [body.key])
        assert keys == [group]


@pytest.mark.parametrize("name", CLIENTS)
def test_metadata_requests(name: str) -> None:
    for req in _requests(name, ApiKey.METADATA):
        body: Any = req.body
        assert body.topics is None or all(t.name for t in body.topics)


def test_confluent_kafka_admin_requests() -> None:
    (create,) = _requests("confluent-kafka", ApiKey.CREATE_TOPICS)
    topic: Any = create.body.topics[0]  # type: ignore[union-attr]
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("ck-admin", 3, 1)
    (partitions,) = _requests("confluent-kafka", ApiKey.CREATE_PARTITIONS)
    assert [(t.name, t.count) for t in partitions.body.topics] == [("ck-admin", 4)]  # type: ignore[union-attr]
    (configs,) = _requests("confluent-kafka", ApiKey.DESCRIBE_CONFIGS)
    (resource,) = configs.body.resources  # type: ignore[union-attr]
    assert (resource.resource_type, resource.resource_name) == (2, "ck-admin")
