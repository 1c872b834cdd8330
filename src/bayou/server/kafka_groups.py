"""Kafka's group APIs on the broker's groups (server/kafka.py dispatches here).

Membership is Kafka's classic protocol (broker/groups/classic.py: the client's assignor runs in
the leader, the metadata and assignments stay opaque); committed offsets are the broker's one
offset table, which V1, Cursus, Iggy and the SDK read and write too, so a group's lag and resets
show in every tool. FindCoordinator names this broker standalone; in cluster mode the group's
coordinator (FNV-1a of its name over the live brokers, as for Cursus groups), because a classic
group's membership lives in its coordinator's memory: the membership APIs, DescribeGroups and
DeleteGroups at any other broker answer NOT_COORDINATOR (clients find the coordinator again), and
when the coordinator dies its groups move to a live broker, where the members rejoin. Committed
offsets are the cluster's (ZooKeeper), so OffsetFetch is answered anywhere. ListGroups,
DescribeGroups and DeleteGroups see the groups of every protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from bayou.broker import YIELD_EVERY, Pace
from bayou.broker.groups.coordinator import RTES_POLICY
from bayou.errors import BayouError, GroupNotFound, OffsetOutOfRange, OffsetRegression
from bayou.protocols.kafka.codes import ApiKey
from bayou.server.kafka_context import (
    ALL_OPERATIONS_OMITTED,
    GROUP_OPERATIONS,
    Fields,
    Handler,
    Request,
    code_of,
    group_coordinator,
    not_coordinator,
)

if TYPE_CHECKING:
    from bayou.server.kafka import KafkaService

CONSUMER = "consumer"


def _coordinator_entry(svc: KafkaService, req: Request, key: str) -> Fields:
    where = group_coordinator(svc.broker, key, req.advertised)
    if where is None:
        return {"error_code": ErrorCode.coordinator_not_available, "error_message": None,
                "node_id": -1, "host": "", "port": -1}
    return {"error_code": ErrorCode.none, "error_message": None, **where.broker()}


async def find_coordinator(svc: KafkaService, req: Request, body: Any) -> Fields:
    keys = list(getattr(body, "coordinator_keys", ()) or [getattr(body, "key", "")])
    entries = [{"key": k, **_coordinator_entry(svc, req, k)} for k in keys]
    return {**{k: v for k, v in entries[0].items() if k != "key"}, "coordinators": entries}


def _join_error(code: ErrorCode, member_id: str) -> Fields:
    """A refused JoinGroup. The protocol name is left to the schema's empty value: it is a
    nullable string from v7 on only (None before that cannot be encoded)."""
    return {"error_code": code, "generation_id": -1, "member_id": member_id}


async def join_group(svc: KafkaService, req: Request, body: Any) -> Fields:
    session = int(body.session_timeout.total_seconds() * 1000)
    rebalance = getattr(body, "rebalance_timeout", None)
    elsewhere = not_coordinator(svc.broker, req, body.group_id)
    if elsewhere is not None:
        return _join_error(elsewhere, body.member_id)
    try:
        result = await svc.broker.classic_groups.join(
            body.group_id, body.member_id, client_id=req.client_id, client_host=req.client_host,
            session_timeout_ms=session,
            rebalance_timeout_ms=session if rebalance is None else int(rebalance.total_seconds() * 1000),
            protocol_type=body.protocol_type,
            protocols=[(p.name, p.metadata) for p in body.protocols],
            group_instance_id=getattr(body, "group_instance_id", None))
    except BayouError as exc:
        return _join_error(code_of(exc), body.member_id)
    return {"generation_id": result.generation, "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name, "leader": result.leader,
            "member_id": result.member_id,
            "members": [{"member_id": m, "group_instance_id": i, "metadata": meta}
                        for m, i, meta in result.members]}


async def sync_group(svc: KafkaService, req: Request, body: Any) -> Fields:
    elsewhere = not_coordinator(svc.broker, req, body.group_id)
    if elsewhere is not None:
        return {"error_code": elsewhere, "assignment": b"", "protocol_type": None, "protocol_name": None}
    try:
        ptype, pname, assignment = await svc.broker.classic_groups.sync(
            body.group_id, body.member_id, body.generation_id,
            {a.member_id: a.assignment for a in body.assignments})
    except BayouError as exc:
        return {"error_code": code_of(exc), "assignment": b"", "protocol_type": None,
                "protocol_name": None}
    return {"protocol_type": ptype, "protocol_name": pname, "assignment": assignment}


async def heartbeat(svc: KafkaService, req: Request, body: Any) -> Fields:
    elsewhere = not_coordinator(svc.broker, req, body.group_id)
    if elsewhere is not None:
        return {"error_code": elsewhere}
    try:
        svc.broker.classic_groups.heartbeat(body.group_id, body.member_id, body.generation_id)
    except BayouError as exc:
        return {"error_code": code_of(exc)}
    return {}


async def leave_group(svc: KafkaService, req: Request, body: Any) -> Fields:
    members = getattr(body, "members", None)
    ids = [m.member_id for m in members] if members is not None else [body.member_id]
    elsewhere = not_coordinator(svc.broker, req, body.group_id)
    if elsewhere is not None:
        return {"error_code": elsewhere, "members": []}
    entries: list[Fields] = []
    pace = Pace()
    for i in range(0, len(ids), YIELD_EVERY):  # a request may list a million ids: in slices
        await pace(YIELD_EVERY)
        chunk = ids[i:i + YIELD_EVERY]
        entries += [{"member_id": mid, "group_instance_id": None,
                     "error_code": ErrorCode.none if err is None else code_of(err)}
                    for mid, err in zip(chunk, svc.broker.classic_groups.leave(body.group_id, chunk),
                                        strict=True)]
    out: Fields = {"members": entries}
    if members is None and entries[0]["error_code"] != ErrorCode.none:
        out["error_code"] = entries[0]["error_code"]
    return out


async def offset_commit(svc: KafkaService, req: Request, body: Any) -> Fields:
    generation = getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
    member = getattr(body, "member_id", "")
    group_error = not_coordinator(svc.broker, req, body.group_id)
    try:
        if group_error is None:
            svc.broker.classic_groups.check_commit(body.group_id, member, generation)
    except BayouError as exc:
        group_error = code_of(exc)
    codes: list[dict[int, int]] = []
    pace = Pace()
    for t in body.topics:
        await pace(len(t.partitions))
        offsets = {p.partition_index: p.committed_offset for p in t.partitions}
        codes.append(dict.fromkeys(offsets, group_error) if group_error is not None
                     else await _commit_topic(svc, body.group_id, t.name, offsets, pace))
    if group_error is None and any(c == ErrorCode.none for done in codes for c in done.values()):
        try:  # the offsets file once for the whole request (once per partition took 111 s for 100,000)
            await svc.broker.save_offsets()
        except BayouError as exc:
            for done in codes:
                done.update({p: code_of(exc) for p, c in done.items() if c == ErrorCode.none})
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": done[p.partition_index]} for p in t.partitions]}
        for t, done in zip(body.topics, codes, strict=True)]}


async def _commit_topic(svc: KafkaService, group: str, topic: str, offsets: dict[int, int],
                        pace: Pace) -> dict[int, int]:
    """One topic's offsets of an OffsetCommit, committed at once and saved by the caller; each
    partition's code (the checks in the order a commit of one partition makes them)."""
    try:
        if not await svc.broker.has_topic(topic):
            return dict.fromkeys(offsets, ErrorCode.unknown_topic_or_partition)
        if svc.broker.group_topic(group) is None:
            # a bayou group, so the other protocols' tools find it (and its lag)
            await svc.broker.register_group(group, topic, RTES_POLICY)
        svc.broker.authorize("poll", topic)
    except BayouError as exc:
        return dict.fromkeys(offsets, code_of(exc))
    negative = code_of(OffsetOutOfRange("invalid offset"))
    codes: dict[int, int] = {p: ErrorCode.none if o >= 0 else negative for p, o in offsets.items()}
    valid = {p: o for p, o in offsets.items() if o >= 0}
    if not valid:
        return codes
    try:
        await svc.broker.commit_offsets(group, topic, valid, save=False)
    except OffsetRegression:  # a group whose commits only go forward (another protocol's): each alone
        for p, o in valid.items():
            await pace()
            try:
                await svc.broker.commit_offsets(group, topic, {p: o}, save=False)
            except BayouError as exc:
                codes[p] = code_of(exc)
    except BayouError as exc:
        codes.update(dict.fromkeys(valid, code_of(exc)))
    return codes


