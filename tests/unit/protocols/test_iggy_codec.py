"""Iggy request and reply codecs: round trips in every dialect, the exact layouts that differ
between D, L and V, and the protocol error for each malformed input."""

from __future__ import annotations

import struct

import pytest

from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import NON_REPLICATED_COMMANDS, Command, EvictionReason, Operation, Status
from bayou.protocols.iggy.framing import (
    Dialect,
    IggyError,
    RequestHeader,
    VsrFrame,
    VsrFrameReader,
    request_checksum,
)
from bayou.protocols.iggy.wire import enc_identifier

S, T, G = m.Identifier("orders"), m.Identifier(7), m.Identifier("workers")
NUM_S, NUM_T, NUM_G = m.Identifier(1), m.Identifier(2), m.Identifier(3)
CONSUMER = m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier("c1"))
GROUP = m.Consumer(m.ConsumerKind.GROUP, m.Identifier(9))
HEADERS = (m.UserHeader.of("trace", m.HeaderKind.STRING, "abc"),
           m.UserHeader.of("n", m.HeaderKind.INT64, -5),
           m.UserHeader(b"\x01\x02", b"raw", m.HeaderKind.RAW, m.HeaderKind.RAW))
MESSAGES = (m.Message(b"one", 0, (), 1_700_000_000_000_000),
            m.Message(b"two", (1 << 127) + 3, HEADERS, 1_700_000_000_000_500))
OPTIONS = (m.UserHeader.of("compression_algorithm", m.HeaderKind.STRING, "gzip"),
           m.UserHeader.of("message_expiry", m.HeaderKind.UINT64, 60_000_000),
           m.UserHeader.of("max_topic_size", m.HeaderKind.UINT64, 1 << 30),
           m.UserHeader.of("replication_factor", m.HeaderKind.UINT8, 3),
           m.UserHeader.of("durability", m.HeaderKind.STRING, "replicated"))

COMMON: list[m.Request] = [
    m.Ping(), m.GetStats(), m.GetMe(), m.GetClient(12), m.GetClients(), m.GetStreams(),
    m.GetStream(S), m.DeleteStream(NUM_S), m.GetTopic(S, T), m.GetTopics(S), m.DeleteTopic(S, T),
    m.CreatePartitions(S, T, 3), m.DeletePartitions(NUM_S, NUM_T, 1), m.GetConsumerGroups(S, T),
]

LEGACY_AND_VSR: list[m.Request] = [
    m.GetClusterMetadata(), m.GetUser(m.Identifier("root")), m.GetUsers(), m.DeleteUser(m.Identifier(4)),
    m.LogoutUser(), m.GetPersonalAccessTokens(), m.CreatePersonalAccessToken("ci", 3_600_000_000),
    m.DeletePersonalAccessToken("ci"), m.CreateUser("alice", "secret"), m.UpdateUser(m.Identifier(4), "bob"),
    m.UpdatePermissions(m.Identifier(4), None), m.ChangePassword(m.Identifier(4), "old", "new"),
    m.PollMessages(CONSUMER, S, T, None, m.PollingStrategy(m.PollingKind.NEXT), 100, True),
    m.PollMessages(GROUP, S, T, 3, m.PollingStrategy(m.PollingKind.TIMESTAMP, 1 << 50), 1, False),
    m.FlushUnsavedBuffer(S, T, 2, True),
    m.GetConsumerOffset(CONSUMER, S, T, 0), m.GetConsumerOffset(GROUP, S, T, None),
    m.UpdateStream(S, "renamed"), m.PurgeStream(S), m.PurgeTopic(S, T),
    m.DeleteSegments(S, T, 1, 4),
    m.GetConsumerGroup(S, T, G), m.DeleteConsumerGroup(S, T, G), m.JoinConsumerGroup(S, T, G),
    m.LeaveConsumerGroup(S, T, m.Identifier(0)), m.CreateConsumerGroup(S, T, "workers"),
    m.SendMessages(S, T, m.Partitioning.balanced(), MESSAGES),
    m.SendMessages(S, T, m.Partitioning.partition(5), MESSAGES[:1]),
    m.SendMessages(S, T, m.Partitioning.messages_key(b"user-42"), MESSAGES),
]

