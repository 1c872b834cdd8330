"""Consumer groups across a 3-broker cluster: V1 groups live in ZooKeeper, so members talking to
different brokers form one group, generations and assignments agree everywhere, and the group and
its committed offsets outlive any one broker (SIGKILL). Deleting a group or a topic removes its
committed offsets from every broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
from pathlib import Path

import pytest
from test_redirects import cursus_cmd, cursus_produce

from support.brokers import BrokerProcess, free_port
from support.cluster import CLUSTER_CONFIG, Cluster, running_cluster, v1
from support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow


def ok(reply: str) -> str:
    assert "|OK|" in reply, reply
    return reply.split("|OK|", 1)[1]


def gen_and_parts(payload: str) -> tuple[int, list[int]]:
    m = re.fullmatch(r"generation=(\d+) assigned=\[([\d ]*)\]", payload)
    assert m is not None, payload
    return int(m.group(1)), [int(p) for p in m.group(2).split()]


def test_v1_group_spans_brokers_and_survives_one(cluster: Cluster) -> None:
    topic, group = "orders", "billing"
    port = {i: b.port for i, b in cluster.brokers.items()}
    ok(v1(port[1], f"V1|1|ADMIN_CREATE_TOPIC|{topic} 4 3"))
    cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(4)), 30, "full ISRs")

    # a on broker 1, b on broker 2: one group, two members, partitions split between them
    g1, parts_a = gen_and_parts(ok(v1(port[1], f"V1|2|JOIN|{group} {topic} a")))
    assert (g1, parts_a) == (2, [0, 1, 2, 3])
    g2, parts_b = gen_and_parts(ok(v1(port[2], f"V1|3|JOIN|{group} {topic} b")))
    assert g2 == 3 and parts_b == [1, 3]
    # a's old generation is stale wherever it asks; SYNC on broker 3 gives the new assignment
    stale = v1(port[1], f"V1|4|HEARTBEAT|{group} {topic} a {g1}")
    assert "|ERR|GENERATION_MISMATCH|" in stale, stale
    assert gen_and_parts(ok(v1(port[3], f"V1|5|SYNC|{group} {topic} a {g2}"))) == (3, [0, 2])
    assert ok(v1(port[2], f"V1|6|HEARTBEAT|{group} {topic} a {g2}")).startswith("heartbeat=ok")
    # ownership is checked against the shared assignment: b does not own partition 0
    denied = v1(port[1], f"V1|7|COMMIT|{group} {topic} b {g2} 0 10")
    assert "|ERR|GENERATION_MISMATCH|" in denied, denied
    assert "committed=true" in ok(v1(port[1], f"V1|8|COMMIT|{group} {topic} a {g2} 0 10"))
    assert "committed=true" in ok(v1(port[3], f"V1|9|COMMIT|{group} {topic} b {g2} 1 20"))
    for i in port:
        cluster.wait(lambda i=i: "offset=10" in v1(port[i], f"V1|10|OFFSET|{group} {topic} 0")
                     and "offset=20" in v1(port[i], f"V1|11|OFFSET|{group} {topic} 1"),
                     10, f"committed offsets on broker {i}")

    # broker 1 dies: the group goes on at the same generation on the others
    cluster.brokers[1].kill()
    assert ok(v1(port[3], f"V1|12|HEARTBEAT|{group} {topic} a {g2}")).startswith("heartbeat=ok")
    assert ok(v1(port[2], f"V1|13|HEARTBEAT|{group} {topic} b {g2}")).startswith("heartbeat=ok")
    assert "committed=true" in ok(v1(port[2], f"V1|14|COMMIT|{group} {topic} a {g2} 2 30"))
    assert "left=true" in ok(v1(port[3], f"V1|15|LEAVE|{group} {topic} b {g2}"))
    assert gen_and_parts(ok(v1(port[2], f"V1|16|SYNC|{group} {topic} a {g2 + 1}"))) == (g2 + 1, [0, 1, 2, 3])

    # broker 1 comes back: it sees the group as it is now, and every committed offset
    cluster.brokers[1].start(timeout=60)

    def adopted() -> bool:  # a keeps its membership alive through broker 2 meanwhile
        assert ok(v1(port[2], f"V1|17|HEARTBEAT|{group} {topic} a {g2 + 1}")).startswith("heartbeat=ok")
        return v1(port[1], f"V1|17|OFFSET|{group} {topic} 2").endswith("|OK|offset=30")

    cluster.wait(adopted, 30, "broker 1 adopts the offset committed while it was down")
    assert "offset=20" in v1(port[1], f"V1|18|OFFSET|{group} {topic} 1")
    assert ok(v1(port[1], f"V1|19|HEARTBEAT|{group} {topic} a {g2 + 1}")).startswith("heartbeat=ok")
    gen, parts = gen_and_parts(ok(v1(port[1], f"V1|20|JOIN|{group} {topic} c")))
    assert gen == g2 + 2 and parts == [1, 3]


def test_deleting_a_topic_forgets_its_offsets_everywhere(cluster: Cluster) -> None:
    topic, group = "ephemeral", "readers"
    port = {i: b.port for i, b in cluster.brokers.items()}
    ok(v1(port[1], f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3"))
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    gen, _parts = gen_and_parts(ok(v1(port[2], f"V1|2|JOIN|{group} {topic} a")))
    assert "committed=true" in ok(v1(port[2], f"V1|3|COMMIT|{group} {topic} a {gen} 0 7"))
    for i in port:
        cluster.wait(lambda i=i: "offset=7" in v1(port[i], f"V1|4|OFFSET|{group} {topic} 0"), 10,
                     f"the offset on broker {i}")
    # delete it through Cursus on broker 3, create it again: no broker remembers the old offset
    assert cursus_cmd(cluster.brokers[3].cursus_port, f"DELETE topic={topic}").startswith("OK")
    cluster.wait(lambda: not cluster.kazoo.exists(f"/topics/{topic}"), 10, "the topic gone")
    ok(v1(port[1], f"V1|5|ADMIN_CREATE_TOPIC|{topic} 1 3"))
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR again")
    for i in port:
        cluster.wait(lambda i=i: v1(port[i], f"V1|6|OFFSET|{group} {topic} 0").endswith("|OK|offset=0"),
                     10, f"no committed offset on broker {i}")


def test_a_data_directory_joins_only_its_own_cluster(cluster: Cluster) -> None:
    """Kafka's cluster id check: broker 1 restarted against another chroot (an empty cluster)
    refuses to start instead of dropping its copies of the topics; back on its own, all is there."""
    topic = "kept"
    port = cluster.brokers[1].port
    ok(v1(port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3"))
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    leader = cluster.brokers[cluster.leader(topic, 0)]
    assert "|OK|" in v1(leader.port, f"V1|2|PRODUCE|{topic} k:v acks=all")
    b1 = cluster.brokers[1]
    b1.stop()
    wrong = BrokerProcess(b1.data_dir, "--config", str(cluster.cfg), "--cluster",
                          cluster.zk.url("some-other-cluster"), "--broker-id", "1",
                          "--replication", f"127.0.0.1:{free_port()}", fsync="always")
    with contextlib.suppress(RuntimeError):  # exited before or after its listeners opened
        wrong.start(timeout=60)
    assert wrong.proc is not None and wrong.proc.wait(60) != 0
    assert "belongs to cluster" in wrong.log()
    assert (b1.data_dir / "topics").exists()
    b1.start(timeout=60)
    cluster.wait(lambda: v1(port, f"V1|3|CONSUME|{topic} 0 0").startswith("V1|3|OK|messages=0:v "), 20,
                 "broker 1 serving its copy again")


def test_adding_partitions_grows_the_topic_on_every_broker(cluster: Cluster) -> None:
    """Cursus CREATE with a larger count on broker 2: ZooKeeper gets the new partitions (spread
    over the brokers, the topic's replication factor, full ISRs), every broker opens them, and
    each takes records at its leader and replicates them."""
    topic = "growing"
    port = {i: b.port for i, b in cluster.brokers.items()}
    ok(v1(port[1], f"V1|1|ADMIN_CREATE_TOPIC|{topic} 2 3"))
    cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(2)), 30, "full ISRs")
    reply = cursus_cmd(cluster.brokers[2].cursus_port, f"CREATE topic={topic} partitions=5")
    assert reply.startswith("OK") and "partitions=5" in reply, reply
    cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(5)), 30, "full ISRs of 5")
    assert len({cluster.leader(topic, p) for p in range(2, 5)}) == 3  # spread over the brokers
    for p in range(5):
        leader = cluster.brokers[cluster.leader(topic, p)]
        # (a broker opens the new partitions when ZooKeeper's watch reaches it)
        cluster.wait(lambda leader=leader, p=p: cursus_produce(leader.cursus_port, topic, p).startswith(
            b'{"status":"OK"'), 10, f"partition {p} at its leader")
    for i in port:
        cluster.wait(lambda i=i: all(v1(port[i], f"V1|3|CONSUME|{topic} {p} 0").startswith(
            "V1|3|OK|messages=0:hello ") for p in range(5)), 20, f"every partition on broker {i}")
    # shrinking is refused, as Cursus does
    reply = cursus_cmd(cluster.brokers[3].cursus_port, f"CREATE topic={topic} partitions=3")
    assert reply.startswith("ERROR"), reply


def test_iggy_delete_partitions_and_purge_in_the_cluster(cluster: Cluster) -> None:
    """Iggy DELETE_PARTITIONS shrinks the topic on every broker and drops the removed
    partitions' committed offsets from ZooKeeper; PURGE_TOPIC at the leader empties every
    replica (followers take the leader's new log start), and is refused by a follower."""
    from bayou.protocols.iggy import messages as im
    from support.iggy import legacy_login

    topic = "trimmed"
    port = {i: b.port for i, b in cluster.brokers.items()}
    ok(v1(port[1], f"V1|1|ADMIN_CREATE_TOPIC|{topic} 4 3"))
    cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(4)), 30, "full ISRs")
    gen, _parts = gen_and_parts(ok(v1(port[1], f"V1|2|JOIN|g {topic} a")))
    for p in (0, 3):
        assert "committed=true" in ok(v1(port[1], f"V1|3|COMMIT|g {topic} a {gen} {p} 5"))
    ident = (im.Identifier("default"), im.Identifier(topic))

    async def iggy(broker: int, req: object) -> int:
        conn = await legacy_login(cluster.brokers[broker].iggy_port)
        try:
            # past the broker's own 15 s deadline for the change to reach it (loaded machines)
            return int((await conn.ask_raw(conn.frame(req), timeout=30)).status)  # type: ignore[arg-type]
        finally:
            await conn.close()

    assert asyncio.run(iggy(3, im.DeletePartitions(*ident, 2))) == 0
    assert sorted(int(p) for p in cluster.kazoo.get_children(f"/topics/{topic}/partitions")) == [0, 1]
    for i in port:
        cluster.wait(lambda i=i: v1(port[i], f"V1|4|CONSUME|{topic} 2 0")
                     == "V1|4|ERR|BAD_REQUEST|invalid partition", 10, f"broker {i} with 2 partitions")
    data, _stat = cluster.kazoo.get(f"/groups/g/{topic}")
    assert json.loads(data) == {"0": 5}

    # records on partition 0, then PURGE_TOPIC: refused by a follower, done by the leader
    leader = cluster.leader(topic, 0)
    for p in range(2):  # every partition led by the same broker, so one broker can purge it all
        if cluster.leader(topic, p) != leader:
            ok(v1(port[leader], f"V1|5|ADMIN_SET_PARTITION_LEADER|{topic} {p} {leader} 1,2,3"))
    cluster.wait(lambda: all(cluster.leader(topic, p) == leader for p in range(2)), 10, "one leader")
    for n in range(20):  # NOT_LEADER (nothing stored) until the broker has taken the new state
        cluster.wait(lambda n=n: "|OK|" in v1(port[leader], f"V1|6|PRODUCE|{topic} k{n}:v{n} acks=all"),
                     10, "the produce at the leader")
    follower = next(b for b in cluster.brokers if b != leader)
    assert asyncio.run(iggy(follower, im.PurgeTopic(*ident))) == 58  # TRANSIENT_NOT_ACCEPTED
    cluster.wait(lambda: sum(v1(port[follower], f"V1|7|CONSUME|{topic} {p} 0").count(":")
                             for p in range(2)) == 20, 10, "the records on the follower, still there")
    assert asyncio.run(iggy(leader, im.PurgeTopic(*ident))) == 0
    for i in port:
        cluster.wait(lambda i=i: all(re.fullmatch(r"V1\|8\|OK\|messages= hw=\d+",
                                                  v1(port[i], f"V1|8|CONSUME|{topic} {p} 0"))
                                     for p in range(2)), 15, f"broker {i} purged")


