"""A 3-broker cluster on loopback with a real ZooKeeper: leaders killed with SIGKILL during acks=all
production, and a checker that every acknowledged record is there exactly once, in order."""

from __future__ import annotations

import re
import time

import pytest

from support.cluster import OK, Cluster, Producer, consume_all, v1

pytestmark = pytest.mark.slow

def test_sigkill_rounds_on_the_leader_lose_no_acknowledged_record(cluster: Cluster) -> None:
    topic = "ledger"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3")
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    producer = Producer(cluster, topic)
    producer.start()
    failovers: list[float] = []
    try:
        for _round in range(10):
            before = len(producer.acked)
            cluster.wait(lambda b=before: len(producer.acked) >= b + 20, 30, "acknowledged produces")
            leader = cluster.leader(topic, 0)
            cluster.brokers[leader].kill()
            failovers.append(cluster.wait(
                lambda old=leader: cluster.leader(topic, 0) not in (old, -1), 15, "a new leader"))
            cluster.brokers[leader].start(timeout=60)
            cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 60, "the restarted broker back in the ISR")
        cluster.wait(lambda: len(producer.acked) >= 20 * 10 + 20, 30, "more produces")
    finally:
        producer.stop_flag.set()
        producer.join(30)
    print(f"failover times (s): {[round(f, 2) for f in failovers]}; max {max(failovers):.2f}; "
          f"{len(producer.acked)} acknowledged of {producer.attempts} attempts")
    assert max(failovers) < 5.0
    leader = cluster.leader(topic, 0)
    stored = consume_all(cluster.brokers[leader].port, topic)
    values = [v for _o, v in stored]
    assert [o for o, _v in stored] == list(range(len(stored)))  # no gaps, no repeats
    position = {v: i for i, (_o, v) in enumerate(stored)}
    for value, offset in producer.acked:
        assert values.count(value) == 1, f"acknowledged {value} stored {values.count(value)} times"
        assert stored[position[value]][0] == offset  # where the acknowledgement said
    acked_positions = [position[v] for v, _o in producer.acked]
    assert acked_positions == sorted(acked_positions)  # in acknowledgement order
    # every replica holds the same records up to its high watermark
    cluster.wait(lambda: all(consume_all(b.port, topic) == stored for b in cluster.brokers.values()), 20,
                 "the followers to catch up")


def produce_n(cluster: Cluster, topic: str, n: int, tag: str) -> list[tuple[str, int]]:
    """``n`` acks=all produces, each retried on every broker until one acknowledges it."""
    acked: list[tuple[str, int]] = []
    ids = sorted(cluster.brokers)
    target = 0
    for i in range(n):
        value = f"{tag}{i}"
        deadline = time.monotonic() + 30
        while True:
            port = cluster.brokers[ids[target]].port
            reply = v1(port, f"V1|1|PRODUCE|{topic} k:{value} acks=all", timeout=5)
            m = OK.match(reply)
            if m:
                acked.append((value, int(m.group(2))))
                break
            assert time.monotonic() < deadline, f"no broker acknowledged {value}: {reply}"
            target = (target + 1) % len(ids)
            time.sleep(0.05)
    return acked


def test_paused_follower_leaves_the_isr_and_rejoins(cluster: Cluster) -> None:
    """SIGSTOP a follower for longer than its ZooKeeper session: it leaves the ISR, acks=all
    production carries on with the other two, and after SIGCONT its expired session is replaced,
    it catches up and rejoins the ISR with every record."""
    import signal

    topic = "paused"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3")
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    produce_n(cluster, topic, 20, "a")
    leader = cluster.leader(topic, 0)
    follower = next(b for b in cluster.brokers if b != leader)
    proc = cluster.brokers[follower].proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)
    try:
        cluster.wait(lambda: follower not in cluster.isr(topic, 0), 15,
                     "the paused follower to leave the ISR")
        acked = produce_n(cluster, topic, 30, "b")  # two in sync: acks=all still succeeds
        time.sleep(1.0)  # well past the 3 s session by now
    finally:
        proc.send_signal(signal.SIGCONT)
    cluster.wait(lambda: follower in cluster.isr(topic, 0), 30, "the follower back in the ISR")
    assert cluster.leader(topic, 0) == leader
    stored = consume_all(cluster.brokers[leader].port, topic)
    cluster.wait(lambda: consume_all(cluster.brokers[follower].port, topic) == stored, 20,
                 "the follower to hold every record")
    assert all((off, value) in stored for value, off in acked)


