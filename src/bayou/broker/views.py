"""What the broker's facade for the front ends (``Broker``, "the front ends' facade") hands out
besides plain values: small frozen records, and the narrow view of the cluster's shared documents.

A front end that keeps its own state (the Iggy catalog and users) shares it between the brokers of
a cluster as JSON documents under a cluster-wide lock (``Broker.shared_documents``): it may read
and write a document, count the changes a watch announced, and hold the lock. The cluster node
implements ``SharedDocuments``; a standalone broker has none.
"""

from __future__ import annotations

import asyncio
import enum
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final, Protocol


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One live broker's listener of a protocol (``Broker.listener_endpoints``)."""

    broker_id: int
    host: str  # an IP address (what Iggy's cluster metadata and TANK's redirects carry)
    port: int
    controller: bool
    name: str = ""  # the host name the broker advertises, when it is not that address

    @property
    def hostname(self) -> str:
        """What a client that resolves names is told (Kafka, Cursus): the advertised host name."""
        return self.name or self.host


class Here(enum.Enum):
    """The answer "this broker" of a standalone broker to "where is it served": it has no
    registered listeners to name, so the front end names the one the client is connected to."""

    THIS_BROKER = "this broker"


THIS_BROKER: Final = Here.THIS_BROKER


@dataclass(frozen=True, slots=True)
class LogTotals:
    """The sums over this broker's partition replicas (``Broker.log_totals``)."""

    partitions: int
    size_bytes: int
    segments: int
    messages: int  # high watermark - log start, summed


class SharedDocuments(Protocol):
    started: asyncio.Event  # set once the broker has joined the cluster

    async def read_doc(self, name: str) -> tuple[bytes, int]:
        """The document (empty if nobody wrote it yet), watched from now on, and its version."""
        ...

    async def write_doc(self, name: str, data: bytes, version: int) -> bool:
        """Replace the document if it still has ``version``; whether it did."""
        ...

    def doc_changes(self, name: str) -> int:
        """How many changes of the document this broker has seen announced."""
        ...

    def is_locked(self, name: str) -> bool:
        """Whether a coroutine of this broker holds (or is taking) the cluster lock ``name``."""
        ...

    def exclusive(self, name: str, timeout: float = 15.0) -> AbstractAsyncContextManager[None]:
        """Hold the cluster-wide lock ``name`` (one holder in the whole cluster)."""
        ...

    async def topic_names(self) -> list[str]:
        """The cluster's topics as the cluster has them now."""
        ...