async def _group_offsets(svc: KafkaService, group: str, topics: Any, pace: Pace) -> Fields:
    await pace()
    out = []
    if topics is None:  # every topic the group has offsets for
        by_topic: dict[str, list[Fields]] = {}
        for (topic, partition), offset in sorted(svc.broker.committed_offsets(group).items()):
            await pace()
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "committed_offset": offset,
                 "committed_leader_epoch": -1, "metadata": ""})
        return {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
    for t in topics:
        parts = []
        for p in t.partition_indexes:
            await pace()
            entry: Fields = {"partition_index": p, "committed_offset": -1,
                             "committed_leader_epoch": -1, "metadata": ""}
            try:
                found = await svc.broker.current_committed_offset(group, t.name, p)
                if found is not None:
                    entry["committed_offset"] = found
            except BayouError as exc:
                entry["error_code"] = code_of(exc)
            parts.append(entry)
        out.append({"name": t.name, "partitions": parts})
    return {"group_id": group, "topics": out}


async def offset_fetch(svc: KafkaService, req: Request, body: Any) -> Fields:
    groups = getattr(body, "groups", None)
    pace = Pace()
    if groups is not None:  # v8+: several groups in one request
        return {"groups": [await _group_offsets(svc, g.group_id, g.topics, pace) for g in groups]}
    return {"topics": (await _group_offsets(svc, body.group_id, body.topics, pace))["topics"]}


def _all_groups(svc: KafkaService) -> dict[str, str]:
    """Group name -> protocol type, for every group of every protocol the caller may see."""
    groups = {name: "" for name in svc.broker.list_groups()}
    for name, g in svc.broker.classic_groups.groups.items():
        groups[name] = g.protocol_type or CONSUMER
    return groups


async def list_groups(svc: KafkaService, req: Request, body: Any) -> Fields:
    wanted = {s.lower() for s in getattr(body, "states_filter", ())}
    out = []
    pace = Pace()
    for name, ptype in sorted(_all_groups(svc).items()):
        await pace()
        state = _state(svc, name)
        if wanted and state.lower() not in wanted:
            continue
        out.append({"group_id": name, "protocol_type": ptype, "group_state": state,
                    "group_type": "classic"})
    return {"groups": out}


def _state(svc: KafkaService, name: str) -> str:
    if name in svc.broker.classic_groups.groups:
        return svc.broker.classic_groups.describe(name).state
    try:
        return svc.broker.describe_group(name).state
    except BayouError:
        return "Empty"


async def describe_groups(svc: KafkaService, req: Request, body: Any) -> Fields:
    out = []
    pace = Pace()
    others = set(svc.broker.list_groups())
    for name in body.groups:
        await pace()
        entry: Fields = {"group_id": name, "group_state": "Dead", "protocol_type": "",
                         "protocol_data": "", "authorized_operations":
                         GROUP_OPERATIONS if getattr(body, "include_authorized_operations", False)
                         else ALL_OPERATIONS_OMITTED}
        try:
            elsewhere = not_coordinator(svc.broker, req, name)
            if elsewhere is not None:
                entry["error_code"] = elsewhere
            elif name in svc.broker.classic_groups.groups:
                d = svc.broker.classic_groups.describe(name)
                entry.update(group_state=d.state, protocol_type=d.protocol_type,
                             protocol_data=d.protocol_name, members=[
                                 {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                  "client_id": m.client_id, "client_host": m.client_host,
                                  "member_metadata": m.metadata, "member_assignment": m.assignment}
                                 for m in d.members])
            elif name in others:  # a V1, Cursus or Iggy group: its members, no metadata
                g = svc.broker.describe_group(name)
                entry.update(group_state=g.state, members=[
                    {"member_id": mid, "client_id": mid, "client_host": ""} for mid, _seen, _p in g.members])
            await pace(len(entry.get("members", ())))
        except BayouError as exc:
            entry["error_code"] = code_of(exc)
        out.append(entry)
    return {"groups": out}


async def delete_groups(svc: KafkaService, req: Request, body: Any) -> Fields:
    results = []
    known = _all_groups(svc)
    with_offsets = svc.broker.offset_groups()  # once: each committed_offsets() reads every offset
    pace = Pace()
    for name in body.groups_names:
        await pace()
        elsewhere = not_coordinator(svc.broker, req, name)
        if elsewhere is not None:
            results.append({"group_id": name, "error_code": elsewhere})
            continue
        code = ErrorCode.none
        try:
            if svc.broker.classic_groups.has_members(name) or svc.broker.group_members(name):
                code = ErrorCode.non_empty_group  # a V1, Cursus or Iggy member counts too
            elif name not in known and (name not in with_offsets or not svc.broker.committed_offsets(name)):
                raise GroupNotFound(f"group {name} not found")
            else:
                await svc.broker.delete_group(name)
                svc.broker.classic_groups.delete(name)
        except BayouError as exc:
            code = code_of(exc)
        results.append({"group_id": name, "error_code": code})
    return {"results": results}


HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.FIND_COORDINATOR: find_coordinator,
    ApiKey.JOIN_GROUP: join_group,
    ApiKey.SYNC_GROUP: sync_group,
    ApiKey.HEARTBEAT: heartbeat,
    ApiKey.LEAVE_GROUP: leave_group,
    ApiKey.OFFSET_COMMIT: offset_commit,
    ApiKey.OFFSET_FETCH: offset_fetch,
    ApiKey.LIST_GROUPS: list_groups,
    ApiKey.DESCRIBE_GROUPS: describe_groups,
    ApiKey.DELETE_GROUPS: delete_groups,
}
