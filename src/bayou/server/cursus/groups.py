"""Cursus's consumer groups, kept by the broker's group coordinator: membership (JOIN, SYNC,
HEARTBEAT, LEAVE), committed offsets, registration and status. A group's registry errors become
replies through the one table (``protocols/cursus/codes``), named by ``_group_errors``."""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterable, Iterator

from bayou.broker.groups.coordinator import CURSUS_POLICY
from bayou.errors import BayouError, GroupNotFound, GroupTopicMismatch, PartitionNotAssigned
from bayou.protocols.cursus import replies
from bayou.protocols.cursus import requests as rq
from bayou.protocols.cursus.codes import Scope, error_reply
from bayou.protocols.cursus.requests import ErrorReply
from bayou.server.base import Connection
from bayou.server.cursus.context import ConnState, Context, err, refuse


class GroupHandlers:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.broker = ctx.broker

    @contextlib.contextmanager
    def _group_errors(self, group: str, member: str = "", generation: int | None = None,
                      partition: int | None = None, batch: Iterable[int] = ()) -> Iterator[None]:
        """Answer a registry error of a group request through the one table, naming the request
        (for NOT_OWNER: ``partition``, or the first of ``batch`` the member does not own)."""
        try:
            yield
        except BayouError as exc:
            if isinstance(exc, PartitionNotAssigned) and partition is None:
                owned = set(self.broker.group_assignment(group, member))
                partition = next((p for p in batch if p not in owned), None)
            scope = Scope(group, member, generation, self.broker.group_generation(group), partition)
            raise ErrorReply(error_reply(exc, scope)) from None

    def _group_for(self, group: str, topic: str) -> None:
        """The group exists and is bound to ``topic`` (checked before reading or committing)."""
        bound = self.broker.group_topic(group)
        if bound is None:
            raise GroupNotFound()
        if bound != topic:
            raise GroupTopicMismatch(bound, topic)

    async def join_group(self, req: rq.JoinGroup, state: ConnState, conn: Connection | None) -> bytes:
        topic, group, member = req.topic, req.group, req.member
        await self.ctx.topic_exists(topic)
        refuse(req.invalid)
        with self._group_errors(group, member, req.generation):
            if req.generation is not None:
                view = await self.broker.resume_group(group, topic, member, req.generation)
                return replies.ok(("generation", view.generation), ("member", member),
                                  ("assignments", list(view.assignment)), ("resumed", True))
            members = self.broker.group_members(group)
            if member in members:
                # A rejoin: the published client re-sends the id it was given (cursus.md 4.9). A
                # fresh suffix would leave the old id behind until it expires and bump the
                # generation again, so two members' rejoins would trigger each other for ever.
                member_id = member
            else:
                member_id = f"{member}-{random.randrange(10_000):04d}"
                while member_id in members:
                    member_id = f"{member}-{random.randrange(10_000):04d}"
            view = await self.broker.join_group(group, topic, member_id, "range", CURSUS_POLICY)
        return replies.ok(("generation", view.generation), ("member", member_id),
                          ("assignments", list(view.assignment)))

    async def sync_group(self, req: rq.SyncGroup, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group, req.member, req.generation):
            view = await self.broker.sync_group(req.group, req.topic, req.member, req.generation)
        return replies.ok(("generation", view.generation), ("member", req.member),
                          ("assignments", list(view.assignment)))

    async def heartbeat(self, req: rq.Heartbeat, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group, req.member, req.generation):
            await self.broker.heartbeat(req.group, req.topic, req.member, req.generation)
        return replies.ok(("member", req.member), ("generation", req.generation))

    async def leave_group(self, req: rq.LeaveGroup, state: ConnState, conn: Connection | None) -> bytes:
        # Without generation= the leave is unconditional (cursus.md decision 2: the Python and
        # Java clients never send one).
        with self._group_errors(req.group, req.member, req.generation):
            await self.broker.leave_group(req.group, req.topic, req.member, req.generation)
        return replies.ok(("group", req.group), ("member", req.member), ("left", True))

    async def fetch_offset(self, req: rq.FetchOffset, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group):
            self._group_for(req.group, req.topic)
            off = self.broker.committed_offset(req.group, req.topic, req.partition)
        return replies.ok(("offset", off if off is not None else 0))

    async def commit_offset(self, req: rq.CommitOffset, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group, req.member or "", req.generation, req.partition):
            self._group_for(req.group, req.topic)
            await self.broker.commit_offset(req.group, req.topic, req.partition, req.offset,
                                            member=req.member, generation=req.generation)
        return replies.ok()

    async def batch_commit(self, req: rq.BatchCommit, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group, req.member, req.generation, batch=req.offsets):
            self._group_for(req.group, req.topic)
            await self.broker.commit_offsets(req.group, req.topic, dict(req.offsets), member=req.member,
                                             generation=req.generation)
        return replies.ok(("batched", len(req.offsets)))

    async def register_group(self, req: rq.RegisterGroup, state: ConnState, conn: Connection | None) -> bytes:
        topic, group = req.topic, req.group
        await self.ctx.topic_exists(topic)
        d = await self.broker.register_group(group, topic, CURSUS_POLICY, "range")
        if d.topic != topic:
            raise err("register_group_failed", ("reason", f"group {group} is bound to topic {d.topic}"))
        return replies.ok(("group", group), ("topic", topic), ("registered", True))

    async def subscribe(self, req: rq.Subscribe, state: ConnState, conn: Connection | None) -> bytes:
        await self.ctx.topic_exists(req.topic)
        d = await self.broker.register_group(req.group, req.topic, CURSUS_POLICY, "range")
        if d.topic != req.topic:
            raise err("topic_not_assigned_to_group", ("expected", d.topic), ("actual", req.topic))
        return replies.ok(("topic", req.topic), ("group", req.group), ("subscribed", True))

    async def group_status(self, req: rq.GroupStatus, state: ConnState, conn: Connection | None) -> bytes:
        with self._group_errors(req.group):
            d = self.broker.describe_group(req.group)
        body = {
            "status": "OK",
            "group_name": d.name,
            "topic_name": d.topic,
            "state": "Stable" if d.members else "Dead",
            "generation": d.generation,
            "member_count": len(d.members),
            "partition_count": d.partition_count,
            "members": [{"member_id": m, "last_heartbeat": _iso(ts), "assignments": list(parts)}
                        for m, ts, parts in d.members],
            "last_rebalance": _iso(d.last_rebalance_ms),
        }
        return json.dumps(body, indent=2).encode()

    async def list_groups(self, req: rq.ListGroups, state: ConnState, conn: Connection | None) -> bytes:
        names = self.broker.list_groups()
        return replies.ok(("count", len(names)), ("groups", ",".join(names)))


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"
