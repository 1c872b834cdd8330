"""Cursus ``DESCRIBE topic=<t>`` in cluster mode answers each partition's real leader, replicas and
ISR (ZooKeeper's), asked at any broker, also after the leader died. It used to answer the asked
broker as leader, sole replica and ISR of every partition (issue 13, "Also fix")."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import pytest

from support.cluster import Cluster, v1

pytestmark = pytest.mark.slow
_U32 = struct.Struct(">I")
TOPIC = "described"


def describe(port: int, topic: str = TOPIC) -> dict[str, Any] | None:
    """DESCRIBE through the Cursus listener (u32 frame, u16 empty topic envelope, command text);
    None when the broker cannot be reached, ``{"error": text}`` for an error reply."""
    body = b"\x00\x00" + f"DESCRIBE topic={topic}".encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(_U32.pack(len(body)) + body)
            (n,) = _U32.unpack(s.recv(4, socket.MSG_WAITALL))
            reply = s.recv(n, socket.MSG_WAITALL)
    except OSError:
        return None
    if not reply.startswith(b"{"):  # e.g. ERROR: topic_not_found from a broker still catching up
        return {"error": reply.decode(errors="replace")}
    doc: dict[str, Any] = json.loads(reply)
    return doc


def assignment(cluster: Cluster) -> dict[int, list[int]]:
    data, _stat = cluster.kazoo.get(f"/topics/{TOPIC}")
    return {int(p): list(r) for p, r in json.loads(data)["partitions"].items()}


def zk_view(cluster: Cluster, partitions: int) -> list[dict[str, Any]]:
    replicas = assignment(cluster)
    return [{"id": p, "leader": cluster.leader(TOPIC, p), "replicas": replicas[p],
             "isr": cluster.isr(TOPIC, p)} for p in range(partitions)]


def roles(doc: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    if doc is None or doc.get("status") != "OK":
        return None
    return [{k: p[k] for k in ("id", "leader", "replicas", "isr")} for p in doc["partitions"]]


def test_describe_answers_the_real_leader_replicas_and_isr(cluster: Cluster) -> None:
    assert "|OK|" in v1(cluster.brokers[1].port, f"V1|1|ADMIN_CREATE_TOPIC|{TOPIC} 3 2")
    cluster.wait(lambda: all(len(cluster.isr(TOPIC, p)) == 2 for p in range(3)), 30, "full ISRs")
    truth = zk_view(cluster, 3)
    assert len({p["leader"] for p in truth}) == 3  # leaders spread: one per broker
    for b in cluster.brokers.values():
        cluster.wait(lambda b=b: roles(describe(b.cursus_port)) == truth, 20,  # type: ignore[misc]
                     f"broker {b.port}'s DESCRIBE to show ZooKeeper's roles {truth}")
    doc = describe(cluster.brokers[2].cursus_port)
    assert doc is not None and list(doc)[:2] == ["status", "topic"] and "policy" in doc
    assert all({"leo", "hwm"} <= set(p) for p in doc["partitions"])

    # the leader of partition 0 dies: the survivors describe its successor and the shrunk ISR
    dead = cluster.leader(TOPIC, 0)
    cluster.brokers[dead].kill()
    cluster.wait(lambda: cluster.leader(TOPIC, 0) not in (dead, -1)
                 and dead not in cluster.isr(TOPIC, 0), 30, "a new leader of partition 0")
    truth = zk_view(cluster, 3)
    assert all(p["leader"] != dead and dead not in p["isr"] for p in truth)
    for i, b in cluster.brokers.items():
        if i != dead:
            cluster.wait(lambda b=b: roles(describe(b.cursus_port)) == truth, 20,  # type: ignore[misc]
                         f"broker {i}'s DESCRIBE after the failover to show {truth}")
