"""Every Iggy vector (tests/conformance/vectors/iggy, copied from shared/vectors/iggy) against the
codec alone: the request frame decodes to the expected message; the reply the client accepted is
reproduced byte for byte (built from scratch where it holds no run-specific value, decoded and
re-encoded where it carries timestamps, server ids or checksums of that run); every truncated prefix
gives "need more" or the protocol error; feeding byte by byte equals feeding whole."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, EvictionReason, Operation, Status
from bayou.protocols.iggy.framing import (
    Dialect,
    IggyError,
    LegacyFrame,
    LegacyFrameReader,
    ReplyHeader,
    VsrFrame,
    VsrFrameReader,
    decode_legacy_reply,
    detect_dialect,
    encode_eviction,
    encode_legacy_error,
    encode_legacy_reply,
    encode_vsr_error,
    encode_vsr_ok,
    reader_for,
    split_result_section,
    split_vsr_reply,
)

VECTORS = Path(__file__).parent / "vectors" / "iggy"
ALL: dict[str, dict[str, Any]] = {p.stem: json.loads(p.read_text()) for p in sorted(VECTORS.glob("*.json"))}

S1, T1, G1 = m.Identifier("s1"), m.Identifier("t1"), m.Identifier("g1")
P0 = m.Partitioning.partition(0)
DEFAULT_CONSUMER = m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(0))
GROUP_G1 = m.Consumer(m.ConsumerKind.GROUP, G1)
STRATEGY = m.PollingStrategy


def _req(name: str) -> bytes:
    return bytes.fromhex(ALL[name]["request_hex"])


def _resp(name: str) -> bytes:
    return bytes.fromhex(ALL[name]["response_hex_that_client_accepted"])


def _frame(name: str) -> tuple[Dialect, LegacyFrame | VsrFrame]:
    data = _req(name)
    dialect = detect_dialect(data)
    assert dialect is not None
    frames = reader_for(dialect).feed(data)
    assert len(frames) == 1
    return dialect, frames[0]


def _dialect(name: str) -> Dialect:
    return Dialect.VSR if name.startswith("vsr-") else Dialect.LEGACY


EXPECTED: dict[str, m.Request] = {
    "legacy-ping": m.Ping(),
    "legacy-login": m.LoginUser("iggy", "iggy", "0.10.0", None),
    "legacy-login-invalid-credentials": m.LoginUser("iggy", "wrong", "0.10.0", None),
    "legacy-create-stream": m.CreateStream("s1"),
    "legacy-get-stream": m.GetStream(S1),
    "legacy-get-stream-not-found": m.GetStream(m.Identifier("nope")),
    "legacy-create-topic-options": m.CreateTopic(
        m.Identifier(0), "t2", 1, compression_algorithm=2, message_expiry=3_600_000_000,
        max_topic_size=10_000_000, replication_factor=1),
    "legacy-send-messages-partition": m.SendMessages(S1, T1, P0, (
        m.Message(b"hello", 0, (), 1795317064559776), m.Message(b"world", 0, (), 1795317064559783))),
    "legacy-poll-first-autocommit": m.PollMessages(
        DEFAULT_CONSUMER, S1, T1, 0, STRATEGY(m.PollingKind.FIRST, 0), 10, True),
    "legacy-poll-next-empty": m.PollMessages(
        DEFAULT_CONSUMER, S1, T1, 0, STRATEGY(m.PollingKind.NEXT, 0), 10, False),
    "legacy-poll-timestamp": m.PollMessages(
        DEFAULT_CONSUMER, S1, T1, 0, STRATEGY(m.PollingKind.TIMESTAMP, 1795317064563795), 10, False),
    "legacy-create-consumer-group": m.CreateConsumerGroup(S1, T1, "g1"),
    "legacy-join-consumer-group": m.JoinConsumerGroup(S1, T1, G1),
    "legacy-poll-consumer-group": m.PollMessages(
        GROUP_G1, S1, T1, None, STRATEGY(m.PollingKind.NEXT, 0), 10, False),
    "legacy-store-consumer-offset": m.StoreConsumerOffset(GROUP_G1, S1, T1, 0, 1),
    "vsr-ping-before-login": m.Ping(),
    "vsr-login-register": m.LoginRegister(0x2C00, "rust-sdk", "0.11.0", "iggy", "iggy", None),
    "vsr-login-invalid-credentials-eviction": m.LoginRegister(
        0x2C00, "rust-sdk", "0.11.0", "iggy", "bad", None),
    "vsr-create-stream-duplicate": m.CreateStream("s1"),
    "vsr-create-topic-options": m.CreateTopic(
        S1, "t2", 1, compression_algorithm=m.CompressionAlgorithm.GZIP, message_expiry=3_600_000_000,
        max_topic_size=10_000_000, options=(
            m.UserHeader.of("compression_algorithm", m.HeaderKind.STRING, "gzip"),
            m.UserHeader.of("consumer_offset_durability", m.HeaderKind.STRING, "replicated"),
            m.UserHeader.of("durability", m.HeaderKind.STRING, "replicated"),
            m.UserHeader.of("max_topic_size", m.HeaderKind.UINT64, 10_000_000),
            m.UserHeader.of("message_expiry", m.HeaderKind.UINT64, 3_600_000_000))),
    "vsr-send-messages-headers": m.SendMessages(S1, T1, P0, (
        m.Message(b"hello", 7, (), 1795316918019709),
        m.Message(b"world", 42, (m.UserHeader.of("k", m.HeaderKind.STRING, "v"),), 1795316918019722))),
    "vsr-send-messages-balanced": m.SendMessages(S1, T1, P0, (
        m.Message(b"m3", 9, (), 1795316918020135),)),
    "vsr-poll-offset": m.PollMessages(
        m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier("c1")), S1, T1, 0,
        STRATEGY(m.PollingKind.OFFSET, 1), 10, False),
    "vsr-get-consumer-offset": m.GetConsumerOffset(
        m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier("c1")), S1, T1, 0),
    "vsr-join-consumer-group": m.JoinConsumerGroup(S1, T1, G1),
    "vsr-sync-consumer-group": m.SyncConsumerGroup(S1, T1, G1),
    "vsr-poll-consumer-group": m.PollMessages(
        GROUP_G1, S1, T1, 0, STRATEGY(m.PollingKind.NEXT, 0), 10, True),
    "vsr-store-consumer-offset": m.StoreConsumerOffset(GROUP_G1, S1, T1, 0, 1, m.AckLevel.QUORUM),
    "vsr-get-stats": m.GetStats(),
    "vsr-logout": m.LogoutUser(),
}

VSR_HEADERS: dict[str, tuple[int, int, int, int]] = {  # operation, code, request, session
    "vsr-ping-before-login": (Operation.NON_REPLICATED, Command.PING, 1, 0),
    "vsr-login-register": (Operation.REGISTER, 0, 0, 0),
    "vsr-create-stream-duplicate": (Operation.CREATE_STREAM, 0, 2, 4),
    "vsr-get-stats": (Operation.NON_REPLICATED, Command.GET_STATS, 12, 4),
    "vsr-sync-consumer-group": (Operation.NON_REPLICATED, Command.SYNC_CONSUMER_GROUP, 10, 4),
    "vsr-send-messages-headers": (Operation.SEND_MESSAGES, 0, 5, 4),
    "vsr-store-consumer-offset": (Operation.STORE_CONSUMER_OFFSET, 0, 11, 4),
    "vsr-logout": (Operation.LOGOUT, 0, 12, 4),
}


def test_every_vector_is_covered() -> None:
    assert len(ALL) == 30
    assert set(EXPECTED) == set(ALL)


@pytest.mark.parametrize("name", sorted(ALL))
def test_request_decodes_to_expected_message(name: str) -> None:
    dialect, frame = _frame(name)
    assert dialect is _dialect(name)
    assert codec.decode_frame(dialect, frame) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(VSR_HEADERS))
def test_vsr_request_header_fields(name: str) -> None:
    _, frame = _frame(name)
    assert isinstance(frame, VsrFrame)
    operation, code, request, session = VSR_HEADERS[name]
    h = frame.header
    assert (h.operation, h.code, h.request, h.session) == (operation, code, request, session)
    assert h.size == len(_req(name)) and h.client != 0


@pytest.mark.parametrize("name", sorted(ALL))
def test_request_reencodes_byte_exact(name: str) -> None:
    """The client side of the codec writes what apache-iggy wrote, request_checksum included."""
    dialect, frame = _frame(name)
    request = codec.decode_frame(dialect, frame)
    if isinstance(frame, VsrFrame):
        h = frame.header
        again = codec.encode_request_frame(request, dialect, client=h.client, request=h.request,
                                           session=h.session)
    else:
        again = codec.encode_request_frame(request, dialect)
    assert again == _req(name)


# -- replies ------------------------------------------------------------------------------------


def _vsr_reply_counters(name: str) -> dict[str, int]:
    h = ReplyHeader.decode(_resp(name))
    return {"op": h.op, "commit": h.commit, "timestamp": h.timestamp}


def _vsr_ok(name: str, payload: bytes = b"") -> bytes:
    _, frame = _frame(name)
    assert isinstance(frame, VsrFrame)
    return encode_vsr_ok(frame.header, payload, **_vsr_reply_counters(name))


def _vsr_reencoded(name: str) -> bytes:
    """Decode the accepted reply's payload with the client-side decoder, encode it again."""
    _, frame = _frame(name)
    assert isinstance(frame, VsrFrame)
    header, body = split_vsr_reply(_resp(name))
    result, payload = split_result_section(header.operation, body)
    assert result == 0
    command = Command(frame.command or 0)
    reply = codec.decode_reply(command, payload, Dialect.VSR)
    assert reply is not None
    return _vsr_ok(name, codec.encode_reply(reply, Dialect.VSR))


