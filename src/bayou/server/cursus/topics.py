"""Cursus's topic and metadata commands: CREATE, DELETE, LIST, HELP, METADATA, FIND_COORDINATOR,
DESCRIBE and LIST_OFFSETS. A topic's Cursus policy (cleanup, partitioner, ACLs, retention) is its
broker topic config, named ``cursus.<field>`` where the broker has no key of its own."""

from __future__ import annotations

import json
from collections.abc import Callable

from bayou.broker.groups.coordinator import CURSUS_POLICY
from bayou.broker.views import THIS_BROKER
from bayou.errors import InvalidConfig, InvalidTopicName
from bayou.protocols.cursus import replies
from bayou.protocols.cursus import requests as rq
from bayou.protocols.cursus.requests import DEFAULT_GROUP
from bayou.server.base import Connection
from bayou.server.cursus.context import ConnState, Context, err, refuse

POLICY_FIELDS = (("cleanup_policy", "delete"), ("partitioner", "hash_key"), ("auth_policy", "open"),
                 ("read_acl", ""), ("write_acl", ""))
HELP = ("CREATE,DELETE,LIST,PUBLISH,CONSUME,STREAM,SUBSCRIBE,JOIN_GROUP,SYNC_GROUP,LEAVE_GROUP,HEARTBEAT,"
        "COMMIT,COMMIT_OFFSET,BATCH_COMMIT,FETCH_OFFSET,LIST_OFFSETS,REGISTER_GROUP,GROUP_STATUS,"
        "LIST_GROUPS,DESCRIBE,METADATA,FIND_COORDINATOR,HELP")


