"""Bad input on the Iggy listener, in the legacy framing (L, apache-iggy 0.8) and the VSR framing
(V, apache-iggy 0.9): iggy.md B.1, B.3, B.5, B.6, C.2, C.4, C.6, C.7, C.9, D.2.

One in-process broker serves the whole module. Before the first test it stores a known set of
messages in stream ``bad`` (topic ``t``: three L messages in partition 0, one V batch of two in
partition 1). Each test sends one kind of bad input and checks the exact status (B.6 codes: the L
reply status, the V header status or result entry) or the close / eviction where that is what
happens; then that the same connection still answers PING where the protocol keeps it open; and,
after every test, a fixture checks on new connections that the stored messages poll back with the
same bytes (L and V), that GET_STREAM ``bad`` is unchanged and that the topic list is unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import L_HEADER_SIZE, V_BATCH_SIZE, V_FRAME_SIZE
from bayou.protocols.iggy.codes import OPERATION_OF, Command, EvictionReason, Operation, Status
from bayou.protocols.iggy.framing import (
    HEADER_SIZE,
    MAX_LEGACY_PAYLOAD,
    MAX_SEND_PAYLOAD,
    MAX_VSR_FRAME,
    Dialect,
    RequestHeader,
    encode_legacy_request,
    encode_vsr_request,
)
from bayou.server.app import BayouServer
from support.iggy import (
    PROTOCOL,
    LegacyConn,
    VsrConn,
    iggy_port,
    legacy_login,
    start_iggy,
    vsr_login,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

STREAM, TOPIC = "bad", "t"
S, T = m.Identifier(STREAM), m.Identifier(TOPIC)
C0 = m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier("checker"))
HDR = m.UserHeader.of("h", m.HeaderKind.STRING, "x")
L_SEED = (m.Message(b"l0", 11, (HDR,), 1_700_000_000_000_001), m.Message(b"l1", 12),
          m.Message(b"l2" * 40, 0, (), 1_700_000_000_000_003))
V_SEED = (m.Message(b"v0", 21, (), 1_700_000_000_000_010),
          m.Message(b"v1", 22, (HDR,), 1_700_000_000_000_020))
GOOD = (m.Message(b"good", 0, (), 1_700_000_000_000_100), m.Message(b"also", 0, (), 1_700_000_000_000_101))


@dataclass
class Env:
    server: BayouServer
    port: int
    admin: LegacyConn
    baseline: tuple[bytes, ...]

    async def legacy(self, *, login: bool = True) -> LegacyConn:
        return await legacy_login(self.port) if login else await LegacyConn.open(self.port)

    async def vsr(self, *, login: bool = True) -> VsrConn:
        return await vsr_login(self.port) if login else await VsrConn.open(self.port)


async def snapshot(port: int, server: BayouServer) -> tuple[bytes, ...]:
    """What must never change: both partitions polled from offset 0 in L and V (reply bodies),
    GET_STREAM ``bad`` and the broker's topic list."""
    lc = await legacy_login(port)
    vc = await vsr_login(port)
    try:
        out: list[bytes] = []
        for p in (0, 1):
            poll = m.PollMessages(C0, S, T, p, m.PollingStrategy(m.PollingKind.OFFSET, 0), 100, False)
            lr = await lc.ask(poll)
            vr = await vc.ask(poll)
            assert lr.status == 0 and vr.status == 0
            out += [lr.payload, vr.body]
        got = await lc.ask(m.GetStream(S))
        assert got.status == 0 and got.payload
        out += [got.payload, "\n".join(sorted(server.broker.list_topics())).encode()]
        return tuple(out)
    finally:
        await lc.close()
        await vc.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    server = await start_iggy(tmp_path_factory.mktemp("iggy-bad") / "data")
    port = iggy_port(server)
    admin = await legacy_login(port)
    await admin.call(m.CreateStream(STREAM))
    await admin.call(m.CreateTopic(S, TOPIC, 2))
    await admin.call(m.SendMessages(S, T, m.Partitioning.partition(0), L_SEED))
    v = await vsr_login(port)
    await v.call(m.SendMessages(S, T, m.Partitioning.partition(1), V_SEED))
    await v.close()
    baseline = await snapshot(port, server)
    polled = codec.decode_reply(Command.POLL_MESSAGES, baseline[0], Dialect.LEGACY)
    assert [x.payload for x in polled.messages] == [x.payload for x in L_SEED]
    polled = codec.decode_reply(Command.POLL_MESSAGES, baseline[3], Dialect.VSR)
    assert [x.payload for x in polled.messages] == [x.payload for x in V_SEED]
    try:
        yield Env(server, port, admin, baseline)
    finally:
        await admin.close()
        await server.stop()


@pytest_asyncio.fixture(autouse=True, loop_scope="module")
async def nothing_stored_changes(env: Env) -> AsyncIterator[None]:
    yield
    assert await snapshot(env.port, env.server) == env.baseline


# -- helpers ------------------------------------------------------------------------------------


