"""bayou's extensions of the Iggy transport, over real sockets (in-process broker with the Iggy, V1
and Cursus listeners):

- record keys: the user header ``bayou.key`` (string key, RAW value) is the record key other
  protocols see, and a record key shows up as that header on an Iggy poll, never twice;
- plain bayou topics: CREATE_TOPIC in the ``default`` stream (always resolvable) makes the bayou
  topic of exactly that name, and CREATE_TOPIC / UPDATE_TOPIC options named like bayou topic config
  keys set that config (in L as an options block after the name, bayou's extension);
- message de-duplication (``message.deduplication=true``): a message whose id's low 64 bits are at
  or below the last stored for the producer named by its high 64 bits is dropped, on every send path
  (L fast path, L decoded, V, messages key), across a restart too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.client.wire import batches_to_arrow, partition_replies
from bayou.protocols.cursus.batch import decode_head, decode_messages
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy import stored as iggy_stored
from bayou.protocols.iggy.codes import Command, Status
from bayou.server.app import BayouServer, IggyOptions, ServerConfig
from bayou.server.iggy import fetch as iggy_fetch
from bayou.server.iggy import produce as iggy_produce
from bayou.server.iggy.catalog import DEFAULT_STREAM_ID, DEFAULT_STREAM_NAME
from support.brokers import LineConn
from support.cursus import FrameConn, envelope
from support.iggy import LegacyConn, VsrConn, ident, legacy_login, poll, send, vsr_login

pytestmark = pytest.mark.timeout(120)

DEFAULT = m.Identifier(DEFAULT_STREAM_NAME)
S, R = m.HeaderKind.STRING, m.HeaderKind.RAW
P = 0xB0B  # a producer id (the high 64 bits of a message id)


def key_header(key: bytes) -> m.UserHeader:
    return m.UserHeader(b"bayou.key", key, S, R)


def opt(name: str, value: str, kind: m.HeaderKind = S) -> m.UserHeader:
    return m.UserHeader(name.encode(), value.encode(), S, kind)


def ids(first: int, last: int, producer: int = P) -> list[int]:
    return [producer << 64 | seq for seq in range(first, last + 1)]


class Env:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.server: BayouServer | None = None

    async def start(self) -> Env:
        cfg = ServerConfig(
            broker=BrokerConfig(data_dir=self.data, min_insync_replicas=1),
            listeners={"iggy": ("127.0.0.1", 0), "rtes": ("127.0.0.1", 0), "cursus": ("127.0.0.1", 0)},
            advertised_host="127.0.0.1", shutdown_grace_s=2.0, iggy=IggyOptions())
        self.server = BayouServer(cfg)
        await self.server.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None

    def port(self, name: str) -> int:
        assert self.server is not None
        return self.server.listeners[name].port

    @property
    def broker(self) -> Broker:
        assert self.server is not None
        return self.server.broker

    async def legacy(self) -> LegacyConn:
        return await legacy_login(self.port("iggy"))

    async def vsr(self) -> VsrConn:
        return await vsr_login(self.port("iggy"))

    async def v1(self, line: str) -> str:
        conn = await LineConn.open(self.port("rtes"))
        try:
            return await conn.ask(line)
        finally:
            await conn.close()

    def stored(self, topic: str, partition: int = 0) -> list[tuple[int, int | None, bytes]]:
        """(offset, message id, value) of everything stored, as every protocol reads it."""
        log = self.broker.partition(topic, partition).log
        return [(r.offset, r.message_id, r.value) for r in log.read_records(0, 100_000)]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = await Env(tmp_path / "data").start()
    try:
        yield e
    finally:
        await e.stop()


async def cursus_read(port: int, topic: str, partition: int = 0) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, payload) of a partition through Cursus CONSUME."""
    c = await FrameConn.open(port)
    try:
        body = await c.ask(envelope(f"CONSUME topic={topic} partition={partition} offset=0 member=x "
                                    f"group=ext-reader batch=100000"))
        assert body[:2] == b"\xba\x7c", f"CONSUME answered {body[:200]!r}"
        return [(msg.offset, msg.key, msg.payload) for msg in decode_messages(body, decode_head(body))]
    finally:
        await c.close()