LEGACY_ONLY: list[m.Request] = [
    m.WaitForMessages(500, (m.WaitTopic(S, T, ((0, 3), (1, 0))),)),  # bayou's extension
    m.PollBatches(CONSUMER, S, T, 2, m.PollingStrategy(m.PollingKind.OFFSET, 7), 500, False),  # bayou's too
    m.PollPartitions(250, (m.PollTopic(S, T, ((0, 3, 100), (1, 0, 5))),)),  # and this
    m.LoginUser("iggy", "iggy", "0.10.0", None), m.LoginUser("admin", "secret", None, "ctx"),
    m.LoginWithToken("token-value"),
    m.StoreConsumerOffset(CONSUMER, S, T, 1, 42), m.DeleteConsumerOffset(GROUP, S, T, None),
    m.CreateStream("orders"),
    m.CreateTopic(S, "t", 3, 2, 3_600_000_000, 10_000_000, 1),
    m.UpdateTopic(S, T, 1, 0, 0, "t2", replication_factor=2),
    m.Unsupported(Command.DESCRIBE_OPTIONS, b"\x04user"),
]

VSR_ONLY: list[m.Request] = [
    m.LoginRegister(0x2C00, "rust-sdk", "0.11.0", "iggy", "iggy", None),
    m.LoginRegister(0x2C00, "rust-sdk", "0.11.0", "iggy", "", "ctx"),
    m.LoginRegisterWithToken(0x2C00, "rust-sdk", "0.11.0", "tok", None),
    m.StoreConsumerOffset(CONSUMER, S, T, 1, 42, m.AckLevel.NO_ACK),
    m.DeleteConsumerOffset(GROUP, S, T, None, m.AckLevel.QUORUM),
    m.CreateStream("orders", options=(m.UserHeader.of("x", m.HeaderKind.BOOL, True),)),
    m.CreateTopic(S, "t", 3, m.CompressionAlgorithm.GZIP, 60_000_000, 1 << 30, 3, options=OPTIONS),
    m.CreateTopic(S, "plain", 1),
    m.UpdateTopic(S, T, m.CompressionAlgorithm.GZIP, 0, 0, "t2", options=OPTIONS[:1]),
    m.SyncConsumerGroup(S, T, G),
    m.Unsupported(Command.GET_SNAPSHOT_FILE, b"\x01"),
]

SEED_ONLY: list[m.Request] = [
    m.PollMessages(m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(5)), NUM_S, NUM_T, 1,
                   m.PollingStrategy(m.PollingKind.OFFSET, 0), 10, False),
    m.PollMessages(m.Consumer(m.ConsumerKind.GROUP, m.Identifier(1)), S, T, None,
                   m.PollingStrategy(m.PollingKind.LAST, 0), 1, True),
    m.GetConsumerOffset(m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(1)), S, T, 2),
    m.StoreConsumerOffset(m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(1)), S, T, 2, 99),
    m.CreateStream("orders", stream_id=1),
    m.CreateTopic(NUM_S, "t", 2, message_expiry=0, topic_id=1),
    m.CreateConsumerGroup(S, T, None, group_id=1), m.GetConsumerGroup(S, T, NUM_G),
    m.DeleteConsumerGroup(S, T, NUM_G), m.JoinConsumerGroup(S, T, NUM_G), m.LeaveConsumerGroup(S, T, NUM_G),
    m.SendMessages(S, T, m.Partitioning.partition(1),
                   (m.Message(b"a", 1), m.Message(b"b", 2, (m.UserHeader.of("k", m.HeaderKind.UINT32, 7),)))),
    m.SendMessages(S, T, m.Partitioning(m.PartitioningKind.BALANCED, bytes(4)), (m.Message(b"", 3),)),
]


def _vsr_round_trip(req: m.Request) -> m.Request:
    register = req.command in (Command.LOGIN_REGISTER, Command.LOGIN_REGISTER_WITH_PAT)
    frame = codec.encode_request_frame(req, Dialect.VSR, client=77, request=0 if register else 5,
                                       session=0 if register else 3)
    (got,) = VsrFrameReader().feed(frame)
    return codec.decode_vsr_request(got)


@pytest.mark.parametrize("req", COMMON + LEGACY_AND_VSR + LEGACY_ONLY, ids=repr)
def test_legacy_round_trip(req: m.Request) -> None:
    payload = codec.encode_request(req, Dialect.LEGACY)
    assert codec.decode_request(Dialect.LEGACY, req.command, payload) == req


@pytest.mark.parametrize("req", COMMON + LEGACY_AND_VSR + VSR_ONLY, ids=repr)
def test_vsr_round_trip(req: m.Request) -> None:
    assert _vsr_round_trip(req) == req


@pytest.mark.parametrize("req", COMMON + SEED_ONLY, ids=repr)
def test_seed_round_trip(req: m.Request) -> None:
    payload = codec.encode_request(req, Dialect.SEED)
    assert codec.decode_request(Dialect.SEED, req.command, payload) == req


def test_every_command_has_one_decoder_and_every_request_one_encoder() -> None:
    assert set(codec.DECODERS) == set(Command)
    samples = COMMON + LEGACY_AND_VSR + LEGACY_ONLY + VSR_ONLY + SEED_ONLY
    assert {type(s) for s in samples} == set(codec.ENCODERS)


