"""Every protocol's answer to a produce sent to a broker that does not lead the partition, in a
3-broker cluster: V1 NOT_LEADER, Cursus ``ERROR: NOT_LEADER LEADER_IS host:port``, TANK error
0xfc with the leader's address, Iggy TRANSIENT_NOT_ACCEPTED and its cluster metadata; and the
V1 ADMIN_* commands on the cluster's state."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import struct

import pytest

from bayou.protocols.cursus.batch import encode_batch
from bayou.protocols.tank import messages as tm
from bayou.protocols.tank.bundles import TankMessage, encode_bundle
from bayou.records.cursus import CursusMessage, encode_message
from bayou.records.hashing import fnv1a_32
from support.cluster import Cluster, v1
from support.tank import TankConn

pytestmark = pytest.mark.slow
_U32 = struct.Struct(">I")


def cursus_produce(port: int, topic: str, partition: int) -> bytes:
    out = bytearray()
    encode_message(CursusMessage(b"hello", 0, 1, b"p", b"", 1_700_000_000), out)
    body = encode_batch(topic, partition, bytes(out), 1, 1, 1, "1")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_U32.pack(len(body)) + body)
        (n,) = _U32.unpack(s.recv(4, socket.MSG_WAITALL))
        return s.recv(n, socket.MSG_WAITALL)


def test_each_protocol_redirects_to_the_leader(cluster: Cluster) -> None:
    topic = "redirects"
    assert "|OK|" in v1(cluster.brokers[2].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3")
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    leader = cluster.leader(topic, 0)
    other = next(b for b in cluster.brokers if b != leader)
    lp, op = cluster.brokers[leader], cluster.brokers[other]

    # V1
    assert v1(op.port, f"V1|7|PRODUCE|{topic} k:v acks=all") == \
        "V1|7|ERR|NOT_LEADER|partition leader unavailable on this broker"
    assert v1(lp.port, f"V1|8|PRODUCE|{topic} k:v acks=all").startswith("V1|8|OK|partition=0 offset=0")

    # Cursus: the distributed brokers' redirect; the leader takes it
    assert cursus_produce(op.cursus_port, topic, 0) == \
        f"ERROR: NOT_LEADER LEADER_IS 127.0.0.1:{lp.cursus_port}".encode()
    assert cursus_produce(lp.cursus_port, topic, 0).startswith(b'{"status":"OK"')

    # TANK: error 0xfc followed by the leader's IPv4 address and TANK port
    async def tank(port: int) -> tm.ProduceResponse:
        conn = await TankConn.open(port)
        try:
            bundle = encode_bundle([TankMessage(value=b"tank-value")])
            req = tm.Produce(1, (tm.ProduceTopic(topic, (tm.ProduceEntry(0, bundle),)),))
            resp = await conn.call(req)
            assert isinstance(resp, tm.ProduceResponse)
            return resp
        finally:
            await conn.close()

    redirected = asyncio.run(tank(op.tank_port)).topics[0]
    assert redirected.errors == (0xFC,)
    assert redirected.leaders == (tm.Endpoint(int(ipaddress.IPv4Address("127.0.0.1")), lp.tank_port),)
    assert asyncio.run(tank(lp.tank_port)).topics[0].errors == (0,)

    # records from every protocol are on every replica
    cluster.wait(lambda: all(v1(b.port, f"V1|1|CONSUME|{topic} 0 0").count(":") >= 3
                             for b in cluster.brokers.values()), 20, "replication")


def test_admin_commands_see_and_change_the_cluster(cluster: Cluster) -> None:
    topic = "admin"
    port = cluster.brokers[1].port
    assert "|OK|" in v1(port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 2 3")
    cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(2)), 30, "full ISRs")
    assert v1(port, "V1|2|ADMIN_GET_METADATA|").endswith(f"topics=[{topic}] brokers=[1 2 3] fenced=[]")
    old = cluster.leader(topic, 0)
    new = next(b for b in cluster.isr(topic, 0) if b != old)
    isr = ",".join(str(b) for b in cluster.isr(topic, 0))
    reply = v1(port, f"V1|3|ADMIN_SET_PARTITION_LEADER|{topic} 0 {new} {isr}")
    assert "|OK|" in reply, reply
    cluster.wait(lambda: cluster.leader(topic, 0) == new, 10, "the chosen leader")
    assert int(cluster.state(topic, 0)["leader_epoch"]) == 1  # type: ignore[call-overload]
    key0 = next(f"k{i}" for i in range(1000) if fnv1a_32(f"k{i}".encode()) % 2 == 0)  # V1: partition 0
    cluster.wait(lambda: "|OK|" in v1(cluster.brokers[new].port, f"V1|4|PRODUCE|{topic} {key0}:x acks=all"),
                 10, "the new leader to take produces")
    # a leader outside the ISR is refused, and nothing changes
    cluster.brokers[old].kill()
    cluster.wait(lambda: old not in cluster.live(), 15, "the killed broker's session to expire")
    asker = cluster.brokers[new].port
    cluster.wait(lambda: f"fenced=[{old}]" in v1(asker, "V1|5|ADMIN_GET_METADATA|"), 10,
                 "the dead broker fenced in the metadata")
    live = next(b for b in cluster.brokers if b != old)
    bad = v1(cluster.brokers[live].port, f"V1|6|ADMIN_SET_PARTITION_LEADER|{topic} 0 {old} {old}")
    assert "ERR|BAD_REQUEST" in bad, bad
    assert cluster.leader(topic, 0) == new
    assert "elected_changes=0" in v1(cluster.brokers[live].port, f"V1|7|ADMIN_ELECT_TOPIC_LEADERS|{topic}")


def _ask_at_once(port: int, lines: list[str]) -> list[str]:
    """Send ``lines`` on one already-open connection the moment it is asked, and read the replies."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall("".join(f"{line}\n" for line in lines).encode())
        buf = b""
        while buf.count(b"\n") < len(lines):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    return buf.decode().splitlines()


