"""Issue 13, items 11 and 12, on a real 3-broker cluster (ZooKeeper from Debian's package):

* SIGTERM to a partition leader while acks=all production runs and a consumer long-polls it: the
  leader hands its partitions to in-sync followers through ZooKeeper before it stops serving
  (Kafka's controlled shutdown), so no partition is ever leaderless and production resumes through
  the other brokers; every acknowledged record is stored once, where the acknowledgement said.
* An acks=all produce with fewer in-sync replicas than min.insync.replicas is refused before it
  is appended (nothing becomes visible, so a client's retry cannot duplicate it).
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, encode_bundle
from bayou.records.hashing import fnv1a_32
from support.cluster import (
    Cluster,
    Producer,
    consume_all,
    running_cluster,
    v1,
    zookeeper_fixture,  # noqa: F401 - the zookeeper fixture
)
from support.tank import TankConn
from support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with running_cluster(zookeeper, tmp_path, request.node.name) as c:
        yield c


class LongPoll(threading.Thread):
    """A TANK consume at the partition's tail with a long wait, held open on one broker."""

    def __init__(self, port: int, topic: str, partition: int) -> None:
        super().__init__(daemon=True)
        self.port, self.topic, self.partition = port, topic, partition
        self.answered = threading.Event()
        self.sent = threading.Event()
        self.outcome: object = None

    def run(self) -> None:
        async def poll() -> object:
            conn = await TankConn.open(self.port)
            try:
                req = tm.Consume(1, (tm.ConsumeTopic(self.topic, (
                    tm.ConsumePartition(self.partition, (1 << 64) - 1, 1 << 16),)),), max_wait=20_000)
                call = asyncio.ensure_future(conn.call(req))
                await asyncio.sleep(0)
                self.sent.set()
                return await asyncio.wait_for(call, 30)
            finally:
                await conn.close()

        try:
            self.outcome = asyncio.run(poll())
        except Exception as exc:  # the broker closed the connection: also an answer
            self.outcome = exc
        self.answered.set()


def test_sigterm_hands_leadership_over_before_the_leader_stops(cluster: Cluster) -> None:
    topic = "handover"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 3 3")
    cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(3)), 30, "full ISRs")
    part = fnv1a_32(b"k") % 3  # where the producer's key lands
    leaving = cluster.leader(topic, part)
    led_before = [p for p in range(3) if cluster.leader(topic, p) == leaving]
    epochs = {p: int(cluster.state(topic, p)["leader_epoch"]) for p in range(3)}  # type: ignore[call-overload]

    producer = Producer(cluster, topic)
    producer.target = leaving
    producer.start()
    poll = LongPoll(cluster.brokers[leaving].tank_port, topic, part)
    try:
        cluster.wait(lambda: len(producer.acked) >= 20, 30, "acknowledged produces")
        poll.start()
        assert poll.sent.wait(10)
        proc = cluster.brokers[leaving].proc
        assert proc is not None
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        leaderless: list[tuple[int, dict[str, object]]] = []

        def handed_over() -> bool:
            states = {p: cluster.state(topic, p) for p in range(3)}
            leaderless.extend((p, s) for p, s in states.items() if s["leader"] == -1)
            return all(s["leader"] != leaving for s in states.values())

        moved = cluster.wait(handed_over, 20, "leadership handed over")
        cluster.wait(lambda: any(t > t0 and b != leaving for t, b in producer.acked_by), 20,
                     "acks=all production through another broker")
        resumed = next(t for t, b in producer.acked_by if t > t0 and b != leaving) - t0
        assert proc.wait(30) == 0, cluster.brokers[leaving].log()
        stopped = time.monotonic() - t0
        # while it is down, every partition is led, by a broker that was in sync, one epoch on
        for p in range(3):
            state = cluster.state(topic, p)
            assert state["leader"] not in (-1, leaving), state
            assert leaving not in state["isr"], state  # type: ignore[operator]
            if p in led_before:
                assert int(state["leader_epoch"]) == epochs[p] + 1, state  # type: ignore[call-overload]
        assert not leaderless, leaderless
        assert poll.answered.wait(20), "the long poll was never answered or closed"
        print(f"\nSIGTERM -> leadership moved {moved:.2f} s, acks=all production resumed through "
              f"another broker {resumed:.2f} s, process exited {stopped:.2f} s")
        cluster.wait(lambda: len(producer.acked_by) >= 10 + sum(t <= t0 for t, _b in producer.acked_by),
                     20, "more produces after the stop")
    finally:
        producer.stop_flag.set()
        producer.join(30)
    cluster.brokers[leaving].start(timeout=60)
    cluster.wait(lambda: len(cluster.isr(topic, part)) == 3, 60, "the restarted broker back in the ISR")
    leader = cluster.leader(topic, part)
    stored = consume_all(cluster.brokers[leader].port, topic, part)
    assert [o for o, _v in stored] == list(range(len(stored)))
    values = [v for _o, v in stored]
    position = {v: i for i, v in enumerate(values)}
    for value, offset in producer.acked:
        assert values.count(value) == 1, f"acknowledged {value} stored {values.count(value)} times"
        assert stored[position[value]][0] == offset
    cluster.wait(lambda: all(consume_all(b.port, topic, part) == stored for b in cluster.brokers.values()),
                 20, "every replica to hold the same records")


