"""protocols/kafka/fast.py writes the bytes kio writes, for every Produce version bayou serves."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from bayou.protocols.kafka import codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import SUPPORTED, ApiKey
from bayou.protocols.kafka.fast import COPY_BELOW, encode_fetch_response, encode_produce_response
from bayou.protocols.kafka.framing import RequestHeader

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
