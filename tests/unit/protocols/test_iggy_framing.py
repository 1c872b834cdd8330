"""Iggy framing: dialect detection (iggy.md D.2/D.3), the legacy and VSR frame readers, and the
reply encoders of each dialect."""

from __future__ import annotations

import struct

import pytest
import xxhash

from bayou.protocols.iggy.codes import Command, EvictionReason, Operation, Status
from bayou.protocols.iggy.framing import (
    HEADER_SIZE,
    Dialect,
    IggyError,
    LegacyFrame,
    LegacyFrameReader,
    ReplyHeader,
    RequestHeader,
    VsrFrame,
    VsrFrameReader,
    decode_legacy_reply,
    detect_dialect,
    encode_eviction,
    encode_legacy_error,
    encode_legacy_reply,
    encode_legacy_request,
    encode_seed_error,
    encode_seed_reply,
    encode_vsr_error,
    encode_vsr_ok,
    encode_vsr_reply,
    reader_for,
    request_checksum,
    resolve_legacy_dialect,
    split_result_section,
    split_vsr_reply,
)

PING = bytes.fromhex("0400000001000000")
CLIENT = 0xF6C820D2208E4C99B19EAA22DE1B9F50


def vsr_frame(operation: int, body: bytes = b"", *, code: int = 0, request: int = 1, session: int = 4,
              client: int = CLIENT) -> bytes:
    header = RequestHeader(client=client, operation=operation, request=request, session=session, code=code,
                           request_checksum=request_checksum(operation, body))
    return header.encode(len(body)) + body


# -- detection ----------------------------------------------------------------------------------


def test_legacy_ping_is_detected_from_eight_bytes() -> None:
    assert detect_dialect(PING[:3]) is None
    assert detect_dialect(PING[:4]) is None
    assert detect_dialect(PING[:7]) is None
    assert detect_dialect(PING) is Dialect.LEGACY
    login = bytes.fromhex("1c00000026000000")
    assert detect_dialect(login) is Dialect.LEGACY


def test_zero_first_word_is_vsr_after_four_bytes() -> None:
    assert detect_dialect(b"\x00\x00\x00") is None
    assert detect_dialect(b"\x00\x00\x00\x00") is Dialect.VSR


def test_sealed_vsr_header_is_recognised_by_step_three() -> None:
    frame = bytearray(vsr_frame(Operation.NON_REPLICATED, code=Command.PING))
    frame[0:16] = b"\xff" * 16  # a future client that seals its checksum
    assert detect_dialect(bytes(frame[:8])) is None
    assert detect_dialect(bytes(frame[:60])) is None
    assert detect_dialect(bytes(frame[:61])) is Dialect.VSR


def test_bytes_that_fit_no_framing_close_the_connection() -> None:
    junk = b"\xff" * 64
    assert detect_dialect(junk[:60]) is None
    with pytest.raises(IggyError) as err:
        detect_dialect(junk)
    assert err.value.close
    too_long = struct.pack("<II", 200 * 1024 * 1024, 1) + bytes(56)
    with pytest.raises(IggyError):
        detect_dialect(too_long)


@pytest.mark.parametrize(("code", "authenticated", "expected"), [
    (Command.PING, False, None),
    (Command.GET_STATS, False, None),
    (Command.LOGIN_USER, False, Dialect.LEGACY),
    (Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN, False, Dialect.LEGACY),
    (Command.GET_STREAM, False, Dialect.SEED),
    (Command.POLL_MESSAGES, False, Dialect.SEED),
    (Command.GET_STREAM, True, Dialect.LEGACY),
    (Command.PING, True, Dialect.LEGACY),
])
def test_seed_or_legacy_follows_what_is_sent_before_login(code: int, authenticated: bool,
                                                          expected: Dialect | None) -> None:
    assert resolve_legacy_dialect(code, authenticated=authenticated) is expected


def test_reader_for_each_dialect() -> None:
    assert isinstance(reader_for(Dialect.SEED), LegacyFrameReader)
    assert isinstance(reader_for(Dialect.LEGACY), LegacyFrameReader)
    assert isinstance(reader_for(Dialect.VSR), VsrFrameReader)


# -- legacy reader ------------------------------------------------------------------------------


def test_legacy_reader_splits_frames_and_keeps_partial_ones() -> None:
    frame = encode_legacy_request(Command.GET_STREAM, b"\x02\x02s1")
    reader = LegacyFrameReader()
    assert reader.feed(frame[:5]) == []
    assert reader.feed(frame[5:] + PING + PING[:2]) == [
        LegacyFrame(Command.GET_STREAM, b"\x02\x02s1"), LegacyFrame(Command.PING, b"")]
    assert reader.buffered == 2
    assert reader.feed(PING[2:]) == [LegacyFrame(Command.PING, b"")]
    assert reader.buffered == 0