def test_acks_all_below_min_insync_is_refused_before_it_is_appended(cluster: Cluster) -> None:
    topic = "minisr"  # the brokers' default min.insync.replicas is 2
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3")
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    leader = cluster.leader(topic, 0)
    port = cluster.brokers[leader].port
    assert "|OK|" in v1(port, f"V1|2|PRODUCE|{topic} k:first acks=all")
    followers = [b for b in cluster.brokers if b != leader]
    for b in followers:
        cluster.brokers[b].kill()
    cluster.wait(lambda: cluster.isr(topic, 0) == [leader], 20, "the ISR to shrink to the leader")
    # ZooKeeper's ISR shrinks first; the leader takes it on a moment later, and its own view is
    # what a produce is checked against (REPLICA_FETCH reports it: a report changes nothing in
    # cluster mode). Produced in between, the record would be appended and then refused.
    cluster.wait(lambda: v1(port, f"V1|9|REPLICA_FETCH|{topic} 0 {followers[0]} 0").endswith(
        f"isr=[{leader}] under_replicated=true"), 20, "the leader's own ISR to shrink")
    before = v1(port, f"V1|3|ADMIN_DESCRIBE_TOPIC|{topic}")
    assert "log_end=[1]" in before, before

    reply = v1(port, f"V1|4|PRODUCE|{topic} k:refused acks=all")
    assert reply == "V1|4|ERR|REPLICATION_TIMEOUT|not enough in-sync replicas", reply

    async def tank(acks: int) -> int:
        conn = await TankConn.open(cluster.brokers[leader].tank_port)
        try:
            bundle = encode_bundle([TankMessage(value=b"refused-tank")])
            req = tm.Produce(1, (tm.ProduceTopic(topic, (tm.ProduceEntry(0, bundle),)),), required_acks=acks)
            resp = await conn.call(req)
            assert isinstance(resp, tm.ProduceResponse)
            return resp.topics[0].errors[0]
        finally:
            await conn.close()

    assert asyncio.run(tank(2)) == 0x04  # TANK's insufficient replicas
    after = v1(port, f"V1|5|ADMIN_DESCRIBE_TOPIC|{topic}")
    assert "log_end=[1]" in after, after  # nothing was appended
    assert v1(port, f"V1|6|CONSUME|{topic} 0 0") == "V1|6|OK|messages=0:first hw=0"
    # acks=1 still works alone
    assert v1(port, f"V1|7|PRODUCE|{topic} k:one acks=1").startswith("V1|7|OK|partition=0 offset=1")
    for b in followers:
        cluster.brokers[b].start(timeout=60)
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 60, "the followers back in the ISR")
    assert v1(port, f"V1|8|PRODUCE|{topic} k:last acks=all").startswith("V1|8|OK|partition=0 offset=2")
    assert [v for _o, v in consume_all(port, topic)] == ["first", "one", "last"]


