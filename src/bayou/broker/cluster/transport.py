"""How one broker talks to another's replication listener, as the cluster node sees it.

The node's parts speak in these requests and answers: a follower's FETCH and its answer (the
follower fetcher, and the leader side that serves it), and a PRODUCE forwarded to a partition's
leader with its answer. The bytes on the wire are the replica protocol's
(protocols/replica/codec.py); the client that opens the sockets and speaks it is the server
layer's (server/replica_client.py), handed to the node as a ``ReplicaDialer`` where the process is
wired (server/app.py). So the broker layer opens no socket and imports no codec.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal, Protocol

DEDUPLICATE = 0x01  # ProduceRequest.flags: de-duplicate by the records' message ids
TXN_MARKER = 0x02  # ProduceRequest.flags: the batch is a transaction marker (broker/transactions.py)


class LinkError(Exception):
    """The replication link is unusable: the handshake was refused, or the peer sent something
    other than the answer expected. The connection is closed."""


class LinkDropped(ConnectionError):
    """The peer closed the connection before any byte of the answer came back (an idle pooled
    connection the peer had closed: the request may be sent again on a new one)."""


class FetchStatus(enum.IntEnum):
    NONE = 0
    NOT_LEADER = 1
    FENCED = 2
    UNKNOWN_PARTITION = 3
    OFFSET_OUT_OF_RANGE = 4


class ProduceStatus(enum.IntEnum):
    NONE = 0
    NOT_LEADER = 1
    REPLICATION_TIMEOUT = 2
    UNKNOWN_TOPIC = 3
    UNKNOWN_PARTITION = 4
    REJECTED = 5


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's fetch (``replica_id`` its broker id), or a consumer's read forwarded by a
    broker holding no replica (``replica_id`` -1)."""

    topic: str
    partition: int
    replica_id: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int
    max_wait_ms: int


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    error: FetchStatus
    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    diverging_end_offset: int = -1
    diverging_epoch: int = -1
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    topic: str
    partition: int
    acks: int
    flags: int
    batch: bytes


@dataclass(frozen=True, slots=True)
class ProduceAnswer:
    error: ProduceStatus
    base_offset: int = -1
    last_offset: int = -1
    high_watermark: int = -1
    log_start_offset: int = -1
    message: str = ""


class ReplicaLink(Protocol):
    """One connection to another broker's replication listener, one request in flight."""

    async def fetch(self, req: FetchRequest, timeout: float | None = None) -> FetchAnswer:
        """Send ``req``, wait for its answer (``timeout`` for each read of it; None: no limit).
        Raises OSError (``LinkDropped`` when nothing came back), EOFError, TimeoutError or
        ``LinkError``; the caller then closes the link."""
        ...

    async def produce(self, req: ProduceRequest, timeout: float | None = None) -> ProduceAnswer:
        """As ``fetch``, for a forwarded produce."""
        ...

    def close(self) -> None: ...


class ReplicaDialer(Protocol):
    """Opens links to other brokers' replication listeners (past the cluster's secret and TLS)."""

    async def connect(self, host: str, port: int, *, limit: int = 1 << 16) -> ReplicaLink:
        """A link, or OSError (ConnectionRefusedError: nothing listens there) or ``LinkError``
        (the TLS or secret handshake failed). ``limit``: the largest answer read at once."""
        ...

    async def probe(self, host: str, port: int, timeout: float) -> Literal["open", "refused", "unknown"]:
        """Whether something accepts connections at ``host:port`` (a plain connect, closed at once)."""
        ...