async def polled(conn: LegacyConn | VsrConn, stream: m.Identifier | str, topic: str,
                 partition: int = 0) -> tuple[m.PolledMessage, ...]:
    s = stream.value if isinstance(stream, m.Identifier) else stream
    reply = await conn.call(poll(s, topic, partition, kind=m.PollingKind.FIRST, count=1000))
    assert isinstance(reply, m.PolledMessages)
    return reply.messages


def describe_config(reply: str) -> dict[str, str]:
    assert reply.startswith("V1|1|OK|"), reply
    text = reply.split(" config=", 1)[1]
    return dict(kv.split("=", 1) for kv in text.split(",") if kv)


# -- record keys ----------------------------------------------------------------------------------


async def test_an_iggy_key_header_is_the_record_key_other_protocols_see(env: Env) -> None:
    conn = await env.legacy()
    v = await env.vsr()
    await conn.call(m.CreateTopic(DEFAULT, "keys", 1))
    trace = m.UserHeader.of("trace", m.HeaderKind.STRING, "t1")
    sent = [
        m.Message(b"first", 1, (key_header(b"user-1"), trace)),
        m.Message(b"second", 2, (trace, key_header(b"user-2"))),  # anywhere among the headers
        m.Message(b"third", 3, (m.UserHeader(b"bayou.key", b"str", S, S),)),  # not RAW: a header
        m.Message(b"fourth", 4),
    ]
    await conn.call(send(DEFAULT_STREAM_NAME, "keys", 0, sent[:2]))
    await v.call(send(DEFAULT_STREAM_NAME, "keys", 0, sent[2:]))  # the V path stores frames too

    # Cursus (and V1, TANK: the same records) sees the key and no bayou.key header
    got = await cursus_read(env.port("cursus"), "keys")
    assert got == [(0, b"user-1", b"first"), (1, b"user-2", b"second"), (2, b"", b"third"),
                   (3, b"", b"fourth")]
    records = env.broker.partition("keys", 0).log.read_records(0, 10)
    assert [r.key for r in records] == [b"user-1", b"user-2", None, None]
    assert [[n for n, _v in r.headers] for r in records] == [
        ["iggy.origin_ts", "iggy.h.trace"], ["iggy.origin_ts", "iggy.h.trace"],
        ["iggy.origin_ts", "iggy.h.bayou.key"], ["iggy.origin_ts"]]

    # Iggy polls serve the stored frames: each header once, where the producer put it
    for c in (conn, v):
        back = await polled(c, DEFAULT, "keys")
        assert [(x.payload, x.headers) for x in back] == [(s.payload, s.headers) for s in sent]
    await conn.close()
    await v.close()


async def test_record_keys_reach_iggy_polls_as_the_key_header(env: Env) -> None:
    assert (await env.v1("V1|1|ADMIN_CREATE_TOPIC|v1keys 1 1")).startswith("V1|1|OK|")
    long_key = "k" * 300  # Iggy header fields are 1..255 bytes: no header then
    for i, key in enumerate(["alpha", "beta", long_key]):
        assert (await env.v1(f"V1|1|PRODUCE|v1keys {key}:value-{i}")).startswith("V1|1|OK|")
    conn = await env.legacy()
    v = await env.vsr()
    for c in (conn, v):
        back = await polled(c, DEFAULT, "v1keys")
        assert [(x.payload, x.headers) for x in back] == [
            (b"value-0", (key_header(b"alpha"),)), (b"value-1", (key_header(b"beta"),)), (b"value-2", ())]

    # an Iggy messages-key send stores records keyed by the messages key; a message's own
    # bayou.key header is its key instead; either way the poll shows one bayou.key header
    await conn.call(m.CreateTopic(DEFAULT, "mk", 1))
    msgs = (m.Message(b"a", 1), m.Message(b"b", 2, (key_header(b"own"), m.UserHeader.of("n", S, "1"))))
    await conn.call(m.SendMessages(DEFAULT, ident("mk"), m.Partitioning.messages_key(b"route"), msgs))
    assert [r.key for r in env.broker.partition("mk", 0).log.read_records(0, 10)] == [b"route", b"own"]
    for c in (conn, v):
        back = await polled(c, DEFAULT, "mk")
        assert [x.headers for x in back] == [(key_header(b"route"),),
                                             (key_header(b"own"), m.UserHeader.of("n", S, "1"))]
    await conn.close()
    await v.close()


# -- the default stream ---------------------------------------------------------------------------


