"""Issue 14 items 2 and 3: one principal per connection, one authorizer in the broker.

Before, only the Iggy port authenticated: with no login, ``V1|1|CONSUME|sec.priv 0 0`` read a topic
an Iggy user was denied, PRODUCE wrote to it and ``ADMIN_DELETE_TOPIC sec.priv`` deleted it; Cursus
and TANK likewise. Here each attack is made over real sockets against a ``bayou serve`` subprocess
whose config file says ``[security] anonymous = "none"`` or ``"read"``, and every protocol must
answer its own authorization error (never data) and keep serving the connection, with nothing
stored changed. An Iggy user with per-topic grants gets exactly those, whatever the protocol
asks. (``all``, the default, is today's behaviour: the rest of the suite runs with it.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from bayou.client.rtes import RtesClient, RtesClientError
from bayou.protocols.iggy import messages as im
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import Dialect
from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, encode_bundle
from support.brokers import BrokerProcess, LineConn
from support.cursus import FrameConn, envelope
from support.iggy import LegacyConn, VsrConn, legacy_login, poll, send
from support.tank import TankConn

pytestmark = pytest.mark.asyncio(loop_scope="module")

SEC = "sec"  # the Iggy stream, and its topics (bayou topics sec.priv, sec.a, sec.b, sec.c)
PRIV, OPEN_A, OPEN_B, OPEN_C = "priv", "a", "b", "c"
STORED = [b"secret-1", b"secret-2"]


def _broker(tmp: Path, anonymous: str) -> BrokerProcess:
    config = tmp / "bayou.toml"
    config.write_text(f'[security]\nanonymous = "{anonymous}"\n\n[iggy]\nseed_dialect = true\n')
    return BrokerProcess(tmp / "data", "--config", str(config)).start()


async def _seed(b: BrokerProcess) -> dict[str, int]:
    """As Iggy's root: stream sec with topics priv (two records), a, b and c; their Iggy ids."""
    root = await legacy_login(b.iggy_port)
    ids = {SEC: (await root.call(im.CreateStream(SEC))).stream.id}
    for name in (PRIV, OPEN_A, OPEN_B, OPEN_C):
        ids[name] = (await root.call(im.CreateTopic(im.Identifier(SEC), name, 1))).topic.id
    await root.call(send(SEC, PRIV, 0, STORED))
    await root.close()
    return ids


@dataclass
class Brokers:
    none: BrokerProcess
    read: BrokerProcess
    ids: dict[str, int] = field(default_factory=dict)  # Iggy ids on ``none``


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    none = _broker(tmp_path_factory.mktemp("anon-none"), "none")
    try:
        read = _broker(tmp_path_factory.mktemp("anon-read"), "read")
    except BaseException:
        none.stop()
        raise
    try:
        yield Brokers(none, read)
    finally:
        none.stop()
        read.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def brokers(processes: Brokers) -> AsyncIterator[Brokers]:
    processes.ids = await _seed(processes.none)
    await _seed(processes.read)
    yield processes


async def _stored(b: BrokerProcess, tid: str = PRIV) -> list[bytes]:
    """What the topic holds, read by Iggy's root."""
    root = await legacy_login(b.iggy_port)
    polled = await root.call(poll(SEC, tid, 0, count=100))
    await root.close()
    return [msg.payload for msg in polled.messages]


def _v1_denied(reply: str, cid: int) -> None:
    assert reply.startswith(f"V1|{cid}|ERR|UNAUTHORIZED|"), reply


# -- the bypass, with anonymous = "none" ---------------------------------------------------