def test_paused_leader_is_replaced_and_steps_down(cluster: Cluster) -> None:
    """SIGSTOP the leader past its session: another replica leads in a new epoch; after SIGCONT the
    old leader finds its session expired, follows the new leader, and loses nothing acknowledged."""
    import signal

    topic = "stale"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3")
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    first = produce_n(cluster, topic, 20, "a")
    old = cluster.leader(topic, 0)
    epoch = int(cluster.state(topic, 0)["leader_epoch"])  # type: ignore[call-overload]
    proc = cluster.brokers[old].proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)
    try:
        cluster.wait(lambda: cluster.leader(topic, 0) not in (old, -1), 15, "a new leader")
        second = produce_n(cluster, topic, 20, "b")
    finally:
        proc.send_signal(signal.SIGCONT)
    assert int(cluster.state(topic, 0)["leader_epoch"]) > epoch  # type: ignore[call-overload]
    # the old leader rejoins as a follower: it refuses produces and catches up
    cluster.wait(lambda: "NOT_LEADER" in v1(cluster.brokers[old].port, f"V1|1|PRODUCE|{topic} k:x acks=all"),
                 20, "the old leader to step down")
    cluster.wait(lambda: old in cluster.isr(topic, 0), 30, "the old leader back in the ISR")
    new = cluster.leader(topic, 0)
    stored = consume_all(cluster.brokers[new].port, topic)
    for value, off in first + second:
        assert (off, value) in stored
    cluster.wait(lambda: consume_all(cluster.brokers[old].port, topic) == stored, 20,
                 "the old leader to catch up")


def test_committed_offsets_survive_the_loss_of_the_broker_they_were_committed_on(cluster: Cluster) -> None:
    topic = "progress"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 2 3")
    b1 = cluster.brokers[1].port
    join = v1(b1, f"V1|2|JOIN|readers {topic} c1")
    assert "|OK|" in join, join
    generation = re.search(r"generation=(\d+)", join)
    assert generation is not None
    for p, off in ((0, 17), (1, 4)):
        reply = v1(b1, f"V1|3|COMMIT|readers {topic} c1 {generation.group(1)} {p} {off}")
        assert reply == "V1|3|OK|committed=true", reply
    cluster.brokers[1].kill()
    for b in (2, 3):  # every other broker answers with what broker 1 acknowledged
        port = cluster.brokers[b].port
        cluster.wait(lambda port=port: v1(port, f"V1|4|OFFSET|readers {topic} 0") == "V1|4|OK|offset=17"
                     and v1(port, f"V1|5|OFFSET|readers {topic} 1") == "V1|5|OK|offset=4",
                     10, f"broker {b} to know the committed offsets")
    # and a broker restarted from its own data takes the cluster's newer commits (c2 joins the
    # same group as c1, kept in ZooKeeper, so it gets partition 1)
    port2 = cluster.brokers[2].port
    join = v1(port2, f"V1|6|JOIN|readers {topic} c2")
    assert join.endswith("assigned=[1]"), join
    gen2 = re.search(r"generation=(\d+)", join)
    assert gen2 is not None, join
    assert "|OK|" in v1(port2, f"V1|7|COMMIT|readers {topic} c2 {gen2.group(1)} 1 30")
    cluster.brokers[1].start(timeout=60)
    cluster.wait(lambda: v1(b1, f"V1|8|OFFSET|readers {topic} 1") == "V1|8|OK|offset=30", 15,
                 "the restarted broker to take the newer commit")


def test_whole_cluster_killed_and_restarted_keeps_every_acknowledged_record(cluster: Cluster) -> None:
    """Every broker SIGKILLed at once, then restarted from its data: the last leader (the only one
    the ISR may elect) comes back to lead, the others follow, nothing acknowledged is lost."""
    topic = "blackout"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3")
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    acked = produce_n(cluster, topic, 40, "a")
    for b in cluster.brokers.values():
        b.kill()
    cluster.wait(lambda: not cluster.live(), 15, "every session to expire")
    for b in cluster.brokers.values():
        b.start(timeout=60)
    cluster.wait(lambda: cluster.leader(topic, 0) != -1 and len(cluster.isr(topic, 0)) == 3, 30,
                 "a leader and a full ISR again")
    acked += produce_n(cluster, topic, 10, "b")
    stored = consume_all(cluster.brokers[cluster.leader(topic, 0)].port, topic)
    for value, off in acked:
        assert (off, value) in stored
    cluster.wait(lambda: all(consume_all(b.port, topic) == stored for b in cluster.brokers.values()), 20,
                 "every replica to agree")