async def test_the_default_stream_always_resolves(env: Env) -> None:
    conn = await env.legacy()
    v = await env.vsr()
    for c in (conn, v):
        for stream in (DEFAULT, m.Identifier(DEFAULT_STREAM_ID)):
            details = await c.call(m.GetStream(stream))
            assert isinstance(details, m.StreamDetails), details
            assert (details.stream.id, details.stream.name, details.stream.topics_count) == (
                DEFAULT_STREAM_ID, DEFAULT_STREAM_NAME, 0)
            assert details.topics == ()
        assert await c.call(m.GetStreams()) == ()  # listed only while it holds topics
    assert await conn.call(m.GetTopics(DEFAULT)) == ()
    assert (await v.ask(m.GetTopics(DEFAULT))).result() == (0, b"\0\0\0\0")  # V: a u32 count, 0
    await conn.close()
    await v.close()


@pytest.mark.parametrize("framing", ["legacy", "vsr"])
async def test_create_topic_in_the_default_stream_makes_the_plain_bayou_topic(env: Env, framing: str) -> None:
    c: LegacyConn | VsrConn = await (env.legacy() if framing == "legacy" else env.vsr())
    name = f"plain.{framing}_topic-1"
    details = await c.call(m.CreateTopic(DEFAULT, name, 2))
    assert isinstance(details, m.TopicDetails)
    assert (details.topic.name, details.topic.partitions_count) == (name, 2)
    assert env.broker.list_topics() == [name]
    reply = await env.v1(f"V1|1|ADMIN_DESCRIBE_TOPIC|{name}")
    assert reply.startswith(f"V1|1|OK|topic={name} partitions=2"), reply
    streams = await c.call(m.GetStreams())
    assert [(s.id, s.name, s.topics_count) for s in streams] == [(DEFAULT_STREAM_ID, DEFAULT_STREAM_NAME, 1)]
    got = await c.call(m.GetTopic(DEFAULT, m.Identifier(name)))
    assert isinstance(got, m.TopicDetails) and got.topic.id == details.topic.id

    # what V1 produces there, Iggy reads, and the other way round
    assert (await env.v1(f"V1|1|PRODUCE|{name} k:from-v1")).startswith("V1|1|OK|")
    await c.call(send(DEFAULT_STREAM_NAME, name, 0, [b"from-iggy"]))
    values = sorted(v for p in (0, 1) for _o, _i, v in env.stored(name, p))
    assert values == [b"from-iggy", b"from-v1"]

    # refusals
    assert await c.status(m.CreateTopic(DEFAULT, name, 1)) == Status.TOPIC_NAME_ALREADY_EXISTS
    assert await c.status(m.CreateTopic(DEFAULT, "bad/name", 1)) == Status.INVALID_TOPIC_NAME
    assert await c.status(m.CreateTopic(DEFAULT, "..", 1)) == Status.INVALID_TOPIC_NAME
    assert await c.status(m.CreateTopic(DEFAULT, "x" * 250, 1)) == Status.INVALID_TOPIC_NAME
    assert await c.status(m.CreateTopic(DEFAULT, "zero", 0)) == Status.INVALID_PARTITIONS_COUNT
    assert (await env.v1("V1|1|ADMIN_CREATE_TOPIC|made-by-v1 1 1")).startswith("V1|1|OK|")
    assert await c.status(m.CreateTopic(DEFAULT, "made-by-v1", 1)) == Status.TOPIC_NAME_ALREADY_EXISTS
    await c.call(m.CreateStream("shop"))
    await c.call(m.CreateTopic(m.Identifier("shop"), "orders", 1))  # the bayou topic shop.orders
    assert await c.status(m.CreateTopic(DEFAULT, "shop.orders", 1)) == Status.TOPIC_NAME_ALREADY_EXISTS
    await c.close()