# -- exact layouts ------------------------------------------------------------------------------


def test_seed_and_legacy_poll_lengths_differ_as_d3_says() -> None:
    """D.3 rule 4: a D poll with numeric ids is 35 bytes, the same request in L 38."""
    d = m.PollMessages(m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(1)), NUM_S, NUM_T, 1,
                       m.PollingStrategy(m.PollingKind.OFFSET, 0), 10, False)
    seed, legacy = codec.encode_request(d, Dialect.SEED), codec.encode_request(d, Dialect.LEGACY)
    assert (len(seed), len(legacy)) == (35, 38)
    with pytest.raises(IggyError) as err:
        codec.decode_request(Dialect.LEGACY, Command.POLL_MESSAGES, seed)
    assert err.value.status in (Status.INVALID_COMMAND, Status.INVALID_IDENTIFIER)
    with pytest.raises(IggyError):
        codec.decode_request(Dialect.SEED, Command.POLL_MESSAGES, legacy)


def test_seed_create_topic_layout() -> None:
    """A.5 item 3: stream, topic_id u32, partitions_count u32, message_expiry u32, name8."""
    payload = codec.encode_request(m.CreateTopic(NUM_S, "tt", 2, message_expiry=5, topic_id=3), Dialect.SEED)
    assert payload == bytes.fromhex("010401000000") + struct.pack("<III", 3, 2, 5) + b"\x02tt"


def test_seed_create_stream_layout() -> None:
    payload = codec.encode_request(m.CreateStream("s", stream_id=9), Dialect.SEED)
    assert payload == struct.pack("<I", 9) + b"\x01s"


def test_vsr_store_offset_defaults_to_quorum() -> None:
    req = m.StoreConsumerOffset(CONSUMER, S, T, 0, 1)
    assert codec.encode_request(req, Dialect.VSR)[-1] == 1
    assert codec.encode_request(req, Dialect.LEGACY)[-8:] == struct.pack("<Q", 1)


def test_register_with_token_names_itself_in_the_code_field() -> None:
    frame = codec.encode_request_frame(m.LoginRegisterWithToken(1, "a", "b", "t"), Dialect.VSR, client=1)
    header = RequestHeader.decode(frame)
    assert (header.operation, header.code) == (Operation.REGISTER, Command.LOGIN_REGISTER_WITH_PAT)
    assert header.request_checksum == request_checksum(Operation.REGISTER, frame[256:])


# -- errors -------------------------------------------------------------------------------------


def _legacy_error(code: int, payload: bytes, dialect: Dialect = Dialect.LEGACY) -> IggyError:
    with pytest.raises(IggyError) as err:
        codec.decode_request(dialect, code, payload)
    return err.value


def test_unknown_and_foreign_codes() -> None:
    assert _legacy_error(999, b"").status == Status.INVALID_COMMAND
    assert not _legacy_error(999, b"").close  # the connection stays open (D.2 step 2)
    assert _legacy_error(Command.LOGIN_USER, b"", Dialect.SEED).status == Status.INVALID_COMMAND
    assert _legacy_error(Command.LOGIN_REGISTER, b"").status == Status.INVALID_COMMAND
    assert _legacy_error(Command.SYNC_CONSUMER_GROUP, b"").status == Status.INVALID_COMMAND
    with pytest.raises(ValueError):
        codec.decode_request(Dialect.VSR, Command.PING, b"")


def test_trailing_bytes_are_invalid_command() -> None:
    assert _legacy_error(Command.PING, b"\x00").status == Status.INVALID_COMMAND
    good = codec.encode_request(m.GetStream(S), Dialect.LEGACY)
    assert _legacy_error(Command.GET_STREAM, good + b"\x00").status == Status.INVALID_COMMAND


@pytest.mark.parametrize(("raw", "status"), [
    (b"\x01\x03\x00\x00\x00", Status.INVALID_IDENTIFIER),  # numeric of length 3
    (b"\x02\x00", Status.INVALID_IDENTIFIER),  # empty name
    (b"\x02\x02\xff\xfe", Status.INVALID_IDENTIFIER),  # not UTF-8
    (b"\x03\x01a", Status.INVALID_IDENTIFIER),  # unknown kind
    (b"\x02\x05ab", Status.INVALID_COMMAND),  # truncated
])
def test_bad_identifiers(raw: bytes, status: Status) -> None:
    assert _legacy_error(Command.GET_STREAM, raw).status == status


def test_a_255_byte_name_is_the_longest() -> None:
    longest = m.Identifier("x" * 255)
    payload = codec.encode_request(m.GetStream(longest), Dialect.LEGACY)
    assert codec.decode_request(Dialect.LEGACY, Command.GET_STREAM, payload) == m.GetStream(longest)
    with pytest.raises(ValueError):
        codec.encode_request(m.GetStream(m.Identifier("x" * 256)), Dialect.LEGACY)


