"""/metrics and /ready of a 3-broker cluster (issue 16 items 2 and 3): leader and follower counts,
ISR sizes, the controller, the ZooKeeper session, then a broker killed: under-replicated and
(with RF 1) offline partitions, and the restarted broker not ready until it is back in the ISR."""

from __future__ import annotations

from support.cluster import Cluster, v1
from support.http import Samples, get_json, scrape, total, value


def _scrapes(cluster: Cluster, ids: list[int] | None = None) -> dict[int, Samples]:
    return {i: scrape(cluster.brokers[i].http_port) for i in (ids or sorted(cluster.brokers))}


def test_cluster_metrics_and_readiness(cluster: Cluster) -> None:
    b1 = cluster.brokers[1]
    assert "|OK|" in v1(b1.port, "V1|1|ADMIN_CREATE_TOPIC|replicated 3 3")
    assert "|OK|" in v1(b1.port, "V1|2|ADMIN_CREATE_TOPIC|single 3 1")
    cluster.wait(lambda: all(len(cluster.isr("replicated", p)) == 3 for p in range(3)), 30, "full ISRs")

    def settled() -> bool:
        s = _scrapes(cluster)
        return (sum(total(x, "bayou_cluster_partitions", role="leader") for x in s.values()) == 6
                and sum(total(x, "bayou_cluster_partitions", role="follower") for x in s.values()) == 6)
    cluster.wait(settled, 30, "every broker's view of the leaders and followers")
    s = _scrapes(cluster)
    for i, x in s.items():
        assert value(x, "bayou_cluster_brokers") == 3
        assert value(x, "bayou_zookeeper_session_state", state="connected") == 1
        assert value(x, "bayou_zookeeper_session_state", state="lost") == 0
        assert value(x, "bayou_cluster_joined") == 1
        assert value(x, "bayou_cluster_under_replicated_partitions") == 0
        assert value(x, "bayou_cluster_offline_partitions") == 0
        for p in range(3):  # every broker holds a replica of every partition of "replicated"
            assert value(x, "bayou_cluster_partition_isr_size", topic="replicated", partition=p) == 3
            assert value(x, "bayou_cluster_partition_replicas", topic="replicated", partition=p) == 3
        assert get_json(cluster.brokers[i].http_port, "/ready") == (200, {"ready": True, "status": "ready"})
    controllers = [i for i, x in s.items() if value(x, "bayou_cluster_controller") == 1]
    assert len(controllers) == 1
    assert {value(x, "bayou_cluster_controller_id") for x in s.values()} == {controllers[0]}

    # a broker dies: the others see 2 brokers, shrunk ISRs (under-replicated partitions they lead)
    # and the RF-1 partitions it led offline
    victim = 3
    led_single = [p for p in range(3) if cluster.leader("single", p) == victim]
    cluster.brokers[victim].kill()
    others = [1, 2]

    def degraded() -> bool:
        s = _scrapes(cluster, others)
        return (all(value(x, "bayou_cluster_brokers") == 2 for x in s.values())
                and sum(value(x, "bayou_cluster_under_replicated_partitions") for x in s.values()) == 3
                and all(value(x, "bayou_cluster_offline_partitions") == len(led_single) for x in s.values()))
    cluster.wait(degraded, 30, "the dead broker's partitions under-replicated / offline")
    s = _scrapes(cluster, others)
    for x in s.values():
        for p in range(3):
            assert value(x, "bayou_cluster_partition_isr_size", topic="replicated", partition=p) == 2

    # back: /ready says 503 (joining or catching up) until it is in every ISR, then 200
    restarted = cluster.brokers[victim].start(timeout=60)
    states = []

    def ready() -> bool:
        status, doc = get_json(restarted.http_port, "/ready")
        states.append(doc["status"])
        return status == 200
    cluster.wait(ready, 60, "the restarted broker ready")
    assert states[-1] == "ready"
    # (starting: joined, its start-up work not done yet: the Iggy catalog taken under the cluster lock)
    assert all(s in ("joining", "catching_up", "zookeeper", "starting", "ready") for s in states), states
    cluster.wait(lambda: all(len(cluster.isr("replicated", p)) == 3 for p in range(3)), 30, "full ISRs again")
