"""What a front end may ask of the cluster's shared documents (``Broker.shared_documents``).

A front end that keeps its own state (the Iggy catalog and users) shares it between the brokers of
a cluster as JSON documents under a cluster-wide lock. This is the narrow view it gets of the
cluster node for that: read and write a document, count the changes a watch announced, and hold
the lock. The cluster node implements it; a standalone broker has none.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Protocol


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
