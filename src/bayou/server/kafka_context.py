"""What every Kafka handler shares (server/kafka.py dispatches; kafka_groups.py and
kafka_admin.py hold the group and admin APIs): a request's context, its connection's session, the
advertised listener, the error-code lookup and Kafka's authorized-operations bits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from bayou.broker.authz import Principal
from bayou.broker.views import THIS_BROKER
from bayou.protocols.kafka.codes import error_code
from bayou.protocols.scram import ScramCredential, ScramExchange

if TYPE_CHECKING:
    from bayou.broker import Broker
    from bayou.server.kafka import KafkaService

CLUSTER_ID = "bayou"
ALL_OPERATIONS_OMITTED = -2147483648  # Kafka's "authorized operations not requested"
# AclOperation bits: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12. What is reported when a client asks
# (kafka-python's admin always does): every operation the resource has; the broker still checks
# each request against the caller's permissions.
TOPIC_OPERATIONS = sum(1 << b for b in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << b for b in (5, 7, 8, 9, 10, 11, 12))
GROUP_OPERATIONS = sum(1 << b for b in (3, 6, 8))

class Logins(Protocol):
    """The broker's users as SASL on a Kafka listener sees them: the Iggy listener's users, login
    guard and hash pool (server/iggy/auth.py), as the HTTP port's Basic login (app.py wires them)."""

    async def plain(self, peer: str, user: str, password: str) -> Principal:
        """The principal of these credentials (PLAIN); raises AuthFailure."""
        ...

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """What ``user``'s SCRAM proof is checked against; None: no such active user, or none kept."""
        ...

    async def scram(self, peer: str, user: str, verify: Callable[[], bytes]) -> tuple[Principal, bytes]:
        """A SCRAM exchange's last step judged through the login guard (``verify`` raises
        ScramFailure or returns the server-final message), and the principal of ``user``;
        raises AuthFailure or ScramFailure."""
        ...


@dataclass(slots=True)
class Session:
    """One connection's state: its SASL exchange, and whether it must close after this reply."""

    peer: str
    mechanism: str | None = None
    authenticated: bool = False
    close: bool = False
    scram: ScramExchange | None = None  # a SCRAM exchange between its two SaslAuthenticate steps
    client_host: str = field(init=False)  # "/host", as Kafka's tools show a member's host

    def __post_init__(self) -> None:
        self.client_host = f"/{self.peer.rsplit(':', 1)[0]}"


@dataclass(frozen=True, slots=True)
class Advertised:
    """Where clients are told to connect: Metadata's, FindCoordinator's and DescribeCluster's
    broker entry. ``port`` is the listener's own (each listener advertises itself); ``listener``
    its name (``KAFKA_LISTENERS``), which names the same listener of the other brokers."""

    node_id: int
    host: str
    port: int
    listener: str = "rtes"

    def broker(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "broker_id": self.node_id, "host": self.host,
                "port": self.port, "rack": None}


KAFKA_LISTENERS = ("rtes", "kafka")
"""The listeners that serve Kafka: the V1 port (by the first byte) and ``--kafka``'s. Every
broker registers each of its listeners in the cluster (broker/cluster/state.py), these included."""


def _preference(here: Advertised) -> tuple[str, ...]:
    """The listener names to look for on other brokers: the one the client connected to first
    (Kafka's rule: a listener name means the same listener on every broker), then the others
    that speak Kafka, for a broker configured without it."""
    return (here.listener, *(n for n in KAFKA_LISTENERS if n != here.listener))


def cluster_brokers(broker: Broker, here: Advertised) -> tuple[list[Advertised], int]:
    """The brokers Metadata and DescribeCluster name, and the controller's id. Standalone: this
    listener alone. In cluster mode: every live broker (node id = broker id) at its Kafka
    listener (``_preference``) and the host it registered; -1 while no controller is known."""
    names = _preference(here)
    found: dict[int, Advertised] = {}
    controller = -1
    for name in reversed(names):  # the preferred listener last, so that it wins
        endpoints = broker.listener_endpoints(name)
        if endpoints is None:
            return [here], here.node_id
        for e in endpoints:
            found[e.broker_id] = Advertised(e.broker_id, e.hostname, e.port, name)
            if e.controller:
                controller = e.broker_id
    found.setdefault(here.node_id, here)  # before this broker's own registration is read back
    return [found[b] for b in sorted(found)], controller


def group_coordinator(broker: Broker, group: str, here: Advertised) -> Advertised | None:
    """Where ``group`` is coordinated: this broker standalone; in cluster mode the broker the
    cluster assigns it (Kafka's classic groups are kept in the coordinator's memory), None while
    none is known."""
    e = broker.group_coordinator(group, _preference(here))
    if e is THIS_BROKER:
        return here
    if e is None:
        return None
    return Advertised(e.broker_id, e.hostname, e.port)  # as Metadata names it


def not_coordinator(broker: Broker, req: Request, key: str) -> ErrorCode | None:
    """None when this broker coordinates ``key`` (a group, or a transactional id: Kafka names
    both the same way): always standalone. Else NOT_COORDINATOR, or COORDINATOR_NOT_AVAILABLE
    while no coordinator is known."""
    where = group_coordinator(broker, key, req.advertised)
    if where is None:
        return ErrorCode.coordinator_not_available
    return None if where.node_id == req.advertised.node_id else ErrorCode.not_coordinator


@dataclass(slots=True)
class Request:
    """What a handler knows of the request besides its body."""

    api_key: int
    version: int
    client_id: str
    client_host: str
    advertised: Advertised
    session: Session


Fields = dict[str, Any]
Handler = Callable[["KafkaService", Request, Any], Awaitable[Fields | None]]


def code_of(exc: BaseException) -> ErrorCode:
    """The Kafka code to answer ``exc`` with (protocols/kafka/codes.py, the one table)."""
    return error_code(exc)
