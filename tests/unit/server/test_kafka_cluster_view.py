"""What the Kafka front end tells clients about the cluster (server/kafka_context.py): which
listener of each broker Metadata names, the controller, and where a group is coordinated."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from bayou.broker.views import THIS_BROKER, Endpoint, Here
from bayou.server.kafka_context import Advertised, cluster_brokers, group_coordinator


class FakeBroker:
    """The facade's cluster view: live brokers' listeners by name (None standalone)."""

    def __init__(self, listeners: dict[str, list[Endpoint]] | None, coordinator: Endpoint | None = None):
        self.listeners = listeners
        self.coordinator = coordinator
        self.asked: tuple[str, ...] = ()

    @property
    def clustered(self) -> bool:
        return self.listeners is not None

    def listener_endpoints(self, listener: str) -> list[Endpoint] | None:
        return None if self.listeners is None else self.listeners.get(listener, [])

    def group_coordinator(self, group: str, listeners: Sequence[str]) -> Endpoint | Here | None:
        self.asked = tuple(listeners)
        return THIS_BROKER if self.listeners is None else self.coordinator


def _view(broker: FakeBroker, here: Advertised) -> tuple[list[Advertised], int]:
    return cluster_brokers(cast(Any, broker), here)


def test_standalone_names_the_listener_asked() -> None:
    here = Advertised(0, "localhost", 9092, "rtes")
    assert _view(FakeBroker(None), here) == ([here], 0)
    assert group_coordinator(cast(Any, FakeBroker(None)), "g", here) == here


def test_cluster_names_every_broker_at_the_listener_of_the_kind_the_client_used() -> None:
    rtes = [Endpoint(1, "10.0.0.1", 9092, False), Endpoint(2, "10.0.0.2", 9092, True),
            Endpoint(3, "10.0.0.3", 9092, False)]
    kafka = [Endpoint(1, "10.0.0.1", 19092, False), Endpoint(2, "10.0.0.2", 19092, True)]
    broker = FakeBroker({"rtes": rtes, "kafka": kafka})
    brokers, controller = _view(broker, Advertised(1, "localhost", 19092, "kafka"))
    assert controller == 2
    # broker 3 has no --kafka listener: its V1 port, which serves Kafka too
    assert [(b.node_id, b.host, b.port) for b in brokers] == [
        (1, "10.0.0.1", 19092), (2, "10.0.0.2", 19092), (3, "10.0.0.3", 9092)]
    brokers, _c = _view(broker, Advertised(1, "localhost", 9092, "rtes"))
    assert [b.port for b in brokers] == [9092, 9092, 9092]


def test_this_broker_is_named_before_its_registration_is_read_back() -> None:
    broker = FakeBroker({"rtes": [Endpoint(2, "10.0.0.2", 9092, True)]})
    brokers, controller = _view(broker, Advertised(1, "localhost", 9093, "rtes"))
    assert [b.node_id for b in brokers] == [1, 2] and controller == 2


def test_the_coordinator_is_the_clusters_choice_at_the_listener_kind_used() -> None:
    broker = FakeBroker({"rtes": []}, Endpoint(3, "10.0.0.3", 19092, False))
    where = group_coordinator(cast(Any, broker), "g", Advertised(1, "localhost", 19092, "kafka"))
    assert where is not None and (where.node_id, where.host, where.port) == (3, "10.0.0.3", 19092)
    assert broker.asked == ("kafka", "rtes")
    assert group_coordinator(cast(Any, FakeBroker({"rtes": []}, None)), "g",
                             Advertised(1, "localhost", 9092, "rtes")) is None
