"""protocols/kafka/fast.py writes the bytes kio writes, for every Produce version bayou serves, and
reads the Produce requests kio reads."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from bayou.protocols.kafka import codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import SUPPORTED, ApiKey
from bayou.protocols.kafka.fast import (
    COPY_BELOW,
    decode_fetch,
    decode_produce,
    encode_fetch_response,
    encode_produce_response,
)
from bayou.protocols.kafka.framing import KafkaError, RequestHeader, decode_header

VERSIONS = range(SUPPORTED[ApiKey.PRODUCE].min, SUPPORTED[ApiKey.PRODUCE].max + 1)

partition = st.fixed_dictionaries(
    {"index": st.integers(0, 1 << 20),
     "error_code": st.sampled_from([ErrorCode(c) for c in (0, 1, 2, 6, 10, 45, 87)]),
     "base_offset": st.integers(-1, 1 << 62), "log_append_time": st.none(),
     "log_start_offset": st.integers(-1, 1 << 62)},
    optional={"error_message": st.none() | st.text(max_size=20)})
topics = st.lists(st.fixed_dictionaries({"name": st.text(min_size=1, max_size=12),
                                         "partition_responses": st.lists(partition, max_size=3)}),
                  max_size=3)


def kio_bytes(version: int, correlation_id: int, responses: list[dict[str, object]]) -> bytes:
    header = RequestHeader(ApiKey.PRODUCE, version, correlation_id, "t",
                           codec.request_is_flexible(ApiKey.PRODUCE, version), 0)
    body = build(codec.response_schema(ApiKey.PRODUCE, version), responses=responses)
    return codec.encode_response(header, body)


@pytest.mark.parametrize("version", VERSIONS)
@given(responses=topics, correlation_id=st.integers(0, (1 << 31) - 1))
def test_the_fast_produce_response_is_kios(version: int, correlation_id: int,
                                           responses: list[dict[str, object]]) -> None:
    assert encode_produce_response(version, correlation_id, responses) == kio_bytes(
        version, correlation_id, responses)


def test_what_it_does_not_write_is_left_to_kio() -> None:
    leader = [{"name": "t", "partition_responses": [{"index": 0, "current_leader": {"leader_id": 1}}]}]
    assert encode_produce_response(10, 1, leader) is None
    assert encode_produce_response(2, 1, []) is None


FETCH_VERSIONS = range(SUPPORTED[ApiKey.FETCH].min, SUPPORTED[ApiKey.FETCH].max + 1)

fetch_partition = st.fixed_dictionaries(
    {"partition_index": st.integers(0, 1 << 20),
     "high_watermark": st.integers(-1, 1 << 62), "last_stable_offset": st.integers(-1, 1 << 62),
     "log_start_offset": st.integers(-1, 1 << 62), "preferred_read_replica": st.just(-1),
     "records": st.none() | st.binary(max_size=300)},
    optional={"error_code": st.sampled_from([ErrorCode(c) for c in (0, 1, 3, 6, 74)]),
              "aborted_transactions": st.lists(st.fixed_dictionaries(
                  {"producer_id": st.integers(0, 1 << 62), "first_offset": st.integers(0, 1 << 62)}),
                  max_size=3)})
fetch_topics = st.lists(st.fixed_dictionaries({"topic": st.text(min_size=1, max_size=12),
                                               "partitions": st.lists(fetch_partition, max_size=3)}),
                        max_size=3)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@given(responses=fetch_topics, correlation_id=st.integers(0, (1 << 31) - 1))
def test_the_fast_fetch_response_is_kios(version: int, correlation_id: int,
                                         responses: list[dict[str, object]]) -> None:
    fields = {"session_id": 0, "responses": responses}
    header = RequestHeader(ApiKey.FETCH, version, correlation_id, "t",
                           codec.request_is_flexible(ApiKey.FETCH, version), 0)
    want = codec.encode_response(header, build(codec.response_schema(ApiKey.FETCH, version), **fields))
    assert encode_fetch_response(version, correlation_id, fields) == want


piece = st.binary(max_size=300) | st.integers(COPY_BELOW // 2, COPY_BELOW + 10).map(
    lambda n: memoryview(bytes([n % 251]) * n))
pieces_partition = st.fixed_dictionaries(
    {"partition_index": st.integers(0, 1 << 20), "high_watermark": st.integers(-1, 1 << 62),
     "last_stable_offset": st.integers(-1, 1 << 62), "log_start_offset": st.integers(-1, 1 << 62),
     "preferred_read_replica": st.just(-1), "records": st.lists(piece, max_size=3)})


@pytest.mark.parametrize("version", [4, 11, 12])
@given(partitions=st.lists(pieces_partition, min_size=1, max_size=3), correlation_id=st.integers(0, 1000))
def test_records_in_pieces_are_written_uncopied_in_the_frame_kio_writes(
        version: int, correlation_id: int, partitions: list[dict[str, Any]]) -> None:
    fields = {"session_id": 0, "responses": [{"topic": "t", "partitions": partitions}]}
    joined = {"session_id": 0, "responses": [{"topic": "t", "partitions": [
        dict(p, records=b"".join(p["records"])) for p in partitions]}]}
    header = RequestHeader(ApiKey.FETCH, version, correlation_id, "t",
                           codec.request_is_flexible(ApiKey.FETCH, version), 0)
    want = codec.encode_response(header, build(codec.response_schema(ApiKey.FETCH, version), **joined))
    got = encode_fetch_response(version, correlation_id, fields)
    assert got is not None
    big = [piece for p in partitions if sum(map(len, p["records"])) >= COPY_BELOW for piece in p["records"]]
    if big:  # the records' own pieces are in the frame's, not copies of them
        assert isinstance(got, list) and all(any(c is piece for c in got) for piece in big)
    assert (got if isinstance(got, bytes) else b"".join(got)) == want


def test_a_fetch_response_it_does_not_write_is_left_to_kio() -> None:
    hint = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0,
                                                         "current_leader": {"leader_id": 1}}]}]}
    assert encode_fetch_response(12, 1, hint) is None
    assert encode_fetch_response(12, 1, {"error_code": 1, "responses": []}) is None
    assert encode_fetch_response(13, 1, {"responses": []}) is None


# -- Produce requests read without kio (decode_produce) ------------------------------------------

produce_partition = st.fixed_dictionaries({"index": st.integers(-(1 << 31), (1 << 31) - 1),
                                           "records": st.none() | st.binary(max_size=200)})
produce_topics = st.lists(st.fixed_dictionaries({"name": st.text(max_size=12),
                                                 "partition_data": st.lists(produce_partition, max_size=3)}),
                          max_size=3)


def produce_frame(version: int, txn: str | None, acks: int, topic_data: list[dict[str, Any]]) -> bytes:
    """A Produce request frame (without its size) as kio writes it."""
    header = RequestHeader(ApiKey.PRODUCE, version, 7, "client",
                           codec.request_is_flexible(ApiKey.PRODUCE, version), 0)
    body = build(codec.request_schema(ApiKey.PRODUCE, version), transactional_id=txn, acks=acks,
                 timeout=1500, topic_data=topic_data)
    return codec.encode_request(header, body)[4:]


def kio_read(frame: bytes | bytearray) -> tuple[Any, int] | None:
    """What kio reads from a Produce frame (body, trailing bytes), None when it refuses it."""
    header = decode_header(frame, flexible=codec.request_is_flexible(ApiKey.PRODUCE, frame[3]))
    try:
        return codec._read_body(codec.request_schema(ApiKey.PRODUCE, frame[3]), frame, header.size)
    except KafkaError:
        return None


def same_body(fast: Any, kio: Any) -> bool:
    return (fast.transactional_id == kio.transactional_id and fast.acks == kio.acks
            and fast.timeout_ms == kio.timeout.total_seconds() * 1000
            and [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in fast.topic_data]
            == [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in kio.topic_data])


@pytest.mark.parametrize("version", VERSIONS)
@given(txn=st.none() | st.text(max_size=10), acks=st.sampled_from([-1, 0, 1, 2]), topic_data=produce_topics,
       trailing=st.binary(max_size=3))
def test_the_fast_produce_reader_reads_what_kio_reads(
        version: int, txn: str | None, acks: int, topic_data: list[dict[str, Any]], trailing: bytes) -> None:
    frame = produce_frame(version, txn, acks, topic_data) + trailing
    header = decode_header(frame, flexible=version >= 9)
    fast = decode_produce(frame, version, header.size)
    kio = kio_read(frame)
    assert fast is not None and kio is not None
    assert same_body(fast[0], kio[0]) and fast[1] == kio[1] == len(trailing)


def damaged(frame: bytes, flexible: bool, cut: int, flips: list[tuple[int, int]]) -> tuple[int, bytearray]:
    """The header's size, and ``frame`` with bytes of its body changed (``flips``) and, for an odd
    ``cut``, that many bytes cut from its end (never into the header)."""
    out = bytearray(frame)
    head = decode_header(out, flexible=flexible).size
    for pos, value in flips:
        if head <= pos < len(out):
            out[pos] = value
    return head, out[:max(head, len(out) - cut)] if cut % 2 else out


@pytest.mark.parametrize("version", [3, 8, 9, 12])
@given(topic_data=produce_topics.filter(bool), cut=st.integers(1, 400), flips=st.lists(
    st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3))
def test_a_damaged_produce_is_read_as_kio_reads_it_or_left_to_kio(
        version: int, topic_data: list[dict[str, Any]], cut: int, flips: list[tuple[int, int]]) -> None:
    """A frame cut short or with bytes changed: what the fast reader accepts, kio reads the same;
    anything else it leaves to kio (None), which then answers with the error."""
    head, frame = damaged(produce_frame(version, "t-1", 1, topic_data), version >= 9, cut, flips)
    fast = decode_produce(frame, version, head)
    if fast is not None:
        kio = kio_read(bytes(frame))  # kio reads read-only buffers (frames are bytes)
        assert kio is not None and same_body(fast[0], kio[0]) and fast[1] == kio[1]


def test_unusual_produce_bodies_are_left_to_kio() -> None:
    ok = produce_frame(9, None, 1, [{"name": "t", "partition_data": [{"index": 0, "records": b"x"}]}])
    head = decode_header(ok, flexible=True).size
    assert decode_produce(ok, 9, head) is not None
    tagged = bytearray(ok)
    tagged[-1] = 1  # the body's tagged-field count: a tagged field follows (cut short here)
    assert decode_produce(tagged, 9, head) is None
    assert decode_produce(ok, 13, head) is None and decode_produce(ok, 2, head) is None
    bad_name = produce_frame(7, None, 1, [{"name": "tt", "partition_data": []}])
    at = bad_name.index(b"tt")
    assert decode_produce(bad_name[:at] + b"\xff\xfe" + bad_name[at + 2:], 7,
                          decode_header(bad_name, flexible=False).size) is None
    null_array = bytearray(produce_frame(7, None, 1, []))
    null_array[-4:] = b"\xff\xff\xff\xff"  # topic_data null
    assert decode_produce(null_array, 7, decode_header(null_array, flexible=False).size) is None


# -- Fetch requests read without kio (decode_fetch) ----------------------------------------------

I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
fetch_request_partition = st.fixed_dictionaries(
    {"partition": I32, "current_leader_epoch": I32, "fetch_offset": I64, "last_fetched_epoch": I32,
     "log_start_offset": I64, "partition_max_bytes": I32})
fetch_request_topics = st.lists(st.fixed_dictionaries(
    {"topic": st.text(max_size=12), "partitions": st.lists(fetch_request_partition, max_size=3)}), max_size=3)
forgotten = st.lists(st.fixed_dictionaries({"topic": st.text(max_size=8),
                                            "partitions": st.lists(I32, max_size=4)}), max_size=2)
fetch_fields = st.fixed_dictionaries(
    {"replica_id": I32, "max_wait": st.integers(-(1 << 31), (1 << 31) - 1), "min_bytes": I32,
     "max_bytes": I32, "isolation_level": st.integers(-128, 127), "session_id": I32,
     "session_epoch": I32, "topics": fetch_request_topics, "forgotten_topics_data": forgotten,
     "rack_id": st.text(max_size=6)})


def fetch_frame(version: int, fields: dict[str, Any]) -> bytes:
    """A Fetch request frame (without its size) as kio writes it."""
    header = RequestHeader(ApiKey.FETCH, version, 9, "consumer",
                           codec.request_is_flexible(ApiKey.FETCH, version), 0)
    return codec.encode_request(header, build(codec.request_schema(ApiKey.FETCH, version), **fields))[4:]


def kio_read_fetch(frame: bytes | bytearray) -> tuple[Any, int] | None:
    header = decode_header(frame, flexible=codec.request_is_flexible(ApiKey.FETCH, frame[3]))
    try:
        return codec._read_body(codec.request_schema(ApiKey.FETCH, frame[3]), frame, header.size)
    except KafkaError:
        return None


def same_fetch(version: int, fast: Any, kio: Any) -> bool:
    """The fast body, turned into kio's (``codec.kio_body``), is kio's; and the wait agrees."""
    header = RequestHeader(ApiKey.FETCH, version, 9, "consumer", version >= 12, 0)
    return (codec.kio_body(header, fast) == kio and fast.max_wait == kio.max_wait
            and fast.max_wait_ms == kio.max_wait // datetime.timedelta(milliseconds=1))


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@given(fields=fetch_fields, trailing=st.binary(max_size=3))
def test_the_fast_fetch_reader_reads_what_kio_reads(version: int, fields: dict[str, Any],
                                                    trailing: bytes) -> None:
    frame = fetch_frame(version, fields) + trailing
    header = decode_header(frame, flexible=version >= 12)
    fast = decode_fetch(frame, version, header.size)
    kio = kio_read_fetch(frame)
    assert fast is not None and kio is not None
    assert same_fetch(version, fast[0], kio[0]) and fast[1] == kio[1] == len(trailing)
    # what a decoded request is written back as (encode_request) is the frame it was read from
    written = codec.encode_request(decode_header(frame, flexible=version >= 12), fast[0])
    assert written[4:] == frame[:len(frame) - len(trailing)]


@pytest.mark.parametrize("version", [4, 7, 9, 11, 12])
@given(fields=fetch_fields, cut=st.integers(1, 300), flips=st.lists(
    st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=3))
def test_a_damaged_fetch_is_read_as_kio_reads_it_or_left_to_kio(
        version: int, fields: dict[str, Any], cut: int, flips: list[tuple[int, int]]) -> None:
    head, frame = damaged(fetch_frame(version, fields), version >= 12, cut, flips)
    fast = decode_fetch(frame, version, head)
    if fast is not None:
        kio = kio_read_fetch(bytes(frame))
        assert kio is not None and same_fetch(version, fast[0], kio[0]) and fast[1] == kio[1]


def test_unusual_fetch_bodies_are_left_to_kio() -> None:
    fields = {"max_wait": 500, "min_bytes": 1, "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "fetch_offset": 3, "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": []}
    ok = fetch_frame(12, fields)
    head = decode_header(ok, flexible=True).size
    assert decode_fetch(ok, 12, head) is not None
    with_cluster_id = fetch_frame(12, dict(fields, cluster_id="c"))  # v12's tagged field
    read = decode_fetch(with_cluster_id, 12, head)
    kio = kio_read_fetch(with_cluster_id)
    assert read is None and kio is not None and kio[0].cluster_id == "c"
    # served through kio then: the request decodes with its tagged field
    assert codec.decode_request(with_cluster_id).body.cluster_id == "c"
    assert decode_fetch(ok, 13, head) is None and decode_fetch(ok, 3, head) is None
    null_topics = bytearray(fetch_frame(7, dict(fields, topics=[])))
    at = len(null_topics) - 8  # topics (i32 count), then forgotten_topics_data (i32 count)
    null_topics[at:at + 4] = b"\xff\xff\xff\xff"
    assert decode_fetch(null_topics, 7, decode_header(null_topics, flexible=False).size) is None
    bad_name = fetch_frame(7, dict(fields, topics=[{"topic": "tt", "partitions": []}]))
    at = bad_name.index(b"tt")
    assert decode_fetch(bad_name[:at] + b"\xff\xfe" + bad_name[at + 2:], 7,
                        decode_header(bad_name, flexible=False).size) is None