def test_login_limits_of_the_08_server() -> None:
    def login(user: bytes, password: bytes) -> bytes:
        return bytes([len(user)]) + user + bytes([len(password)]) + password + bytes(8)
    assert _legacy_error(Command.LOGIN_USER, login(b"ab", b"secret")).status == Status.INVALID_USERNAME
    assert _legacy_error(Command.LOGIN_USER, login(b"a" * 51, b"secret")).status == Status.INVALID_USERNAME
    assert _legacy_error(Command.LOGIN_USER, login(b"iggy", b"pw")).status == Status.INVALID_PASSWORD
    assert _legacy_error(Command.LOGIN_USER, login(b"iggy", b"p" * 101)).status == Status.INVALID_PASSWORD
    assert _legacy_error(Command.LOGIN_USER, login(b"", b"secret")).status == Status.INVALID_USERNAME


@pytest.mark.parametrize(("payload", "status"), [
    # consumer kind 3
    (b"\x03\x02\x02s1\x02\x02t1" + bytes(5) + b"\x01" + bytes(8) + bytes(5), Status.INVALID_FORMAT),
    (b"\x01\x01\x04" + bytes(4) + b"\x02\x02s1\x02\x02t1\x02" + bytes(4) + b"\x01" + bytes(13),
     Status.INVALID_FORMAT),  # partition flag 2
    (b"\x01\x01\x04" + bytes(4) + b"\x02\x02s1\x02\x02t1\x00" + bytes(4) + b"\x06" + bytes(13),
     Status.INVALID_FORMAT),  # polling kind 6
    (b"\x01\x01\x04" + bytes(4) + b"\x02\x02s1\x02\x02t1\x00" + bytes(4) + b"\x01" + bytes(12) + b"\x02",
     Status.INVALID_FORMAT),  # auto_commit 2
])
def test_bad_poll_fields(payload: bytes, status: Status) -> None:
    assert _legacy_error(Command.POLL_MESSAGES, payload).status == status


def test_names_report_the_command_specific_code() -> None:
    assert _legacy_error(Command.CREATE_STREAM, b"\x00").status == Status.INVALID_STREAM_NAME
    assert _legacy_error(Command.CREATE_STREAM, b"\x02\xff\xff").status == Status.INVALID_STREAM_NAME
    topic = b"\x02\x02s1" + struct.pack("<IBQQB", 1, 1, 0, 0, 0) + b"\x00"
    assert _legacy_error(Command.CREATE_TOPIC, topic).status == Status.INVALID_TOPIC_NAME
    assert _legacy_error(Command.CREATE_CONSUMER_GROUP, b"\x02\x02s1\x02\x02t1\x00").status == (
        Status.INVALID_CONSUMER_GROUP_NAME)


def test_unsupported_commands_keep_their_payload() -> None:
    for code in (Command.GET_SNAPSHOT_FILE, Command.DESCRIBE_OPTIONS):
        got = codec.decode_request(Dialect.LEGACY, code, b"\x01\x02")
        assert got == m.Unsupported(code, b"\x01\x02") and got.command == code


# -- VSR-specific errors ------------------------------------------------------------------------


def _vsr_error(operation: int, body: bytes = b"", *, code: int = 0, request: int = 1, session: int = 1,
               client: int = 5) -> IggyError:
    frame = VsrFrame(RequestHeader(client=client, operation=operation, request=request, session=session,
                                   code=code), body)
    with pytest.raises(IggyError) as err:
        codec.decode_vsr_request(frame)
    return err.value


def test_vsr_header_rules() -> None:
    assert _vsr_error(Operation.RESERVED).eviction == EvictionReason.INVALID_REQUEST_OPERATION
    assert _vsr_error(99).eviction == EvictionReason.INVALID_REQUEST_OPERATION
    assert _vsr_error(Operation.NON_REPLICATED, code=1, client=0).eviction == EvictionReason.SESSION_ERROR
    assert _vsr_error(Operation.REGISTER, session=3).eviction == EvictionReason.SESSION_ERROR
    assert _vsr_error(Operation.REGISTER, request=1, session=0).eviction == EvictionReason.SESSION_ERROR
    assert _vsr_error(Operation.CREATE_STREAM, b"\x01s", session=0).eviction == EvictionReason.NO_SESSION
    assert _vsr_error(Operation.LOGOUT, request=0).eviction == EvictionReason.NO_SESSION