def _legacy_reencoded(name: str) -> bytes:
    dialect, frame = _frame(name)
    assert isinstance(frame, LegacyFrame)
    status, payload = decode_legacy_reply(_resp(name))
    assert status == 0
    reply = codec.decode_reply(Command(frame.code), payload, dialect)
    assert reply is not None
    return encode_legacy_reply(codec.encode_reply(reply, dialect))


def _login_register_reply(name: str) -> bytes:
    reply = m.LoginRegisterReply(user_id=1, session=4, server_protocol_version=m.pack_version(0, 11, 0),
                                 server_version="0.11.0")
    return _vsr_ok(name, codec.encode_reply(reply, Dialect.VSR))


def _eviction(name: str) -> bytes:
    _, frame = _frame(name)
    assert isinstance(frame, VsrFrame)
    return encode_eviction(frame.header.client, EvictionReason.INVALID_CREDENTIALS)


def _duplicate(name: str) -> bytes:
    _, frame = _frame(name)
    assert isinstance(frame, VsrFrame)
    return encode_vsr_error(frame.header, Status.STREAM_NAME_ALREADY_EXISTS, committed=True,
                            **_vsr_reply_counters(name))


def _confirm(name: str, base_offset: int) -> bytes:
    reply = m.SendConfirmations((m.SendConfirmation(0, 0, 0, base_offset),))
    return _vsr_ok(name, codec.encode_reply(reply, Dialect.VSR))