def test_iggy_consumer_group_spans_brokers_and_survives_one(cluster: Cluster) -> None:
    """An Iggy consumer group made on broker 1 is known on every broker (same name and id);
    members joined through different brokers share the partitions; the members of a killed
    broker leave the group (their connections died with it), the rest take its partitions; the
    group's stored offsets are read on any broker."""
    from bayou.protocols.iggy import messages as im
    from support.iggy import LegacyConn, legacy_login

    topic = "events"
    ok(v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 4 3"))
    cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(4)), 30, "full ISRs")
    for n in range(8):
        lp = cluster.brokers[cluster.leader(topic, n % 4)].cursus_port
        cluster.wait(lambda lp=lp, n=n: cursus_produce(lp, topic, n % 4).startswith(b'{"status":"OK"'),
                     10, "a record")
    for i, b in cluster.brokers.items():  # every replica's high watermark covers them
        cluster.wait(lambda b=b: all(v1(b.port, f"V1|2|CONSUME|{topic} {p} 0").endswith("hw=1")
                                     for p in range(4)), 10, f"the records on broker {i}")
    st, tp, grp = im.Identifier("default"), im.Identifier(topic), im.Identifier("workers")
    group_consumer = im.Consumer(im.ConsumerKind.GROUP, grp)

    async def details(conn: LegacyConn) -> im.ConsumerGroupDetails:
        d = await conn.call(im.GetConsumerGroup(st, tp, grp))
        assert isinstance(d, im.ConsumerGroupDetails), d
        return d

    async def scenario() -> None:
        a = await legacy_login(cluster.brokers[1].iggy_port)
        b = await legacy_login(cluster.brokers[2].iggy_port)
        c = await legacy_login(cluster.brokers[3].iggy_port)
        try:
            created = await a.call(im.CreateConsumerGroup(st, tp, "workers"))
            assert created.group.name == "workers"
            # the same name elsewhere is taken: names are unique in the cluster
            assert await c.status(im.CreateConsumerGroup(st, tp, "workers")) == 5004  # NAME_ALREADY_EXISTS
            await a.call(im.JoinConsumerGroup(st, tp, grp))
            await b.call(im.JoinConsumerGroup(st, tp, grp))  # known on broker 2 through ZooKeeper
            seen = await details(c)
            assert seen.group.id == created.group.id and seen.group.members_count == 2
            assert sorted(p for mem in seen.members for p in mem.partitions) == [0, 1, 2, 3]
            assert all(len(mem.partitions) == 2 for mem in seen.members)
            b_id = next(mem.id for mem in seen.members if mem.id >> 20 == 2)
            # an offset stored for the group through broker 2 is read through broker 3
            b_parts = next(mem.partitions for mem in seen.members if mem.id == b_id)
            await b.call(im.StoreConsumerOffset(group_consumer, st, tp, b_parts[0], 1))
            got = await c.call(im.GetConsumerOffset(group_consumer, st, tp, b_parts[0]))
            assert isinstance(got, im.ConsumerOffsetInfo) and got.stored_offset == 1

            cluster.brokers[1].kill()  # a's connection dies with its broker

            async def alone() -> bool:
                d = await details(c)
                return [(mem.id, sorted(mem.partitions)) for mem in d.members] == [(b_id, [0, 1, 2, 3])]

            deadline = asyncio.get_running_loop().time() + 20
            while not await alone():
                assert asyncio.get_running_loop().time() < deadline, await details(c)
                await asyncio.sleep(0.1)
            # a comes back through broker 3 and gets its share again
            a2 = await legacy_login(cluster.brokers[3].iggy_port)
            try:
                await a2.call(im.JoinConsumerGroup(st, tp, grp))
                assert (await details(b)).group.members_count == 2
            finally:
                await a2.close()
            # deleting the group on broker 3 deletes it everywhere
            await c.call(im.DeleteConsumerGroup(st, tp, grp))
            deadline = asyncio.get_running_loop().time() + 10
            while await b.call(im.GetConsumerGroup(st, tp, grp)) is not None:  # once the watch fires
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
        finally:
            for conn in (a, b, c):
                with contextlib.suppress(Exception):
                    await conn.close()

    asyncio.run(scenario())


