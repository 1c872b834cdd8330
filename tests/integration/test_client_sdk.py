"""bayou.client against a real broker subprocess: admin, producer, consumer groups, seeks,
idempotence, errors, the asyncio API, and records crossing to and from the V1 protocol."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

import pytest

from bayou.client import (
    AsyncClient,
    AsyncProducer,
    BayouClientError,
    Client,
    Consumer,
    Producer,
    RtesClient,
    TopicExistsError,
    TopicPartition,
    UnknownTopicError,
    partition_for_key,
)
from bayou.client.errors import AuthenticationError, BrokerConnectionError
from bayou.protocols.iggy import messages as m
from support.brokers import BrokerProcess, free_port


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("sdk") / "data"
    data.mkdir()
    b = BrokerProcess(data).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Client]:
    with Client(f"127.0.0.1:{broker.iggy_port}") as c:
        yield c


def _boot(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.iggy_port}"


def test_topic_admin(client: Client) -> None:
    client.create_topic("sdk-admin", 2, {"retention.ms": "3600000"})
    assert "sdk-admin" in client.list_topics()
    with pytest.raises(TopicExistsError):
        client.create_topic("sdk-admin", 2)
    d = client.describe_topic("sdk-admin")
    assert d.partition_count == 2 and all(p.earliest == p.latest == 0 for p in d.partitions)
    client.create_partitions("sdk-admin", 4)
    assert client.partition_count("sdk-admin") == 4
    with pytest.raises(BayouClientError):
        client.create_partitions("sdk-admin", 3)
    client.delete_topic("sdk-admin")
    assert "sdk-admin" not in client.list_topics()
    with pytest.raises(UnknownTopicError):
        client.describe_topic("sdk-admin")


def test_send_fetch_and_offsets(client: Client) -> None:
    client.create_topic("sdk-data", 1)
    before = int(time.time() * 1000)
    client.send("sdk-data", 0, [b"a", b"bb", b"ccc"], keys=[b"k", None, b"k"],
                headers=[[("h", b"1")], [], []])
    time.sleep(0.02)
    middle = int(time.time() * 1000)
    client.send("sdk-data", 0, [b"x" * 10] * 4)
    rows = client.fetch_arrow("sdk-data", 0, 0).to_pylist()
    assert [r["offset"] for r in rows] == list(range(7))
    assert [r["value"] for r in rows[:3]] == [b"a", b"bb", b"ccc"]
    assert [r["key"] for r in rows[:3]] == [b"k", None, b"k"]
    assert rows[0]["headers"] == [{"key": "h", "value": b"1"}]
    assert all(r["timestampType"] == 1 and r["topic"] == "sdk-data" for r in rows)
    assert client.fetch_arrow("sdk-data", 0, 2, 3).column("offset").to_pylist() == [2, 3, 4]
    assert client.fetch_arrow("sdk-data", 0, 0, end_offset=2).num_rows == 2
    assert client.fetch_arrow("sdk-data", 0, 7).num_rows == 0
    assert client.earliest_offset("sdk-data", 0) == 0 and client.latest_offset("sdk-data", 0) == 7
    assert client.offset_for_time("sdk-data", 0, before - 1000) == 0
    assert client.offset_for_time("sdk-data", 0, middle) == 3
    assert client.offset_for_time("sdk-data", 0, middle + 60_000) is None


def test_records_cross_to_and_from_v1(broker: BrokerProcess, client: Client) -> None:
    with RtesClient("127.0.0.1", broker.port) as v1:
        v1.create_topic("sdk-x", 1)
        v1.produce("sdk-x", "user7", "from-v1")
        client.send("sdk-x", 0, [b"from-sdk"], keys=[b"user8"])
        records, _hw = v1.consume("sdk-x", 0, 0)
    assert [v for _o, v in records] == ["from-v1", "from-sdk"]
    rows = client.fetch_arrow("sdk-x", 0, 0).to_pylist()
    assert [(r["key"], r["value"]) for r in rows] == [(b"user7", b"from-v1"), (b"user8", b"from-sdk")]


def test_producer_batches_and_keys(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("sdk-prod", 3)
    with Producer(_boot(broker), linger_ms=20, batch_size=4096) as p:
        futures = [p.send("sdk-prod", f"v{i}".encode(), key=f"k{i % 7}".encode()) for i in range(500)]
        p.flush()
        metas = [f.result(5) for f in futures]
    for i, meta in enumerate(metas):
        assert meta.partition == partition_for_key(f"k{i % 7}".encode(), 3)
    per_key: dict[bytes, list[bytes]] = {}
    total = 0
    for part in range(3):
        for r in client.fetch_arrow("sdk-prod", part, 0, 1000).to_pylist():
            per_key.setdefault(r["key"], []).append(r["value"])
            total += 1
    assert total == 500
    for k, values in per_key.items():  # per key, the order of sending
        n = int(k[1:])
        assert values == [f"v{i}".encode() for i in range(500) if i % 7 == n]


def test_unkeyed_producer_and_acks0(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("sdk-unkeyed", 2)
    with Producer(_boot(broker), acks=0, max_batch_records=50) as p:
        for i in range(300):
            p.send("sdk-unkeyed", b"%d" % i)
    assert sum(client.latest_offset("sdk-unkeyed", q) for q in range(2)) == 300
    with pytest.raises(ValueError):
        Producer(_boot(broker), acks=2)


def test_idempotent_resend_is_stored_once(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("sdk-idem", 1, {"message.deduplication": "true"})
    ids = [(42 << 64) | s for s in range(1, 11)]
    client.send("sdk-idem", 0, [b"m%d" % s for s in range(1, 11)], message_ids=ids)
    client.send("sdk-idem", 0, [b"m%d" % s for s in range(5, 16)],
                message_ids=[(42 << 64) | s for s in range(5, 16)])
    values = client.fetch_arrow("sdk-idem", 0, 0, 100).column("value").to_pylist()
    assert values == [b"m%d" % s for s in range(1, 16)]
    with Producer(_boot(broker), idempotent=True) as p:
        for i in range(20):
            p.send("sdk-idem", b"p%d" % i, partition=0)
    assert client.latest_offset("sdk-idem", 0) == 35


def test_consumer_group_shares_partitions_and_resumes(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("sdk-group", 4)
    for part in range(4):
        client.send("sdk-group", part, [b"%d-%d" % (part, i) for i in range(25)])
    boot = _boot(broker)
    a = Consumer(boot, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    b = Consumer(boot, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    a.subscribe(["sdk-group"])
    b.subscribe(["sdk-group"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(a.assignment()) + len(b.assignment()) != 4:
        time.sleep(0.1)
    sa, sb = a.assignment(), b.assignment()
    assert sa and sb and not sa & sb and len(sa | sb) == 4
    seen = [r.value for r in a.poll(2000, 1000)] + [r.value for r in b.poll(2000, 1000)]
    assert sorted(seen) == sorted(b"%d-%d" % (p, i) for p in range(4) for i in range(25))
    a.commit()
    b.commit()
    assert client.committed("g", "sdk-group") == {p: 25 for p in range(4)}
    assert client.lag("g", "sdk-group") == {p: 0 for p in range(4)}
    assert client.list_groups("sdk-group") == ["g"]
    a.close()
    b.close()
    client.send("sdk-group", 1, [b"late"])
    c = Consumer(boot, group_id="g", auto_offset_reset="earliest")
    c.subscribe(["sdk-group"])
    got = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not got:
        got = c.poll(500)
    assert [r.value for r in got] == [b"late"]
    c.close()  # auto-commit on close
    assert client.committed("g", "sdk-group")[1] == 26


def test_assign_and_seek(broker: BrokerProcess, client: Client) -> None:
    client.create_topic("sdk-seek", 1)
    client.send("sdk-seek", 0, [b"a", b"b"])
    time.sleep(0.02)
    mark = int(time.time() * 1000)
    client.send("sdk-seek", 0, [b"c", b"d"])
    tp = TopicPartition("sdk-seek", 0)
    with Consumer(_boot(broker)) as c:
        c.assign([tp])
        assert c.position(tp) == 4  # latest by default
        assert c.poll(100) == []
        c.seek_to_beginning(tp)
        assert [r.value for r in c.poll(1000)] == [b"a", b"b", b"c", b"d"]
        c.seek(tp, 1)
        assert [r.offset for r in c.poll(1000, max_records=2)] == [1, 2]
        c.seek_to_timestamp(tp, mark)
        assert [r.value for r in c.poll(1000)] == [b"c", b"d"]
        c.seek_to_end(tp)
        assert c.position(tp) == 4
        with pytest.raises(BayouClientError):
            c.commit()  # no group


def _from_the_start(broker: BrokerProcess, topic: str, partitions: int, **kw: Any) -> Consumer:
    """A consumer assigned every partition of ``topic``, each at offset 0."""
    c = Consumer(_boot(broker), **kw)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, 0)
    return c


@pytest.mark.parametrize("fetch_ahead", [True, False])
def test_a_consumer_of_several_partitions_shares_each_poll_and_reads_every_record_once(
        broker: BrokerProcess, client: Client, fetch_ahead: bool) -> None:
    """Several partitions are polled together (one round trip), each asked for all the poll may
    still take, and what a poll does not return is kept for the next ones: a poll never passes
    ``max_poll_records``, and every record comes once, in its partition's order, whatever each
    partition holds."""
    topic = f"sdk-several-{fetch_ahead}"
    client.create_topic(topic, 3)
    sizes = {0: 40, 1: 3, 2: 0}
    for p, count in sizes.items():
        if count:
            client.send(topic, p, [b"p%d-%03d" % (p, i) for i in range(count)])
    with _from_the_start(broker, topic, 3, max_poll_records=7, fetch_ahead=fetch_ahead) as c:
        got: dict[int, list[int]] = {p: [] for p in sizes}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 43 and time.monotonic() < deadline:
            records = c.poll(1000)
            assert len(records) <= 7
            for r in records:
                got[r.partition].append(r.offset)
        assert got == {p: list(range(count)) for p, count in sizes.items()}
        assert c.poll(200) == []
        # at the log end of all three: a record sent to one of them while the poll waits
        sender = threading.Timer(0.3, lambda: client.send(topic, 2, [b"late"]))
        sender.start()
        started = time.monotonic()
        late = c.poll(5000)
        sender.join()
        assert [(r.partition, r.offset, r.value) for r in late] == [(2, 0, b"late")]
        assert time.monotonic() - started < 4  # the broker woke the wait, not the poll's timeout


def test_a_partition_behind_a_backlog_is_not_starved(broker: BrokerProcess, client: Client) -> None:
    """While one partition has a backlog its batches fetched ahead fill every poll; a record in
    another partition still comes within a few polls (review: it waited for the whole backlog)."""
    client.create_topic("sdk-starve", 2)
    client.send("sdk-starve", 1, [b"b%05d" % i for i in range(3000)])
    with _from_the_start(broker, "sdk-starve", 2, max_poll_records=100) as c:
        c.poll(1000)
        client.send("sdk-starve", 0, [b"lonely"])
        polls = 0
        while polls < 10:
            polls += 1
            if any(r.partition == 0 for r in c.poll(1000)):
                break
        assert polls <= 4, f"partition 0's record came after {polls} polls"


def test_a_full_poll_then_a_record_wakes_the_next_poll_of_several_partitions(
        broker: BrokerProcess, client: Client) -> None:
    """A poll that took a full batch has the next one fetched ahead, which at the log end comes
    back empty: the next poll still waits on that partition (review: it was left out of the wait,
    and a record sent there came back only when the broker's wait ran out, 1 s later)."""
    client.create_topic("sdk-full-then-one", 2)
    client.send("sdk-full-then-one", 0, [b"r%02d" % i for i in range(10)])
    with _from_the_start(broker, "sdk-full-then-one", 2, max_poll_records=10) as c:
        assert len(c.poll(1000)) == 10  # a full poll: the next batch is fetched ahead (empty)
        time.sleep(0.2)  # let the fetch ahead finish (it is empty either way)
        sender = threading.Timer(0.1, lambda: client.send("sdk-full-then-one", 0, [b"late"]))
        sender.start()
        started = time.monotonic()
        late = c.poll(5000)
        took = time.monotonic() - started
        sender.join()
        assert [(r.partition, r.value) for r in late] == [(0, b"late")]
        assert took < 0.9, f"the record came {took:.2f} s into the poll"


def test_a_position_below_the_start_of_a_purged_partition_does_not_spin(
        broker: BrokerProcess, client: Client) -> None:
    """WAIT_FOR_MESSAGES counted a partition as ready when its position was below the log start
    of an empty (purged) partition; its poll reads from the log start and gets nothing, so the
    consumer asked again at once, for the whole poll (review: 3,002 requests in a 2 s poll)."""
    client.create_topic("sdk-purged", 2)
    client.send("sdk-purged", 0, [b"x%d" % i for i in range(5)])
    with _from_the_start(broker, "sdk-purged", 2) as c:
        client.run(client.resolver.address("sdk-purged"))
        stream, topic = client.resolver.cache["sdk-purged"]
        client.conn.call(m.PurgeTopic(stream, topic))
        assert client.partition_offsets("sdk-purged", 0).earliest == 5
        cpu = time.process_time()
        assert c.poll(1500) == []
        assert time.process_time() - cpu < 0.5  # a wait, not a loop (a spin took all 1.5 s)
        client.send("sdk-purged", 0, [b"after"])
        assert [(r.offset, r.value) for r in c.poll(5000)] == [(5, b"after")]


def test_a_cancelled_or_interrupted_request_does_not_leave_replies_for_the_next(
        broker: BrokerProcess, client: Client) -> None:
    """Replies left unread by a cancelled (async) or interrupted (sync) exchange would be read as
    the next requests' replies: the connection is closed instead, and the next request opens a
    new one."""
    client.create_topic("sdk-cancel", 2)
    client.send("sdk-cancel", 0, [b"a", b"b"])

    async def main() -> list[bytes]:
        async with AsyncClient(_boot(broker)) as c:
            with pytest.raises(TimeoutError):
                wants = [("sdk-cancel", 1, 0, 10), ("sdk-cancel", 0, 2, 10)]
                await asyncio.wait_for(c.fetch_arrow_many(wants, max_wait_ms=3000), 0.3)
            batch = await c.fetch_arrow("sdk-cancel", 0, 0, 10)
            return list(batch.column("value").to_pylist())

    assert asyncio.run(main()) == [b"a", b"b"]
    with Client(_boot(broker)) as c:
        main_thread = threading.main_thread().ident or 0
        timer = threading.Timer(0.3, lambda: signal.pthread_kill(main_thread, signal.SIGUSR1))

        def interrupt(_signum: int, _frame: object) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGUSR1, interrupt)
        try:
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                c.fetch_arrow_many([("sdk-cancel", 1, 0, 10), ("sdk-cancel", 0, 2, 10)], max_wait_ms=3000)
        finally:
            timer.join()
            signal.signal(signal.SIGUSR1, previous)
        assert c.fetch_arrow("sdk-cancel", 0, 0, 10).column("value").to_pylist() == [b"a", b"b"]