async def test_v1_without_a_principal_reads_writes_and_deletes_nothing(brokers: Brokers) -> None:
    b = brokers.none
    line = await LineConn.open(b.port)
    _v1_denied(await line.ask("V1|1|CONSUME|sec.priv 0 0"), 1)
    _v1_denied(await line.ask("V1|2|PRODUCE|sec.priv k:v acks=1"), 2)
    _v1_denied(await line.ask("V1|3|ADMIN_DELETE_TOPIC|sec.priv"), 3)
    _v1_denied(await line.ask("V1|4|ADMIN_CREATE_TOPIC|sneaky 1 1"), 4)
    _v1_denied(await line.ask("V1|5|PRODUCE|autocreated k:v acks=1"), 5)  # no auto-creation either
    _v1_denied(await line.ask("V1|6|OFFSET|g sec.priv 0"), 6)
    _v1_denied(await line.ask("V1|7|JOIN|g sec.priv m1"), 7)
    _v1_denied(await line.ask("V1|8|ADMIN_DESCRIBE_TOPIC|sec.priv"), 8)
    _v1_denied(await line.ask("V1|9|ADMIN_REGISTER_BROKER|9 evil.example 9092 1"), 9)
    _v1_denied(await line.ask("V1|10|SET_PARTITION_ROLE|sec.priv 0 follower"), 10)
    meta = await line.ask("V1|11|ADMIN_GET_METADATA|")
    assert meta.startswith("V1|11|OK|topics=[] "), meta  # listing shows nothing it may not describe
    assert await line.ask("V1|12|PING|") == "V1|12|OK"  # the connection still works
    await line.close()
    assert await _stored(b) == STORED  # the topic is still there, with what it held
    root = await legacy_login(b.iggy_port)
    names = [t.name for t in await root.call(im.GetTopics(im.Identifier("default")))]
    assert "sneaky" not in names and "autocreated" not in names
    await root.close()


async def test_cursus_without_a_principal_reads_writes_and_deletes_nothing(brokers: Brokers) -> None:
    b = brokers.none
    c = await FrameConn.open(b.cursus_port)
    for command in ("CONSUME topic=sec.priv partition=0 offset=0 member=x group=g batch=100",
                    "PUBLISH topic=sec.priv acks=1 producerId=p message=forged",
                    "DELETE topic=sec.priv",
                    "CREATE topic=sneaky partitions=1",
                    "DESCRIBE topic=sec.priv",
                    "STREAM topic=sec.priv partition=0 group=g"):
        reply = (await c.ask(envelope(command))).decode()
        assert reply.startswith("ERROR: unauthorized reason="), (command, reply)
    assert (await c.ask(envelope("LIST"))).decode() == "OK count=0 topics="
    await c.close()
    assert await _stored(b) == STORED


async def _tank_produce(c: TankConn) -> tm.ProduceResponse:
    bundle = encode_bundle([TankMessage(0, 1_650_000_000_000, b"k", b"forged")])
    produced = await c.call(tm.Produce(1, (tm.ProduceTopic("sec.priv", (tm.ProduceEntry(0, bundle),)),)))
    assert isinstance(produced, tm.ProduceResponse)
    return produced


async def _tank_consume(c: TankConn) -> tm.ConsumeResponse:
    partition = tm.ConsumePartition(0, 0, 1 << 20)
    consumed = await c.call(tm.Consume(2, (tm.ConsumeTopic("sec.priv", (partition,)),)))
    assert isinstance(consumed, tm.ConsumeResponse)
    return consumed


# the seed dialect numbers partitions from 1
SEED_POLL = im.PollMessages(im.Consumer(im.ConsumerKind.CONSUMER, im.Identifier(1)), im.Identifier(SEC),
                            im.Identifier(PRIV), 1, im.PollingStrategy(im.PollingKind.OFFSET, 0), 10, False)
SEED_SEND = im.SendMessages(im.Identifier(SEC), im.Identifier(PRIV), im.Partitioning.partition(1),
                            (im.Message(b"forged"),))


async def test_tank_without_a_principal_reads_writes_and_deletes_nothing(brokers: Brokers) -> None:
    b = brokers.none
    c = await TankConn.open(b.tank_port)
    assert (await _tank_produce(c)).topics[0].topic_error == 0xFE  # tank-cli's "not allowed" fault
    consumed = await _tank_consume(c)
    assert isinstance(consumed.topics[0], tm.ConsumeUnknownTopic)  # no data, no "not allowed" code
    created = await c.call(tm.CreateTopic(3, "sneaky", 1, ""))
    assert isinstance(created, tm.CreateTopicResponse) and created.error == 5
    listed = await c.call(tm.DiscoverTopics(4))
    assert isinstance(listed, tm.DiscoverTopicsResponse) and listed.topics == ()
    partitions = await c.call(tm.DiscoverPartitions(5, "sec.priv"))
    assert isinstance(partitions, tm.DiscoverPartitionsResponse) and partitions.partitions == ()
    await c.close()
    assert await _stored(b) == STORED