def test_non_replicated_carries_only_non_replicated_codes() -> None:
    err = _vsr_error(Operation.NON_REPLICATED, b"\x01s", code=Command.CREATE_STREAM)
    assert err.status == Status.INVALID_COMMAND and err.eviction is None
    assert _vsr_error(Operation.NON_REPLICATED, code=Command.LOGIN_USER).status == Status.INVALID_COMMAND
    assert _vsr_error(Operation.NON_REPLICATED, code=4242).status == Status.INVALID_COMMAND
    ping = VsrFrame(RequestHeader(client=5, operation=Operation.NON_REPLICATED, code=1), b"")
    assert codec.decode_vsr_request(ping) == m.Ping()  # session 0 is fine before login


def test_malformed_login_is_an_eviction() -> None:
    body = codec.encode_request(m.LoginRegister(0x2C00, "rust-sdk", "0.11.0", "iggy", "iggy"), Dialect.VSR)
    for cut in (2, 10, len(body) - 1):
        err = _vsr_error(Operation.REGISTER, body[:cut], request=0, session=0)
        assert err.eviction == EvictionReason.MALFORMED_LOGIN
    token = codec.encode_request(m.LoginRegisterWithToken(0x2C00, "rust-sdk", "0.11.0", "t"), Dialect.VSR)
    err = _vsr_error(Operation.REGISTER, token[:-2], code=Command.LOGIN_REGISTER_WITH_PAT, request=0,
                     session=0)
    assert err.eviction == EvictionReason.MALFORMED_LOGIN


def _options_error(options: bytes) -> IggyError:
    return _vsr_error(Operation.CREATE_STREAM, b"\x01s" + options)


def _tlv(kind: int, raw: bytes) -> bytes:
    return bytes([kind]) + struct.pack("<I", len(raw)) + raw


def test_options_block_rules() -> None:
    assert _options_error(_tlv(1, b"k") + _tlv(2, b"v")).status == Status.INVALID_FORMAT  # non-string key
    assert _options_error(_tlv(2, b"\xff") + _tlv(2, b"v")).status == Status.INVALID_FORMAT  # not UTF-8
    dup = _tlv(2, b"k") + _tlv(2, b"v")
    assert _options_error(dup + dup).status == Status.INVALID_FORMAT
    many = b"".join(_tlv(2, f"k{i}".encode()) + _tlv(2, b"v") for i in range(1025))
    assert _options_error(many).status == Status.OPTIONS_BLOCK_TOO_LARGE
    huge = b"".join(_tlv(2, f"{i:0>200}".encode()) + _tlv(2, b"v" * 255) for i in range(230))
    assert _options_error(huge).status == Status.OPTIONS_BLOCK_TOO_LARGE
    assert _options_error(_tlv(2, b"k")).status == Status.INVALID_FORMAT  # key without value


def test_topic_option_values_are_checked() -> None:
    head = codec.encode_request(m.CreateTopic(S, "t", 1), Dialect.VSR)

    def create(opts: bytes) -> IggyError:
        return _vsr_error(Operation.CREATE_TOPIC, head + opts)
    assert create(_tlv(2, b"compression_algorithm") + _tlv(2, b"lz4")).status == Status.INVALID_OPTION_VALUE
    assert create(_tlv(2, b"compression_algorithm") + _tlv(9, b"\x02")).status == Status.INVALID_OPTION_VALUE
    assert create(_tlv(2, b"message_expiry") + _tlv(11, bytes(4))).status == Status.INVALID_OPTION_VALUE
    assert create(_tlv(2, b"max_topic_size") + _tlv(12, bytes(7))).status == Status.INVALID_OPTION_VALUE


def test_unknown_option_keys_are_kept_not_interpreted() -> None:
    req = m.CreateTopic(S, "t", 1, options=(m.UserHeader.of("segment_size", m.HeaderKind.UINT64, 5),))
    assert _vsr_round_trip(req) == req


# -- replies ------------------------------------------------------------------------------------

TOPIC_L = m.TopicInfo(1, 10, 2, 0, 1, 0, 100, 5, "t", replication_factor=1)
TOPIC_V = m.TopicInfo(1, 10, 2, 0, 1, 0, 100, 5, "t", options=OPTIONS[:1], derived_options=OPTIONS[1:3])
PARTS = (m.PartitionInfo(0, 10, 1, 4, 50, 5), m.PartitionInfo(1, 10, 1, 0, 0, 0))
STREAM = m.StreamInfo(0, 9, 1, 100, 5, "s")
STATS = m.Stats(1, 1.5, 2.25, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, "h", "Linux", "6", "6.1",
                "0.8.0", 8000, (m.CacheMetric(1, 2, 3, 4, 5, 0.5),), 18, 19, 20)