async def test_default_stream_topics_take_every_topic_command(env: Env) -> None:
    c = await env.legacy()
    t = m.Identifier("admin-me")
    await c.call(m.CreateTopic(DEFAULT, "admin-me", 1))
    await c.call(m.CreatePartitions(DEFAULT, t, 2))
    assert env.broker.partition_count("admin-me") == 3
    await c.call(m.DeletePartitions(DEFAULT, t, 1))
    assert env.broker.partition_count("admin-me") == 2
    await c.call(send(DEFAULT_STREAM_NAME, "admin-me", 1, [b"a", b"b"]))
    await c.call(m.PurgeTopic(DEFAULT, t))
    log = env.broker.partition("admin-me", 1).log
    assert (log.log_start_offset, log.next_offset) == (2, 2)
    await c.call(m.UpdateTopic(DEFAULT, t, 1, 3_600_000_000, 0, "admin-me",
                               options=(opt("segment.bytes", "65536"),)))
    assert env.broker.describe_topic("admin-me").config == {"retention.ms": "3600000",
                                                            "segment.bytes": "65536"}
    await c.call(m.DeleteTopic(DEFAULT, t))
    assert env.broker.list_topics() == []
    assert await c.call(m.GetTopic(DEFAULT, t)) is None
    details = await c.call(m.GetStream(DEFAULT))
    assert details.stream.topics_count == 0
    await c.close()


# -- options -> topic config ----------------------------------------------------------------------


async def test_create_topic_options_set_bayou_topic_config(env: Env) -> None:
    options = (opt("segment.bytes", "1048576"), opt("retention.ms", "86400000", R),
               opt("message.deduplication", "true"), opt("fsync", "interval:50"),
               opt("not.a.bayou.key", "ignored"), m.UserHeader.of("x", m.HeaderKind.UINT8, 3))
    conn = await env.legacy()
    await conn.call(m.CreateTopic(DEFAULT, "configured", 1, options=options))
    want = {"segment.bytes": "1048576", "retention.ms": "86400000", "message.deduplication": "true",
            "fsync": "interval:50"}
    assert env.broker.describe_topic("configured").config == want
    assert describe_config(await env.v1("V1|1|ADMIN_DESCRIBE_TOPIC|configured")) == want

    v = await env.vsr()  # V carries options in every stream; bayou keys override Iggy's fields
    await v.call(m.CreateStream("s"))
    v_options = (m.UserHeader.of("message_expiry", m.HeaderKind.UINT64, 5_000_000),
                 opt("retention.ms", "60000"), opt("retention.segments", "4"))
    await v.call(m.CreateTopic(m.Identifier("s"), "t", 1, options=v_options))
    assert env.broker.describe_topic("s.t").config == {"retention.ms": "60000", "retention.segments": "4"}

    # UPDATE_TOPIC carries options in both framings
    update = (opt("message.deduplication", "false"), opt("segment.bytes", "2097152"))
    await conn.call(m.UpdateTopic(DEFAULT, ident("configured"), 1, 0, 0, "configured", options=update))
    assert env.broker.describe_topic("configured").config == {
        "segment.bytes": "2097152", "message.deduplication": "false", "fsync": "interval:50"}
    await v.call(m.UpdateTopic(m.Identifier("s"), ident("t"), 1, 0, 0, "t",
                               options=(opt("retention.bytes", "999"),)))
    assert env.broker.describe_topic("s.t").config == {"retention.segments": "4", "retention.bytes": "999"}

    bad = [opt("retention.ms", "soon"), opt("message.deduplication", "maybe"), opt("fsync", "sometimes"),
           opt("segment.bytes", "1"), opt("message.deduplication.producers", "0"),
           m.UserHeader.of("segment.bytes", m.HeaderKind.UINT64, 1 << 20),  # a bayou key: a string value
           m.UserHeader(b"retention.ms", b"\xff\xfe", S, R)]  # not UTF-8
    invalid = Status.INVALID_OPTION_VALUE
    for i, o in enumerate(bad):
        assert await conn.status(m.CreateTopic(DEFAULT, f"bad-{i}", 1, options=(o,))) == invalid, o
        assert await v.status(m.CreateTopic(DEFAULT, f"bad-{i}", 1, options=(o,))) == invalid, o
        assert await conn.status(m.UpdateTopic(DEFAULT, ident("configured"), 1, 0, 0, "configured",
                                               options=(o,))) == invalid, o
    assert "bad-0" not in env.broker.topics
    assert env.broker.describe_topic("configured").config["segment.bytes"] == "2097152"
    await conn.close()
    await v.close()


# -- de-duplication -------------------------------------------------------------------------------


def msgs(message_ids: Sequence[int], *, headers: bool = False) -> list[m.Message]:
    """Equal-size messages; ``headers``: each with a user header whose size varies."""
    def extra(i: int) -> tuple[m.UserHeader, ...]:
        return (m.UserHeader.of("h", S, "v" * (1 + i % 3)),) if headers else ()
    return [m.Message(b"m-%05d" % (i & 0xFFFF), i, extra(i)) for i in message_ids]