def _fetch_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("bayou-fetch-ahead")]


def test_fetch_ahead_reads_each_record_once_and_a_seek_or_assign_drops_what_it_fetched(
        broker: BrokerProcess, client: Client) -> None:
    client.create_topic("sdk-ahead", 2)
    client.send("sdk-ahead", 0, [b"r%03d" % i for i in range(105)])
    client.send("sdk-ahead", 1, [b"other"])
    tp, other = TopicPartition("sdk-ahead", 0), TopicPartition("sdk-ahead", 1)
    with Consumer(_boot(broker), max_poll_records=10) as c:
        assert c.fetch_ahead
        c.assign([tp])
        c.seek(tp, 0)
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 105 and time.monotonic() < deadline:
            got += [r.offset for r in c.poll(1000)]
        assert got == list(range(105))  # full batches were fetched ahead: none lost, none twice
        assert c.poll(200) == []
        c.seek(tp, 0)
        assert [r.offset for r in c.poll(1000)] == list(range(10))  # ahead: 10-19, asked at 10
        # what was fetched ahead at 10 is not what a seek to 50 reads
        c.seek(tp, 50)
        assert [r.offset for r in c.poll(1000)] == list(range(50, 60))
        assert [r.offset for r in c.poll(1000, max_records=3)] == [60, 61, 62]  # a smaller poll
        assert [r.offset for r in c.poll(1000)] == list(range(63, 73))
        c.assign([other])  # a new assignment: the batch fetched ahead for partition 0 goes
        c.seek(other, 0)
        assert [(r.partition, r.value) for r in c.poll(1000)] == [(1, b"other")]
        assert _fetch_ahead_threads()
    deadline = time.monotonic() + 10
    while _fetch_ahead_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _fetch_ahead_threads()  # close() stopped its thread
    with Consumer(_boot(broker), max_poll_records=10, fetch_ahead=False) as c:
        c.assign([tp])
        c.seek(tp, 0)
        assert [r.offset for r in c.poll(1000)] == list(range(10))
        assert not _fetch_ahead_threads()