async def legacy_code(conn: LegacyConn, code: int, payload: bytes = b"") -> int:
    reply = await conn.ask_code(code, payload)
    assert reply.status == 0 or reply.payload == b"", "an error reply carries no payload (B.1)"
    return reply.status


def vsr_frame(conn: VsrConn, code: int, body: bytes) -> bytes:
    """``body`` under ``code`` as the 0.9 client frames it (operation from C.5)."""
    try:
        operation = OPERATION_OF.get(Command(code), Operation.NON_REPLICATED)
    except ValueError:
        operation = Operation.NON_REPLICATED
    return conn.raw_frame(operation, body, code=code if operation == Operation.NON_REPLICATED else 0)


async def vsr_code(conn: VsrConn, code: int, body: bytes = b"") -> int:
    reply = await conn.ask_raw(vsr_frame(conn, code, body))
    assert reply.eviction is None, f"evicted, reason {reply.eviction}"
    result, _payload = reply.result()
    if reply.status:
        assert reply.body == b"", "a header status comes with an empty body (C.6 rule 1)"
    return result


async def code_in(framing: str, conn: LegacyConn | VsrConn, code: int, payload: bytes) -> int:
    if isinstance(conn, LegacyConn):
        return await legacy_code(conn, code, payload)
    return await vsr_code(conn, code, payload)


async def connect(env: Env, framing: str, *, login: bool = True) -> LegacyConn | VsrConn:
    return await (env.legacy(login=login) if framing == "L" else env.vsr(login=login))


async def assert_evicted(conn: VsrConn, frame: bytes, reason: EvictionReason) -> None:
    reply = await conn.ask_raw(frame)
    assert reply.eviction == reason, reply
    assert reply.raw[128:144] == conn.client.to_bytes(16, "little")
    window = reply.raw[144:152]
    assert (window != bytes(8)) == (reason == EvictionReason.INCOMPATIBLE_PROTOCOL)
    assert await conn.is_closed()


def payload_of(req: m.Request, framing: str) -> bytes:
    return codec.encode_request(req, Dialect.LEGACY if framing == "L" else Dialect.VSR)


BOTH = pytest.mark.parametrize("framing", ["L", "V"])


# -- command codes ------------------------------------------------------------------------------


@BOTH
async def test_unknown_command_code_is_invalid_command(env: Env, framing: str) -> None:
    conn = await connect(env, framing)
    for code in (2, 999, 9999, 65535):
        assert await code_in(framing, conn, code, b"") == Status.INVALID_COMMAND
    await conn.ping()
    await conn.close()


async def test_legacy_vsr_only_codes_are_invalid_command(env: Env) -> None:
    conn = await env.legacy()
    for code in (Command.LOGIN_REGISTER, Command.SYNC_CONSUMER_GROUP):
        assert await legacy_code(conn, code, b"\x00" * 12) == Status.INVALID_COMMAND
    await conn.ping()


async def test_vsr_replicated_command_as_non_replicated_is_invalid_command(env: Env) -> None:
    conn = await env.vsr()
    frame = conn.raw_frame(Operation.NON_REPLICATED, b"\x02zz", code=Command.CREATE_STREAM)
    assert (await conn.ask_raw(frame)).status == Status.INVALID_COMMAND
    frame = conn.raw_frame(Operation.NON_REPLICATED, b"", code=Command.LOGIN_USER)
    assert (await conn.ask_raw(frame)).status == Status.INVALID_COMMAND
    await conn.ping()


@pytest.mark.parametrize("operation", [0, 4, 127, 150, 163, 255])
async def test_vsr_unknown_operation_is_evicted(env: Env, operation: int) -> None:
    conn = await env.vsr()
    await assert_evicted(conn, conn.raw_frame(operation, b""), EvictionReason.INVALID_REQUEST_OPERATION)


# -- truncated and over-long payloads -----------------------------------------------------------

TRUNCATABLE: list[m.Request] = [
    m.CreateStream("newstream"),
    m.GetStream(S),
    m.CreateTopic(S, "newtopic", 3, 1, 0, 0, 0),
    m.PollMessages(C0, S, T, 0, m.PollingStrategy(m.PollingKind.FIRST), 10, False),
    m.StoreConsumerOffset(C0, S, T, 0, 0),
    m.GetConsumerOffset(C0, S, T, 0),
    m.CreateConsumerGroup(S, T, "newgroup"),
    m.JoinConsumerGroup(S, T, m.Identifier("nogroup")),
    m.DeleteTopic(S, m.Identifier("nothere")),
    m.CreatePartitions(S, T, 1),
]


