"""bayou's WAIT_FOR_MESSAGES (an extension of Iggy's legacy transport, command 10100) and the SDK
consumer on it (issue 18, item 4), against a real broker subprocess: a wait ends when a listed
partition gets a record, at once when one is there, empty at its deadline; bad requests get
Iggy's statuses on a connection that stays usable; ``Consumer.poll`` waits at the broker instead
of polling on a timer."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from bayou.client import BayouClientError, Client, Consumer, TopicPartition, UnknownTopicError
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, Status
from support.brokers import BrokerProcess
from support.http import scrape, value
from support.iggy import legacy_login


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("wait") / "data"
    data.mkdir()
    b = BrokerProcess(data).start()
    try:
        yield b
    finally:
        b.stop()


def _boot(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.iggy_port}"


def _in_thread(fn: object) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(fn()))  # type: ignore[operator]
    t.start()
    return t, out


def test_a_wait_ends_when_a_listed_partition_gets_a_record(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as waiter, Client(_boot(broker)) as sender:
        waiter.create_topic("wait-one", 2)
        started = time.monotonic()
        t, out = _in_thread(lambda: waiter.wait_for_messages({"wait-one": {0: 0, 1: 0}}, 20_000))
        time.sleep(0.3)
        assert not out, "the wait ended with nothing to read"
        sender.send("wait-one", 1, [b"v"])
        t.join(15)
        assert out == [1]  # partition 1 has a record at or past offset 0; partition 0 none
        assert time.monotonic() - started < 15  # woken by the send, not by the 20 s deadline


def test_a_wait_ends_at_once_when_a_record_is_there(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as c:
        c.create_topic("wait-there", 3)
        c.send("wait-there", 0, [b"a", b"b"])
        c.send("wait-there", 2, [b"c"])
        started = time.monotonic()
        assert c.wait_for_messages({"wait-there": {0: 1, 1: 0, 2: 0}}, 20_000) == 2
        assert c.wait_for_messages({"wait-there": {0: 2, 2: 1}}, 300) == 0  # both read to the end
        assert time.monotonic() - started < 10


def test_a_wait_with_nothing_ends_empty_at_its_deadline(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as c:
        c.create_topic("wait-empty", 1)
        started = time.monotonic()
        assert c.wait_for_messages({"wait-empty": {0: 0}}, 400) == 0
        assert time.monotonic() - started >= 0.35


def test_a_wait_on_nothing_takes_its_time(broker: BrokerProcess) -> None:
    """A wait that lists no partition (or, in cluster mode, only partitions read at other brokers)
    still lasts its time: a client looping on it does not spin."""
    with Client(_boot(broker)) as c:
        c.create_topic("wait-nothing", 1)
        started = time.monotonic()
        assert c.wait_for_messages({"wait-nothing": {}}, 300) == 0
        assert time.monotonic() - started >= 0.25


def test_bad_waits_get_iggy_statuses_and_the_connection_stays(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as c:
        c.create_topic("wait-bad", 1)
        with pytest.raises(UnknownTopicError):
            c.wait_for_messages({"wait-no-such-topic": {0: 0}}, 100)
        with pytest.raises(BayouClientError) as info:
            c.wait_for_messages({"wait-bad": {5: 0}}, 100)
        assert info.value.status == Status.PARTITION_NOT_FOUND
        c.send("wait-bad", 0, [b"still here"])
        assert c.wait_for_messages({"wait-bad": {0: 0}}, 100) == 1


async def _raw_waits(port: int) -> list[int]:
    conn = await legacy_login(port)
    try:
        await conn.call(m.CreateStream("wait-raw"))
        await conn.call(m.CreateTopic(m.Identifier("wait-raw"), "t", 1))
        good = conn.frame(m.WaitForMessages(0, (m.WaitTopic(m.Identifier("wait-raw"), m.Identifier("t"),
                                                            ((0, 0),)),)))
        truncated = await conn.ask_code(Command.WAIT_FOR_MESSAGES, good[8:-3])
        too_many = await conn.ask_code(Command.WAIT_FOR_MESSAGES, struct.pack("<II", 0, 1)
                                       + good[16:-16] + struct.pack("<I", 10_001))
        trailing = await conn.ask_code(Command.WAIT_FOR_MESSAGES, good[8:] + b"x")
        after = await conn.ask_raw(good)
        return [truncated.status, too_many.status, trailing.status, after.status,
                struct.unpack("<I", after.payload)[0]]
    finally:
        await conn.close()


def test_malformed_waits_are_invalid_command(broker: BrokerProcess) -> None:
    truncated, too_many, trailing, after, ready = asyncio.run(_raw_waits(broker.iggy_port))
    assert truncated == too_many == trailing == Status.INVALID_COMMAND
    assert (after, ready) == (0, 0)  # the same connection answers the next wait


def _requests(broker: BrokerProcess, name: str) -> float:
    try:
        return value(scrape(broker.http_port), "bayou_requests_total", protocol="iggy", request=name)
    except KeyError:  # not requested yet
        return 0.0


def _polled_while_sent(broker: BrokerProcess, consumer: Consumer, topic: str, partition: int) -> None:
    """A record sent 0.3 s into a poll of up to 20 s comes back from that poll, well before its end."""
    def send_later() -> None:
        time.sleep(0.3)
        with Client(_boot(broker)) as sender:
            sender.send(topic, partition, [b"hello"])

    t = threading.Thread(target=send_later)
    started = time.monotonic()
    t.start()
    got = consumer.poll(timeout_ms=20_000)
    t.join(10)
    assert [(r.partition, r.value) for r in got] == [(partition, b"hello")]
    assert time.monotonic() - started < 10


def test_the_consumer_waits_at_the_broker_and_gets_a_record_at_once(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as admin:
        admin.create_topic("wait-consumer", 2)
    consumer = Consumer(_boot(broker), auto_offset_reset="latest")
    try:
        consumer.assign([TopicPartition("wait-consumer", 0), TopicPartition("wait-consumer", 1)])
        assert consumer.poll(timeout_ms=50) == []  # positions known (the log end)
        polls, waits = _requests(broker, "POLL_BATCHES"), _requests(broker, "WAIT_FOR_MESSAGES")
        legacy, many = _requests(broker, "POLL_MESSAGES"), _requests(broker, "POLL_PARTITIONS")
        assert consumer.poll(timeout_ms=1500) == []
        # one request for each wait of at most a second (POLL_PARTITIONS: the wait on both
        # partitions, then their polls): not a poll every 5-100 ms, nor a request per partition
        assert 1 <= _requests(broker, "POLL_PARTITIONS") - many <= 3
        assert _requests(broker, "POLL_BATCHES") == polls and _requests(broker, "WAIT_FOR_MESSAGES") == waits
        assert _requests(broker, "POLL_MESSAGES") == legacy  # bayou's SDK polls bayou with its extensions

        _polled_while_sent(broker, consumer, "wait-consumer", 1)
    finally:
        consumer.close()


# -- POLL_BATCHES with a wait: the long poll of one partition in one round trip ------------------


def test_a_waiting_poll_returns_the_record_that_arrives(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as waiter, Client(_boot(broker)) as sender:
        waiter.create_topic("poll-wait", 2)
        started = time.monotonic()
        t, out = _in_thread(lambda: waiter.fetch_arrow("poll-wait", 1, 0, 10, max_wait_ms=20_000))
        time.sleep(0.3)
        assert not out, "the poll ended with nothing to read"
        sender.send("poll-wait", 0, [b"elsewhere"])  # another partition: the poll goes on waiting
        sender.send("poll-wait", 1, [b"v1", b"v2"])
        t.join(15)
        (batch,) = out
        assert batch.column("value").to_pylist() == [b"v1", b"v2"]  # type: ignore[attr-defined]
        assert batch.column("partition").to_pylist() == [1, 1]  # type: ignore[attr-defined]
        assert time.monotonic() - started < 15  # woken by the send, not by the 20 s deadline


def test_a_waiting_poll_answers_at_once_when_records_are_there(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as c:
        c.create_topic("poll-there", 1)
        c.send("poll-there", 0, [b"a", b"b", b"c"])
        started = time.monotonic()
        got = c.fetch_arrow("poll-there", 0, 1, 10, max_wait_ms=20_000)
        assert got.column("offset").to_pylist() == [1, 2]
        assert time.monotonic() - started < 10


def test_a_waiting_poll_with_nothing_ends_empty_at_its_deadline(broker: BrokerProcess) -> None:
    with Client(_boot(broker)) as c:
        c.create_topic("poll-empty", 1)
        c.send("poll-empty", 0, [b"a"])
        started = time.monotonic()
        assert c.fetch_arrow("poll-empty", 0, 1, 10, max_wait_ms=400).num_rows == 0
        assert time.monotonic() - started >= 0.35
        # and the connection goes on serving
        assert c.fetch_arrow("poll-empty", 0, 0, 10, max_wait_ms=400).column("value").to_pylist() == [b"a"]


async def _raw_polls(port: int) -> list[int]:
    conn = await legacy_login(port)
    try:
        await conn.call(m.CreateStream("poll-raw"))
        await conn.call(m.CreateTopic(m.Identifier("poll-raw"), "t", 1))
        req = m.PollBatches(m.Consumer(m.ConsumerKind.CONSUMER, m.Identifier(1)), m.Identifier("poll-raw"),
                            m.Identifier("t"), 0, m.PollingStrategy(m.PollingKind.OFFSET, 0), 10, False, 50)
        good = conn.frame(req)
        short_wait = await conn.ask_code(Command.POLL_BATCHES, good[8:-1])  # 3 bytes of the u32
        trailing = await conn.ask_code(Command.POLL_BATCHES, good[8:] + b"x")
        no_such = await conn.ask_code(Command.POLL_BATCHES, good[8:].replace(b"poll-raw", b"poll-rax"))
        after = await conn.ask_raw(good)
        return [short_wait.status, trailing.status, no_such.status, after.status,
                struct.unpack_from("<I", after.payload, 12)[0]]
    finally:
        await conn.close()


def test_malformed_waiting_polls_get_iggy_statuses_and_the_connection_stays(broker: BrokerProcess) -> None:
    short_wait, trailing, no_such, after, count = asyncio.run(_raw_polls(broker.iggy_port))
    assert short_wait == trailing == Status.INVALID_COMMAND
    assert no_such == Status.STREAM_NAME_NOT_FOUND
    assert (after, count) == (0, 0)  # the same connection answers the next poll (after its wait)


def test_the_consumer_of_one_partition_waits_in_its_poll(broker: BrokerProcess) -> None:
    """One assigned partition: ``Consumer.poll`` asks POLL_BATCHES with a wait, one request per
    wait, and no WAIT_FOR_MESSAGES; the record sent meanwhile comes back from that poll."""
    with Client(_boot(broker)) as admin:
        admin.create_topic("poll-consumer", 1)
    consumer = Consumer(_boot(broker), auto_offset_reset="latest")
    try:
        consumer.assign([TopicPartition("poll-consumer", 0)])
        assert consumer.poll(timeout_ms=50) == []  # the position known (the log end)
        polls, waits = _requests(broker, "POLL_BATCHES"), _requests(broker, "WAIT_FOR_MESSAGES")
        assert consumer.poll(timeout_ms=1500) == []
        assert 1 <= _requests(broker, "POLL_BATCHES") - polls <= 3  # waits of up to a second each
        assert _requests(broker, "WAIT_FOR_MESSAGES") == waits

        _polled_while_sent(broker, consumer, "poll-consumer", 0)
        assert _requests(broker, "WAIT_FOR_MESSAGES") == waits
    finally:
        consumer.close()


async def _group_polls(port: int, *, ready: bool) -> tuple[list[int], float]:
    """A group member owning two partitions polls with a wait of 3 s and names no partition (it
    is given them in turn); a record is on partition 1 already (``ready``) or sent to partition 0
    0.3 s in. How many each poll got, until one got it, and how long that took."""
    name = f"poll-group-{int(ready)}"
    conn, producer = await legacy_login(port), await legacy_login(port)
    try:
        stream, topic = m.Identifier(name), m.Identifier("t")
        await conn.call(m.CreateStream(name))
        await conn.call(m.CreateTopic(stream, "t", 2))
        await conn.call(m.CreateConsumerGroup(stream, topic, "g"))
        await conn.call(m.JoinConsumerGroup(stream, topic, m.Identifier("g")))

        async def send(partition: int) -> None:
            await producer.call(m.SendMessages(stream, topic, m.Partitioning.partition(partition),
                                               (m.Message(b"v"),)))

        poll = m.PollBatches(m.Consumer(m.ConsumerKind.GROUP, m.Identifier("g")), stream, topic, None,
                             m.PollingStrategy(m.PollingKind.NEXT, 0), 10, True, 3000)
        if ready:
            await send(1)
        started = time.monotonic()
        later = None if ready else asyncio.create_task(asyncio.sleep(0.3))
        counts: list[int] = []
        while not counts or counts[-1] == 0:
            if later is not None and later.done():
                later = None
                await send(0)
            reply = await conn.ask(poll)
            assert reply.status == 0
            counts.append(struct.unpack_from("<I", reply.payload, 12)[0])
            assert time.monotonic() - started < 10
        return counts, time.monotonic() - started
    finally:
        await conn.close()
        await producer.close()


@pytest.mark.parametrize("ready", [True, False], ids=["ready", "sent-during-the-poll"])
def test_a_group_member_naming_no_partition_is_not_held_on_an_empty_one(broker: BrokerProcess,
                                                                        ready: bool) -> None:
    """Review: the wait watched the partition the member's turn gave the poll, and the re-poll
    after it took the next turn; a record on the other partition came back only at the end of
    the whole wait (3 s). Such a poll waits at most 100 ms, as a client loops on it."""
    counts, took = asyncio.run(_group_polls(broker.iggy_port, ready=ready))
    assert counts[-1] == 1
    assert took < 1.5, f"the record came back after {took:.2f} s of a 3 s wait"


async def _one_partition_member_polls(port: int) -> tuple[float, int, float]:
    """A group member owning the topic's one partition polls naming none, with a wait: an idle
    poll of 600 ms, then one of 3 s with a record sent 0.3 s in. How long the first was held; what
    the second got, and when."""
    conn, producer = await legacy_login(port), await legacy_login(port)
    try:
        stream, topic = m.Identifier("poll-group-one"), m.Identifier("t")
        await conn.call(m.CreateStream("poll-group-one"))
        await conn.call(m.CreateTopic(stream, "t", 1))
        await conn.call(m.CreateConsumerGroup(stream, topic, "g"))
        await conn.call(m.JoinConsumerGroup(stream, topic, m.Identifier("g")))

        def poll(wait: int) -> m.PollBatches:
            return m.PollBatches(m.Consumer(m.ConsumerKind.GROUP, m.Identifier("g")), stream, topic, None,
                                 m.PollingStrategy(m.PollingKind.NEXT, 0), 10, True, wait)

        started = time.monotonic()
        assert struct.unpack_from("<I", (await conn.ask(poll(600))).payload, 12)[0] == 0
        idle = time.monotonic() - started

        async def send_later() -> None:
            await asyncio.sleep(0.3)
            await producer.call(m.SendMessages(stream, topic, m.Partitioning.partition(0),
                                               (m.Message(b"v"),)))

        started = time.monotonic()
        sender = asyncio.create_task(send_later())
        reply = await conn.ask(poll(3000))
        took = time.monotonic() - started
        await sender
        return idle, struct.unpack_from("<I", reply.payload, 12)[0], took
    finally:
        await conn.close()
        await producer.close()


def test_a_group_member_owning_one_partition_waits_on_it(broker: BrokerProcess) -> None:
    """Review: the 100 ms cut of a member naming no partition is for one given several in turn; a
    member owning one (one consumer per partition) waits on it: its record comes back from the
    poll it was sent during, and an idle poll is held its time."""
    idle, count, took = asyncio.run(_one_partition_member_polls(broker.iggy_port))
    assert idle >= 0.5
    assert count == 1
    assert took < 2.5
