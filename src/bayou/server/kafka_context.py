"""What every Kafka handler shares (server/kafka.py dispatches; kafka_groups.py and
kafka_admin.py hold the group and admin APIs): a request's context, its connection's session, the
advertised listener, the error-code lookup and Kafka's authorized-operations bits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from bayou.broker.authz import Principal
from bayou.protocols.kafka.codes import error_code

if TYPE_CHECKING:
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

Login = Callable[[str, str, str], Awaitable[Principal]]
"""(peer address, user name, password) -> the principal of those credentials; raises
``AuthFailure`` (the broker's users: server/iggy/users.py, as the HTTP port's Basic login)."""


@dataclass(slots=True)
class Session:
    """One connection's state: its SASL exchange, and whether it must close after this reply."""

    peer: str
    mechanism: str | None = None
    authenticated: bool = False
    close: bool = False


@dataclass(frozen=True, slots=True)
class Advertised:
    """Where clients are told to connect: Metadata's, FindCoordinator's and DescribeCluster's
    broker entry. ``port`` is the listener's own (each listener advertises itself)."""

    node_id: int
    host: str
    port: int

    def broker(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "broker_id": self.node_id, "host": self.host,
                "port": self.port, "rack": None}


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