async def test_iggy_without_a_login_is_refused(brokers: Brokers) -> None:
    b = brokers.none
    plain = await VsrConn.open(b.iggy_port)  # an apache-iggy 0.9 client that does not log in
    assert await plain.status(poll(SEC, PRIV, 0)) == Status.UNAUTHENTICATED
    await plain.close()
    seed = await LegacyConn.open(b.iggy_port, Dialect.SEED)  # the login-less seed dialect: anonymous
    await seed.ping()
    assert await seed.status(SEED_POLL) == Status.UNAUTHORIZED
    assert await seed.status(SEED_SEND) == Status.UNAUTHORIZED
    assert await seed.status(im.DeleteTopic(im.Identifier(SEC), im.Identifier(PRIV))) == Status.UNAUTHORIZED
    assert await seed.status(im.CreateStream("evil", stream_id=99)) == Status.UNAUTHORIZED
    await seed.ping()
    await seed.close()
    assert await _stored(b) == STORED


# -- anonymous = "read" ----------------------------------------------------------------------------


async def test_read_only_anonymous_reads_on_every_protocol_but_changes_nothing(brokers: Brokers) -> None:
    b = brokers.read
    line = await LineConn.open(b.port)
    assert (await line.ask("V1|1|CONSUME|sec.priv 0 0")).startswith("V1|1|OK|messages=0:secret-1,1:secret-2")
    _v1_denied(await line.ask("V1|2|PRODUCE|sec.priv k:v acks=1"), 2)
    _v1_denied(await line.ask("V1|3|ADMIN_DELETE_TOPIC|sec.priv"), 3)
    _v1_denied(await line.ask("V1|4|ADMIN_CREATE_TOPIC|sneaky 1 1"), 4)
    assert "sec.priv" in await line.ask("V1|5|ADMIN_GET_METADATA|")
    _v1_denied(await line.ask("V1|6|BROKER_FETCH|sec.priv 0 9 0"), 6)  # past the high watermark
    await line.close()

    c = await FrameConn.open(b.cursus_port)
    body = await c.ask(envelope("CONSUME topic=sec.priv partition=0 offset=0 member=x group=g batch=100"))
    assert b"secret-1" in body and b"secret-2" in body
    for command in ("PUBLISH topic=sec.priv acks=1 producerId=p message=forged", "DELETE topic=sec.priv",
                    "CREATE topic=sneaky partitions=1"):
        reply = (await c.ask(envelope(command))).decode()
        assert reply.startswith("ERROR: unauthorized reason="), (command, reply)
    assert "sec.priv" in (await c.ask(envelope("LIST"))).decode()
    await c.close()

    t = await TankConn.open(b.tank_port)
    part = (await _tank_consume(t)).topics[0]
    assert isinstance(part, tm.ConsumeTopicResult) and part.partitions[0].chunk
    assert (await _tank_produce(t)).topics[0].topic_error == 0xFE
    created = await t.call(tm.CreateTopic(3, "sneaky", 1, ""))
    assert isinstance(created, tm.CreateTopicResponse) and created.error == 5
    await t.close()

    seed = await LegacyConn.open(b.iggy_port, Dialect.SEED)
    assert [msg.payload for msg in (await seed.call(SEED_POLL)).messages] == STORED
    assert await seed.status(SEED_SEND) == Status.UNAUTHORIZED
    await seed.close()
    assert await _stored(b) == STORED


# -- an Iggy user's per-topic grants, whatever protocol it uses -----------------------------------