def test_iggy_streams_topics_and_users_are_the_clusters(cluster: Cluster) -> None:
    """The Iggy catalog and users are shared: a stream, its topic and a user made through broker
    1 are served by the others (a record produced through V1 is polled by name through Iggy on
    another broker), outlive broker 1, keep their names unique, and go everywhere when deleted."""
    from bayou.protocols.iggy import messages as im
    from support.iggy import LegacyConn, legacy_login

    shop, orders = im.Identifier("shop"), im.Identifier("orders")

    async def made_on_broker_1() -> None:
        conn = await legacy_login(cluster.brokers[1].iggy_port)
        try:
            await conn.call(im.CreateStream("shop"))
            await conn.call(im.CreateTopic(shop, "orders", 2))
            await conn.call(im.CreateUser("alice", "secret-1", permissions=im.Permissions.root()))
        finally:
            await conn.close()

    asyncio.run(made_on_broker_1())
    cluster.wait(lambda: all(len(cluster.isr("shop.orders", p)) == 3 for p in range(2)), 30, "full ISRs")
    for n in range(6):  # the key picks the partition; only its leader takes it (NOT_LEADER elsewhere)
        cluster.wait(lambda n=n: any("|OK|" in v1(b.port, f"V1|1|PRODUCE|shop.orders k{n}:v{n} acks=all")
                                     for b in cluster.brokers.values()), 10, "a record")

    async def count(conn: LegacyConn) -> int:
        details = await conn.call(im.GetTopic(shop, orders))
        assert isinstance(details, im.TopicDetails), details
        return sum(p.messages_count for p in details.partitions)

    async def elsewhere() -> None:
        conn = await legacy_login(cluster.brokers[2].iggy_port, "alice", "secret-1")
        try:
            stream = await conn.call(im.GetStream(shop))
            assert isinstance(stream, im.StreamDetails) and [t.name for t in stream.topics] == ["orders"]
            deadline = asyncio.get_running_loop().time() + 10
            while await count(conn) != 6:  # a follower's high watermark follows its next fetch
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
            assert await conn.status(im.CreateStream("shop")) == 1012  # STREAM_NAME_ALREADY_EXISTS
        finally:
            await conn.close()

    asyncio.run(elsewhere())
    cluster.brokers[1].kill()

    async def after_broker_1() -> None:
        conn = await legacy_login(cluster.brokers[3].iggy_port, "alice", "secret-1")
        other = await legacy_login(cluster.brokers[2].iggy_port)
        try:
            deadline = asyncio.get_running_loop().time() + 15
            while await count(conn) != 6:  # a new leader's high watermark catches up with the ISR
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
            await other.call(im.DeleteStream(shop))
            deadline = asyncio.get_running_loop().time() + 10
            while await conn.call(im.GetStream(shop)) is not None:  # the catalog's watch reaches it
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
            assert not cluster.kazoo.exists("/topics/shop.orders")
        finally:
            await conn.close()
            await other.close()

    asyncio.run(after_broker_1())