def test_a_topic_made_elsewhere_is_waited_for_not_unknown(cluster: Cluster) -> None:
    """Issue 13.14: a request naming a topic that ZooKeeper has but this broker has not opened yet
    (its watch still on the way) waits for the local copy instead of answering "unknown topic"
    (the cause of a flaky test). Every other broker is asked the moment the creation is answered,
    each about every partition led by it."""
    for n in range(4):
        topic = f"fresh{n}"
        others = [b for b in cluster.brokers if b != 1]
        socks = {b: socket.create_connection(("127.0.0.1", cluster.brokers[b].port), timeout=15)
                 for b in others}
        try:
            assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 6 3")
            for s in socks.values():
                s.sendall(f"V1|2|ADMIN_DESCRIBE_TOPIC|{topic}\nV1|3|CONSUME|{topic} 5 0\n".encode())
            for b, s in socks.items():
                buf = b""
                while buf.count(b"\n") < 2:
                    chunk = s.recv(1 << 16)
                    assert chunk, f"broker {b} closed the connection"
                    buf += chunk
                describe, consume = buf.decode().splitlines()
                assert describe.startswith(f"V1|2|OK|topic={topic} partitions=6 "), (b, describe)
                assert consume == "V1|3|OK|messages= hw=-1", (b, consume)
        finally:
            for s in socks.values():
                s.close()
    # REPLICA_FETCH at each partition's leader, as soon as ZooKeeper names it
    t2 = "fresh-roles"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|4|ADMIN_CREATE_TOPIC|{t2} 6 3")
    for p in range(6):
        leader = cluster.leader(t2, p)
        follower = next(b for b in cluster.isr(t2, p) if b != leader)
        reply = _ask_at_once(cluster.brokers[leader].port, [f"V1|5|REPLICA_FETCH|{t2} {p} {follower} 0"])
        assert reply and reply[0].startswith("V1|5|OK|"), (p, leader, reply)


