"""Iggy user and token administration: request and reply codecs, and the permissions block.

Exact bytes come from two places: request bodies captured from apache-iggy 0.9.0 (V) against a test
double, and replies that client accepted and decoded to the expected values; the L layouts follow
the 0.8-era source (``iggy_common`` commands, ``binary/mapper.rs``), which the 0.8.0 Python API
cannot exercise (B.8)."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, Status
from bayou.protocols.iggy.framing import Dialect, IggyError, VsrFrameReader

ALICE, NUM = m.Identifier("alice"), m.Identifier(5)
GLOBAL_ONLY = m.Permissions(m.GlobalPermissions(read_streams=True))
# The permissions the 0.9.0 capture sent: two streams, the first with two topics.
CAPTURED_PERMS = m.Permissions(
    m.GlobalPermissions(manage_servers=True, read_users=True, send_messages=True),
    (m.StreamPermissions(7, read_stream=True, send_messages=True, topics=(
        m.TopicPermissions(3, manage_topic=True, poll_messages=True),
        m.TopicPermissions(4, read_topic=True))),
     m.StreamPermissions(9, manage_stream=True)))
CAPTURED_PERMS_HEX = ("01000001000000000001" "01" "07000000" "000100000001" "01" "03000000" "01000100" "01"
                      "04000000" "00010000" "00" "01" "09000000" "010000000000" "00" "00")
OPTION = (m.UserHeader.of("k", m.HeaderKind.STRING, "v"),)

BOTH: list[m.Request] = [
    m.CreateUser("alice", "secret"),
    m.CreateUser("bob", "secret", m.UserStatus.INACTIVE),
    m.CreateUser("carol", "p" * 100, m.UserStatus.ACTIVE, CAPTURED_PERMS),
    m.CreateUser("d" * 50, "pwd", permissions=m.Permissions()),
    m.UpdateUser(NUM, "alice2", m.UserStatus.INACTIVE),
    m.UpdateUser(ALICE),
    m.UpdateUser(ALICE, status=m.UserStatus.ACTIVE),
    m.UpdatePermissions(NUM, None),
    m.UpdatePermissions(ALICE, CAPTURED_PERMS),
    m.ChangePassword(NUM, "secret", "newsecret"),
    m.GetUser(ALICE), m.GetUser(NUM), m.GetUsers(), m.DeleteUser(ALICE),
    m.GetPersonalAccessTokens(), m.CreatePersonalAccessToken("ci", 0),
    m.CreatePersonalAccessToken("deploy", 3_600_000_000), m.DeletePersonalAccessToken("ci"),
]
VSR_ONLY: list[m.Request] = [
    m.CreateUser("alice", "secret", options=OPTION),
    m.UpdateUser(NUM, options=OPTION),
]


def _legacy(req: m.Request) -> m.Request:
    return codec.decode_request(Dialect.LEGACY, req.command, codec.encode_request(req, Dialect.LEGACY))


def _vsr(req: m.Request) -> m.Request:
    frame = codec.encode_request_frame(req, Dialect.VSR, client=9, request=2, session=3)
    (got,) = VsrFrameReader().feed(frame)
    return codec.decode_vsr_request(got)


def _error(dialect: Dialect, command: Command, payload: bytes) -> IggyError:
    with pytest.raises(IggyError) as err:
        if dialect is Dialect.VSR:
            codec.DECODERS[command](payload, dialect)
        else:
            codec.decode_request(dialect, command, payload)
    return err.value


# -- requests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("req", BOTH, ids=repr)
def test_round_trip_in_legacy_and_vsr(req: m.Request) -> None:
    assert _legacy(req) == req
    assert _vsr(req) == req


@pytest.mark.parametrize("req", VSR_ONLY, ids=repr)
def test_vsr_user_commands_carry_trailing_options(req: m.Request) -> None:
    assert _vsr(req) == req
    legacy = codec.encode_request(req, Dialect.LEGACY)  # L has no room for them: dropped
    assert codec.decode_request(Dialect.LEGACY, req.command, legacy) == dataclasses.replace(req, options=())


@pytest.mark.parametrize(("command", "body", "expected"), [
    (Command.CREATE_USER, "05616c696365067365637265740100", m.CreateUser("alice", "secret")),
    (Command.CREATE_USER, "03626f62067365637265740200", m.CreateUser("bob", "secret", m.UserStatus.INACTIVE)),
    (Command.CREATE_USER, "056361726f6c06736563726574010135000000" + CAPTURED_PERMS_HEX,
     m.CreateUser("carol", "secret", m.UserStatus.ACTIVE, CAPTURED_PERMS)),
    (Command.UPDATE_USER, "0104050000000106616c696365320102",
     m.UpdateUser(NUM, "alice2", m.UserStatus.INACTIVE)),
    (Command.UPDATE_USER, "0205616c6963650000", m.UpdateUser(ALICE)),
    (Command.UPDATE_USER, "010405000000000002010000006b020100000076", m.UpdateUser(NUM, options=OPTION)),
    (Command.UPDATE_PERMISSIONS, "01040500000000", m.UpdatePermissions(NUM, None)),
    (Command.UPDATE_PERMISSIONS, "010405000000010b0000000000000000010000000000",
     m.UpdatePermissions(NUM, GLOBAL_ONLY)),
    (Command.CHANGE_PASSWORD, "01040500000006736563726574096e6577736563726574",
     m.ChangePassword(NUM, "secret", "newsecret")),
    (Command.DELETE_USER, "0205616c696365", m.DeleteUser(ALICE)),
    (Command.GET_USER, "010405000000", m.GetUser(NUM)),
])
def test_bodies_captured_from_the_09_client(command: Command, body: str, expected: m.Request) -> None:
    raw = bytes.fromhex(body)
    assert codec.DECODERS[command](raw, Dialect.VSR) == expected
    assert codec.encode_request(expected, Dialect.VSR) == raw


def test_legacy_layouts_from_the_08_source() -> None:
    """``CreateUser::to_bytes``: has_permissions 0 is the last byte (no u32 length); with
    permissions, u8 1 + u32 length + block. ``UpdateUser``: Identifier, flag + name8, flag + u8."""
    assert codec.encode_request(m.CreateUser("user", "secret"), Dialect.LEGACY) == (
        b"\x04user\x06secret\x01\x00")
    block = codec.encode_permissions(GLOBAL_ONLY)
    inactive = m.CreateUser("user", "secret", m.UserStatus.INACTIVE, GLOBAL_ONLY)
    assert codec.encode_request(inactive, Dialect.LEGACY) == (
        b"\x04user\x06secret\x02\x01" + struct.pack("<I", 11) + block)
    assert codec.encode_request(m.UpdateUser(NUM, None, m.UserStatus.ACTIVE), Dialect.LEGACY) == (
        b"\x01\x04\x05\x00\x00\x00\x00\x01\x01")
    assert codec.encode_request(m.UpdatePermissions(ALICE, None), Dialect.LEGACY) == b"\x02\x05alice\x00"
    assert codec.encode_request(m.ChangePassword(ALICE, "old", "new"), Dialect.LEGACY) == (
        b"\x02\x05alice\x03old\x03new")
    assert codec.encode_request(m.CreatePersonalAccessToken("ci", 7), Dialect.LEGACY) == (
        b"\x02ci" + struct.pack("<Q", 7))


@pytest.mark.parametrize("req", [r for r in BOTH if codec.encode_request(r, Dialect.LEGACY)], ids=repr)
def test_every_truncated_prefix_is_a_protocol_error(req: m.Request) -> None:
    for dialect in (Dialect.LEGACY, Dialect.VSR):
        payload = codec.encode_request(req, dialect)
        for cut in range(len(payload)):
            with pytest.raises(IggyError):
                codec.DECODERS[req.command](payload[:cut], dialect)


def test_trailing_bytes_after_a_legacy_user_command() -> None:
    for req in (m.CreateUser("alice", "secret"), m.UpdateUser(NUM), m.UpdatePermissions(NUM, None),
                m.ChangePassword(NUM, "abc", "def")):
        payload = codec.encode_request(req, Dialect.LEGACY) + b"\x00"
        assert _error(Dialect.LEGACY, req.command, payload).status == Status.INVALID_COMMAND
    # in V only CREATE_USER and UPDATE_USER end with options; a stray byte is a bad options block
    assert _error(Dialect.VSR, Command.CREATE_USER, b"\x05alice\x06secret\x01\x00\x00").status == (
        Status.INVALID_HEADER_KIND)
    assert _error(Dialect.VSR, Command.UPDATE_PERMISSIONS, b"\x01\x04" + bytes(5) + b"\x00").status == (
        Status.INVALID_COMMAND)


def _create(user: bytes, password: bytes, status: int = 1, tail: bytes = b"\x00") -> bytes:
    return bytes([len(user)]) + user + bytes([len(password)]) + password + bytes([status]) + tail


@pytest.mark.parametrize(("command", "payload", "status"), [
    (Command.CREATE_USER, _create(b"ab", b"secret"), Status.INVALID_USERNAME),
    (Command.CREATE_USER, _create(b"a" * 51, b"secret"), Status.INVALID_USERNAME),
    (Command.CREATE_USER, _create(b"", b"secret"), Status.INVALID_USERNAME),
    (Command.CREATE_USER, _create(b"alice", b"pw"), Status.INVALID_PASSWORD),
    (Command.CREATE_USER, _create(b"alice", b"p" * 101), Status.INVALID_PASSWORD),
    (Command.CREATE_USER, _create(b"alice", b"\xff\xfe\xfd"), Status.INVALID_PASSWORD),
    (Command.CREATE_USER, _create(b"alice", b"secret", 0), Status.INVALID_COMMAND),
    (Command.CREATE_USER, _create(b"alice", b"secret", 3), Status.INVALID_COMMAND),
    (Command.CREATE_USER, _create(b"alice", b"secret", 1, b"\x02"), Status.INVALID_FORMAT),
    (Command.UPDATE_USER, b"\x02\x05alice\x01\x02ab\x00", Status.INVALID_USERNAME),
    (Command.UPDATE_USER, b"\x02\x05alice\x00\x01\x07", Status.INVALID_COMMAND),
    (Command.UPDATE_USER, b"\x02\x05alice\x02\x00", Status.INVALID_FORMAT),
    (Command.CHANGE_PASSWORD, b"\x02\x05alice\x02ab\x03new", Status.INVALID_PASSWORD),
    (Command.CHANGE_PASSWORD, b"\x02\x05alice\x03old\x02ab", Status.INVALID_PASSWORD),
    (Command.UPDATE_PERMISSIONS, b"\x01\x03\x00\x00\x00\x00", Status.INVALID_IDENTIFIER),
])
def test_limits_and_bad_fields(command: Command, payload: bytes, status: Status) -> None:
    for dialect in (Dialect.LEGACY, Dialect.VSR):
        assert _error(dialect, command, payload).status == status


def test_user_commands_do_not_exist_in_the_seed_dialect() -> None:
    payload = codec.encode_request(m.CreateUser("alice", "secret"), Dialect.LEGACY)
    assert _error(Dialect.SEED, Command.CREATE_USER, payload).status == Status.INVALID_COMMAND


def test_snapshot_and_option_discovery_stay_unsupported() -> None:
    for code in (Command.GET_SNAPSHOT_FILE, Command.DESCRIBE_OPTIONS):
        assert codec.decode_request(Dialect.LEGACY, code, b"\x01") == m.Unsupported(code, b"\x01")


# -- permissions --------------------------------------------------------------------------------

PERMISSION_SETS = [
    m.Permissions(),
    m.Permissions.root(),
    GLOBAL_ONLY,
    CAPTURED_PERMS,
    m.Permissions(streams=(m.StreamPermissions(0),)),
    m.Permissions(streams=(m.StreamPermissions(0xFFFF_FFFF, *(True,) * 6, topics=(
        m.TopicPermissions(0xFFFF_FFFF, True, True, True, True),)),)),
]


@pytest.mark.parametrize("perms", PERMISSION_SETS, ids=repr)
def test_permissions_round_trip_and_truncation(perms: m.Permissions) -> None:
    block = codec.encode_permissions(perms)
    assert codec.decode_permissions(block) == perms
    for cut in range(len(block)):
        with pytest.raises(IggyError):
            codec.decode_permissions(block[:cut])
    with pytest.raises(IggyError):
        codec.decode_permissions(block + b"\x00")


def test_permissions_exact_bytes() -> None:
    """Ten global flags in ``permissions.rs`` order, a u8 streams flag, then per stream u32 id,
    six flags, u8 topics flag, topics (u32 id, four flags, u8 next), u8 next stream."""
    assert codec.encode_permissions(CAPTURED_PERMS) == bytes.fromhex(CAPTURED_PERMS_HEX)
    assert codec.encode_permissions(m.Permissions.root()) == b"\x01" * 10 + b"\x00"
    assert codec.encode_permissions(GLOBAL_ONLY) == bytes(5) + b"\x01" + bytes(5)
    assert len(bytes.fromhex(CAPTURED_PERMS_HEX)) == 0x35  # the length the 0.9.0 client sent


def test_permissions_are_canonical() -> None:
    """Streams and topics sort by id (V's order; L's is hash-map order), so equal sets compare
    equal and encode the same."""
    a = m.Permissions(streams=(m.StreamPermissions(9), m.StreamPermissions(2, topics=(
        m.TopicPermissions(5), m.TopicPermissions(1)))))
    b = m.Permissions(streams=(m.StreamPermissions(2, topics=(m.TopicPermissions(1), m.TopicPermissions(5))),
                               m.StreamPermissions(9)))
    assert a == b and codec.encode_permissions(a) == codec.encode_permissions(b)
    two = a.stream(2)
    assert two is not None and two.topic(5) == m.TopicPermissions(5) and two.topic(3) is None
    assert a.stream(3) is None
    with pytest.raises(ValueError):
        m.Permissions(streams=(m.StreamPermissions(1), m.StreamPermissions(1)))
    with pytest.raises(ValueError):
        m.StreamPermissions(1, topics=(m.TopicPermissions(4), m.TopicPermissions(4)))


def test_bad_permission_blocks() -> None:
    stream = struct.pack("<I", 1) + bytes(6) + b"\x00"
    with pytest.raises(IggyError) as err:  # the same stream twice
        codec.decode_permissions(bytes(10) + b"\x01" + stream + b"\x01" + stream + b"\x00")
    assert err.value.status == Status.INVALID_FORMAT
    with pytest.raises(IggyError) as err:  # a flag that is neither 0 nor 1
        codec.decode_permissions(b"\x02" + bytes(10))
    assert err.value.status == Status.INVALID_FORMAT
    # the u32 length must cover the block exactly
    for length in (10, 12):
        payload = b"\x02\x05alice\x01" + struct.pack("<I", length) + bytes(11) + b"\x00"
        with pytest.raises(IggyError):
            codec.DECODERS[Command.UPDATE_PERMISSIONS](payload, Dialect.LEGACY)


# -- replies ------------------------------------------------------------------------------------

USER = m.UserInfo(5, 1_700_000_000_000_000, m.UserStatus.ACTIVE, "alice")
USER_V = m.UserInfo(5, 1_700_000_000_000_000, m.UserStatus.ACTIVE, "alice", OPTION)
REPLIES: list[tuple[Command, m.Reply, tuple[Dialect, ...]]] = [
    (Command.GET_USER, m.UserDetails(USER), (Dialect.LEGACY, Dialect.VSR)),
    (Command.GET_USER, m.UserDetails(USER, CAPTURED_PERMS), (Dialect.LEGACY, Dialect.VSR)),
    (Command.GET_USER, m.UserDetails(USER_V, GLOBAL_ONLY), (Dialect.VSR,)),
    (Command.CREATE_USER, m.UserDetails(m.UserInfo(6, 42, m.UserStatus.INACTIVE, "bob")),
     (Dialect.LEGACY, Dialect.VSR)),
    (Command.GET_USERS, (m.UserInfo(0, 1, m.UserStatus.ACTIVE, "iggy"), USER), (Dialect.LEGACY, Dialect.VSR)),
    (Command.GET_USERS, (USER_V,), (Dialect.VSR,)),
    (Command.GET_PERSONAL_ACCESS_TOKENS,
     (m.PersonalAccessTokenInfo("ci"), m.PersonalAccessTokenInfo("deploy", 1_800_000_000_000_000)),
     (Dialect.LEGACY, Dialect.VSR)),
    (Command.CREATE_PERSONAL_ACCESS_TOKEN, m.RawPersonalAccessToken("t" * 68), (Dialect.LEGACY, Dialect.VSR)),
]


@pytest.mark.parametrize(("command", "reply", "dialects"), REPLIES, ids=lambda x: getattr(x, "name", ""))
def test_reply_round_trip(command: Command, reply: m.Reply, dialects: tuple[Dialect, ...]) -> None:
    for dialect in dialects:
        payload = codec.encode_reply(reply, dialect)
        assert codec.decode_reply(command, payload, dialect) == reply
        one = reply[:1] if isinstance(reply, tuple) else reply
        whole = codec.encode_reply(one, dialect)
        for cut in range(1, len(whole)):  # an empty payload is "not found" / the empty list
            with pytest.raises(IggyError):
                codec.decode_reply(command, whole[:cut], dialect)


def test_user_reply_layouts() -> None:
    """L (``binary/mapper.rs``): u32 id, u64 created_at, u8 status, name8, then u8 1 + u32 length +
    permissions, or u32 0 when there are none. V puts a u32-prefixed options block after the name;
    these V bytes are what apache-iggy 0.9.0 accepted and decoded to the same values."""
    head = struct.pack("<IQB", 6, 42, 2) + b"\x03bob"
    none = m.UserDetails(m.UserInfo(6, 42, m.UserStatus.INACTIVE, "bob"))
    assert codec.encode_reply(none, Dialect.LEGACY) == head + bytes(4)
    assert codec.encode_reply(none, Dialect.VSR) == head + bytes(4) + bytes(4)
    full = m.UserDetails(USER, CAPTURED_PERMS)
    assert codec.encode_reply(full, Dialect.VSR) == bytes.fromhex(
        "0500000000401e18240a06000105616c696365" "00000000" "0135000000" + CAPTURED_PERMS_HEX)
    users = (m.UserInfo(0, 1, m.UserStatus.ACTIVE, "iggy"), m.UserInfo(5, 2, m.UserStatus.INACTIVE, "alice"))
    assert codec.encode_reply(users, Dialect.VSR) == bytes.fromhex(
        "00000000010000000000000001046967677900000000" "050000000200000000000000020561"
        "6c69636500000000")
    assert codec.encode_reply(users, Dialect.LEGACY) == (
        struct.pack("<IQB", 0, 1, 1) + b"\x04iggy" + struct.pack("<IQB", 5, 2, 2) + b"\x05alice")


def test_token_reply_layouts() -> None:
    """``map_personal_access_tokens``: name8 + u64 expiry_at (0 = never); ``map_raw_pat``: name8."""
    tokens = (m.PersonalAccessTokenInfo("ci"), m.PersonalAccessTokenInfo("cd", 9))
    assert codec.encode_reply(tokens, Dialect.LEGACY) == (
        b"\x02ci" + bytes(8) + b"\x02cd" + struct.pack("<Q", 9))
    assert codec.encode_reply(m.RawPersonalAccessToken("abc"), Dialect.VSR) == b"\x03abc"


def test_user_reply_edge_cases() -> None:
    assert codec.decode_reply(Command.GET_USER, b"", Dialect.LEGACY) is None  # not found
    assert codec.decode_reply(Command.GET_USERS, b"", Dialect.VSR) == ()
    assert codec.decode_reply(Command.GET_PERSONAL_ACCESS_TOKENS, b"", Dialect.LEGACY) == ()
    head = struct.pack("<IQB", 6, 42, 1) + b"\x03bob"
    for bad in (head + b"\x00\x00\x01\x00",  # padding of the no-permissions marker is not zero
                head + b"\x02" + bytes(4),  # flag 2
                struct.pack("<IQB", 6, 42, 9) + b"\x03bob" + bytes(4)):  # status 9
        with pytest.raises(IggyError):
            codec.decode_reply(Command.GET_USER, bad, Dialect.LEGACY)