REPLIES: dict[str, Callable[[str], bytes]] = {
    "legacy-ping": lambda n: encode_legacy_reply(),
    "legacy-login": lambda n: encode_legacy_reply(codec.encode_reply(m.LoginReply(0), Dialect.LEGACY)),
    "legacy-login-invalid-credentials": lambda n: encode_legacy_error(Status.INVALID_CREDENTIALS),
    "legacy-create-stream": _legacy_reencoded,
    "legacy-get-stream": _legacy_reencoded,
    "legacy-get-stream-not-found": lambda n: encode_legacy_reply(),
    "legacy-create-topic-options": _legacy_reencoded,
    "legacy-send-messages-partition": lambda n: encode_legacy_reply(),
    "legacy-poll-first-autocommit": _legacy_reencoded,
    "legacy-poll-next-empty": lambda n: encode_legacy_reply(
        codec.encode_reply(m.PolledMessages(0, 2, ()), Dialect.LEGACY)),
    "legacy-poll-timestamp": _legacy_reencoded,
    "legacy-create-consumer-group": lambda n: encode_legacy_reply(codec.encode_reply(
        m.ConsumerGroupDetails(m.ConsumerGroupInfo(0, 2, 0, "g1")), Dialect.LEGACY)),
    "legacy-join-consumer-group": lambda n: encode_legacy_reply(),
    "legacy-poll-consumer-group": _legacy_reencoded,
    "legacy-store-consumer-offset": lambda n: encode_legacy_reply(),
    "vsr-ping-before-login": _vsr_ok,
    "vsr-login-register": _login_register_reply,
    "vsr-login-invalid-credentials-eviction": _eviction,
    "vsr-create-stream-duplicate": _duplicate,
    "vsr-create-topic-options": _vsr_reencoded,
    "vsr-send-messages-headers": lambda n: _confirm(n, 0),
    "vsr-send-messages-balanced": lambda n: _confirm(n, 2),
    "vsr-poll-offset": _vsr_reencoded,
    "vsr-get-consumer-offset": lambda n: _vsr_ok(n, codec.encode_reply(m.ConsumerOffsetInfo(0, 3, 3),
                                                                       Dialect.VSR)),
    "vsr-join-consumer-group": _vsr_ok,
    "vsr-sync-consumer-group": lambda n: _vsr_ok(n, codec.encode_reply(
        m.ConsumerGroupAssignment(1, (0, 1)), Dialect.VSR)),
    "vsr-poll-consumer-group": _vsr_reencoded,
    "vsr-store-consumer-offset": _vsr_ok,
    "vsr-get-stats": _vsr_reencoded,
    "vsr-logout": _vsr_ok,
}