REPLIES: list[tuple[Command, m.Reply, tuple[Dialect, ...]]] = [
    (Command.GET_STREAM, m.StreamDetails(STREAM, (TOPIC_L,)), (Dialect.LEGACY, Dialect.SEED)),
    (Command.GET_STREAM, m.StreamDetails(m.StreamInfo(0, 9, 1, 100, 5, "s", OPTIONS[:2]), (TOPIC_V,)),
     (Dialect.VSR,)),
    (Command.CREATE_STREAM, m.StreamDetails(m.StreamInfo(3, 9, 0, 0, 0, "new")), tuple(Dialect)),
    (Command.GET_TOPIC, m.TopicDetails(TOPIC_L, PARTS), (Dialect.LEGACY,)),
    (Command.CREATE_TOPIC, m.TopicDetails(TOPIC_V, PARTS), (Dialect.VSR,)),
    (Command.GET_STREAMS, (STREAM, m.StreamInfo(1, 9, 0, 0, 0, "b")), tuple(Dialect)),
    (Command.GET_TOPICS, (TOPIC_L, TOPIC_L), (Dialect.LEGACY,)),
    (Command.GET_TOPICS, (TOPIC_V,), (Dialect.VSR,)),
    (Command.GET_CONSUMER_GROUP, m.ConsumerGroupDetails(
        m.ConsumerGroupInfo(0, 4, 2, "g"),
        (m.ConsumerGroupMember(1, (0, 2)), m.ConsumerGroupMember(2, (1, 3)))),
     tuple(Dialect)),
    (Command.GET_CONSUMER_GROUPS, (m.ConsumerGroupInfo(0, 4, 0, "g"), m.ConsumerGroupInfo(1, 4, 0, "h")),
     tuple(Dialect)),
    (Command.SYNC_CONSUMER_GROUP, m.ConsumerGroupAssignment(7, (0, 5, 9)), (Dialect.VSR,)),
    (Command.GET_CONSUMER_OFFSET, m.ConsumerOffsetInfo(0, 10, 4), tuple(Dialect)),
    (Command.SEND_MESSAGES,
     m.SendConfirmations((m.SendConfirmation(1, 2, 3, 4), m.SendConfirmation(1, 2, 4, 0))),
     (Dialect.VSR,)),
    (Command.LOGIN_USER, m.LoginReply(0), (Dialect.LEGACY,)),
    (Command.LOGIN_REGISTER, m.LoginRegisterReply(0, 99, 0x2C00, "0.11.0"), (Dialect.VSR,)),
    (Command.GET_CLUSTER_METADATA, m.ClusterMetadata("single-node", (
        m.ClusterNode("iggy-node", "127.0.0.1", 8090, 8080, 3000, 8092),)), tuple(Dialect)),
    (Command.GET_STATS, STATS, tuple(Dialect)),
    (Command.GET_ME, m.ClientDetails(m.ClientInfo(1, 0, 1, "127.0.0.1:5000", 1), (m.ClientGroup(0, 0, 0),)),
     tuple(Dialect)),
    (Command.GET_CLIENTS, (m.ClientInfo(1, 0, 1, "a", 0), m.ClientInfo(2, 0, 2, "b", 3)), tuple(Dialect)),
]


@pytest.mark.parametrize(("command", "reply", "dialects"), REPLIES, ids=lambda x: getattr(x, "name", ""))
def test_reply_round_trip(command: Command, reply: m.Reply, dialects: tuple[Dialect, ...]) -> None:
    for dialect in dialects:
        payload = codec.encode_reply(reply, dialect)
        assert codec.decode_reply(command, payload, dialect) == reply


def test_legacy_and_vsr_topic_records_differ() -> None:
    """C.8: no replication_factor byte in V; two u32-prefixed option blocks after the name."""
    plain = m.TopicInfo(1, 10, 2, 0, 1, 0, 100, 5, "t")
    legacy, vsr = codec.encode_reply((plain,), Dialect.LEGACY), codec.encode_reply((plain,), Dialect.VSR)
    assert len(legacy) == 51 + 1 and len(vsr) == 50 + 1 + 8
    assert len(codec.encode_reply((STREAM,), Dialect.LEGACY)) == 33 + 1
    assert len(codec.encode_reply((STREAM,), Dialect.VSR)) == 33 + 1 + 4


def test_empty_replies() -> None:
    assert codec.decode_reply(Command.GET_STREAM, b"", Dialect.LEGACY) is None  # not found
    assert codec.decode_reply(Command.GET_STREAMS, b"", Dialect.LEGACY) == ()
    assert codec.decode_reply(Command.PING, b"", Dialect.VSR) is None
    with pytest.raises(IggyError):
        codec.decode_reply(Command.PING, b"\x00\x00", Dialect.VSR)
    with pytest.raises(IggyError):
        codec.decode_reply(Command.GET_CONSUMER_OFFSET, bytes(21), Dialect.LEGACY)
    assert codec.encode_reply((), Dialect.LEGACY) == b""