async def dedup_topic(conn: LegacyConn, name: str, on: bool = True, partitions: int = 1) -> None:
    await conn.call(m.CreateTopic(DEFAULT, name, partitions,
                                  options=(opt("message.deduplication", "true" if on else "false"),)))


@pytest.mark.parametrize("path", ["legacy-fast", "legacy-decoded", "vsr", "messages-key"])
async def test_replayed_ids_are_stored_once(env: Env, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast: list[bool] = []
    real = iggy_produce.legacy_send_frames

    def spy(*args: Any, **kwargs: Any) -> Any:
        # "legacy-decoded": the send the column-wise path would take is left to the per-message
        # path (what a send with message checksums, which apache-iggy 0.8 does not set, takes)
        out = None if path == "legacy-decoded" else real(*args, **kwargs)
        fast.append(out is not None)
        return out

    monkeypatch.setattr(iggy_produce, "legacy_send_frames", spy)
    conn = await env.legacy()
    await dedup_topic(conn, "once")
    v = await env.vsr()

    async def send_ids(message_ids: list[int]) -> int | None:
        batch = msgs(message_ids, headers=path == "legacy-decoded")
        if path == "messages-key":
            by_key = m.Partitioning.messages_key(b"k")
            await conn.call(m.SendMessages(DEFAULT, ident("once"), by_key, tuple(batch)))
            return None
        if path == "vsr":
            reply = await v.call(send(DEFAULT_STREAM_NAME, "once", 0, batch))
            assert isinstance(reply, m.SendConfirmations)
            (confirmation,) = reply.confirmations
            return confirmation.base_offset
        await conn.call(send(DEFAULT_STREAM_NAME, "once", 0, batch))
        return None

    first = await send_ids(ids(1, 10))
    again = await send_ids(ids(5, 15))
    replay = await send_ids(ids(3, 15))  # every message a replay: the send still succeeds
    stored = env.stored("once")
    assert [(o, i) for o, i, _v in stored] == list(enumerate(ids(1, 15)))
    assert [val for _o, _i, val in stored] == [b"m-%05d" % s for s in range(1, 16)]
    if path == "vsr":  # base offset of what was stored; the log end when nothing was
        assert (first, again, replay) == (0, 10, 15)
    if path.startswith("legacy"):
        assert fast == [path == "legacy-fast"] * 3
    # polled back in order, consecutive offsets, each id once
    back = await polled(conn, DEFAULT, "once")
    assert [(x.offset, x.id) for x in back] == list(enumerate(ids(1, 15)))
    # a mixed send keeps only the new messages, in order; other producers are independent
    await send_ids([ids(14, 14)[0], *ids(1, 2, producer=P + 1), ids(16, 16)[0], ids(2, 2, producer=P + 1)[0]])
    assert [i for _o, i, _v in env.stored("once")][15:] == [*ids(1, 2, producer=P + 1), *ids(16, 16)]
    await conn.close()
    await v.close()


async def test_without_deduplication_duplicates_are_stored(env: Env) -> None:
    conn = await env.legacy()
    await dedup_topic(conn, "plain", on=False)
    await conn.call(m.CreateTopic(DEFAULT, "default-off", 1))
    for topic in ("plain", "default-off"):
        await conn.call(send(DEFAULT_STREAM_NAME, topic, 0, msgs(ids(1, 10))))
        await conn.call(send(DEFAULT_STREAM_NAME, topic, 0, msgs(ids(5, 15))))
        assert len(env.stored(topic)) == 21
    await conn.close()


async def test_ids_zero_are_never_replays(env: Env) -> None:
    conn = await env.legacy()
    await dedup_topic(conn, "zeros")
    for _ in range(2):
        await conn.call(send(DEFAULT_STREAM_NAME, "zeros", 0, [b"a", b"b", b"c"]))
    stored = env.stored("zeros")
    assert len(stored) == 6 and len({i for _o, i, _v in stored}) == 6 and all(stored[k][1] for k in range(6))
    await conn.close()


async def test_concurrent_connections_store_each_sequence_once(env: Env) -> None:
    setup = await env.legacy()
    await dedup_topic(setup, "racy")
    conns = [await env.legacy() for _ in range(4)] + [await env.vsr() for _ in range(4)]

    async def sender(k: int, c: LegacyConn | VsrConn) -> None:
        for _ in range(3):
            await c.call(send(DEFAULT_STREAM_NAME, "racy", 0, msgs(ids(1 + k, 40 + k))))

    await asyncio.gather(*(sender(k, c) for k, c in enumerate(conns)))
    # whichever send came first, each sequence is stored at most once and only above the last one
    seqs = [(i or 0) - (P << 64) for _o, i, _v in env.stored("racy")]
    assert seqs == sorted(set(seqs)) and seqs[-1] == 40 + len(conns) - 1 and seqs[0] >= 1
    for c in [setup, *conns]:
        await c.close()


async def test_deduplication_survives_a_restart(env: Env) -> None:
    conn = await env.legacy()
    await dedup_topic(conn, "durable", partitions=2)
    await conn.call(send(DEFAULT_STREAM_NAME, "durable", 0, msgs(ids(1, 10))))
    await conn.call(m.SendMessages(DEFAULT, ident("durable"), m.Partitioning.partition(1),
                                   tuple(msgs(ids(1, 5, producer=P + 7), headers=True))))
    await conn.close()
    await env.stop()

    await env.start()
    assert env.broker.partition("durable", 0).dedup is None  # rebuilt by the first send
    conn = await env.legacy()
    await conn.call(send(DEFAULT_STREAM_NAME, "durable", 0, msgs(ids(5, 15))))
    await conn.call(send(DEFAULT_STREAM_NAME, "durable", 1, msgs(ids(1, 6, producer=P + 7))))
    assert [i for _o, i, _v in env.stored("durable", 0)] == ids(1, 15)
    assert [i for _o, i, _v in env.stored("durable", 1)] == ids(1, 6, producer=P + 7)
    await conn.close()


# -- POLL_BATCHES: the V layout on the legacy transport --------------------------------------------


def batches_of(req: m.PollMessages) -> m.PollBatches:
    return m.PollBatches(req.consumer, req.stream, req.topic, req.partition_id, req.strategy, req.count,
                         req.auto_commit)


async def test_poll_batches_serves_what_poll_messages_serves(env: Env) -> None:
    """Stored frames (L and V sends: one size, mixed sizes, keys, headers) and records converted
    from other protocols come back from POLL_BATCHES as POLL_MESSAGES gives them, from any
    offset and in any count."""
    conn = await env.legacy()
    v = await env.vsr()
    await conn.call(m.CreateTopic(DEFAULT, "pb", 1))
    await conn.call(send(DEFAULT_STREAM_NAME, "pb", 0, [b"u" * 40] * 30))  # one size: column-wise
    await conn.call(send(DEFAULT_STREAM_NAME, "pb", 0, [
        m.Message(b"k" * 40, 0, (key_header(b"key-%03d" % i),)) for i in range(20)]))  # keys of one length
    await v.call(send(DEFAULT_STREAM_NAME, "pb", 0, [
        m.Message(b"x" * i, 0, (m.UserHeader.of("h", S, "v"),) if i % 2 else ()) for i in range(1, 12)]))
    for line in ("V1|1|PRODUCE|pb k1:from-v1", "V1|2|PRODUCE|pb :no-key"):  # converted when polled
        reply = await env.v1(line)
        assert reply.startswith(line[:5] + "OK|"), reply
    end = 30 + 20 + 11 + 2
    assert env.broker.partition_bounds("pb", 0)[1] == end
    for start, count in ((0, 1000), (0, 1), (25, 10), (45, 17), (60, 5), (end, 10)):
        req = poll(DEFAULT_STREAM_NAME, "pb", 0, value=start, count=count)
        legacy = await conn.call(req)
        batches = await conn.call(batches_of(req))
        assert isinstance(batches, m.PolledMessages)
        assert batches.current_offset == legacy.current_offset == end - 1
        assert batches.messages == legacy.messages, (start, count)
        assert [x.offset for x in batches.messages] == list(range(start, min(start + count, end)))
    # auto_commit stores the offset as POLL_MESSAGES does
    group = m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier("pb-reader"))
    await conn.call(batches_of(poll(DEFAULT_STREAM_NAME, "pb", 0, value=0, count=7, auto_commit=True,
                                    consumer=group)))
    info = await conn.call(m.GetConsumerOffset(group, DEFAULT, ident("pb"), 0))
    assert info.stored_offset == 6
    await conn.close()
    await v.close()