async def test_per_topic_grants_through_iggy(brokers: Brokers) -> None:
    b = brokers.none
    ids = brokers.ids
    grants = im.Permissions(streams=(im.StreamPermissions(ids[SEC], topics=(
        im.TopicPermissions(ids[OPEN_A], send_messages=True),
        im.TopicPermissions(ids[OPEN_B], poll_messages=True))),))
    root = await legacy_login(b.iggy_port)
    await root.call(im.CreateUser("ursula", "pw-ursula", permissions=grants))
    await root.call(send(SEC, OPEN_B, 0, [b"for-b"]))
    await root.call(send(SEC, OPEN_C, 0, [b"for-c"]))
    await root.close()
    u = await legacy_login(b.iggy_port, "ursula", "pw-ursula")
    assert await u.status(send(SEC, OPEN_A, 0, [b"a-1"])) == 0
    assert await u.status(poll(SEC, OPEN_A, 0)) == Status.UNAUTHORIZED
    assert [m.payload for m in (await u.call(poll(SEC, OPEN_B, 0))).messages] == [b"for-b"]
    assert await u.status(send(SEC, OPEN_B, 0, [b"b-1"])) == Status.UNAUTHORIZED
    assert await u.status(send(SEC, OPEN_C, 0, [b"c-1"])) == Status.UNAUTHORIZED
    assert await u.status(poll(SEC, OPEN_C, 0)) == Status.UNAUTHORIZED
    assert await u.status(im.DeleteTopic(im.Identifier(SEC), im.Identifier(OPEN_A))) == Status.UNAUTHORIZED
    assert await u.status(im.PurgeTopic(im.Identifier(SEC), im.Identifier(OPEN_B))) == Status.UNAUTHORIZED
    await u.ping()
    await u.call(im.LogoutUser())  # back to the connection's own principal: anonymous, allowed nothing
    assert await u.status(poll(SEC, OPEN_B, 0)) == Status.UNAUTHENTICATED
    await u.close()
    assert await _stored(b, OPEN_A) == [b"a-1"]
    assert await _stored(b, OPEN_B) == [b"for-b"]
    assert await _stored(b, OPEN_C) == [b"for-c"]


# -- what bayou's own clients show a user ---------------------------------------------------------


async def test_the_sdk_and_the_cli_report_the_denial(brokers: Brokers) -> None:
    b = brokers.read
    with RtesClient("127.0.0.1", b.port) as client:
        with pytest.raises(RtesClientError) as denied:
            client.produce("sec.priv", "k", "forged")
        assert denied.value.code == "UNAUTHORIZED" and "sec.priv" in denied.value.message
        assert [v for _o, v in client.consume("sec.priv", 0, 0)[0]] == ["secret-1", "secret-2"]
    cli = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "bayou", "produce", "sec.priv", "forged", "-b",
                         f"127.0.0.1:{b.port}"], capture_output=True, text=True, timeout=60)
    assert cli.returncode != 0 and "UNAUTHORIZED" in cli.stderr and "Traceback" not in cli.stderr, cli
    assert await _stored(b) == STORED


# -- consumer groups are their topics' ------------------------------------------------------------


async def test_groups_of_a_denied_topic_are_neither_listed_nor_described(brokers: Brokers) -> None:
    b = brokers.none
    root = await legacy_login(b.iggy_port)
    await root.call(im.CreateConsumerGroup(im.Identifier(SEC), im.Identifier(PRIV), "auditors"))
    await root.close()
    group = f"iggy.{SEC}.{PRIV}.auditors"  # the broker's name of that Iggy group
    c = await FrameConn.open(b.cursus_port)
    assert (await c.ask(envelope("LIST_GROUPS"))).decode() == "OK count=0 groups="
    reply = (await c.ask(envelope(f"GROUP_STATUS group={group}"))).decode()
    assert reply.startswith("ERROR: unauthorized reason="), reply
    await c.close()
    root = await legacy_login(b.iggy_port)  # root still sees and describes it
    got = await root.call(im.GetConsumerGroup(im.Identifier(SEC), im.Identifier(PRIV),
                                              im.Identifier("auditors")))
    assert got.group.name == "auditors"
    await root.close()