class TopicHandlers:
    def __init__(self, ctx: Context, forget: Callable[[str], None]) -> None:
        """``forget``: what else a deleted topic takes with it (the event store's versions)."""
        self.ctx = ctx
        self.broker = ctx.broker
        self._forget = forget

    def _policy_pairs(self, topic: str) -> list[tuple[str, object]]:
        cfg = self.broker.topic_config(topic)
        pairs: list[tuple[str, object]] = [(k, cfg.get(f"cursus.{k}", d)) for k, d in POLICY_FIELDS]
        rms = cfg.get("retention.ms")
        pairs.append(("retention_hours", int(rms) // 3_600_000 if rms and int(rms) > 0 else 0))
        rb = cfg.get("retention.bytes")
        pairs.append(("retention_bytes", int(rb) if rb and int(rb) > 0 else 0))
        return pairs

    async def create(self, req: rq.CreateTopic, state: ConnState, conn: Connection | None) -> bytes:
        topic = req.topic
        try:
            self.broker.check_topic_name(topic)
        except InvalidTopicName:
            raise err("invalid_topic_name", ("topic", replies.Quoted(topic)),
                      ("reason", "use 1-249 of letters, digits, '.', '_', '-', not '.' or '..'")) from None
        refuse(req.invalid)
        n = req.partitions
        try:  # (cluster mode: ZooKeeper says whether it exists, not a local copy maybe just deleted)
            existing = await self.broker.create_topic(topic, n, dict(req.config), exist_ok=True)
        except InvalidConfig as exc:
            raise err("invalid_topic_policy", ("reason", exc.message)) from None
        have = len(existing.partitions)
        if n < have:
            raise err("create_topic_failed", ("topic", topic), (
                "reason", f"cannot decrease partition count for topic '{topic}': {have} -> {n}"))
        if n > have:
            await self.broker.add_partitions(topic, n)
        await self.broker.register_group(DEFAULT_GROUP, topic, CURSUS_POLICY, "range")
        return replies.ok(("topic", topic), ("partitions", n), *self._policy_pairs(topic))

    async def delete(self, req: rq.DeleteTopic, state: ConnState, conn: Connection | None) -> bytes:
        await self.ctx.topic_exists(req.topic)
        await self.broker.delete_topic(req.topic)
        self._forget(req.topic)
        return replies.ok(("topic", req.topic), ("deleted", True))

    async def list_topics(self, req: rq.ListTopics, state: ConnState, conn: Connection | None) -> bytes:
        names = self.broker.visible_topics()
        return replies.ok(("count", len(names)), ("topics", ",".join(names)))

    async def help(self, req: rq.Help, state: ConnState, conn: Connection | None) -> bytes:
        return replies.ok(("commands", HELP))

    async def metadata(self, req: rq.Metadata, state: ConnState, conn: Connection | None) -> bytes:
        topic = req.topic
        await self.ctx.topic_exists(topic)
        n = self.broker.partition_count(topic)
        advertised = self.ctx.advertised
        addr = f"{advertised.host}:{advertised.port}"
        leaders, epochs = [], []
        for p in range(n):  # each partition's leader (its Cursus listener) and leader epoch
            where = self.broker.leader_endpoint(topic, p, "cursus")
            leaders.append(addr if where is THIS_BROKER
                           else f"{where.hostname}:{where.port}" if where else "")
            epochs.append(str(max(self.broker.leader_epoch(topic, p), 0)))
        return replies.ok(("topic", topic), ("partitions", n), ("leaders", ",".join(leaders)),
                          ("epochs", ",".join(epochs)), *self._policy_pairs(topic))

    async def find_coordinator(self, req: rq.FindCoordinator, state: ConnState,
                               conn: Connection | None) -> bytes:
        where = self.broker.group_coordinator(req.key, ("cursus",)) if req.kind == "group" else THIS_BROKER
        if where is None:
            raise err("coordinator_not_available", ("group", req.key))
        if where is not THIS_BROKER:
            return replies.ok(("coordinator_id", where.broker_id), ("coordinator_type", req.kind),
                              ("host", where.hostname), ("port", where.port))
        return replies.ok(("coordinator_id", "standalone"), ("coordinator_type", req.kind),
                          ("host", self.ctx.advertised.host), ("port", self.ctx.advertised.port))

    async def describe(self, req: rq.Describe, state: ConnState, conn: Connection | None) -> bytes:
        topic = req.topic
        await self.ctx.topic_exists(topic)
        info = self.broker.describe_topic(topic)
        body = {
            "status": "OK",
            "topic": topic,
            "partitions": [{"id": p.partition, **self._roles(topic, p.partition),
                            "leo": p.log_end_offset, "hwm": p.high_watermark, **_status(p.offline)}
                           for p in info.partitions],
            "policy": dict(self._policy_pairs(topic)),
        }
        return json.dumps(body, indent=2).encode()

    def _roles(self, topic: str, partition: int) -> dict[str, int | list[int]]:
        leader, replicas, isr = self.broker.partition_replicas(topic, partition)
        return {"leader": leader, "replicas": replicas, "isr": isr}

    async def list_offsets(self, req: rq.ListOffsets, state: ConnState, conn: Connection | None) -> bytes:
        await self.ctx.topic_exists(req.topic)
        info = self.broker.describe_topic(req.topic)
        refuse(req.invalid)
        parts = info.partitions
        if req.partition is not None:
            p = req.partition
            if not 0 <= p < len(parts):
                raise err("partition_not_found", ("partition", p))
            parts = (parts[p],)
        offsets = ",".join(f"P{p.partition}:earliest={p.log_start_offset}:latest={p.high_watermark}"
                           f":leo={p.log_end_offset}:hwm={p.high_watermark}" for p in parts)
        return replies.ok(("topic", req.topic), ("partitions", len(info.partitions)), ("offsets", offsets))


def _status(offline: str | None) -> dict[str, str]:
    """A partition's ``status`` in DESCRIBE: ``online``, or ``offline`` with the ``reason`` (a
    quarantined partition: damaged data, readable up to it)."""
    return {"status": "online"} if offline is None else {"status": "offline", "reason": offline}