async def test_poll_batches_is_refused_where_iggy_has_no_such_command(env: Env) -> None:
    req = batches_of(poll(DEFAULT_STREAM_NAME, "nowhere", 0))
    anonymous = await LegacyConn.open(env.port("iggy"))
    assert (await anonymous.ask(req)).status == Status.UNAUTHENTICATED
    await anonymous.close()
    v = await env.vsr()  # VSR framing: not a command a 0.9 client has
    assert (await v.status(req)) == Status.INVALID_COMMAND
    await v.close()
    conn = await env.legacy()
    assert (await conn.ask(req)).status == Status.TOPIC_NAME_NOT_FOUND  # a poll's own statuses
    assert (await conn.ask_code(int(Command.POLL_BATCHES), b"\x01")).status == Status.INVALID_COMMAND
    await conn.call(m.Ping())  # the connection stays
    await conn.close()


async def test_small_legacy_sends_skip_the_column_wise_path(env: Env,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy's fixed cost per send is more than a message-at-a-time conversion's for a few
    messages: a send of fewer than ``stored._FEW`` is converted by ``_few_legacy``, a larger one
    column-wise, and both store the same frames as the per-message decoding would."""
    counts: list[int] = []
    real = iggy_stored._few_legacy

    def spy(payload: bytes, pos: int, count: int, **kwargs: Any) -> Any:
        counts.append(count)
        return real(payload, pos, count, **kwargs)

    monkeypatch.setattr(iggy_stored, "_few_legacy", spy)
    conn = await env.legacy()
    await conn.call(m.CreateTopic(DEFAULT, "small", 1))
    small, large = iggy_stored._FEW - 1, iggy_stored._FEW
    sent = [(n, i + 1) for n in (1, small, large) for i in range(n)]
    for n in (1, small, large):
        batch = [m.Message(b"v-%d" % n, i + 1) for i in range(n)]
        await conn.call(send(DEFAULT_STREAM_NAME, "small", 0, batch))
    assert counts == [1, small]
    back = await polled(conn, DEFAULT, "small")
    expected = [(o, i, b"v-%d" % n) for o, (n, i) in enumerate(sent)]
    assert [(x.offset, x.id, x.payload) for x in back] == expected
    await conn.close()


# -- POLL_PARTITIONS (10102): several partitions in one request ------------------------------------


def poll_partitions(topic: str, wants: Sequence[tuple[int, int, int]], wait_ms: int = 0) -> m.PollPartitions:
    return m.PollPartitions(wait_ms, (m.PollTopic(DEFAULT, ident(topic), tuple(wants)),))


async def test_poll_partitions_answers_each_partition_as_poll_batches_does(env: Env) -> None:
    conn = await env.legacy()
    await conn.call(m.CreateTopic(DEFAULT, "pp", 3))
    await conn.call(send(DEFAULT_STREAM_NAME, "pp", 0, [b"a" * 40] * 30))
    await conn.call(send(DEFAULT_STREAM_NAME, "pp", 1, [m.Message(b"b%d" % i, 0, (key_header(b"k%d" % i),))
                                                        for i in range(5)]))
    wants = [(0, 10, 7), (2, 0, 100), (1, 0, 100), (0, 28, 100), (1, 5, 10)]  # p2 empty, p1 at its end
    reply = await conn.ask(poll_partitions("pp", wants))
    assert reply.status == 0
    parts = partition_replies(reply.payload)
    assert len(parts) == len(wants)
    for (p, offset, count), part in zip(wants, parts, strict=True):
        one = await conn.ask(batches_of(poll(DEFAULT_STREAM_NAME, "pp", p, value=offset, count=count)))
        assert one.status == 0 and bytes(part) == one.payload, (p, offset, count)
    rows = [batches_to_arrow(part, "pp", w[0])[0].num_rows for w, part in zip(wants, parts, strict=True)]
    assert rows == [7, 0, 5, 2, 0]
    await conn.close()


async def test_poll_partitions_waits_for_a_record_in_any_partition(env: Env) -> None:
    conn = await env.legacy()
    await conn.call(m.CreateTopic(DEFAULT, "pw", 3))
    sender = await env.legacy()

    async def send_later() -> None:
        await asyncio.sleep(0.3)
        await sender.call(send(DEFAULT_STREAM_NAME, "pw", 2, [b"late"]))

    late = asyncio.create_task(send_later())
    started = asyncio.get_running_loop().time()
    reply = await conn.ask(poll_partitions("pw", [(0, 0, 10), (1, 0, 10), (2, 0, 10)], wait_ms=20_000))
    took = asyncio.get_running_loop().time() - started
    await late
    assert reply.status == 0 and 0.25 < took < 10
    rows = [batches_to_arrow(part, "pw", p)[0].column("value").to_pylist()
            for p, part in enumerate(partition_replies(reply.payload))]
    assert rows == [[], [], [b"late"]]
    # nothing past the offsets: answered empty once the wait passes
    started = asyncio.get_running_loop().time()
    reply = await conn.ask(poll_partitions("pw", [(0, 0, 10), (2, 1, 10)], wait_ms=300))
    took = asyncio.get_running_loop().time() - started
    assert reply.status == 0 and 0.25 < took < 5
    assert [batches_to_arrow(part, "pw", 0)[0].num_rows
            for part in partition_replies(reply.payload)] == [0, 0]
    await conn.close()
    await sender.close()


async def test_poll_partitions_bad_input_gets_iggys_errors_and_the_connection_stays(env: Env) -> None:
    conn = await env.legacy()
    await conn.call(m.CreateTopic(DEFAULT, "pb2", 2))
    for wait_ms in (0, 200):
        assert (await conn.ask(poll_partitions("pb2", [(0, 0, 1), (7, 0, 1)], wait_ms))).status \
            == Status.PARTITION_NOT_FOUND
    missing = m.PollPartitions(0, (m.PollTopic(DEFAULT, ident("pb2"), ((0, 0, 1),)),
                                   m.PollTopic(DEFAULT, ident("nowhere"), ((0, 0, 1),))))
    assert (await conn.ask(missing)).status == Status.TOPIC_NAME_NOT_FOUND
    payload = conn.frame(poll_partitions("pb2", [(0, 0, 1)]))[8:]
    assert (await conn.ask_code(int(Command.POLL_PARTITIONS), payload[:-1])).status == Status.INVALID_COMMAND
    trailing = await conn.ask_code(int(Command.POLL_PARTITIONS), payload + b"\0")
    assert trailing.status == Status.INVALID_COMMAND
    assert (await conn.ask(poll_partitions("pb2", [(0, 0, 1)] * 10_001))).status == Status.INVALID_COMMAND
    await conn.call(m.Ping())  # the connection stays
    assert (await conn.ask(poll_partitions("pb2", [(0, 0, 1), (1, 0, 1)]))).status == 0
    anonymous = await LegacyConn.open(env.port("iggy"))
    assert (await anonymous.ask(poll_partitions("pb2", [(0, 0, 1)]))).status == Status.UNAUTHENTICATED
    await anonymous.close()
    v = await env.vsr()  # VSR framing: not a command a 0.9 client has
    assert (await v.status(poll_partitions("pb2", [(0, 0, 1)]))) == Status.INVALID_COMMAND
    await v.close()
    await conn.close()


async def test_a_poll_of_several_partitions_answers_at_most_the_poll_bound(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """One answer over all its partitions holds at most POLL_MAX_BYTES (a batch at least): the
    partitions past it are answered empty, and polled on from the same offsets."""
    conn = await env.legacy()
    await conn.call(m.CreateTopic(DEFAULT, "pbig", 3))
    for p in range(3):
        for _ in range(10):
            await conn.call(send(DEFAULT_STREAM_NAME, "pbig", p, [b"%d" % p * 200] * 5))
    monkeypatch.setattr(iggy_fetch, "POLL_MAX_BYTES", 4096)
    offsets, got = [0, 0, 0], [0, 0, 0]
    for _ in range(100):
        reply = await conn.ask(poll_partitions("pbig", [(p, offsets[p], 1_000_000) for p in range(3)]))
        assert reply.status == 0 and len(reply.payload) <= 4096 + 2 * 1400  # a batch begun under it
        for p, part in enumerate(partition_replies(reply.payload)):
            rows = batches_to_arrow(part, "pbig", p)[0]
            assert rows.column("offset").to_pylist() == list(range(offsets[p], offsets[p] + rows.num_rows))
            offsets[p] += rows.num_rows
            got[p] += rows.num_rows
        if offsets == [50, 50, 50]:
            break
    assert got == [50, 50, 50]
    await conn.close()