def test_every_reply_is_covered() -> None:
    assert set(REPLIES) == set(ALL)


@pytest.mark.parametrize("name", sorted(ALL))
def test_reply_reproduced_byte_exact(name: str) -> None:
    assert REPLIES[name](name) == _resp(name)


def _decoded_reply(name: str) -> Any:
    dialect, frame = _frame(name)
    if isinstance(frame, VsrFrame):
        header, body = split_vsr_reply(_resp(name))
        _, payload = split_result_section(header.operation, body)
        return codec.decode_reply(Command(frame.command or 0), payload, dialect)
    _, payload = decode_legacy_reply(_resp(name))
    return codec.decode_reply(Command(frame.code), payload, dialect)


def test_reply_contents_match_the_notes() -> None:
    """The fields the vector notes spell out, read back through the client-side decoders."""
    created = _decoded_reply("legacy-create-stream")
    assert created.stream == m.StreamInfo(0, created.stream.created_at, 0, 0, 0, "s1")
    got = _decoded_reply("legacy-get-stream")
    assert (got.stream.name, got.stream.topics_count, got.stream.messages_count) == ("s1", 2, 4)
    assert [(t.id, t.name, t.partitions_count) for t in got.topics] == [(0, "t1", 2), (1, "t2", 1)]
    assert got.topics[1].compression_algorithm == m.CompressionAlgorithm.GZIP
    assert got.topics[1].replication_factor == 1
    topic = _decoded_reply("legacy-create-topic-options")
    assert (topic.topic.id, topic.topic.message_expiry, topic.topic.max_topic_size) == (
        1, 3_600_000_000, 10_000_000)
    assert [p.id for p in topic.partitions] == [0]
    polled = _decoded_reply("legacy-poll-first-autocommit")
    assert (polled.partition_id, polled.current_offset) == (0, 2)
    assert [(x.offset, x.payload) for x in polled.messages] == [(0, b"hello"), (1, b"world"), (2, b"late")]
    assert polled.messages[0].origin_timestamp == 1795317064559776
    late = _decoded_reply("legacy-poll-timestamp")
    assert [(x.offset, x.payload) for x in late.messages] == [(2, b"late")]
    v_poll = _decoded_reply("vsr-poll-offset")
    assert [(x.offset, x.payload) for x in v_poll.messages] == [(1, b"world"), (2, b"m3"), (3, b"late")]
    assert v_poll.messages[0].headers == (m.UserHeader.of("k", m.HeaderKind.STRING, "v"),)
    assert v_poll.messages[0].origin_timestamp == 1795316918019722
    assert {x.timestamp for x in v_poll.messages} == {1795316918019873}
    group_poll = _decoded_reply("vsr-poll-consumer-group")
    assert [x.offset for x in group_poll.messages] == [0, 1, 2, 3]
    v_topic = _decoded_reply("vsr-create-topic-options")
    assert (v_topic.topic.name, v_topic.topic.compression_algorithm, v_topic.topic.options) == ("t2", 1, ())
    stats = _decoded_reply("vsr-get-stats")
    assert (stats.process_id, stats.hostname, stats.os_name, stats.iggy_server_semver) == (
        1234, "fakehost", "Linux", 11264)
    assert _decoded_reply("vsr-login-register") == m.LoginRegisterReply(1, 4, 0x2C00, "0.11.0")
    assert _decoded_reply("legacy-get-stream-not-found") is None


