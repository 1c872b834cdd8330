"""What the cluster keeps in ZooKeeper besides topics and partition states: committed offsets
(written through before a commit is answered, so any broker serves them after this one is lost),
V1 and Iggy group state, shared documents (the Iggy catalog and users), and cluster-wide locks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from kazoo.exceptions import LockTimeout

from bayou.broker.cluster.context import ClusterContext
from bayou.broker.cluster.state import LOCKS
from bayou.errors import StorageError


class ZkMetadataStore:
    def __init__(self, ctx: ClusterContext) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self._locks: dict[str, asyncio.Lock] = {}

    # -- committed offsets ----------------------------------------------------------------------

    async def publish_offsets(self, group: str, topic: str, entries: dict[int, int]) -> None:
        """Write committed offsets through to ZooKeeper (before the commit is answered), so any
        broker serves them after this one is lost."""
        await self.ctx.run(self.ctx.zk.merge_offsets, group, topic, entries)

    async def forget_offset(self, group: str, topic: str, partition: int) -> None:
        await self.ctx.run(self.ctx.zk.delete_offset, group, topic, partition)

    async def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        return await self.ctx.run(self.ctx.zk.committed_offset, group, topic, partition)

    async def forget_group(self, group: str) -> None:
        await self.ctx.run(self.ctx.zk.delete_group, group)

    # -- shared documents (the Iggy catalog and users) -----------------------------------------

    async def read_doc(self, name: str) -> tuple[bytes, int]:
        """A JSON document every broker shares (``/<name>``), watched from now on; empty if
        nobody wrote it yet; and the version to write it back with."""
        await self.ctx.run(self.ctx.zk.watch_doc, f"/{name}")
        return await self.ctx.run(self.ctx.zk.doc, f"/{name}")

    async def write_doc(self, name: str, data: bytes, version: int) -> bool:
        return await self.ctx.run(self.ctx.zk.set_doc, f"/{name}", data, version)

    async def topic_names(self) -> list[str]:
        """The cluster's topics as ZooKeeper has them now."""
        return await self.ctx.run(self.ctx.zk.topic_names)

    def doc_changes(self, name: str) -> int:
        """How many changes of the document this broker has seen announced (a watch count)."""
        return self.ctx.zk.doc_changes.get(f"/{name}", 0)

    def is_locked(self, name: str) -> bool:
        """Whether a coroutine of this broker holds (or is taking) the cluster lock ``name``."""
        local = self._locks.get(name)
        return local is not None and local.locked()

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str, timeout: float = 15.0) -> AsyncIterator[None]:
        """Hold the cluster-wide lock ``name`` (one holder in the whole cluster)."""
        local = self._locks.setdefault(name, asyncio.Lock())
        async with local:
            lock = self.ctx.zk.lock(f"{LOCKS}/{name}")
            try:
                acquired = await self.ctx.run(lock.acquire, True, timeout)
            except LockTimeout:
                acquired = False
            if not acquired:
                raise StorageError(f"the cluster lock {name} was not free within {timeout:.0f} s")
            try:
                yield
            finally:
                await self.ctx.run(lock.release)

    async def shared_groups(self) -> dict[str, tuple[str, str]]:
        """The groups kept in ZooKeeper: name -> (policy, topic)."""
        return await self.ctx.run(self.ctx.zk.shared_groups)

    async def group_state(self, group: str) -> tuple[bytes, int]:
        """A V1 group's state as ZooKeeper holds it, and the version to write it back with."""
        return await self.ctx.run(self.ctx.zk.group_state, group)

    async def set_group_state(self, group: str, data: bytes, version: int) -> bool:
        return await self.ctx.run(self.ctx.zk.set_group_state, group, data, version)

    # -- Kafka transactions' coordinator state (broker/transactions.py) ----------------------

    async def txn_state(self, txn_id: str) -> tuple[bytes, int]:
        return await self.ctx.run(self.ctx.zk.txn_state, txn_id)

    async def set_txn_state(self, txn_id: str, data: bytes | None, version: int) -> bool:
        return await self.ctx.run(self.ctx.zk.set_txn_state, txn_id, data, version)

    async def txn_ids(self) -> list[str]:
        return await self.ctx.run(self.ctx.zk.txn_ids)

    async def txn_bucket_size(self, txn_id: str) -> int:
        return await self.ctx.run(self.ctx.zk.txn_bucket_size, txn_id)

    async def sync_offsets(self) -> None:
        """Take every group's committed offsets from ZooKeeper (the cluster's copy wins, deletions
        included; a local commit or deletion made while the copy was being read is kept)."""
        mark = self.broker.offsets_mark()
        remote = await self.ctx.run(self.ctx.zk.read_offsets)
        if self.broker.adopt_offsets(remote, since=mark):
            await self.broker.save_offsets()