def test_partition_role_replica_fetch_tank_acks_and_iggy_metadata(cluster: Cluster) -> None:
    from bayou.protocols.iggy import messages as im
    from support.iggy import legacy_login

    topic = "roles"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 3")
    cluster.wait(lambda: len(cluster.isr(topic, 0)) == 3, 30, "a full ISR")
    old = cluster.leader(topic, 0)
    other = next(b for b in cluster.brokers if b != old)
    op, lp = cluster.brokers[other].port, cluster.brokers[old].port

    # REPLICA_FETCH reports the real state on the leader and cannot fake progress
    reply = v1(lp, f"V1|1|REPLICA_FETCH|{topic} 0 {other} 999")
    isr = " ".join(map(str, cluster.isr(topic, 0)))
    assert reply.endswith(f"hw=-1 isr=[{isr}] under_replicated=false"), reply
    assert v1(op, f"V1|2|REPLICA_FETCH|{topic} 0 {old} 0") == "V1|2|ERR|BAD_REQUEST|partition is not leader"
    assert "BAD_REQUEST" in v1(lp, f"V1|3|REPLICA_FETCH|{topic} 0 {old} 0")  # itself is no follower

    # SET_PARTITION_ROLE moves the leadership through ZooKeeper
    assert v1(op, f"V1|4|SET_PARTITION_ROLE|{topic} 0 leader").startswith(
        f"V1|4|OK|topic={topic} partition=0 role=leader")
    assert cluster.leader(topic, 0) == other
    assert int(cluster.state(topic, 0)["leader_epoch"]) == 1  # type: ignore[call-overload]
    reply = v1(op, f"V1|5|SET_PARTITION_ROLE|{topic} 0 follower")
    assert reply.startswith(f"V1|5|OK|topic={topic} partition=0 role=follower"), reply
    assert cluster.leader(topic, 0) not in (other, -1)

    # TANK required acks: more than the in-sync replicas is 0x04, nothing stored
    leader = cluster.leader(topic, 0)
    lb = cluster.brokers[leader]

    async def tank(acks: int) -> int:
        conn = await TankConn.open(lb.tank_port)
        try:
            bundle = encode_bundle([TankMessage(value=b"acked")])
            req = tm.Produce(1, (tm.ProduceTopic(topic, (tm.ProduceEntry(0, bundle),)),), required_acks=acks)
            resp = await conn.call(req)
            assert isinstance(resp, tm.ProduceResponse)
            return resp.topics[0].errors[0]
        finally:
            await conn.close()

    assert asyncio.run(tank(3)) == 0  # all three in sync: acknowledged once all hold it
    end = cluster.brokers[leader].port
    before = v1(end, f"V1|6|CONSUME|{topic} 0 0")
    down = next(b for b in cluster.brokers if b != leader)
    cluster.brokers[down].kill()
    cluster.wait(lambda: down not in cluster.isr(topic, 0), 15, "the ISR to shrink")
    # ZooKeeper's ISR shrinks first (the dead broker's registration goes); the leader takes it from
    # its watch, and its own view is what a produce is checked against (REPLICA_FETCH reports it)
    live = next(b for b in cluster.brokers if b not in (leader, down))

    def leader_isr() -> list[str]:
        found = re.search(r"isr=\[([^\]]*)\]", v1(end, f"V1|8|REPLICA_FETCH|{topic} 0 {live} 0"))
        return found.group(1).split() if found else []

    cluster.wait(lambda: leader_isr() and str(down) not in leader_isr(), 15, "the leader's own ISR to shrink")
    assert asyncio.run(tank(3)) == 0x04
    assert v1(end, f"V1|7|CONSUME|{topic} 0 0").split("|", 3)[3] == before.split("|", 3)[3]
    assert asyncio.run(tank(2)) == 0

    # Iggy: GET_CLUSTER_METADATA lists the live brokers' Iggy listeners
    async def metadata() -> object:
        conn = await legacy_login(lb.iggy_port)
        try:
            return await conn.call(im.GetClusterMetadata())
        finally:
            await conn.close()

    def iggy_ports() -> list[int]:
        meta = asyncio.run(metadata())
        assert isinstance(meta, im.ClusterMetadata)
        return sorted(n.tcp_port for n in meta.nodes)

    live_ports = sorted(b.iggy_port for i, b in cluster.brokers.items() if i != down)
    cluster.wait(lambda: iggy_ports() == live_ports, 10, "the cluster metadata without the dead broker")