@pytest.mark.parametrize("length", [0, 1, 2, 3])
def test_legacy_length_below_four_is_invalid_command(length: int) -> None:
    reader = LegacyFrameReader()
    with pytest.raises(IggyError) as err:
        reader.feed(struct.pack("<I", length))
    assert err.value.status == Status.INVALID_COMMAND and err.value.close


def test_legacy_oversized_payload_is_refused_before_buffering() -> None:
    reader = LegacyFrameReader(max_payload=16, max_send_payload=64)
    big = struct.pack("<II", 4 + 17, Command.GET_STREAM)
    assert reader.feed(PING + big) == [LegacyFrame(Command.PING, b"")]  # earlier frames first
    with pytest.raises(IggyError) as err:
        reader.feed(b"")
    assert err.value.status == Status.INVALID_COMMAND and err.value.close
    with pytest.raises(IggyError):
        reader.feed(PING)  # the stream stays failed


def test_legacy_send_messages_has_its_own_cap() -> None:
    reader = LegacyFrameReader(max_payload=16, max_send_payload=64)
    send = encode_legacy_request(Command.SEND_MESSAGES, bytes(40))
    assert reader.feed(send) == [LegacyFrame(Command.SEND_MESSAGES, bytes(40))]
    with pytest.raises(IggyError):
        LegacyFrameReader(max_payload=16, max_send_payload=64).feed(
            struct.pack("<II", 4 + 65, Command.SEND_MESSAGES))


# -- VSR reader ---------------------------------------------------------------------------------


def test_vsr_reader_reads_header_then_body() -> None:
    frame = vsr_frame(Operation.CREATE_STREAM, b"\x02s1", request=2)
    reader = VsrFrameReader()
    assert reader.feed(frame[:HEADER_SIZE]) == []
    (got,) = reader.feed(frame[HEADER_SIZE:])
    assert got.body == b"\x02s1"
    assert got.header == RequestHeader(client=CLIENT, operation=Operation.CREATE_STREAM, request=2,
                                       session=4, request_checksum=xxhash.xxh3_64_intdigest(b"\x02s1"),
                                       size=HEADER_SIZE + 3)
    assert got.command == Command.CREATE_STREAM


@pytest.mark.parametrize(("offset", "value", "what"), [
    (48, struct.pack("<I", 255), "size below 256"),
    (48, struct.pack("<I", 10_000), "size above the cap"),
    (60, b"\x08", "a Reply header sent by a client"),
])
def test_vsr_reader_rejects_bad_headers(offset: int, value: bytes, what: str) -> None:
    frame = bytearray(vsr_frame(Operation.NON_REPLICATED, code=Command.PING))
    frame[offset : offset + len(value)] = value
    reader = VsrFrameReader(max_frame=4096)
    good = vsr_frame(Operation.NON_REPLICATED, code=Command.PING)
    assert len(reader.feed(good + bytes(frame))) == 1
    with pytest.raises(IggyError) as err:
        reader.feed(b"")
    assert err.value.close, what


def test_request_header_round_trip() -> None:
    h = RequestHeader(client=(1 << 127) + 5, operation=Operation.NON_REPLICATED, request=9, session=77,
                      code=Command.POLL_MESSAGES, request_checksum=(1 << 100) + 3, timestamp=11, user_id=3)
    raw = h.encode(10)
    assert len(raw) == HEADER_SIZE and raw[60] == 5
    assert RequestHeader.decode(raw) == RequestHeader(
        client=h.client, operation=h.operation, request=9, session=77, code=h.code,
        request_checksum=h.request_checksum, timestamp=11, user_id=3, size=HEADER_SIZE + 10)


def test_frame_command_resolution() -> None:
    def command(operation: int, code: int = 0) -> int | None:
        return VsrFrame(RequestHeader(client=1, operation=operation, code=code), b"").command
    assert command(Operation.NON_REPLICATED, 606) == Command.SYNC_CONSUMER_GROUP
    assert command(Operation.REGISTER) == Command.LOGIN_REGISTER
    assert command(Operation.REGISTER, Command.LOGIN_REGISTER_WITH_PAT) == Command.LOGIN_REGISTER_WITH_PAT
    assert command(Operation.LOGOUT) == Command.LOGOUT_USER
    assert command(Operation.STORE_CONSUMER_OFFSET) == Command.STORE_CONSUMER_OFFSET
    assert command(99) is None
    assert command(Operation.RESERVED) is None


def test_request_checksum_covers_register_logout_and_metadata_only() -> None:
    assert request_checksum(Operation.LOGOUT, b"") == 0x2D06800538D394C2  # vsr-logout
    assert request_checksum(Operation.CREATE_STREAM, b"x") == xxhash.xxh3_64_intdigest(b"x")
    assert request_checksum(Operation.REGISTER, b"x") == xxhash.xxh3_64_intdigest(b"x")
    assert request_checksum(Operation.NON_REPLICATED, b"x") == 0
    assert request_checksum(Operation.SEND_MESSAGES, b"x") == 0


# -- reply encoders -----------------------------------------------------------------------------