def test_a_small_max_poll_records_does_not_cost_a_round_trip_per_poll(
        broker: BrokerProcess, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch fetched ahead is about 1 MiB of records, whatever ``max_poll_records`` is, and
    the polls after it take from it: 2,000 small records read 10 a poll take a few fetches, where
    they took one per poll (200)."""
    client.create_topic("sdk-small-polls", 1)
    client.send("sdk-small-polls", 0, [b"v%05d" % i for i in range(2000)])
    fetches: list[int] = []
    fetch = Client.fetch_arrow

    def counted(self: Client, topic: str, partition: int, offset: int, max_records: int = 10_000,
                **kw: Any) -> Any:
        fetches.append(max_records)
        return fetch(self, topic, partition, offset, max_records, **kw)

    monkeypatch.setattr(Client, "fetch_arrow", counted)
    with _from_the_start(broker, "sdk-small-polls", 1, max_poll_records=10) as c:
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 2000 and time.monotonic() < deadline:
            records = c.poll(1000)
            assert len(records) <= 10
            got += [r.offset for r in records]
        assert got == list(range(2000))
    assert len(fetches) <= 5, fetches
    assert max(fetches) >= 2000  # ~1 MiB of 7-byte records: more than the topic holds


def test_a_failed_fetch_ahead_is_fetched_again_and_turns_fetching_ahead_off(
        broker: BrokerProcess, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    client.create_topic("sdk-ahead-fails", 1)
    client.send("sdk-ahead-fails", 0, [b"r%03d" % i for i in range(35)])
    tries: list[int] = []

    def refused(self: Consumer, tp: TopicPartition, pos: int, limit: int) -> object:
        tries.append(pos)
        raise BrokerConnectionError("the second connection is refused")

    monkeypatch.setattr(Consumer, "_fetch_on_thread", refused)
    tp = TopicPartition("sdk-ahead-fails", 0)
    with Consumer(_boot(broker), max_poll_records=10) as c:
        c.assign([tp])
        c.seek(tp, 0)
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 35 and time.monotonic() < deadline:
            got += [r.offset for r in c.poll(1000)]
        assert got == list(range(35))
        assert tries == [10] and not c.fetch_ahead  # tried once, then the poll's own fetches


def test_errors(broker: BrokerProcess) -> None:
    with pytest.raises(AuthenticationError):
        Client(_boot(broker), password="wrong").list_topics()
    with pytest.raises(BrokerConnectionError):
        Client(f"127.0.0.1:{free_port()}", timeout=2).list_topics()
    with pytest.raises(ValueError):
        Client("127.0.0.1:notaport")
    with Client(_boot(broker)) as c, pytest.raises(UnknownTopicError):
        c.send("sdk-missing", 0, [b"x"])


def test_async_client_and_producer(broker: BrokerProcess) -> None:
    async def main() -> list[bytes]:
        async with AsyncClient(_boot(broker)) as c:
            await c.create_topic("sdk-async", 2)
            async with AsyncProducer(_boot(broker), linger_ms=5) as p:
                futs = [await p.send("sdk-async", b"a%d" % i, key=b"k") for i in range(50)]
                await p.flush()
                metas = await asyncio.gather(*futs)
            assert {m.partition for m in metas} == {partition_for_key(b"k", 2)}
            batch = await c.fetch_arrow("sdk-async", metas[0].partition, 0, 100)
            part = metas[0].partition
            # several partitions in one round trip, a wait first: the records there come at once
            started = time.monotonic()
            many = await c.fetch_arrow_many([("sdk-async", 1 - part, 0, 10), ("sdk-async", part, 48, 10)],
                                            max_wait_ms=5000)
            assert time.monotonic() - started < 4
            assert [b.num_rows for b in many] == [0, 2]
            assert many[1].column("value").to_pylist() == [b"a48", b"a49"]
            return list(batch.column("value").to_pylist())

    assert asyncio.run(main()) == [b"a%d" % i for i in range(50)]


def test_cli_group_commands(broker: BrokerProcess, client: Client, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from bayou.cli import main

    client.create_topic("sdk-cli", 1)
    client.send("sdk-cli", 0, [b"1", b"2", b"3"])
    client.commit("cli-group", "sdk-cli", {0: 1})
    runner = CliRunner()
    api = ["--admin", f"127.0.0.1:{broker.http_port}"]  # the group commands use the admin API
    out = runner.invoke(main, ["group", "list", "--topic", "sdk-cli", *api])
    assert out.exit_code == 0, out.output
    assert [row.split()[0] for row in out.output.splitlines()[1:]] == ["iggy.sdk-cli.cli-group"]
    out = runner.invoke(main, ["group", "describe", "iggy.sdk-cli.cli-group", *api])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[-1].split() == ["sdk-cli", "0", "-", "1", "0", "3", "2"]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_producer_round_trip_and_cross_protocol(broker: BrokerProcess, client: Client,
                                                           codec: str) -> None:
    topic = f"sdk-compressed-{codec}"
    client.create_topic(topic, 2)
    with Producer(_boot(broker), compression=codec, max_batch_records=300) as p:
        for i in range(1000):
            p.send(topic, b"event %d " % i + b"payload " * 8, key=b"user-%d" % (i % 10),
                   headers=[("n", b"%d" % i)] if i % 2 else None)
    rows = [r for part in range(2) for r in client.fetch_arrow(topic, part, 0, 2000).to_pylist()]
    assert sorted(int(r["value"].split()[1]) for r in rows) == list(range(1000))
    for r in rows:
        i = int(r["value"].split()[1])
        assert r["key"] == b"user-%d" % (i % 10)
        assert r["headers"] == ([{"key": "n", "value": b"%d" % i}] if i % 2 else [])
    # what is stored is the records, not the envelope: a V1 consumer reads them as sent
    part = partition_for_key(b"user-3", 2)
    with RtesClient("127.0.0.1", broker.port) as v1:
        records, _hw = v1.consume(topic, part, 0)
    stored = client.fetch_arrow(topic, part, 0, len(records)).column("value").to_pylist()
    assert records and [o for o, _v in records] == list(range(len(records)))
    assert [unquote_to_bytes(v) for _o, v in records] == stored  # V1 percent-encodes values
    with pytest.raises(ValueError, match="compression"):
        Producer(_boot(broker), compression="brotli")


def test_bad_compressed_send_gets_invalid_format_and_stores_nothing(client: Client) -> None:
    from bayou.client import ops
    from bayou.client.wire import send_metadata
    from bayou.protocols.iggy import messages as m
    from bayou.protocols.iggy.batches import L_HEADER, L_INDEX
    from bayou.protocols.iggy.codes import Command
    from bayou.protocols.iggy.framing import encode_legacy_request

    client.create_topic("sdk-bad-envelope", 1)
    client.send("sdk-bad-envelope", 0, [b"kept"], compression="zstd")
    name, codec = b"bayou.compression", b"zstd"
    hdr = bytes([2]) + len(name).to_bytes(4, "little") + name + bytes([1]) + len(codec).to_bytes(4, "little")
    hdr += codec
    data = b"this is not zstd"
    msg = L_HEADER.pack(0, 0, 0, 0, 0, 0, len(hdr), len(data), 0) + data + hdr
    payload = (send_metadata(m.Identifier("default"), m.Identifier("sdk-bad-envelope"), 0, 1)
               + L_INDEX.pack(0, len(msg), 0) + msg)

    def raw() -> ops.Op[None]:
        yield ops.Raw(encode_legacy_request(Command.SEND_MESSAGES, payload), "bad envelope")

    with pytest.raises(BayouClientError) as info:
        client.run(raw())
    assert info.value.status == 4  # INVALID_FORMAT
    client.send("sdk-bad-envelope", 0, [b"after"], compression="lz4")  # the connection carries on
    assert client.fetch_arrow("sdk-bad-envelope", 0, 0).column("value").to_pylist() == [b"kept", b"after"]
