"""Iggy's consumer groups and consumer offsets, kept by the broker's group coordinator.

An Iggy consumer group lives in its topic (the catalog) and is the broker group
``iggy.<bayou topic>.<group name>``; its members are connections (a session's client id), so a
closed connection leaves its groups. A regular consumer's offsets are kept in a broker group of
its own (``iggy-consumer.<id>``).

Iggy's "stored consumer offset" is the offset of the last consumed message, bayou's committed
offset the next one to read: stored = committed - 1 at this boundary, so a V1 or Cursus consumer of
the same group resumes where an Iggy one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib

from bayou.broker.groups.coordinator import IGGY_POLICY
from bayou.errors import BayouError, GroupNotFound, StorageError, UnknownMember
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import IggyError
from bayou.server.iggy.catalog import GroupEntry, StreamEntry, TopicEntry
from bayou.server.iggy.context import Context, Session, check_name

GroupKey = tuple[int, int, int]  # (stream, topic, group) ids, as a session lists its groups


class GroupHandlers:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self._leaving: set[asyncio.Task[None]] = set()  # memberships still to remove

    # -- whose offsets, which partitions -------------------------------------------------------

    def consumer_key(self, topic: TopicEntry, consumer: m.Consumer) -> str:
        """The broker group holding this consumer's offsets: the Iggy group's, or one per
        regular consumer id (a numeric id and its decimal name are the same consumer)."""
        if consumer.kind == m.ConsumerKind.GROUP:
            return topic.broker_group(self.ctx.group(topic, consumer.id))
        return f"iggy-consumer.{consumer.id.value}"

    async def member_partitions(self, s: Session, stream: StreamEntry, topic: TopicEntry,
                                group: GroupEntry) -> tuple[int, ...]:
        """The partitions the group assigns the session now; not a member: CONSUMER_GROUP_MEMBER_NOT_FOUND."""
        if (stream.id, topic.id, group.id) not in s.groups:
            raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND, f"not a member of {group.name!r}")
        try:  # cluster mode: as ZooKeeper has it now (members on other brokers change it)
            desc = await self.broker.current_group(topic.broker_group(group))
        except GroupNotFound:
            raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND,
                            f"not a member of {group.name!r}") from None
        for member, _seen, parts in desc.members:
            if member == s.member:
                return parts
        raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND, f"not a member of {group.name!r}")

    # -- consumer offsets ----------------------------------------------------------------------

    async def _offset_partition(self, s: Session, stream: StreamEntry, topic: TopicEntry,
                                consumer: m.Consumer, partition_id: int | None) -> int:
        p = self.ctx.partition_in(s, partition_id)
        if p is None:
            if consumer.kind == m.ConsumerKind.GROUP:
                group = self.ctx.group(topic, consumer.id)
                parts = await self.member_partitions(s, stream, topic, group)
                if not parts:
                    raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND, "no partitions assigned")
                return parts[0]
            p = 0
        self.ctx.check_partition(topic, p)
        return p

    async def get_offset(self, s: Session, req: m.GetConsumerOffset) -> m.ConsumerOffsetInfo | None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "poll", stream.id, topic.id)
        p = await self._offset_partition(s, stream, topic, req.consumer, req.partition_id)
        committed = await self.broker.current_committed_offset(self.consumer_key(topic, req.consumer),
                                                               topic.topic, p)
        if committed is None or committed == 0:
            return None
        _start, hw = self.broker.partition_bounds(topic.topic, p)
        return m.ConsumerOffsetInfo(self.ctx.partition_out(s, p), max(hw - 1, 0), committed - 1)

    async def store_offset(self, s: Session, req: m.StoreConsumerOffset) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "poll", stream.id, topic.id)
        p = await self._offset_partition(s, stream, topic, req.consumer, req.partition_id)
        _start, hw = self.broker.partition_bounds(topic.topic, p)
        if hw == 0 or req.offset > hw - 1:
            raise IggyError(Status.INVALID_OFFSET, f"offset {req.offset} is past the partition's last")
        await self.broker.commit_offset(self.consumer_key(topic, req.consumer), topic.topic, p,
                                        req.offset + 1)

    async def delete_offset(self, s: Session, req: m.DeleteConsumerOffset) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "poll", stream.id, topic.id)
        p = await self._offset_partition(s, stream, topic, req.consumer, req.partition_id)
        key = self.consumer_key(topic, req.consumer)
        if not await self.broker.delete_committed_offset(key, topic.topic, p):
            raise IggyError(Status.CONSUMER_OFFSET_NOT_FOUND, "no stored offset")

    # -- consumer groups -----------------------------------------------------------------------

    async def _group_details(self, topic: TopicEntry, group: GroupEntry) -> m.ConsumerGroupDetails:
        try:
            desc = await self.broker.current_group(topic.broker_group(group))
            found = desc.members
        except GroupNotFound:  # registered, no state yet
            found = ()
        members = tuple(m.ConsumerGroupMember(int(mid), tuple(parts)) for mid, _seen, parts in found)
        info = m.ConsumerGroupInfo(group.id, self.broker.partition_count(topic.topic), len(members),
                                   group.name)
        return m.ConsumerGroupDetails(info, members)

    async def get_group(self, s: Session, req: m.GetConsumerGroup) -> m.ConsumerGroupDetails | None:
        try:
            stream, topic = await self.ctx.resolve(req.stream, req.topic)
        except IggyError:
            return None
        self.ctx.permit(s, "read_topics", stream.id, topic.id)
        group = topic.group(req.group.value)
        return None if group is None else await self._group_details(topic, group)

    async def get_groups(self, s: Session, req: m.GetConsumerGroups) -> tuple[m.ConsumerGroupInfo, ...]:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "read_topics", stream.id, topic.id)
        return tuple([(await self._group_details(topic, g)).group
                      for g in sorted(topic.groups.values(), key=lambda g: g.id)])

    async def create_group(self, s: Session, req: m.CreateConsumerGroup) -> m.ConsumerGroupDetails:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "poll", stream.id, topic.id)
        if req.group_id is not None:  # D: the client chose the id (its name is derived from it)
            if req.group_id < 1:
                raise IggyError(Status.INVALID_CONSUMER_GROUP_ID, f"group id {req.group_id}")
            if req.group_id in topic.groups:
                raise IggyError(Status.CONSUMER_GROUP_ID_ALREADY_EXISTS, f"group {req.group_id} exists")
        name = req.name if req.name is not None else str(req.group_id)
        check_name(name, Status.INVALID_CONSUMER_GROUP_NAME)
        if topic.group(name) is not None:
            raise IggyError(Status.CONSUMER_GROUP_NAME_ALREADY_EXISTS, f"group {name!r} exists")
        group = topic.add_group(name, req.group_id)
        await self.broker.register_group(topic.broker_group(group), topic.topic, IGGY_POLICY)
        await self.ctx.state.save_catalog()
        return await self._group_details(topic, group)

    async def delete_group(self, s: Session, req: m.DeleteConsumerGroup) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "poll", stream.id, topic.id)
        group = self.ctx.group(topic, req.group)
        await self.broker.delete_group(topic.broker_group(group))
        del topic.groups[group.id]
        for c in self.ctx.sessions.values():
            c.groups.discard((stream.id, topic.id, group.id))
        await self.ctx.state.save_catalog()

    async def join_group(self, s: Session, req: m.JoinConsumerGroup) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        self.ctx.permit(s, "poll", stream.id, topic.id)
        group = self.ctx.group(topic, req.group)
        await self.broker.join_group(topic.broker_group(group), topic.topic, s.member, policy=IGGY_POLICY)
        s.groups.add((stream.id, topic.id, group.id))

    async def leave_group(self, s: Session, req: m.LeaveConsumerGroup) -> None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        group = self.ctx.group(topic, req.group)
        key = (stream.id, topic.id, group.id)
        if key not in s.groups:
            raise IggyError(Status.CONSUMER_GROUP_MEMBER_NOT_FOUND, f"not a member of {group.name!r}")
        await self._leave(s, key)

    async def sync_group(self, s: Session, req: m.SyncConsumerGroup) -> m.ConsumerGroupAssignment | None:
        stream, topic = await self.ctx.resolve(req.stream, req.topic)
        group = self.ctx.group(topic, req.group)
        if (stream.id, topic.id, group.id) not in s.groups:
            return None
        try:
            desc = await self.broker.current_group(topic.broker_group(group))
        except GroupNotFound:
            return None
        for member, _seen, parts in desc.members:
            if member == s.member:
                return m.ConsumerGroupAssignment(desc.generation, tuple(parts))
        return None

    # -- leaving: a logout, a closed connection ------------------------------------------------

    async def _leave(self, s: Session, key: GroupKey) -> None:
        s.groups.discard(key)
        stream = self.ctx.catalog.stream(key[0])
        topic = stream.topics.get(key[1]) if stream else None
        group = topic.groups.get(key[2]) if topic else None
        if topic is not None and group is not None:
            with contextlib.suppress(GroupNotFound, UnknownMember):
                await self.broker.leave_group(topic.broker_group(group), topic.topic, s.member, None)

    async def leave_all(self, s: Session) -> None:
        """A logout: the session leaves every group it joined (what cannot be left is let go)."""
        for key in list(s.groups):
            with contextlib.suppress(BayouError, IggyError):
                await self._leave(s, key)

    async def leave_closed(self, s: Session) -> None:
        """A closed connection leaves its groups; a removal ZooKeeper could not take now (cluster
        mode) is retried in the background."""
        for key in list(s.groups):
            try:
                await self._leave(s, key)
            except StorageError:  # cluster mode, ZooKeeper unreachable: leave once it is back
                task = asyncio.get_running_loop().create_task(self._leave_later(s, key))
                self._leaving.add(task)
                task.add_done_callback(self._leaving.discard)
            except (BayouError, IggyError):
                pass

    async def _leave_later(self, s: Session, key: GroupKey, attempts: int = 60) -> None:
        """A closed connection's membership whose removal failed: retried every second for a
        minute (else the controller drops it with its broker, or a restart does)."""
        for _ in range(attempts):
            await asyncio.sleep(1)
            try:
                await self._leave(s, key)
                return
            except StorageError:
                continue
            except (BayouError, IggyError):
                return


__all__ = ["GroupHandlers"]