def cursus_cmd(port: int, text: str) -> str:
    body = b"\x00\x00" + text.encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_U32.pack(len(body)) + body)
        (n,) = _U32.unpack(s.recv(4, socket.MSG_WAITALL))
        return s.recv(n, socket.MSG_WAITALL).decode()


def test_cursus_group_coordinator_and_its_failover(cluster: Cluster) -> None:
    """Cursus METADATA names each partition's leader; FIND_COORDINATOR names one coordinator per
    group on every broker; group commands elsewhere answer NOT_COORDINATOR with its address; when
    the coordinator dies the group moves and its committed offsets come along."""
    topic, group = "coord", "billing"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 2 3")
    cluster.wait(lambda: all(len(cluster.isr(topic, p)) == 3 for p in range(2)), 30, "full ISRs")
    by_cursus = {b.cursus_port: i for i, b in cluster.brokers.items()}
    meta = cursus_cmd(cluster.brokers[1].cursus_port, f"METADATA topic={topic}")
    leaders = re.search(r"leaders=(\S+)", meta)
    assert leaders is not None, meta
    assert [by_cursus[int(a.rsplit(":", 1)[1])] for a in leaders.group(1).split(",")] == \
        [cluster.leader(topic, p) for p in range(2)]

    def coordinator(port: int) -> int | None:
        """The coordinator a broker names; None while it answers the retriable
        coordinator_not_available (its view of the live brokers has not arrived yet)."""
        reply = cursus_cmd(port, f"FIND_COORDINATOR group={group}")
        if reply == f"ERROR: coordinator_not_available group={group}":
            return None
        m = re.search(r"port=(\d+)", reply)
        assert reply.startswith("OK coordinator_id=") and m is not None, reply
        return by_cursus[int(m.group(1))]

    def agreed() -> bool:
        named = {coordinator(b.cursus_port) for b in cluster.brokers.values()}
        return len(named) == 1 and None not in named

    cluster.wait(agreed, 15, "every broker to name one coordinator")
    coord = coordinator(cluster.brokers[1].cursus_port)
    assert coord is not None
    assert {coordinator(b.cursus_port) for b in cluster.brokers.values()} == {coord}
    other = next(b for b in cluster.brokers if b != coord)
    wrong = cursus_cmd(cluster.brokers[other].cursus_port, f"JOIN_GROUP topic={topic} group={group} member=m")
    assert wrong == f"ERROR: NOT_COORDINATOR host=127.0.0.1 port={cluster.brokers[coord].cursus_port}"
    cport = cluster.brokers[coord].cursus_port
    joined = cursus_cmd(cport, f"JOIN_GROUP topic={topic} group={group} member=m")
    assert joined.startswith("OK"), joined
    member = re.search(r"member=(\S+)", joined)
    gen = re.search(r"generation=(\d+)", joined)
    assert member is not None and gen is not None
    committed = cursus_cmd(cport, f"COMMIT_OFFSET topic={topic} group={group} partition=0 offset=42 "
                                  f"member={member.group(1)} generation={gen.group(1)}")
    assert committed.startswith("OK"), committed
    cluster.brokers[coord].kill()
    survivor = next(b for b in cluster.brokers if b != coord)
    cluster.wait(lambda: coordinator(cluster.brokers[survivor].cursus_port) not in (coord, None), 15,
                 "the group to move to a live coordinator")
    new = coordinator(cluster.brokers[survivor].cursus_port)
    assert new is not None
    nport = cluster.brokers[new].cursus_port
    assert cursus_cmd(nport, f"JOIN_GROUP topic={topic} group={group} member=m").startswith("OK")
    cluster.wait(lambda: cursus_cmd(nport, f"FETCH_OFFSET topic={topic} group={group} partition=0")
                 == "OK offset=42", 10, "the committed offset at the new coordinator")