@BOTH
@pytest.mark.parametrize("req", TRUNCATABLE, ids=lambda r: type(r).__name__)
async def test_truncated_payload_is_invalid_command(env: Env, framing: str, req: m.Request) -> None:
    conn = await connect(env, framing)
    whole = payload_of(req, framing)
    for cut in sorted({0, 1, len(whole) // 2, len(whole) - 1}):
        assert await code_in(framing, conn, req.command, whole[:cut]) == Status.INVALID_COMMAND, cut
    await conn.ping()
    await conn.close()


@BOTH
async def test_trailing_bytes_are_invalid_command(env: Env, framing: str) -> None:
    conn = await connect(env, framing)
    for req in (m.GetStream(S), m.PollMessages(C0, S, T, 0, m.PollingStrategy(m.PollingKind.FIRST), 1, False),
                m.Ping()):
        assert await code_in(framing, conn, req.command, payload_of(req, framing) + b"\x00") == (
            Status.INVALID_COMMAND)
    await conn.ping()


@BOTH
async def test_truncated_send_is_invalid_command(env: Env, framing: str) -> None:
    conn = await connect(env, framing)
    whole = payload_of(m.SendMessages(S, T, m.Partitioning.partition(0), GOOD), framing)
    (meta,) = struct.unpack_from("<I", whole)
    for cut in (0, 3, 4 + meta - 1, 4 + meta + 8):
        assert await code_in(framing, conn, Command.SEND_MESSAGES, whole[:cut]) == Status.INVALID_COMMAND, cut
    # a metadata length that runs past the payload
    assert await code_in(framing, conn, Command.SEND_MESSAGES,
                         struct.pack("<I", len(whole)) + whole[4:]) == Status.INVALID_COMMAND
    await conn.ping()


async def test_vsr_truncated_login_is_malformed_login(env: Env) -> None:
    for cut in (0, 3, 10, 20):
        conn = await env.vsr(login=False)
        login = m.LoginRegister(PROTOCOL, "rust-sdk", "0.11.0", "iggy", "iggy")
        body = codec.encode_request(login, Dialect.VSR)
        frame = codec.encode_request_frame(login, Dialect.VSR, client=conn.client)
        assert len(frame) == HEADER_SIZE + len(body)
        header = RequestHeader.decode(frame)
        await assert_evicted(conn, encode_vsr_request(header, body[:cut]), EvictionReason.MALFORMED_LOGIN)


# -- frame lengths ------------------------------------------------------------------------------


async def test_legacy_length_below_4_answers_3_and_closes(env: Env) -> None:
    for length in (0, 1, 3):
        conn = await env.legacy()
        await conn.send_raw(struct.pack("<II", length, Command.PING))
        reply = await conn.recv()
        assert (reply.status, reply.payload) == (Status.INVALID_COMMAND, b"")
        assert await conn.is_closed()


async def test_first_frame_with_length_below_4_is_closed(env: Env) -> None:
    """D.2 step 3: non-zero first bytes that are no legacy header and no VSR header: close."""
    for length in (1, 3):
        conn = await env.legacy(login=False)
        await conn.send_raw(struct.pack("<II", length, Command.PING) + bytes(56))
        assert await conn.is_closed()


async def test_legacy_oversized_non_send_answers_3_and_closes(env: Env) -> None:
    conn = await env.legacy()
    await conn.send_raw(struct.pack("<II", 4 + MAX_LEGACY_PAYLOAD + 1, Command.CREATE_STREAM) + b"\x02ab")
    reply = await conn.recv()
    assert (reply.status, reply.payload) == (Status.INVALID_COMMAND, b"")
    assert await conn.is_closed()


async def test_legacy_send_is_not_held_to_the_10_mib_cap(env: Env) -> None:
    """B.1: SEND_MESSAGES may exceed 10 MiB; bayou caps it at 128 MiB (3 and close beyond)."""
    conn = await env.legacy()
    await conn.send_raw(struct.pack("<II", 4 + MAX_SEND_PAYLOAD + 1, Command.SEND_MESSAGES))
    reply = await conn.recv()
    assert (reply.status, reply.payload) == (Status.INVALID_COMMAND, b"")
    assert await conn.is_closed()
    conn = await env.legacy()
    big = b"x" * (MAX_LEGACY_PAYLOAD + 1024)
    reply = await conn.ask(m.SendMessages(S, m.Identifier("nosuchtopic"), m.Partitioning.partition(0),
                                          (m.Message(big),)))
    assert reply.status == Status.TOPIC_NAME_NOT_FOUND  # read whole, then refused on its merits
    await conn.ping()


@pytest.mark.parametrize("size", [0, 255, MAX_VSR_FRAME + 1, 0xFFFF_FFFF])
async def test_vsr_size_outside_limits_closes(env: Env, size: int) -> None:
    conn = await env.vsr()
    frame = bytearray(conn.frame(m.Ping()))
    struct.pack_into("<I", frame, 48, size)
    await conn.send_raw(bytes(frame))
    assert await conn.is_closed()


async def test_vsr_header_command_other_than_request_closes(env: Env) -> None:
    conn = await env.vsr()
    frame = bytearray(conn.frame(m.Ping()))
    frame[60] = 8
    await conn.send_raw(bytes(frame))
    assert await conn.is_closed()


# -- identifiers and names ----------------------------------------------------------------------

BAD_IDENTIFIERS = {
    "kind 3": b"\x03\x02ab",
    "kind 0": b"\x00\x04\x00\x00\x00\x00",
    "string of length 0": b"\x02\x00",
    "numeric of length 2": b"\x01\x02\x00\x00",
    "numeric of length 8": b"\x01\x08" + bytes(8),
    "invalid UTF-8": b"\x02\x02\xff\xfe",
}


@BOTH
@pytest.mark.parametrize("bad", sorted(BAD_IDENTIFIERS))
async def test_bad_identifier_is_invalid_identifier(env: Env, framing: str, bad: str) -> None:
    conn = await connect(env, framing)
    raw = BAD_IDENTIFIERS[bad]
    topic = codec.encode_request(m.GetTopic(S, T), Dialect.LEGACY)[len(STREAM) + 2:]
    for code, payload in ((Command.GET_STREAM, raw), (Command.GET_TOPIC, raw + topic),
                          (Command.DELETE_STREAM, raw)):
        assert await code_in(framing, conn, code, payload) == Status.INVALID_IDENTIFIER, code
    await conn.ping()


@BOTH
async def test_identifier_of_255_bytes_is_fine(env: Env, framing: str) -> None:
    """Names cannot exceed 255 bytes on the wire (u8 length); the longest one is accepted."""
    conn = await connect(env, framing)
    longest = "é" * 127 + "x"
    assert len(longest.encode()) == 255
    assert await code_in(framing, conn, Command.GET_STREAM, payload_of(m.GetStream(m.Identifier(longest)),
                                                                       framing)) == 0
    assert await conn.call(m.GetStream(m.Identifier(longest))) is None  # not found: empty body
    await conn.ping()


@BOTH
async def test_bad_names_are_refused(env: Env, framing: str) -> None:
    conn = await connect(env, framing)
    assert await code_in(framing, conn, Command.CREATE_STREAM, b"\x00") == Status.INVALID_STREAM_NAME
    assert await code_in(framing, conn, Command.CREATE_STREAM, b"\x02\xff\xfe") == Status.INVALID_STREAM_NAME
    assert await conn.status(m.CreateStream(STREAM)) == Status.STREAM_NAME_ALREADY_EXISTS
    assert await conn.status(m.CreateTopic(S, TOPIC, 1)) == Status.TOPIC_NAME_ALREADY_EXISTS
    assert await conn.status(m.CreateTopic(S, "zero", 0)) == Status.INVALID_PARTITIONS_COUNT
    assert await conn.status(m.CreateTopic(S, "many", 1001)) == Status.INVALID_PARTITIONS_COUNT
    await conn.ping()


@BOTH
async def test_unknown_objects_are_not_found(env: Env, framing: str) -> None:
    conn = await connect(env, framing)
    first = m.PollingStrategy(m.PollingKind.FIRST)
    poll = m.PollMessages(C0, m.Identifier("nostream"), T, 0, first, 1, False)
    assert await conn.status(poll) == Status.STREAM_NAME_NOT_FOUND
    poll = m.PollMessages(C0, m.Identifier(4242), T, 0, m.PollingStrategy(m.PollingKind.FIRST), 1, False)
    assert await conn.status(poll) == Status.STREAM_ID_NOT_FOUND
    poll = m.PollMessages(C0, S, m.Identifier("x"), 0, m.PollingStrategy(m.PollingKind.FIRST), 1, False)
    assert await conn.status(poll) == Status.TOPIC_NAME_NOT_FOUND
    poll = m.PollMessages(C0, S, T, 7, m.PollingStrategy(m.PollingKind.FIRST), 1, False)
    assert await conn.status(poll) == Status.PARTITION_NOT_FOUND
    send = m.SendMessages(S, T, m.Partitioning.partition(2), GOOD)
    assert await conn.status(send) == Status.PARTITION_NOT_FOUND
    group = m.Consumer(m.ConsumerKind.GROUP, m.Identifier("nogroup"))
    poll = m.PollMessages(group, S, T, 0, m.PollingStrategy(m.PollingKind.NEXT), 1, False)
    assert await conn.status(poll) == Status.CONSUMER_GROUP_NAME_NOT_FOUND
    store = m.StoreConsumerOffset(C0, S, T, 0, 99)
    assert await conn.status(store) == Status.INVALID_OFFSET
    await conn.ping()


# -- SEND_MESSAGES: L message area --------------------------------------------------------------


def legacy_send(messages: tuple[m.Message, ...] = GOOD) -> tuple[bytearray, int, int]:
    """(payload, index table start, message area start) of a valid L send to ``bad/t`` p0."""
    payload = bytearray(codec.encode_request(m.SendMessages(S, T, m.Partitioning.partition(0), messages),
                                             Dialect.LEGACY))
    (meta,) = struct.unpack_from("<I", payload)
    index = 4 + meta
    return payload, index, index + 16 * len(messages)


def _l_nonzero_offset(p: bytearray, index: int, area: int) -> None:
    struct.pack_into("<I", p, index, 1)


def _l_nonzero_timestamp(p: bytearray, index: int, area: int) -> None:
    struct.pack_into("<Q", p, index + 16 + 8, 5)


def _l_too_small(p: bytearray, index: int, area: int) -> None:
    struct.pack_into("<I", p, index + 4, 10)  # first message would be 10 bytes


def _l_past_area(p: bytearray, index: int, area: int) -> None:
    struct.pack_into("<I", p, index + 16 + 4, len(p) - area + 1)


def _l_short_of_area(p: bytearray, index: int, area: int) -> None:
    p += b"\x00" * 7  # the index ends before the area does


def _l_decreasing(p: bytearray, index: int, area: int) -> None:
    (end0,) = struct.unpack_from("<I", p, index + 4)
    struct.pack_into("<I", p, index + 16 + 4, end0 - 1)


def _l_lengths_disagree(p: bytearray, index: int, area: int) -> None:
    struct.pack_into("<I", p, area + 52, 5)  # payload_length 5 in a 68-byte span ("good" is 4)


def _l_reserved(p: bytearray, index: int, area: int) -> None:
    struct.pack_into("<Q", p, area + 56, 1)


def _l_bad_checksum(p: bytearray, index: int, area: int) -> None:
    struct.pack_into("<Q", p, area, 0xDEADBEEF)  # 0 means "not computed"; anything else is checked


def _l_count_zero(p: bytearray, index: int, area: int) -> None:
    struct.pack_into("<I", p, index - 4, 0)


def _l_count_low(p: bytearray, index: int, area: int) -> None:
    struct.pack_into("<I", p, index - 4, 1)  # one index entry read, two messages in the area


L_SEND_CORRUPTIONS = {
    "index offset field non-zero": (_l_nonzero_offset, Status.NON_ZERO_OFFSET),
    "index timestamp field non-zero": (_l_nonzero_timestamp, Status.NON_ZERO_TIMESTAMP),
    "message under 64 bytes": (_l_too_small, Status.TOO_SMALL_MESSAGE),
    "position past the area": (_l_past_area, Status.INVALID_MESSAGES_SIZE),
    "area longer than the index": (_l_short_of_area, Status.INVALID_MESSAGES_SIZE),
    "positions decreasing": (_l_decreasing, Status.INVALID_MESSAGES_SIZE),
    "lengths disagree with the index": (_l_lengths_disagree, Status.INVALID_MESSAGES_SIZE),
    "reserved field non-zero": (_l_reserved, Status.INVALID_RESERVED_FIELD),
    "wrong message checksum": (_l_bad_checksum, Status.INVALID_MESSAGE_CHECKSUM),
    "messages_count 0": (_l_count_zero, Status.INVALID_MESSAGES_COUNT),
    # one index entry is read; the second becomes the first 16 bytes of the message area, which
    # shifts the first message header so that its "reserved" field holds an origin timestamp
    "messages_count below the messages sent": (_l_count_low, Status.INVALID_RESERVED_FIELD),
}


@pytest.mark.parametrize("case", sorted(L_SEND_CORRUPTIONS))
async def test_legacy_send_corruption(env: Env, case: str) -> None:
    corrupt, status = L_SEND_CORRUPTIONS[case]
    payload, index, area = legacy_send()
    corrupt(payload, index, area)
    conn = await env.legacy()
    assert await legacy_code(conn, Command.SEND_MESSAGES, bytes(payload)) == status
    await conn.ping()


async def test_legacy_send_with_empty_message_payload(env: Env) -> None:
    payload, _index, _area = legacy_send((m.Message(b"x"), m.Message(b"")))
    conn = await env.legacy()
    assert await legacy_code(conn, Command.SEND_MESSAGES, bytes(payload)) == Status.EMPTY_MESSAGE_PAYLOAD
    await conn.ping()


async def test_legacy_send_baseline_is_valid(env: Env) -> None:
    """The uncorrupted payload the cases above start from is accepted (sent to another topic, so
    the stored messages stay as they were)."""
    conn = await env.legacy()
    await conn.call(m.CreateTopic(S, "scratch-l", 1))
    payload, _index, _area = legacy_send()
    scratch = codec.encode_request(m.SendMessages(S, m.Identifier("scratch-l"), m.Partitioning.partition(0),
                                                  GOOD), Dialect.LEGACY)
    assert scratch.endswith(bytes(payload[payload.index(b"t\x02\x04") + 3:]))  # same index and area
    assert await legacy_code(conn, Command.SEND_MESSAGES, scratch) == 0
    await conn.call(m.DeleteTopic(S, m.Identifier("scratch-l")))


# -- SEND_MESSAGES: V batch ---------------------------------------------------------------------


def vsr_send(messages: tuple[m.Message, ...] = GOOD) -> tuple[bytearray, int]:
    """(body, batch start) of a valid V send to ``bad/t`` p0."""
    body = bytearray(codec.encode_request(m.SendMessages(S, T, m.Partitioning.partition(0), messages),
                                          Dialect.VSR))
    (meta,) = struct.unpack_from("<I", body)
    return body, 4 + meta


def _v_payload_flip(b: bytearray, batch: int) -> None:
    b[batch + V_BATCH_SIZE + V_FRAME_SIZE] ^= 0xFF  # first frame's payload: its checksum no longer fits


def _v_frame_checksum(b: bytearray, batch: int) -> None:
    b[batch + V_BATCH_SIZE] ^= 0x01


def _v_batch_checksum(b: bytearray, batch: int) -> None:
    b[batch + 40] ^= 0x01


def _v_batch_field(b: bytearray, batch: int) -> None:
    struct.pack_into("<Q", b, batch + 24, 1)  # origin timestamp changed after the checksum was computed


def _v_frame_reserved(b: bytearray, batch: int) -> None:
    struct.pack_into("<Q", b, batch + V_BATCH_SIZE + 40, 1)


def _v_batch_reserved(b: bytearray, batch: int) -> None:
    b[batch + 200] = 1


def _v_count_mismatch(b: bytearray, batch: int) -> None:
    struct.pack_into("<I", b, batch - 4, 3)


def _v_count_zero(b: bytearray, batch: int) -> None:
    struct.pack_into("<I", b, batch - 4, 0)


def _v_batch_length(b: bytearray, batch: int) -> None:
    (length,) = struct.unpack_from("<Q", b, batch + 32)
    struct.pack_into("<Q", b, batch + 32, length + 1)


def _v_frame_length(b: bytearray, batch: int) -> None:
    struct.pack_into("<I", b, batch + V_BATCH_SIZE + 36, 200)  # payload length past the batch


def _v_trailing(b: bytearray, batch: int) -> None:
    b += b"\x00" * 3


V_SEND_CORRUPTIONS = {
    "payload changed after the checksum": (_v_payload_flip, Status.INVALID_MESSAGE_CHECKSUM),
    "wrong frame checksum": (_v_frame_checksum, Status.INVALID_MESSAGE_CHECKSUM),
    "wrong batch checksum": (_v_batch_checksum, Status.INVALID_BATCH_CHECKSUM),
    "batch field changed after the checksum": (_v_batch_field, Status.INVALID_BATCH_CHECKSUM),
    "frame reserved non-zero": (_v_frame_reserved, Status.INVALID_RESERVED_FIELD),
    "batch reserved non-zero": (_v_batch_reserved, Status.INVALID_RESERVED_FIELD),
    "metadata count above the batch count": (_v_count_mismatch, Status.INVALID_MESSAGES_COUNT),
    "messages_count 0": (_v_count_zero, Status.INVALID_MESSAGES_COUNT),
    "batch length off by one": (_v_batch_length, Status.INVALID_MESSAGES_SIZE),
    "frame past the batch": (_v_frame_length, Status.INVALID_MESSAGES_SIZE),
    "bytes after the batch": (_v_trailing, Status.INVALID_MESSAGES_SIZE),
}


@pytest.mark.parametrize("case", sorted(V_SEND_CORRUPTIONS))
async def test_vsr_send_corruption(env: Env, case: str) -> None:
    corrupt, status = V_SEND_CORRUPTIONS[case]
    body, batch = vsr_send()
    corrupt(body, batch)
    conn = await env.vsr()
    reply = await conn.ask_raw(conn.raw_frame(Operation.SEND_MESSAGES, bytes(body)))
    assert (reply.status, reply.body) == (status, b"")
    await conn.ping()


async def test_vsr_send_with_empty_message_payload(env: Env) -> None:
    body, _batch = vsr_send((m.Message(b"x", 1), m.Message(b"", 2)))
    conn = await env.vsr()
    reply = await conn.ask_raw(conn.raw_frame(Operation.SEND_MESSAGES, bytes(body)))
    assert reply.status == Status.EMPTY_MESSAGE_PAYLOAD
    await conn.ping()


async def test_vsr_send_baseline_is_valid(env: Env) -> None:
    conn = await env.vsr()
    await conn.call(m.CreateTopic(S, "scratch-v", 1))
    send = m.SendMessages(S, m.Identifier("scratch-v"), m.Partitioning.partition(0), GOOD)
    got = await conn.call(send)
    assert got.confirmations[0].base_offset == 0
    await conn.call(m.DeleteTopic(S, m.Identifier("scratch-v")))


# -- before login -------------------------------------------------------------------------------


async def test_legacy_commands_before_login(env: Env) -> None:
    conn = await env.legacy(login=False)
    await conn.ping()
    assert await conn.status(m.GetStats()) == Status.UNAUTHENTICATED  # D support is off
    await conn.ping()
    for req in (m.GetStreams(), m.GetStream(S), m.CreateStream("sneaky"),
                m.SendMessages(S, T, m.Partitioning.partition(0), GOOD),
                m.PollMessages(C0, S, T, 0, m.PollingStrategy(m.PollingKind.FIRST), 10, False),
                m.GetMe(), m.LogoutUser()):
        assert await conn.status(req) == Status.UNAUTHENTICATED, req
    await conn.ping()
    assert await conn.login() == 0  # the refusals did not spoil the connection
    assert await conn.call(m.GetStream(S)) is not None


async def test_vsr_commands_before_login(env: Env) -> None:
    conn = await env.vsr(login=False)
    await conn.ping()
    for req in (m.GetStats(), m.GetStreams(), m.GetStream(S), m.GetMe(),
                m.PollMessages(C0, S, T, 0, m.PollingStrategy(m.PollingKind.FIRST), 10, False)):
        assert await conn.status(req) == Status.UNAUTHENTICATED, req
    conn.session = 12345  # a made-up session: the header is well-formed, the connection unknown
    assert await conn.status(m.CreateStream("sneaky")) == Status.UNAUTHENTICATED
    conn.session = 0
    await conn.ping()
    assert (await conn.login()).user_id == 0


@pytest.mark.parametrize("req", [m.CreateStream("sneaky"),
                                 m.SendMessages(S, T, m.Partitioning.partition(0), GOOD),
                                 m.StoreConsumerOffset(C0, S, T, 0, 0), m.LogoutUser()],
                         ids=lambda r: type(r).__name__)
async def test_vsr_session_operation_without_session_is_evicted(env: Env, req: m.Request) -> None:
    """C.2: every operation but Register and NonReplicated needs a session."""
    conn = await env.vsr(login=False)
    await assert_evicted(conn, conn.frame(req), EvictionReason.NO_SESSION)


async def test_vsr_wrong_session_is_evicted(env: Env) -> None:
    conn = await env.vsr()
    conn.session += 2
    await assert_evicted(conn, conn.frame(m.CreateStream("sneaky")), EvictionReason.SESSION_ERROR)


async def test_vsr_register_with_a_session_is_evicted(env: Env) -> None:
    conn = await env.vsr(login=False)
    body = codec.encode_request(m.LoginRegister(PROTOCOL, "rust-sdk", "0.11.0", "iggy", "iggy"), Dialect.VSR)
    header = RequestHeader(client=conn.client, operation=Operation.REGISTER, session=5)
    frame = encode_vsr_request(header, body)
    await assert_evicted(conn, frame, EvictionReason.SESSION_ERROR)


# -- credentials --------------------------------------------------------------------------------


async def test_legacy_bad_credentials(env: Env) -> None:
    conn = await env.legacy(login=False)
    assert await conn.status(m.LoginUser("iggy", "wrong")) == Status.INVALID_CREDENTIALS
    assert await conn.status(m.LoginUser("nobody", "iggy")) == Status.INVALID_CREDENTIALS
    short_name, short_password = b"\x02ab\x04iggy" + bytes(8), b"\x04iggy\x02ab" + bytes(8)
    assert await legacy_code(conn, Command.LOGIN_USER, short_name) == Status.INVALID_USERNAME
    assert await legacy_code(conn, Command.LOGIN_USER, short_password) == Status.INVALID_PASSWORD
    await conn.ping()
    assert await conn.status(m.GetStreams()) == Status.UNAUTHENTICATED  # still not logged in
    assert await conn.login() == 0


async def test_vsr_bad_credentials_evict(env: Env) -> None:
    for username, password in (("iggy", "wrong"), ("nobody", "iggy")):
        conn = await env.vsr(login=False)
        frame = conn.frame(m.LoginRegister(PROTOCOL, "rust-sdk", "0.11.0", username, password))
        await assert_evicted(conn, frame, EvictionReason.INVALID_CREDENTIALS)


async def test_vsr_incompatible_protocol_evicts_with_the_window(env: Env) -> None:
    conn = await env.vsr(login=False)
    frame = conn.frame(m.LoginRegister(m.pack_version(0, 12, 0), "rust-sdk", "0.12.0", "iggy", "iggy"))
    reply = await conn.ask_raw(frame)
    assert reply.eviction == EvictionReason.INCOMPATIBLE_PROTOCOL
    assert struct.unpack_from("<II", reply.raw, 144) == (PROTOCOL, PROTOCOL & ~0x3FF)
    assert await conn.is_closed()


async def test_tokens(env: Env) -> None:
    """A wrong token is refused (L 53, V eviction 10); the token root creates logs in, both ways."""
    conn = await env.legacy(login=False)
    assert await conn.status(m.LoginWithToken("not-a-token")) == Status.INVALID_PERSONAL_ACCESS_TOKEN
    await conn.ping()
    v = await env.vsr(login=False)
    frame = v.frame(m.LoginRegisterWithToken(PROTOCOL, "rust-sdk", "0.11.0", "not-a-token"))
    await assert_evicted(v, frame, EvictionReason.INVALID_TOKEN)
    token = await env.admin.call(m.CreatePersonalAccessToken("bad-input-token", 0))
    assert isinstance(token, m.RawPersonalAccessToken)
    assert await conn.call(m.LoginWithToken(token.token)) == m.LoginReply(0)
    v = await env.vsr(login=False)
    got = await v.call(m.LoginRegisterWithToken(PROTOCOL, "rust-sdk", "0.11.0", token.token))
    assert got.user_id == 0 and got.session
    await env.admin.call(m.DeletePersonalAccessToken("bad-input-token"))
    conn = await env.legacy(login=False)
    assert await conn.status(m.LoginWithToken(token.token)) == Status.INVALID_PERSONAL_ACCESS_TOKEN


# -- permissions --------------------------------------------------------------------------------


async def test_permission_denied_for_a_read_only_user(env: Env) -> None:
    created = await env.admin.call(m.CreateUser(
        "reader", "reader-pw", permissions=m.Permissions(m.GlobalPermissions(read_streams=True))))
    assert isinstance(created, m.UserDetails) and created.user.username == "reader"
    lc = await legacy_login(env.port, "reader", "reader-pw")
    vc = await vsr_login(env.port, "reader", "reader-pw")
    for conn in (lc, vc):
        assert await conn.call(m.GetStream(S)) is not None
        assert await conn.status(m.CreateStream("readers-stream")) == Status.UNAUTHORIZED
        assert await conn.status(m.CreateTopic(S, "readers-topic", 1)) == Status.UNAUTHORIZED
        assert await conn.status(m.DeleteStream(S)) == Status.UNAUTHORIZED
        assert await conn.status(m.PurgeTopic(S, T)) == Status.UNAUTHORIZED
        assert await conn.status(m.SendMessages(S, T, m.Partitioning.partition(0), GOOD)) == (
            Status.UNAUTHORIZED)
        assert await conn.status(m.CreateUser("other", "other-pw")) == Status.UNAUTHORIZED
        assert await conn.status(m.GetStats()) == Status.UNAUTHORIZED
        await conn.ping()


async def test_send_only_user_can_send_but_not_poll(env: Env) -> None:
    stream = await env.admin.call(m.CreateStream("perm"))
    sid = stream.stream.id
    await env.admin.call(m.CreateTopic(m.Identifier("perm"), "pt", 1))
    grant = m.Permissions(streams=(m.StreamPermissions(sid, send_messages=True),))
    await env.admin.call(m.CreateUser("sender", "sender-pw", permissions=grant))
    lc = await legacy_login(env.port, "sender", "sender-pw")
    vc = await vsr_login(env.port, "sender", "sender-pw")
    pt = m.Identifier("pt")
    for i, conn in enumerate((lc, vc)):
        assert await conn.status(m.SendMessages(m.Identifier(sid), pt, m.Partitioning.partition(0),
                                                (m.Message(b"m%d" % i),))) == 0
        poll = m.PollMessages(C0, m.Identifier(sid), pt, 0, m.PollingStrategy(m.PollingKind.FIRST), 10, False)
        assert await conn.status(poll) == Status.UNAUTHORIZED
        assert await conn.status(m.GetStream(m.Identifier(sid))) == Status.UNAUTHORIZED
        # the grant is for stream "perm" only
        assert await conn.status(m.SendMessages(S, T, m.Partitioning.partition(0), GOOD)) == (
            Status.UNAUTHORIZED)
    polled = await env.admin.call(m.PollMessages(C0, m.Identifier(sid), pt, 0,
                                                 m.PollingStrategy(m.PollingKind.FIRST), 10, False))
    assert [x.payload for x in polled.messages] == [b"m0", b"m1"]
    await env.admin.call(m.DeleteStream(m.Identifier(sid)))


async def test_inactive_user_cannot_log_in(env: Env) -> None:
    await env.admin.call(m.CreateUser("sleeper", "sleeper-pw", m.UserStatus.INACTIVE))
    conn = await env.legacy(login=False)
    assert await conn.status(m.LoginUser("sleeper", "sleeper-pw")) == Status.USER_INACTIVE
    v = await env.vsr(login=False)
    frame = v.frame(m.LoginRegister(PROTOCOL, "rust-sdk", "0.11.0", "sleeper", "sleeper-pw"))
    await assert_evicted(v, frame, EvictionReason.USER_INACTIVE)


# -- framing detection --------------------------------------------------------------------------


async def test_garbage_first_bytes_close_and_others_are_served(env: Env) -> None:
    bad = await env.legacy(login=False)
    await bad.send_raw(b"\xff" * 64)  # length 0xffffffff: neither framing
    assert await bad.is_closed()
    good = await env.legacy()
    await good.ping()


async def test_legacy_frame_split_across_writes(env: Env) -> None:
    """A frame arriving a few bytes at a time is one request (never an error)."""
    conn = await env.legacy(login=False)
    frame = encode_legacy_request(Command.PING) + codec.encode_request_frame(
        m.LoginUser("iggy", "iggy", "0.10.0"), Dialect.LEGACY)
    for i in range(0, len(frame), 3):
        await conn.send_raw(frame[i : i + 3])
    assert (await conn.recv()).status == 0
    assert (await conn.recv()).payload == bytes(4)


async def test_one_connections_errors_do_not_affect_another(env: Env) -> None:
    a = await env.legacy()
    b = await env.vsr()
    assert await legacy_code(a, 999) == Status.INVALID_COMMAND
    body, batch = vsr_send()
    _v_batch_checksum(body, batch)
    assert (await b.ask_raw(b.raw_frame(Operation.SEND_MESSAGES, bytes(body)))).status == (
        Status.INVALID_BATCH_CHECKSUM)
    await a.send_raw(struct.pack("<II", 1, 1))  # a is closed after this
    assert (await a.recv()).status == Status.INVALID_COMMAND
    assert await a.is_closed()
    await b.ping()
    assert await b.call(m.GetStream(S)) is not None
    assert L_HEADER_SIZE == 64