def test_iggy_sends_reach_every_partition_through_one_broker(cluster: Cluster) -> None:
    """Iggy clients stay on one broker (the real SDKs on the metadata's "leader" node), so a send
    for a partition another broker leads is forwarded to that leader over the replication
    listener: the bayou SDK (which speaks Iggy) produces to every partition through broker 1,
    plain and de-duplicated, and the records are on every replica."""
    from bayou.client import Client, Producer

    boot = f"127.0.0.1:{cluster.brokers[1].iggy_port}"
    with Client(boot) as client:
        client.create_topic("spread", 3)
        client.create_topic("spread-idem", 3, {"message.deduplication": "true"})
        cluster.wait(lambda: all(len(cluster.isr(t, p)) == 3 for t in ("spread", "spread-idem")
                                 for p in range(3)), 30, "full ISRs")
        assert {cluster.leader("spread", p) for p in range(3)} == {1, 2, 3}  # two led elsewhere
        for p in range(3):
            client.send("spread", p, [b"%d-%d" % (p, i) for i in range(10)])
        with Producer(boot, idempotent=True) as producer:
            for i in range(30):
                producer.send("spread-idem", b"i%d" % i, partition=i % 3)
        ids = [(7 << 64) | s for s in range(1, 6)]
        for p in range(3):  # a resend of the same ids, through a broker that may not lead p
            client.send("spread-idem", p, [b"r%d" % s for s in range(1, 6)], message_ids=ids)
            client.send("spread-idem", p, [b"r%d" % s for s in range(1, 6)], message_ids=ids)
        big = [(8 << 64) | s for s in range(1, 6)]  # 100 KB a send: decoded off the leader's loop
        for p in range(3):
            for _ in range(2):
                values = [bytes([64 + s]) * 20_000 for s in range(1, 6)]
                client.send("spread-idem", p, values, message_ids=big)
        # (broker 1 answers from its replicas, whose high watermarks follow their next fetch)
        cluster.wait(lambda: [(client.latest_offset("spread", p), client.latest_offset("spread-idem", p))
                              for p in range(3)] == [(10, 20)] * 3, 10, "every send stored once")
    for i, b in cluster.brokers.items():
        cluster.wait(lambda b=b: all(v1(b.port, f"V1|1|CONSUME|spread {p} 0").count(":") == 10
                                     for p in range(3)), 10, f"every record on broker {i}")