def test_brokers_without_a_replica_send_consumers_to_the_leader(cluster: Cluster) -> None:
    """A partition with one replica: every other broker holds nothing of it, so a read there gets
    each protocol's redirect (not an empty answer), except Iggy's, which that broker serves by
    reading at the leader; and the records are read at the leader."""
    from bayou.protocols.iggy import codec
    from bayou.protocols.iggy import messages as im
    from bayou.protocols.iggy.framing import Dialect
    from support.iggy import legacy_login

    topic = "single"
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{topic} 1 1")
    cluster.wait(lambda: cluster.leader(topic, 0) > 0, 30, "a leader")
    leader = cluster.leader(topic, 0)
    lp = cluster.brokers[leader]
    assert v1(lp.port, f"V1|2|PRODUCE|{topic} k:v acks=1").startswith("V1|2|OK|")
    for other in (b for b in cluster.brokers if b != leader):
        op = cluster.brokers[other]
        assert v1(op.port, f"V1|3|CONSUME|{topic} 0 0") == \
            "V1|3|ERR|NOT_LEADER|partition leader unavailable on this broker"
        assert cursus_cmd(op.cursus_port, f"CONSUME topic={topic} partition=0 offset=0 member=x") == \
            f"ERROR: NOT_LEADER LEADER_IS 127.0.0.1:{lp.cursus_port}"

        async def tank(port: int) -> tm.ConsumePartitionResult:
            conn = await TankConn.open(port)
            try:
                req = tm.Consume(1, (tm.ConsumeTopic(topic, (tm.ConsumePartition(0, 0, 4096),)),))
                resp = await conn.call(req)
                assert isinstance(resp, tm.ConsumeResponse)
                answer = resp.topics[0]
                assert isinstance(answer, tm.ConsumeTopicResult)
                return answer.partitions[0]
            finally:
                await conn.close()

        redirected = asyncio.run(tank(op.tank_port))
        assert redirected.flags == 0xFC
        assert redirected.leader == tm.Endpoint(int(ipaddress.IPv4Address("127.0.0.1")), lp.tank_port)

        async def iggy(port: int, kind: im.PollingKind = im.PollingKind.OFFSET) -> tuple[int, object]:
            conn = await legacy_login(port)
            try:
                poll = im.PollMessages(im.Consumer(im.ConsumerKind.CONSUMER, im.Identifier("c")),
                                       im.Identifier("default"), im.Identifier(topic), 0,
                                       im.PollingStrategy(kind, 0), 10, False)
                reply = await conn.ask(poll)
                polled = (codec.decode_reply(poll.command, reply.payload, Dialect.LEGACY)
                          if reply.status == 0 else None)
                return int(reply.status), polled
            finally:
                await conn.close()

        # Iggy clients cannot follow a redirect: the broker reads at the leader for them (by
        # offset, first, last, next); a poll by timestamp needs a replica (TRANSIENT_NOT_ACCEPTED)
        status, polled = asyncio.run(iggy(op.iggy_port))
        assert status == 0 and isinstance(polled, im.PolledMessages), (status, polled)
        assert [msg.payload for msg in polled.messages] == [b"v"] and polled.current_offset == 0
        assert asyncio.run(iggy(op.iggy_port, im.PollingKind.TIMESTAMP))[0] == 58
    assert v1(lp.port, f"V1|4|CONSUME|{topic} 0 0").startswith("V1|4|OK|")
    assert asyncio.run(tank(lp.tank_port)).flags == 0
