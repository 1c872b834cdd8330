"""Consumer groups and committed offsets as the broker serves them: authorization, the groups and
offsets files, and the ``GroupStore`` (broker/coordination.py) where the groups and offsets every
broker shares are kept first: nowhere on a single node; in cluster mode ZooKeeper (V1 and Iggy
groups are read, changed and written back there with a compare-and-set; Cursus groups stay in
their coordinator's memory). The group state table itself is broker/groups/."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from bayou.broker.context import BrokerContext
from bayou.broker.groups.coordinator import (
    CURSUS_POLICY,
    RTES_POLICY,
    GroupDescription,
    GroupPolicy,
    GroupView,
)
from bayou.errors import OffsetOutOfRange

log = logging.getLogger("bayou.broker")
T = TypeVar("T")


class ConsumerGroups:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._groups_dirty = False  # heartbeats: written by the groups-persist task, not each time

    def load(self) -> None:
        """Read the groups and offsets files at start (an unreadable one is logged and ignored)."""
        for file, loader in ((self.ctx.groups_file, self.ctx.groups.load_groups),
                             (self.ctx.offsets_file, self.ctx.groups.load_offsets)):
            data = file.load()
            if data is None:
                continue
            try:
                loader(data)
            except Exception as exc:  # any shape error: ignore the file, start empty (rtes.md 6.4)
                log.error("ignoring unreadable %s: %s", file.path, exc)

    async def expire_members(self) -> None:
        """Sweep the groups whose policy expires members in the background (Cursus: every 5 s)."""
        if self.ctx.groups.sweep_all(active_only=True):
            await self.ctx.groups_file.save(wait=False)

    async def persist_if_dirty(self) -> None:
        """Write the groups file when heartbeats changed it since the last write (a periodic task:
        a heartbeat does not write the file itself)."""
        if self._groups_dirty:
            self._groups_dirty = False
            await self.ctx.groups_file.save(wait=False)

    def _shared_group(self, group: str, policy: GroupPolicy | None = None) -> bool:
        """Whether the group store keeps ``group`` (of ``policy``, else of the policy it has here):
        in cluster mode V1 and Iggy groups, so members on different brokers form one group and it
        survives any broker (GroupStore.shares)."""
        if policy is None:
            g = self.ctx.groups.groups.get(group)
            policy = g.policy if g is not None else None
        return self.ctx.group_store.shares(policy)

    async def _in_store(self, group: str, op: Callable[[], T]) -> T:
        """Run a group operation on the state the group store holds: read it, apply ``op``, write
        the result back with a compare-and-set (again from the newer state when another broker
        wrote first). State changes made before an error (an expiry sweep) are written too."""
        store = self.ctx.group_store
        while True:
            data, version = await store.group_state(group)
            self.ctx.groups.replace_group(group, data)
            error: Exception | None = None
            try:
                result = op()
            except Exception as exc:  # a group error: raised once the state is written
                error = exc
            new = self.ctx.groups.group_json(group)
            if new != data:
                if not await store.set_group_state(group, new, version):
                    continue
                self._groups_dirty = True
            if error is not None:
                raise error
            return result

    async def join_group(self, group: str, topic: str, member: str, assignor: str | None = None,
                         policy: GroupPolicy = RTES_POLICY) -> GroupView:
        self.ctx.authorize("poll", topic)
        if self._shared_group(group, policy):
            return await self._in_store(
                group, lambda: self.ctx.groups.join(group, topic, member, assignor, policy))
        view = self.ctx.groups.join(group, topic, member, assignor, policy)
        await self.ctx.groups_file.save()
        return view

    async def register_group(self, group: str, topic: str, policy: GroupPolicy,
                             assignor: str | None = None) -> GroupDescription:
        """Register ``group`` for ``topic`` (no member joins); the existing group if there is one."""
        self.ctx.authorize("poll", topic)
        partitions = None if policy.rebind_topic else self.ctx.partition_count(topic)
        if self._shared_group(group, policy):
            return await self._in_store(group, lambda: self.ctx.groups.describe(
                self.ctx.groups.register(group, topic, policy, assignor, partitions).name))
        existed = group in self.ctx.groups.groups
        self.ctx.groups.register(group, topic, policy, assignor, partitions)
        if not existed:
            await self.ctx.groups_file.save()
        return self.ctx.groups.describe(group)

    async def forget_shared_partitions(self, topic: str, keep: int) -> None:
        """Cluster mode, partitions ``keep`` and beyond of ``topic`` are gone: the shared groups on
        it (kept in ZooKeeper) drop them from their assignments, once, by the broker that removed
        them (every broker drops its own copy's when it removes the partitions)."""
        for group, (policy, bound) in (await self.ctx.group_store.shared_groups()).items():
            if bound == topic and policy != CURSUS_POLICY.name:
                await self._in_store(group, lambda: self.ctx.groups.forget_partitions(topic, keep))

    async def current_group(self, group: str) -> GroupDescription:
        """The group as it is now: in cluster mode a shared group is read from ZooKeeper (another
        broker's members may have changed it), otherwise as ``describe_group``."""
        if self._shared_group(group):
            return await self._in_store(group, lambda: self.ctx.groups.describe(group))
        return self.ctx.groups.describe(group)

    async def drop_group_members(self, group: str, gone: Callable[[str], bool]) -> None:
        """Remove the members for which ``gone`` holds (see GroupCoordinator.drop_members)."""
        if self._shared_group(group):
            await self._in_store(group, lambda: self.ctx.groups.drop_members(group, gone))
        elif self.ctx.groups.drop_members(group, gone):
            await self.ctx.groups_file.save()

    async def resume_group(self, group: str, topic: str, member: str, generation: int) -> GroupView:
        self.ctx.authorize("poll", topic)
        before = self.generation(group)
        try:
            return self.ctx.groups.resume(group, topic, member, generation)
        finally:
            if self.generation(group) != before:
                await self.ctx.groups_file.save()

    async def sync_group(self, group: str, topic: str, member: str, generation: int) -> GroupView:
        self.ctx.authorize("poll", topic)
        if self._shared_group(group):
            return await self._in_store(
                group, lambda: self.ctx.groups.sync(group, topic, member, generation))
        before = self.generation(group)
        try:
            view = self.ctx.groups.sync(group, topic, member, generation)
        except Exception:
            if self.generation(group) != before:  # the expiry sweep removed someone
                await self.ctx.groups_file.save()
            raise
        await self.ctx.groups_file.save()
        return view

    async def heartbeat(self, group: str, topic: str, member: str, generation: int) -> None:
        self.ctx.authorize("poll", topic)
        if self._shared_group(group):
            return await self._in_store(
                group, lambda: self.ctx.groups.heartbeat(group, topic, member, generation))
        before = self.generation(group)
        try:
            self.ctx.groups.heartbeat(group, topic, member, generation)
        finally:
            if self.generation(group) != before:
                await self.ctx.groups_file.save()
        self._groups_dirty = True

    async def leave_group(self, group: str, topic: str, member: str, generation: int | None) -> None:
        if self._shared_group(group):
            return await self._in_store(
                group, lambda: self.ctx.groups.leave(group, topic, member, generation))
        try:
            self.ctx.groups.leave(group, topic, member, generation)
        finally:
            await self.ctx.groups_file.save()

    async def commit_offset(self, group: str, topic: str, partition: int, offset: int, *,
                            member: str | None = None, generation: int | None = None) -> None:
        """Store a committed offset durably; with a member, check its generation and ownership."""
        self.ctx.authorize("poll", topic)
        if offset < 0:
            raise OffsetOutOfRange("invalid offset")
        if member is not None and generation is not None:
            await self._check_commit(group, topic, member, generation, (partition,))
        # store_offset's check, then the store's copy first: an adoption never reverts this
        self.ctx.groups.check_offsets(group, topic, {partition: offset})
        await self.ctx.group_store.publish_offsets(group, topic, {partition: offset})
        self.ctx.groups.store_offset(group, topic, partition, offset)
        await self.ctx.offsets_file.save()

    async def _check_commit(self, group: str, topic: str, member: str, generation: int,
                            partitions: Iterable[int]) -> None:
        """A member's commit is valid: group, expiry, generation, membership, ownership."""
        def check() -> None:
            self.ctx.groups.check_commit(group, topic, member, generation, partitions)

        if self._shared_group(group):
            await self._in_store(group, check)
            return
        before = self.generation(group)
        try:
            check()
        finally:
            if self.generation(group) != before:
                await self.ctx.groups_file.save()

    def offsets_mark(self) -> int:
        return self.ctx.group_store.offsets_mark()

    async def commit_offsets(self, group: str, topic: str, entries: dict[int, int], *,
                             member: str | None = None, generation: int | None = None,
                             save: bool = True) -> None:
        """Commit several partitions at once, all or nothing, with one save of the offsets file
        (a save per partition made a commit of n partitions write the file n times, each write
        the size of every offset stored); with a member, each checked for ownership. ``save``
        False: the caller commits more and then calls ``save_offsets`` once (before answering)."""
        self.ctx.authorize("poll", topic)
        if any(off < 0 for off in entries.values()):
            raise OffsetOutOfRange("invalid offset")
        if member is not None and generation is not None:
            await self._check_commit(group, topic, member, generation, entries)
        self.ctx.groups.check_offsets(group, topic, entries)
        await self.ctx.group_store.publish_offsets(group, topic, entries)  # the store's copy first
        for p, off in entries.items():
            self.ctx.groups.store_offset(group, topic, p, off)
        if save:
            await self.ctx.offsets_file.save()

    def adopt_offsets(self, offsets: dict[tuple[str, str, int], int], *, since: int) -> bool:
        """Cluster mode: make the committed offsets those of the cluster's copy (read after
        ``offsets_mark()`` returned ``since``), except the ones changed here since; whether any
        changed (GroupStore.adopt_offsets)."""
        return self.ctx.group_store.adopt_offsets(offsets, since=since)

    async def save_offsets(self) -> None:
        await self.ctx.offsets_file.save()

    def _group_topics(self, group: str) -> set[str]:
        """The topics a group is about: the one it lives in, and every topic it has offsets for."""
        g = self.ctx.groups.groups.get(group)
        topics = self.ctx.groups.offsets.topics_of(group)
        if g is not None:
            topics.add(g.topic)
        return topics

    def _authorize_group(self, group: str) -> None:
        """A group's state is its consumers': whoever may poll every topic it is about may see and
        change it (Kafka asks Describe/Delete on the group; Iggy's groups live in their topic)."""
        for topic in sorted(self._group_topics(group)):
            self.ctx.authorizer.check_topic("poll", topic)

    def list_groups(self) -> list[str]:
        """The groups the caller may see: those whose every topic it may describe. The topics of
        every group are gathered in one pass over the offsets (a pass per group made a listing
        take groups x offsets: 2,000 groups of 10 offsets, 1.8 s on the event loop)."""
        topics: dict[str, set[str]] = {}
        for group, topic, _partition in self.ctx.groups.offsets:
            topics.setdefault(group, set()).add(topic)
        out = []
        for name in self.ctx.groups.list_groups():
            about = topics.get(name, set())
            g = self.ctx.groups.groups.get(name)
            if g is not None:
                about.add(g.topic)
            if len(self.ctx.visible_topics_of(about)) == len(about):
                out.append(name)
        return out

    async def reset_group_members(self, group: str) -> None:
        self._authorize_group(group)
        if self.ctx.groups.reset_members(group):
            await self.ctx.groups_file.save()

    async def delete_group(self, group: str) -> None:
        """Remove a group and its committed offsets (a missing group is not an error)."""
        self._authorize_group(group)
        await self.ctx.group_store.forget_group(group)  # the store's copy first
        if self.ctx.groups.delete_group(group):
            await self.ctx.groups_file.save()
            await self.ctx.offsets_file.save()

    async def delete_committed_offset(self, group: str, topic: str, partition: int) -> bool:
        self.ctx.authorize("poll", topic)
        if await self.current_committed_offset(group, topic, partition) is None:
            return False
        await self.ctx.group_store.forget_offset(group, topic, partition)  # the store's copy first
        self.ctx.groups.delete_offset(group, topic, partition)
        await self.ctx.offsets_file.save()
        return True

    def committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        self.ctx.authorize("poll", topic)
        return self.ctx.groups.committed(group, topic, partition)

    async def current_committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        """The committed offset as the cluster has it now (a commit made through another broker
        a moment ago included); on a single node the same as ``committed_offset``."""
        self.ctx.authorize("poll", topic)
        return await self.ctx.group_store.committed_offset(group, topic, partition)

    def describe_group(self, group: str) -> GroupDescription:
        self._authorize_group(group)
        return self.ctx.groups.describe(group)

    def generation(self, group: str) -> int:
        g = self.ctx.groups.groups.get(group)
        return g.generation if g else 0