def test_encoders_refuse_inconsistent_counts() -> None:
    with pytest.raises(ValueError):
        codec.encode_reply(m.StreamDetails(STREAM, ()), Dialect.LEGACY)
    with pytest.raises(ValueError):
        codec.encode_reply(m.TopicDetails(TOPIC_L, PARTS[:1]), Dialect.LEGACY)
    with pytest.raises(ValueError):
        codec.encode_reply(m.ConsumerGroupDetails(m.ConsumerGroupInfo(0, 1, 1, "g")), Dialect.LEGACY)
    with pytest.raises(ValueError):
        codec.encode_reply(m.LoginRegisterReply(0, 0, 1, "v"), Dialect.VSR)  # session must be non-zero
    with pytest.raises(ValueError):
        codec.encode_request(m.CreateConsumerGroup(S, T, None, 1), Dialect.LEGACY)


def test_cluster_metadata_exact_bytes() -> None:
    """B.4: str32 name, u32 count, per node str32 name, str32 ip, four u16 ports, u8 role, u8 status."""
    reply = m.ClusterMetadata("c", (m.ClusterNode("n", "1", 8090, 8080, 3000, 8092, 0, 0),))
    assert codec.encode_reply(reply, Dialect.LEGACY) == (
        struct.pack("<I", 1) + b"c" + struct.pack("<I", 1) + struct.pack("<I", 1) + b"n"
        + struct.pack("<I", 1) + b"1" + struct.pack("<HHHHBB", 8090, 8080, 3000, 8092, 0, 0))


# -- bayou's WAIT_FOR_MESSAGES (10100) ------------------------------------------------------------


def test_wait_for_messages_round_trips_on_the_legacy_transport() -> None:
    req = m.WaitForMessages(750, (
        m.WaitTopic(m.Identifier("s"), m.Identifier(7), ((0, 5), (3, 2**63))),
        m.WaitTopic(m.Identifier(1), m.Identifier("t"), ()),
    ))
    frame = codec.encode_request_frame(req, Dialect.LEGACY)
    size, code = struct.unpack_from("<II", frame)
    assert code == 10_100 and size == len(frame) - 4
    assert codec.decode_request(Dialect.LEGACY, code, frame[8:]) == req
    # the layout: u32 wait, u32 topics, then Identifiers, u32 count, (u32 partition, u64 offset)
    assert frame[8:16] == struct.pack("<II", 750, 2)


def test_wait_for_messages_is_refused_where_iggy_has_no_such_command() -> None:
    payload = codec.encode_request_frame(m.WaitForMessages(0, ()), Dialect.LEGACY)[8:]
    with pytest.raises(IggyError) as seed:  # the design document's dialect lists its commands
        codec.decode_request(Dialect.SEED, Command.WAIT_FOR_MESSAGES, payload)
    assert seed.value.status == Status.INVALID_COMMAND
    assert Command.WAIT_FOR_MESSAGES not in NON_REPLICATED_COMMANDS  # nor in VSR framing


# -- bayou's POLL_PARTITIONS (10102) -------------------------------------------------------------


def test_poll_partitions_round_trips_on_the_legacy_transport_only() -> None:
    req = m.PollPartitions(1_500, (
        m.PollTopic(m.Identifier("s"), m.Identifier(7), ((0, 5, 500), (3, 2**63, 2**32 - 1))),
        m.PollTopic(m.Identifier(1), m.Identifier("t"), ()),
    ))
    frame = codec.encode_request_frame(req, Dialect.LEGACY)
    size, code = struct.unpack_from("<II", frame)
    assert code == 10_102 and size == len(frame) - 4
    assert codec.decode_request(Dialect.LEGACY, code, frame[8:]) == req
    # WAIT_FOR_MESSAGES' layout with a u32 count after each (u32 partition, u64 offset)
    assert frame[8:16] == struct.pack("<II", 1_500, 2)
    assert frame[8 + 8 + 3 + 6:][:4 + 16] == struct.pack("<IIQI", 2, 0, 5, 500)  # after "s" and 7
    with pytest.raises(IggyError) as trailing:
        codec.decode_request(Dialect.LEGACY, code, frame[8:] + b"\0")
    assert trailing.value.status == Status.INVALID_COMMAND
    with pytest.raises(IggyError) as cut:
        codec.decode_request(Dialect.LEGACY, code, frame[8:-1])
    assert cut.value.status == Status.INVALID_COMMAND
    with pytest.raises(IggyError) as seed:
        codec.decode_request(Dialect.SEED, Command.POLL_PARTITIONS, frame[8:])
    assert seed.value.status == Status.INVALID_COMMAND
    assert Command.POLL_PARTITIONS not in NON_REPLICATED_COMMANDS


