"""The admin API in cluster mode (issue 16 item 4): three brokers and a ZooKeeper; every broker
answers /api/v1/cluster for the whole cluster, and a topic created through one broker's API is
described by another with its placement as ZooKeeper has it."""

from __future__ import annotations

from support.admin_api import call, error_code
from support.cluster import Cluster


def test_cluster_view_and_topic_placement(cluster: Cluster) -> None:
    b1, b2, b3 = (cluster.brokers[i] for i in (1, 2, 3))
    # each broker's view follows ZooKeeper's watches: wait until broker 1 and 3 have seen all three
    for b in (b1, b3):
        cluster.wait(lambda b=b: len(call(b.http_port, "GET", "/cluster")[1]["brokers"]) == 3, 30,
                     f"broker {b.port}'s view of three brokers")
    status, doc = call(b1.http_port, "GET", "/cluster")
    assert status == 200, doc
    assert doc["mode"] == "cluster" and doc["broker_id"] == 1
    assert [b["id"] for b in doc["brokers"]] == [1, 2, 3]
    assert [b["self"] for b in doc["brokers"]] == [True, False, False]
    assert doc["brokers"][1]["endpoints"]["http"] == b2.http_port
    controller = doc["controller"]
    assert controller in (1, 2, 3)
    assert call(b3.http_port, "GET", "/cluster")[1]["controller"] == controller  # one cluster, one view

    status, doc = call(b2.http_port, "POST", "/topics", {"name": "api-rf3", "partitions": 2,
                                                          "replication_factor": 3})
    assert status == 201, doc
    for p in (0, 1):
        cluster.wait(lambda p=p: len(cluster.isr("api-rf3", p)) == 3, 30, f"a full ISR of partition {p}")
    status, doc = call(b3.http_port, "GET", "/topics/api-rf3")
    assert status == 200, doc
    for part in doc["partitions"]:
        p = part["partition"]
        assert part["leader"] == cluster.leader("api-rf3", p)
        assert sorted(part["replicas"]) == [1, 2, 3] and sorted(part["isr"]) == [1, 2, 3]
        assert not part["under_replicated"]
    assert doc["replication_factor"] == 3
    assert call(b1.http_port, "GET", "/cluster")[1]["under_replicated_partitions"] == 0

    # a test message through the leader's API; another broker's API names the leader's error
    leader = cluster.leader("api-rf3", 0)
    other = next(i for i in (1, 2, 3) if i != leader)
    status, doc = call(cluster.brokers[leader].http_port, "POST", "/topics/api-rf3/partitions/0/messages",
                       {"value": "replicated"})
    assert status == 201 and doc["offset"] == 0, doc
    status, doc = call(cluster.brokers[other].http_port, "POST", "/topics/api-rf3/partitions/0/messages",
                       {"value": "misdirected"})
    assert status == 421 and error_code(doc) == "NOT_LEADER", doc
    # every replica holds it: a follower's browse shows it once the high watermark passed it
    cluster.wait(lambda: [r["value"] for r in call(cluster.brokers[other].http_port, "GET",
                 "/topics/api-rf3/partitions/0/messages?offset=0")[1].get("records", [])] == ["replicated"],
                 30, "the record on a follower")