def test_a_partition_removed_and_added_again_starts_empty_everywhere(zookeeper: ZooKeeperServer,
                                                                     tmp_path: Path) -> None:
    """Broker 3 is away (paused) while partition 2 is removed and added again: resumed, it serves
    the new, empty partition 2, never its copy of the old one (ZooKeeper's removal history tells it
    which local partitions are of a removed incarnation; the new leader's log would cut them too).
    Paused, not killed: a killed broker's registration goes at once (its ports refuse), and then
    a replication factor of 3 no longer fits the 2 live brokers; a 30 s session keeps the paused
    one registered, as a broker that is merely slow or cut off is."""
    with running_cluster(zookeeper, tmp_path, "reborn", config=CLUSTER_CONFIG.replace(
            "session_timeout_ms = 3000", "session_timeout_ms = 30000")) as cluster:
        _removed_and_added_again(cluster)


def _removed_and_added_again(cluster: Cluster) -> None:
    from bayou.protocols.iggy import messages as im
    from support.iggy import legacy_login

    topic = "reborn"
    ok(v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 3 3"))
    cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(3)), 30, "full ISRs")
    leader = cluster.brokers[cluster.leader(topic, 2)]
    for _ in range(3):
        assert cursus_produce(leader.cursus_port, topic, 2).startswith(b'{"status":"OK"')
    b3 = cluster.brokers[3]
    cluster.wait(lambda: v1(b3.port, f"V1|2|CONSUME|{topic} 2 0").count(":") == 3, 10, "broker 3's copy")
    assert b3.proc is not None
    b3.proc.send_signal(signal.SIGSTOP)
    ident = (im.Identifier("default"), im.Identifier(topic))

    async def iggy(req: object) -> int:
        conn = await legacy_login(cluster.brokers[1].iggy_port)
        try:
            # past the broker's own 15 s deadline for the change to reach it (loaded machines)
            return int((await conn.ask_raw(conn.frame(req), timeout=30)).status)  # type: ignore[arg-type]
        finally:
            await conn.close()

    assert asyncio.run(iggy(im.DeletePartitions(*ident, 1))) == 0
    assert asyncio.run(iggy(im.CreatePartitions(*ident, 1))) == 0
    b3.proc.send_signal(signal.SIGCONT)
    cluster.wait(lambda: 3 in cluster.live(), 30, "broker 3 back")
    for i, b in cluster.brokers.items():
        cluster.wait(lambda b=b: v1(b.port, f"V1|3|CONSUME|{topic} 2 0") == "V1|3|OK|messages= hw=-1",
                     15, f"an empty partition 2 on broker {i}")
    cluster.wait(lambda: len(cluster.isr(topic, 2)) == 3, 30, "broker 3 in the new partition's ISR")