def test_poll_partitions_lists_at_most_ten_thousand_partitions() -> None:
    def payload(n: int) -> bytes:
        req = m.PollPartitions(0, (m.PollTopic(S, T, tuple((p, 0, 1) for p in range(n))),))
        return codec.encode_request_frame(req, Dialect.LEGACY)[8:]
    assert len(codec.decode_request(Dialect.LEGACY, Command.POLL_PARTITIONS, payload(10_000))
               .topics[0].partitions) == 10_000  # type: ignore[attr-defined]
    with pytest.raises(IggyError) as many:
        codec.decode_request(Dialect.LEGACY, Command.POLL_PARTITIONS, payload(10_001))
    assert many.value.status == Status.INVALID_COMMAND


# -- bayou's POLL_BATCHES (10101) ----------------------------------------------------------------


def test_poll_batches_is_poll_messages_under_another_code() -> None:
    strategy = m.PollingStrategy(m.PollingKind.OFFSET, 1 << 40)
    batches = m.PollBatches(GROUP, S, T, None, strategy, 5000, True)
    poll = m.PollMessages(GROUP, S, T, None, strategy, 5000, True)
    frame = codec.encode_request_frame(batches, Dialect.LEGACY)
    size, code = struct.unpack_from("<II", frame)
    assert code == 10_101 and size == len(frame) - 4
    assert frame[8:] == codec.encode_request_frame(poll, Dialect.LEGACY)[8:]  # the same request bytes
    assert codec.decode_request(Dialect.LEGACY, code, frame[8:]) == batches
    with pytest.raises(IggyError) as seed:
        codec.decode_request(Dialect.SEED, Command.POLL_BATCHES, frame[8:])
    assert seed.value.status == Status.INVALID_COMMAND
    assert Command.POLL_BATCHES not in NON_REPLICATED_COMMANDS


def test_poll_batches_may_carry_a_wait() -> None:
    """bayou's long poll: a u32 wait (ms) after POLL_MESSAGES' fields, sent only when above 0 (a
    poll without it is byte for byte the one older brokers take)."""
    strategy = m.PollingStrategy(m.PollingKind.OFFSET, 12)
    plain = codec.encode_request_frame(m.PollBatches(CONSUMER, S, T, 3, strategy, 100, False), Dialect.LEGACY)
    waiting = m.PollBatches(CONSUMER, S, T, 3, strategy, 100, False, 2_500)
    frame = codec.encode_request_frame(waiting, Dialect.LEGACY)
    assert codec.encode_request_frame(m.PollBatches(CONSUMER, S, T, 3, strategy, 100, False, 0),
                                      Dialect.LEGACY) == plain
    assert frame[8:] == plain[8:] + struct.pack("<I", 2_500)
    assert struct.unpack_from("<I", frame)[0] == len(frame) - 4
    assert codec.decode_request(Dialect.LEGACY, Command.POLL_BATCHES, frame[8:]) == waiting
    assert codec.decode_request(Dialect.LEGACY, Command.POLL_BATCHES, plain[8:]).max_wait_ms == 0
    for bad in (frame[8:-1], frame[8:-3], frame[8:] + b"\0", plain[8:] + b"\0"):  # a cut or a longer tail
        with pytest.raises(IggyError) as info:
            codec.decode_request(Dialect.LEGACY, Command.POLL_BATCHES, bad)
        assert info.value.status == Status.INVALID_COMMAND
    with pytest.raises(IggyError):  # POLL_MESSAGES itself takes no wait
        codec.decode_request(Dialect.LEGACY, Command.POLL_MESSAGES, frame[8:])


def test_poll_batches_reply_is_the_v_layout() -> None:
    polled = m.PolledMessages(0, 9, (m.PolledMessage(8, 1_000, 900, 5, b"a", ()),
                                     m.PolledMessage(9, 1_000, 950, 6, b"bc", ())))
    payload = codec.encode_reply(polled, Dialect.VSR)
    assert codec.decode_reply(Command.POLL_BATCHES, payload, Dialect.LEGACY) == polled


@pytest.mark.parametrize("payload", [
    b"",
    struct.pack("<II", 0, 1),  # a topic announced, none there
    struct.pack("<I", 0) + struct.pack("<I", 0) + b"x",  # trailing bytes
    struct.pack("<II", 0, 1) + enc_identifier(m.Identifier("s")) + enc_identifier(m.Identifier("t"))
    + struct.pack("<I", 10_001),  # more partitions than a wait may list: refused before reading them
])
def test_malformed_waits_are_invalid_command(payload: bytes) -> None:
    with pytest.raises(IggyError) as info:
        codec.decode_request(Dialect.LEGACY, Command.WAIT_FOR_MESSAGES, payload)
    assert info.value.status == Status.INVALID_COMMAND