def test_legacy_replies() -> None:
    assert encode_legacy_reply() == bytes(8)
    assert encode_legacy_reply(b"ab") == struct.pack("<II", 0, 2) + b"ab"
    assert encode_legacy_error(Status.UNAUTHENTICATED) == struct.pack("<II", 40, 0)
    assert decode_legacy_reply(encode_legacy_reply(b"abc")) == (0, b"abc")
    with pytest.raises(ValueError):
        encode_legacy_reply(b"x")  # a 1-byte payload is read as empty by the client
    with pytest.raises(ValueError):
        encode_legacy_error(0)
    with pytest.raises(IggyError):
        decode_legacy_reply(b"\x00" * 7)


def test_seed_replies_use_the_legacy_header() -> None:
    assert encode_seed_reply(b"abcd") == encode_legacy_reply(b"abcd")
    assert encode_seed_error(Status.INVALID_COMMAND) == encode_legacy_error(3)


def _request(operation: int) -> RequestHeader:
    return RequestHeader(client=CLIENT, operation=operation, request=3, session=4, request_checksum=99)


def test_vsr_reply_echoes_the_request() -> None:
    frame = encode_vsr_ok(_request(Operation.NON_REPLICATED), b"body", op=7, commit=8, timestamp=9)
    header, body = split_vsr_reply(frame)
    assert body == b"body"
    assert header == ReplyHeader(client=CLIENT, request=3, operation=Operation.NON_REPLICATED, status=0,
                                 request_checksum=99, op=7, commit=8, timestamp=9, size=HEADER_SIZE + 4)
    assert frame[:48] == bytes(48)  # checksum, checksum_body and cluster are not sealed
    assert frame[60] == 8


def test_result_section_only_for_result_framed_operations() -> None:
    _, body = split_vsr_reply(encode_vsr_ok(_request(Operation.CREATE_STREAM), b"rec"))
    assert body == b"\x00\x00\x00\x00rec"
    assert split_result_section(Operation.CREATE_STREAM, body) == (0, b"rec")
    for op in (Operation.STORE_CONSUMER_OFFSET, Operation.DELETE_CONSUMER_OFFSET, Operation.REGISTER,
               Operation.JOIN_CONSUMER_GROUP):
        assert split_vsr_reply(encode_vsr_ok(_request(op)))[1] == bytes(4)
    for op in (Operation.NON_REPLICATED, Operation.SEND_MESSAGES, Operation.LOGOUT):
        assert split_vsr_reply(encode_vsr_ok(_request(op)))[1] == b""


def test_vsr_errors_committed_or_in_the_header() -> None:
    committed = encode_vsr_error(_request(Operation.CREATE_STREAM), 1012, committed=True)
    header, body = split_vsr_reply(committed)
    assert header.status == 0 and body == bytes.fromhex("0100000000000000f4030000")
    assert split_result_section(header.operation, body) == (1012, b"")
    pre_commit = encode_vsr_error(_request(Operation.CREATE_STREAM), Status.UNAUTHORIZED)
    header, body = split_vsr_reply(pre_commit)
    assert (header.status, body) == (41, b"")
    # a non result-framed operation always reports in the header
    header, body = split_vsr_reply(encode_vsr_error(_request(Operation.NON_REPLICATED), 5, committed=True))
    assert (header.status, body) == (5, b"")
    with pytest.raises(ValueError):
        encode_vsr_error(_request(Operation.CREATE_STREAM), 0)


def test_split_result_section_rejects_short_sections() -> None:
    with pytest.raises(IggyError):
        split_result_section(Operation.CREATE_STREAM, b"\x00\x00")
    with pytest.raises(IggyError):
        split_result_section(Operation.CREATE_STREAM, struct.pack("<II", 2, 0))
    assert split_result_section(Operation.REGISTER, b"") == (0, b"")  # terminal login failure
    assert split_result_section(Operation.NON_REPLICATED, b"xy") == (0, b"xy")


def test_eviction_header() -> None:
    frame = encode_eviction(CLIENT, EvictionReason.INCOMPATIBLE_PROTOCOL, server_version=0x2C00,
                            server_version_min=0x2800)
    assert len(frame) == HEADER_SIZE and frame[60] == 13 and frame[255] == 14
    assert struct.unpack_from("<II", frame, 144) == (0x2C00, 0x2800)
    assert int.from_bytes(frame[128:144], "little") == CLIENT
    with pytest.raises(IggyError):
        split_vsr_reply(frame)


def test_split_vsr_reply_checks_size_and_command() -> None:
    frame = encode_vsr_reply(ReplyHeader(client=1, request=1, operation=2), b"ab")
    with pytest.raises(IggyError):
        split_vsr_reply(frame[:-1])
    bad = bytearray(frame)
    bad[60] = 5
    with pytest.raises(IggyError):
        split_vsr_reply(bytes(bad))
    with pytest.raises(IggyError):
        split_vsr_reply(frame[:100])