def test_isr_shrinking_under_min_insync_after_the_append_is_answered_at_once(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """An acks=all produce appended while the ISR was full, whose followers then stop: when the
    ISR shrinks to the leader alone (below min.insync.replicas = 2) the produce is answered at once
    with Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND (V1: REPLICATION_TIMEOUT saying the records were
    stored), not after the whole acks=all timeout (here 20 s, so only that path passes). The record
    is stored and, once the ISR is the leader alone, committed."""
    config = ("[cluster]\nsession_timeout_ms = 3000\n\n"
              "[broker]\nreplica_lag_timeout_ms = 2000\nack_all_timeout_ms = 20000\n")
    with running_cluster(zookeeper, tmp_path, "after-append", config=config) as cluster:
        topic = "afterappend"
        assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3")
        cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
        leader = cluster.leader(topic, 0)
        port = cluster.brokers[leader].port
        assert "|OK|" in v1(port, f"V1|2|PRODUCE|{topic} k:first acks=all")
        followers = [cluster.brokers[b] for b in cluster.brokers if b != leader]
        for b in followers:
            assert b.proc is not None
            b.proc.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            reply = v1(port, f"V1|3|PRODUCE|{topic} k:second acks=all", timeout=30)
            took = time.monotonic() - started
            expected = "V1|3|ERR|REPLICATION_TIMEOUT|appended, but only 1 replicas remain in sync"
            assert reply.startswith(expected), reply
            assert took < 15, f"answered after {took:.1f} s: the acks=all timeout, not the ISR change"
            assert cluster.isr(topic, 0) == [leader]
            # stored and committed (the ISR is the leader alone): visible to consumers
            assert [v for _o, v in consume_all(port, topic)] == ["first", "second"]
        finally:
            for b in followers:
                assert b.proc is not None
                b.proc.send_signal(signal.SIGCONT)
        cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 60, "the followers back in the ISR")
        # the leader takes the ISR from ZooKeeper a moment later; until then acks=all is refused
        # before appending (NOT_ENOUGH_REPLICAS), so a retry cannot store it twice
        replies: list[str] = []
        cluster.wait(lambda: replies.append(v1(port, f"V1|4|PRODUCE|{topic} k:third acks=all"))
                     or "|OK|" in replies[-1], 20, "the leader to take acks=all again")
        assert replies[-1].startswith("V1|4|OK|partition=0 offset=2"), replies
        assert all("not enough in-sync replicas" in r for r in replies[:-1]), replies


def test_a_killed_leader_is_replaced_before_its_session_expires(zookeeper: ZooKeeperServer,
                                                                tmp_path: Path) -> None:
    """Issue 13.13: a SIGKILLed broker's listeners refuse connections at once; the followers that
    find its replication port refused confirm it on every listener and remove its registration,
    so the controller moves its partitions without waiting out a ZooKeeper session (here 30 s,
    so only that path can pass the deadline)."""
    config = "[cluster]\nsession_timeout_ms = 30000\n\n[broker]\nreplica_lag_timeout_ms = 2000\n"
    with running_cluster(zookeeper, tmp_path, "fast-failover", config=config) as cluster:
        topic = "fast"
        assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 3 3")
        cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(3)), 30, "full ISRs")
        controller = json.loads(cluster.kazoo.get("/controller")[0])["broker_id"]
        victim = cluster.leader(topic, 0)
        led = [p for p in range(3) if cluster.leader(topic, p) == victim]
        cluster.brokers[victim].kill()
        # the controller writes the partitions' new states one after another: wait for all of
        # them (new leaders for those it led, the ISRs without it), within the same deadline
        took = cluster.wait(lambda: all(cluster.leader(topic, p) not in (victim, -1) for p in led)
                            and all(victim not in cluster.isr(topic, p) for p in range(3)), 15,
                            "new leaders and ISRs while the dead broker's session is still open")
        assert victim not in cluster.live()
        role = "the controller" if victim == controller else "not the controller"
        print(f"\nSIGKILL -> new leaders in {took:.2f} s (the victim was {role})")
        # an acks=all produce goes through at once; the dead broker comes back and catches up
        key = next(f"k{i}" for i in range(1000) if fnv1a_32(f"k{i}".encode()) % 3 == 0)
        port = cluster.brokers[cluster.leader(topic, 0)].port
        cluster.wait(lambda: "|OK|" in v1(port, f"V1|2|PRODUCE|{topic} {key}:after acks=all"), 10,
                     "the new leader to take an acks=all produce")
        cluster.brokers[victim].start(timeout=60)
        cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(3)), 60, "full ISRs again")
