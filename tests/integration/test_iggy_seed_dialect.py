"""The design-document dialect (D, iggy.md A and D.3) end to end, over real sockets.

With ``IggyOptions(seed_dialect=True)`` a legacy-framed connection that never logs in is served with
the seed's payload layouts: client-chosen ids from 1 (streams, topics, groups), partitions numbered
from 1 (0 = "not specified"), consumers as kind + u32, the 2023 send layout (id, headers, payload per
message) and polled messages with a state byte and a CRC32 of the payload (A.5). Replies use the L
record layouts where the seed is silent (A.5 item 8). Every request here is built by the codec's
encoders in ``Dialect.SEED``, every reply read back by its decoders (which verify the CRC32s).

With the option off (the default) the same commands are refused with status 40 (D.3 rule 2, H.5).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, Status
from bayou.protocols.iggy.framing import Dialect
from bayou.server.app import BayouServer
from support.iggy import LegacyConn, iggy_port, legacy_login, start_iggy

pytestmark = pytest.mark.asyncio(loop_scope="module")

D = Dialect.SEED
ID = m.Identifier
HDR = m.UserHeader.of("trace", m.HeaderKind.STRING, "abc")


def consumer(cid: int) -> m.Consumer:
    return m.Consumer(m.ConsumerKind.CONSUMER, ID(cid))


def group_consumer(gid: int) -> m.Consumer:
    return m.Consumer(m.ConsumerKind.GROUP, ID(gid))


def poll(stream: int, topic: int, partition: int, kind: m.PollingKind, value: int = 0, *, count: int = 100,
         auto_commit: bool = False, who: m.Consumer | None = None) -> m.PollMessages:
    return m.PollMessages(who or consumer(1), ID(stream), ID(topic), partition,
                          m.PollingStrategy(kind, value), count, auto_commit)


def send(stream: int, topic: int, partitioning: m.Partitioning, *payloads: bytes | m.Message
         ) -> m.SendMessages:
    msgs = tuple(p if isinstance(p, m.Message) else m.Message(p) for p in payloads)
    return m.SendMessages(ID(stream), ID(topic), partitioning, msgs)


@dataclass
class Servers:
    on: BayouServer
    off: BayouServer

    async def seed(self) -> LegacyConn:
        return await LegacyConn.open(iggy_port(self.on), D)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def servers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Servers]:
    on = await start_iggy(tmp_path_factory.mktemp("seed-on") / "data", seed_dialect=True)
    off = await start_iggy(tmp_path_factory.mktemp("seed-off") / "data")
    try:
        yield Servers(on, off)
    finally:
        await on.stop()
        await off.stop()


async def stream_and_topic(c: LegacyConn, sid: int, tid: int, partitions: int = 3) -> None:
    created = await c.call(m.CreateStream(f"stream-{sid}", stream_id=sid))
    assert created.stream.id == sid
    topic = await c.call(m.CreateTopic(ID(sid), f"topic-{tid}", partitions, message_expiry=0, topic_id=tid))
    assert topic.topic.id == tid


# -- system -------------------------------------------------------------------------------------


async def test_ping_and_stats_without_login(servers: Servers) -> None:
    c = await servers.seed()
    await c.ping()
    stats = await c.call(m.GetStats())
    assert isinstance(stats, m.Stats) and stats.process_id > 0
    await c.ping()


async def test_me_and_clients(servers: Servers) -> None:
    c = await servers.seed()
    me = await c.call(m.GetMe())
    assert isinstance(me, m.ClientDetails)
    assert me.client.user_id == 0xFFFF_FFFF and me.client.transport == 1  # nobody logged in
    again = await c.call(m.GetClient(me.client.client_id))
    assert again.client == me.client
    assert await c.call(m.GetClient(0xFFFF_FFF0)) is None
    clients = await c.call(m.GetClients())
    assert me.client.client_id in [x.client_id for x in clients]


# -- streams, topics, partitions ----------------------------------------------------------------


async def test_streams_with_client_chosen_ids(servers: Servers) -> None:
    c = await servers.seed()
    created = await c.call(m.CreateStream("orders", stream_id=7))
    assert created == m.StreamDetails(m.StreamInfo(7, created.stream.created_at, 0, 0, 0, "orders"))
    assert await c.status(m.CreateStream("orders-again", stream_id=7)) == Status.STREAM_ID_ALREADY_EXISTS
    assert await c.status(m.CreateStream("orders", stream_id=8)) == Status.STREAM_NAME_ALREADY_EXISTS
    assert await c.status(m.CreateStream("zero", stream_id=0)) == Status.INVALID_STREAM_ID
    got = await c.call(m.GetStream(ID(7)))
    assert got.stream.name == "orders"
    assert (await c.call(m.GetStream(ID("orders")))).stream.id == 7
    assert 7 in [s.id for s in await c.call(m.GetStreams())]
    # an L client sees the same stream under the D client's id
    lc = await legacy_login(iggy_port(servers.on))
    assert (await lc.call(m.GetStream(ID(7)))).stream.name == "orders"
    await c.call(m.DeleteStream(ID(7)))
    assert await c.call(m.GetStream(ID(7))) is None
    assert await c.status(m.DeleteStream(ID(7))) == Status.STREAM_ID_NOT_FOUND


async def test_topics_and_partitions_are_numbered_from_1(servers: Servers) -> None:
    c = await servers.seed()
    await c.call(m.CreateStream("catalog", stream_id=10))
    topic = await c.call(m.CreateTopic(ID(10), "items", 3, message_expiry=0, topic_id=4))
    assert (topic.topic.id, topic.topic.name, topic.topic.partitions_count) == (4, "items", 3)
    assert [p.id for p in topic.partitions] == [1, 2, 3]
    assert await c.status(m.CreateTopic(ID(10), "other", 1, message_expiry=0, topic_id=4)) == (
        Status.TOPIC_ID_ALREADY_EXISTS)
    assert await c.status(m.CreateTopic(ID(10), "items", 1, message_expiry=0, topic_id=5)) == (
        Status.TOPIC_NAME_ALREADY_EXISTS)
    assert await c.status(m.CreateTopic(ID(10), "zero", 1, message_expiry=0, topic_id=0)) == (
        Status.INVALID_TOPIC_ID)
    assert await c.status(m.CreateTopic(ID(10), "none", 0, message_expiry=0, topic_id=6)) == (
        Status.INVALID_PARTITIONS_COUNT)
    await c.call(m.CreateTopic(ID(10), "logs", 1, message_expiry=0, topic_id=2))
    topics = await c.call(m.GetTopics(ID(10)))
    assert [(t.id, t.name) for t in topics] == [(2, "logs"), (4, "items")]
    got = await c.call(m.GetTopic(ID(10), ID(4)))
    assert got == await c.call(m.GetTopic(ID("catalog"), ID("items")))
    stream = await c.call(m.GetStream(ID(10)))
    assert [t.id for t in stream.topics] == [2, 4]

    await c.call(m.CreatePartitions(ID(10), ID(4), 2))
    assert [p.id for p in (await c.call(m.GetTopic(ID(10), ID(4)))).partitions] == [1, 2, 3, 4, 5]
    await c.call(m.DeletePartitions(ID(10), ID(4), 3))
    assert [p.id for p in (await c.call(m.GetTopic(ID(10), ID(4)))).partitions] == [1, 2]
    assert await c.status(m.DeletePartitions(ID(10), ID(4), 2)) == Status.INVALID_PARTITIONS_COUNT

    await c.call(m.DeleteTopic(ID(10), ID(2)))
    assert await c.call(m.GetTopic(ID(10), ID(2))) is None
    assert await c.status(m.DeleteTopic(ID(10), ID(2))) == Status.TOPIC_ID_NOT_FOUND
    await c.call(m.DeleteStream(ID(10)))
    assert await c.call(m.GetTopic(ID(10), ID(4))) is None


# -- sending and polling ------------------------------------------------------------------------


async def test_send_and_poll_every_strategy(servers: Servers) -> None:
    c = await servers.seed()
    await stream_and_topic(c, 20, 1, partitions=2)
    p1 = m.Partitioning.partition(1)  # D partition 1 = the first partition
    await c.call(send(20, 1, p1, m.Message(b"a0", 0xABCDEF, (HDR,)), b"a1"))
    await asyncio.sleep(0.003)
    cut = time.time_ns() // 1000
    await asyncio.sleep(0.003)
    await c.call(send(20, 1, p1, b"a2", b"a3", b"a4"))
    await c.call(send(20, 1, m.Partitioning.partition(2), b"b0"))
    assert await c.status(send(20, 1, m.Partitioning.partition(0), b"x")) == Status.PARTITION_NOT_FOUND
    assert await c.status(send(20, 1, m.Partitioning.partition(3), b"x")) == Status.PARTITION_NOT_FOUND

    first = await c.call(poll(20, 1, 1, m.PollingKind.FIRST))
    assert isinstance(first, m.PolledMessages)
    assert (first.partition_id, first.current_offset) == (1, 4)
    assert [(x.offset, x.payload) for x in first.messages] == [
        (0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"a3"), (4, b"a4")]
    assert first.messages[0].id == 0xABCDEF and first.messages[0].headers == (HDR,)
    assert all(x.id for x in first.messages)  # id 0 = the server mints one
    assert first.messages[0].timestamp < cut < first.messages[2].timestamp

    offset = await c.call(poll(20, 1, 1, m.PollingKind.OFFSET, 3, count=1))
    assert [x.payload for x in offset.messages] == [b"a3"]
    past = await c.call(poll(20, 1, 1, m.PollingKind.OFFSET, 9))
    assert (past.partition_id, past.current_offset, past.messages) == (1, 4, ())
    stamp = await c.call(poll(20, 1, 1, m.PollingKind.TIMESTAMP, cut))
    assert [x.offset for x in stamp.messages] == [2, 3, 4]
    last = await c.call(poll(20, 1, 1, m.PollingKind.LAST, count=2))
    assert [x.offset for x in last.messages] == [3, 4]
    other = await c.call(poll(20, 1, 2, m.PollingKind.FIRST))
    assert (other.partition_id, [x.payload for x in other.messages]) == (2, [b"b0"])
    unspecified = await c.call(poll(20, 1, 0, m.PollingKind.FIRST, count=1))  # 0 = not specified
    assert (unspecified.partition_id, [x.payload for x in unspecified.messages]) == (1, [b"a0"])
    assert await c.status(poll(20, 1, 3, m.PollingKind.FIRST)) == Status.PARTITION_NOT_FOUND

    # Next with auto-commit walks the partition for one consumer id
    who = consumer(42)
    step = await c.call(poll(20, 1, 1, m.PollingKind.NEXT, count=2, auto_commit=True, who=who))
    assert [x.offset for x in step.messages] == [0, 1]
    step = await c.call(poll(20, 1, 1, m.PollingKind.NEXT, count=2, auto_commit=True, who=who))
    assert [x.offset for x in step.messages] == [2, 3]
    assert await c.call(m.GetConsumerOffset(who, ID(20), ID(1), 1)) == m.ConsumerOffsetInfo(1, 4, 3)
    fresh = await c.call(poll(20, 1, 1, m.PollingKind.NEXT, count=1, who=consumer(43)))
    assert [x.offset for x in fresh.messages] == [0]


async def test_balanced_and_keyed_sends(servers: Servers) -> None:
    c = await servers.seed()
    await stream_and_topic(c, 21, 1, partitions=2)
    for i in range(4):
        await c.call(send(21, 1, m.Partitioning.balanced(), b"r%d" % i))
    # a D client may send balanced partitioning as 4 zero bytes (A.3: "3..257 bytes")
    await c.call(send(21, 1, m.Partitioning(m.PartitioningKind.BALANCED, bytes(4)), b"r4"))
    for i in range(3):
        await c.call(send(21, 1, m.Partitioning.messages_key(b"user-1"), b"k%d" % i))
    seen = [[x.payload for x in (await c.call(poll(21, 1, p, m.PollingKind.FIRST))).messages] for p in (1, 2)]
    assert sorted(seen[0] + seen[1]) == sorted([b"r0", b"r1", b"r2", b"r3", b"r4", b"k0", b"k1", b"k2"])
    assert {len([x for x in part if x.startswith(b"r")]) for part in seen} == {2, 3}  # round robin
    keyed = [p for p, part in enumerate(seen) if b"k0" in part]
    assert len(keyed) == 1 and all(x in seen[keyed[0]] for x in (b"k0", b"k1", b"k2"))


async def test_consumer_offsets(servers: Servers) -> None:
    c = await servers.seed()
    await stream_and_topic(c, 22, 1, partitions=2)
    await c.call(send(22, 1, m.Partitioning.partition(2), b"x0", b"x1", b"x2"))
    who = consumer(7)
    assert await c.call(m.GetConsumerOffset(who, ID(22), ID(1), 2)) is None
    await c.call(m.StoreConsumerOffset(who, ID(22), ID(1), 2, 1))
    assert await c.call(m.GetConsumerOffset(who, ID(22), ID(1), 2)) == m.ConsumerOffsetInfo(2, 2, 1)
    nxt = await c.call(poll(22, 1, 2, m.PollingKind.NEXT, who=who))
    assert [x.payload for x in nxt.messages] == [b"x2"]
    assert await c.status(m.StoreConsumerOffset(who, ID(22), ID(1), 2, 3)) == Status.INVALID_OFFSET
    assert await c.status(m.StoreConsumerOffset(who, ID(22), ID(1), 1, 0)) == Status.INVALID_OFFSET  # empty
    # partition 0 = not specified: for a regular consumer, the first partition
    assert await c.call(m.GetConsumerOffset(consumer(8), ID(22), ID(1), 0)) is None
    assert await c.status(m.StoreConsumerOffset(consumer(8), ID(22), ID(1), 0, 0)) == Status.INVALID_OFFSET
    await c.call(send(22, 1, m.Partitioning.partition(1), b"y0"))
    await c.call(m.StoreConsumerOffset(consumer(8), ID(22), ID(1), 0, 0))
    assert await c.call(m.GetConsumerOffset(consumer(8), ID(22), ID(1), 1)) == m.ConsumerOffsetInfo(1, 0, 0)
    assert await c.call(m.GetConsumerOffset(consumer(8), ID(22), ID(1), 0)) == m.ConsumerOffsetInfo(1, 0, 0)


# -- consumer groups ----------------------------------------------------------------------------


async def test_consumer_groups_with_ids(servers: Servers) -> None:
    c = await servers.seed()
    await stream_and_topic(c, 23, 1, partitions=2)
    await c.call(send(23, 1, m.Partitioning.partition(1), b"g0", b"g1"))
    await c.call(send(23, 1, m.Partitioning.partition(2), b"h0"))
    created = await c.call(m.CreateConsumerGroup(ID(23), ID(1), None, 5))
    assert created == m.ConsumerGroupDetails(m.ConsumerGroupInfo(5, 2, 0, "5"))
    assert await c.status(m.CreateConsumerGroup(ID(23), ID(1), None, 0)) == Status.INVALID_CONSUMER_GROUP_ID
    assert await c.status(m.CreateConsumerGroup(ID(23), ID(1), None, 5)) == (
        Status.CONSUMER_GROUP_ID_ALREADY_EXISTS)
    await c.call(m.CreateConsumerGroup(ID(23), ID(1), None, 9))
    groups = await c.call(m.GetConsumerGroups(ID(23), ID(1)))
    assert [(g.id, g.members_count) for g in groups] == [(5, 0), (9, 0)]

    member = group_consumer(5)
    not_yet = poll(23, 1, 0, m.PollingKind.NEXT, who=member)
    assert await c.status(not_yet) == Status.CONSUMER_GROUP_MEMBER_NOT_FOUND
    await c.call(m.JoinConsumerGroup(ID(23), ID(1), ID(5)))
    details = await c.call(m.GetConsumerGroup(ID(23), ID(1), ID(5)))
    assert details.group.members_count == 1
    assert sorted(details.members[0].partitions) == [0, 1]  # member records carry bayou's partitions
    # a group poll without a partition goes round the member's partitions
    got = []
    for _ in range(2):
        polled = await c.call(poll(23, 1, 0, m.PollingKind.NEXT, auto_commit=True, who=member))
        got.append((polled.partition_id, [x.payload for x in polled.messages]))
    assert sorted(got) == [(1, [b"g0", b"g1"]), (2, [b"h0"])]
    again = await c.call(poll(23, 1, 1, m.PollingKind.NEXT, who=member))
    assert again.messages == ()  # auto-commit stored the group's offset
    assert await c.call(m.GetConsumerOffset(member, ID(23), ID(1), 1)) == m.ConsumerOffsetInfo(1, 1, 1)

    await c.call(m.LeaveConsumerGroup(ID(23), ID(1), ID(5)))
    assert (await c.call(m.GetConsumerGroup(ID(23), ID(1), ID(5)))).group.members_count == 0
    assert await c.status(m.LeaveConsumerGroup(ID(23), ID(1), ID(5))) == (
        Status.CONSUMER_GROUP_MEMBER_NOT_FOUND)
    await c.call(m.DeleteConsumerGroup(ID(23), ID(1), ID(9)))
    assert await c.call(m.GetConsumerGroup(ID(23), ID(1), ID(9))) is None
    assert await c.status(m.JoinConsumerGroup(ID(23), ID(1), ID(9))) == Status.CONSUMER_GROUP_ID_NOT_FOUND


async def test_membership_ends_with_the_connection(servers: Servers) -> None:
    a = await servers.seed()
    await stream_and_topic(a, 24, 1, partitions=2)
    await a.call(m.CreateConsumerGroup(ID(24), ID(1), None, 1))
    b = await servers.seed()
    await a.call(m.JoinConsumerGroup(ID(24), ID(1), ID(1)))
    await b.call(m.JoinConsumerGroup(ID(24), ID(1), ID(1)))
    details = await b.call(m.GetConsumerGroup(ID(24), ID(1), ID(1)))
    assert sorted(len(x.partitions) for x in details.members) == [1, 1]
    await a.close()
    for _ in range(100):
        details = await b.call(m.GetConsumerGroup(ID(24), ID(1), ID(1)))
        if details.group.members_count == 1:
            break
        await asyncio.sleep(0.02)
    assert details.group.members_count == 1 and sorted(details.members[0].partitions) == [0, 1]


# -- how a connection's dialect is decided ------------------------------------------------------


async def test_a_seed_connection_cannot_log_in_later(servers: Servers) -> None:
    c = await servers.seed()
    await c.call(m.GetStreams())
    login = codec.encode_request_frame(m.LoginUser("iggy", "iggy", "0.10.0"), Dialect.LEGACY)
    assert (await c.ask_raw(login)).status == Status.INVALID_COMMAND  # not a design-document command
    await c.ping()


async def test_a_logged_in_connection_speaks_l(servers: Servers) -> None:
    """Logging in makes the connection L (D.3 rule 1): seed layouts are then malformed."""
    c = await legacy_login(iggy_port(servers.on))
    seed_create = codec.encode_request_frame(m.CreateStream("l-only", stream_id=30), D)
    assert (await c.ask_raw(seed_create)).status == Status.INVALID_COMMAND
    created = await c.call(m.CreateStream("l-only"))
    assert created.stream.id == 0  # L: the server assigns, lowest free id
    await c.call(m.DeleteStream(ID(0)))


async def test_layout_of_the_other_dialect_is_refused(servers: Servers) -> None:
    """D.3 rule 4: a parse must consume the payload exactly; an L poll on a D connection fails."""
    c = await servers.seed()
    await stream_and_topic(c, 25, 1, partitions=1)
    await c.call(send(25, 1, m.Partitioning.partition(1), b"keep"))
    l_poll = codec.encode_request(poll(25, 1, 1, m.PollingKind.FIRST), Dialect.LEGACY)
    assert (await c.ask_code(Command.POLL_MESSAGES, l_poll)).status != 0
    l_create = codec.encode_request(m.CreateStream("as-l"), Dialect.LEGACY)
    assert (await c.ask_code(Command.CREATE_STREAM, l_create)).status == Status.INVALID_COMMAND
    assert await c.call(m.GetStream(ID("as-l"))) is None
    polled = await c.call(poll(25, 1, 1, m.PollingKind.FIRST))
    assert [x.payload for x in polled.messages] == [b"keep"]


# -- the option off -----------------------------------------------------------------------------

SEED_REQUESTS: list[m.Request] = [
    m.GetStats(),
    m.GetStreams(),
    m.GetStream(ID(1)),
    m.CreateStream("d", stream_id=1),
    m.DeleteStream(ID(1)),
    m.GetTopics(ID(1)),
    m.GetTopic(ID(1), ID(1)),
    m.CreateTopic(ID(1), "t", 1, message_expiry=0, topic_id=1),
    m.DeleteTopic(ID(1), ID(1)),
    m.CreatePartitions(ID(1), ID(1), 1),
    m.DeletePartitions(ID(1), ID(1), 1),
    send(1, 1, m.Partitioning.partition(1), b"x"),
    poll(1, 1, 1, m.PollingKind.FIRST),
    m.GetConsumerOffset(consumer(1), ID(1), ID(1), 1),
    m.StoreConsumerOffset(consumer(1), ID(1), ID(1), 1, 0),
    m.GetConsumerGroups(ID(1), ID(1)),
    m.GetConsumerGroup(ID(1), ID(1), ID(1)),
    m.CreateConsumerGroup(ID(1), ID(1), None, 1),
    m.DeleteConsumerGroup(ID(1), ID(1), ID(1)),
    m.JoinConsumerGroup(ID(1), ID(1), ID(1)),
    m.LeaveConsumerGroup(ID(1), ID(1), ID(1)),
    m.GetMe(),
    m.GetClients(),
    m.GetClient(1),
]


async def test_without_the_option_every_seed_command_needs_a_login(servers: Servers) -> None:
    c = await LegacyConn.open(iggy_port(servers.off), D)
    await c.ping()
    for req in SEED_REQUESTS:
        assert await c.status(req) == Status.UNAUTHENTICATED, req
        await c.ping()
    assert list(servers.off.broker.list_topics()) == []  # nothing was created
    admin = await legacy_login(iggy_port(servers.off))
    assert await admin.call(m.GetStreams()) == ()


async def test_every_seed_command_is_covered(servers: Servers) -> None:
    from bayou.protocols.iggy.codes import SEED_COMMANDS
    covered = {r.command for r in SEED_REQUESTS} | {Command.PING}
    assert covered == set(SEED_COMMANDS)