# -- readers: prefixes, byte by byte, trailing data ---------------------------------------------


def _new_reader(dialect: Dialect) -> LegacyFrameReader | VsrFrameReader:
    return VsrFrameReader() if dialect is Dialect.VSR else LegacyFrameReader()


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_truncated_prefix_needs_more(name: str) -> None:
    data = _req(name)
    dialect = _dialect(name)
    for k in range(len(data)):
        prefix = data[:k]
        detected = detect_dialect(prefix)
        assert detected in (None, dialect)
        assert _new_reader(dialect).feed(prefix) == []


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_truncated_payload_is_a_message_or_the_protocol_error(name: str) -> None:
    """A complete frame whose payload was cut short: never a crash, never another exception."""
    dialect, frame = _frame(name)
    whole = codec.decode_frame(dialect, frame)
    for k in range(len(frame.body if isinstance(frame, VsrFrame) else frame.payload)):
        cut: LegacyFrame | VsrFrame
        if isinstance(frame, VsrFrame):
            cut = VsrFrame(frame.header, frame.body[:k])
        else:
            cut = LegacyFrame(frame.code, frame.payload[:k])
        try:
            got = codec.decode_frame(dialect, cut)
        except IggyError:
            continue
        assert got != whole


@pytest.mark.parametrize("name", sorted(ALL))
def test_byte_by_byte_equals_whole_and_trailing_data_is_kept(name: str) -> None:
    data = _req(name)
    dialect = _dialect(name)
    whole = _new_reader(dialect).feed(data)
    reader = _new_reader(dialect)
    pieces: list[Any] = []
    for i in range(len(data)):
        pieces += reader.feed(data[i : i + 1])
    assert pieces == whole
    reader = _new_reader(dialect)
    assert reader.feed(data + data + data[:7]) == whole + whole
    assert reader.buffered == 7
    assert reader.feed(data[7:]) == whole
