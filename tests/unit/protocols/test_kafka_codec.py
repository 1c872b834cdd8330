"""The Kafka codec around kio: which requests it serves, the ApiVersions fallback, response headers."""

from __future__ import annotations

import datetime
import struct
from types import MappingProxyType

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.metadata.v4.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from bayou.protocols.kafka import codec
from bayou.protocols.kafka.codes import SUPPORTED, TRANSACTION_APIS, ApiKey
from bayou.protocols.kafka.framing import KafkaError, RequestHeader, encode_header


def _frame(key: int, version: int, body: bytes = b"", correlation: int = 9) -> bytes:
    return encode_header(RequestHeader(key, version, correlation, "t", False, 0)) + body


METADATA = MetadataRequest(topics=(MetadataRequestTopic(name=TopicName("t")),),
                           allow_auto_topic_creation=False)


def test_a_request_decodes_with_its_header() -> None:
    header = RequestHeader(3, 4, 5, "client", False, 0)
    req = codec.decode_request(codec.encode_request(header, METADATA)[4:])
    assert req.body == METADATA and req.trailing == 0
    assert req.header == RequestHeader(3, 4, 5, "client", False, 16)


@pytest.mark.parametrize(("key", "version"), [
    (7, 0),  # ControlledShutdown: never served
    (999, 0),
    (-1, 0),
    (ApiKey.PRODUCE, 2),  # before record batches
    (ApiKey.PRODUCE, 13),  # names topics by id
    (ApiKey.FETCH, 3),
    (ApiKey.METADATA, 14),
])
def test_unserved_requests_close(key: int, version: int) -> None:
    with pytest.raises(KafkaError) as info:
        codec.decode_request(_frame(key, version, b"\x00" * 8))
    assert info.value.close and info.value.reply is None


@pytest.mark.parametrize("version", [5, 100, (1 << 15) - 1])
def test_a_newer_apiversions_is_answered_in_v0(version: int) -> None:
    with pytest.raises(KafkaError) as info:
        codec.decode_request(_frame(ApiKey.API_VERSIONS, version, b"\x01\x02\x03", correlation=-7))
    exc = info.value
    assert not exc.close and exc.reply is not None
    assert struct.unpack_from(">ii", exc.reply) == (len(exc.reply) - 4, -7)
    correlation, body = codec.decode_response(exc.reply[4:], ApiKey.API_VERSIONS, 0)
    assert correlation == -7
    assert body.error_code is ErrorCode.unsupported_version  # type: ignore[attr-defined]
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == \
        codec.api_versions()  # type: ignore[attr-defined]


def test_withheld_apis_are_not_served_nor_advertised() -> None:
    served = MappingProxyType({k: r for k, r in SUPPORTED.items() if k not in TRANSACTION_APIS})
    frame = _frame(ApiKey.END_TXN, 0, b"\x00\x01x" + b"\x00" * 14)
    with pytest.raises(KafkaError):
        codec.decode_request(frame, served)
    advertised = {k for k, _lo, _hi in codec.api_versions(served)}
    assert advertised == {int(k) for k in served}


def test_body_errors_carry_the_header() -> None:
    with pytest.raises(KafkaError) as info:
        codec.decode_request(_frame(ApiKey.METADATA, 4, b"\x00\x00\x00\x05"))
    assert info.value.header is not None and info.value.header.correlation_id == 9


def test_bytes_after_the_body_are_counted_not_refused() -> None:
    frame = codec.encode_request(RequestHeader(3, 4, 1, "c", False, 0), METADATA)[4:] + b"\x01\x02"
    assert codec.decode_request(frame).trailing == 2


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_response_every_version(version: int) -> None:
    body = codec.api_versions_response(version)
    header = RequestHeader(ApiKey.API_VERSIONS, version, 3, "c", version >= 3, 0)
    frame = codec.encode_response(header, body)
    # ApiVersions answers with header v0 (no tagged fields) at every version
    assert not codec.response_header_is_flexible(ApiKey.API_VERSIONS, version)
    assert codec.decode_response(frame[4:], ApiKey.API_VERSIONS, version) == (3, body)
    assert len(body.api_keys) == len(SUPPORTED)  # type: ignore[attr-defined]


def test_response_header_v1_for_flexible_versions() -> None:
    body = HeartbeatResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none)
    frame = codec.encode_response(RequestHeader(12, 4, 8, "c", True, 0), body)
    assert frame == struct.pack(">ii", 12, 8) + b"\x00" + b"\x00\x00\x00\x00\x00\x00" + b"\x00"
    req = HeartbeatRequest(group_id=GroupId("g"), generation_id=i32(1), member_id="m",
                           group_instance_id=None)
    wire = codec.encode_request(RequestHeader(12, 4, 8, "c", True, 0), req)
    assert codec.decode_request(wire[4:]).body == req


def test_a_response_must_match_its_request() -> None:
    body = codec.api_versions_response(3)
    with pytest.raises(ValueError, match="does not answer"):
        codec.encode_response(RequestHeader(ApiKey.API_VERSIONS, 2, 1, "c", False, 0), body)
    with pytest.raises(ValueError, match="does not answer"):
        codec.encode_response(RequestHeader(ApiKey.METADATA, 3, 1, "c", False, 0), body)


def test_decode_response_refuses_garbage() -> None:
    for raw in (b"", b"\x00\x00", b"\x00\x00\x00\x01\x00"):
        with pytest.raises(KafkaError):
            codec.decode_response(raw, ApiKey.HEARTBEAT, 4)
    with pytest.raises(KafkaError):
        codec.decode_response(b"\x00" * 12, 7, 0)


def test_apiversions_request_v3_round_trip() -> None:
    body = ApiVersionsRequest(client_software_name="bayou", client_software_version="0.1")
    wire = codec.encode_request(RequestHeader(18, 3, 1, "c", True, 0), body)
    assert codec.decode_request(wire[4:]).body == body
