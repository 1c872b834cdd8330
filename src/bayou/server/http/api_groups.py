"""Consumer groups in the admin API: list with lag, describe (members, assignment, committed offset,
high watermark and lag per partition), reset offsets, delete (broker/admin.py does the work).

A group is any name that committed offsets, whichever protocol it came through: V1 and Cursus
groups with members, Iggy consumer groups, and consumers that only commit. Reset and delete are
refused with 409 while the group has members, as Kafka refuses them (its consumers would
overwrite the change at their next commit).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bayou.broker import admin
from bayou.errors import GroupNotFound, Unauthorized
from bayou.server.http.api import PREFIX, BadInput, body_object, bool_field, endpoint, ok, str_field

if TYPE_CHECKING:
    from bayou.server.app import BayouServer


def lag_doc(lag: admin.GroupLag) -> dict[str, Any]:
    d = lag.description
    return {
        "name": lag.name, "state": lag.state, "topic": None if d is None else d.topic,
        "protocol": None if d is None else d.policy, "generation": None if d is None else d.generation,
        "assignor": None if d is None else d.assignor,
        "members": [] if d is None else [{"id": m, "last_seen_ms": seen, "partitions": list(parts)}
                                         for m, seen, parts in d.members],
        "lag": lag.lag,
        "partitions": [{"topic": p.topic, "partition": p.partition, "committed_offset": p.committed,
                        "log_start_offset": p.log_start_offset, "high_watermark": p.high_watermark,
                        "lag": p.lag, "member": p.member} for p in lag.partitions],
    }


def summary_doc(lag: admin.GroupLag) -> dict[str, Any]:
    d = lag.description
    return {"name": lag.name, "state": lag.state, "topic": None if d is None else d.topic,
            "protocol": None if d is None else d.policy, "members": lag.active_members,
            "topics": sorted({p.topic for p in lag.partitions}), "lag": lag.lag}


def routes(server: BayouServer) -> Iterable[web.RouteDef]:
    broker = server.broker

    @endpoint(server, "broker")
    async def list_groups(_request: web.Request) -> web.StreamResponse:
        out = []
        index = admin.offsets_by_group(broker)  # one pass over the offsets, not one per group
        for i, name in enumerate(admin.group_names(broker, index)):
            if i % 100 == 99:
                await asyncio.sleep(0)  # thousands of groups: let other connections in between
            try:
                out.append(summary_doc(await admin.group_lag(broker, name, index)))
            except (Unauthorized, GroupNotFound):  # may describe its topics, not read them; or gone
                continue
        return ok({"groups": out})

    @endpoint(server, "broker")
    async def describe(request: web.Request) -> web.StreamResponse:
        return ok(lag_doc(await admin.group_lag(broker, request.match_info["group"])))

    @endpoint(server, "broker")
    async def reset(request: web.Request) -> web.StreamResponse:
        group = request.match_info["group"]
        doc = await body_object(request)
        topic = str_field(doc, "topic")
        to = str_field(doc, "to")
        assert topic is not None and to is not None
        if to not in admin.RESET_TARGETS:
            raise BadInput(f"to must be one of {', '.join(admin.RESET_TARGETS)}")
        value = doc.get("value")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise BadInput("value must be a non-negative integer (an offset, or a timestamp in ms)")
        if to in ("offset", "timestamp") and value is None:
            raise BadInput(f"resetting to {to} needs a value")
        parts = doc.get("partitions")
        if parts is not None and (not isinstance(parts, list)
                                  or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts)):
            raise BadInput("partitions must be a list of partition numbers")
        dry_run = bool_field(doc, "dry_run")
        changes = await admin.reset_offsets(broker, group, topic, to, value,
                                            partitions=parts, dry_run=dry_run)
        return ok({"group": group, "topic": topic, "dry_run": dry_run,
                   "partitions": [{"partition": c.partition, "before": c.before, "after": c.after}
                                  for c in changes]})

    @endpoint(server, "broker")
    async def delete(request: web.Request) -> web.StreamResponse:
        group = request.match_info["group"]
        await admin.delete_group(broker, group)
        return ok({"deleted": group})

    base = f"{PREFIX}/groups"
    return [web.get(base, list_groups), web.get(base + "/{group}", describe),
            web.delete(base + "/{group}", delete), web.post(base + "/{group}/reset-offsets", reset)]


__all__ = ["lag_doc", "routes", "summary_doc"]
