"""Kafka's topic and config administration on the broker (server/kafka.py dispatches here).

bayou's topic config keys are Kafka's (``retention.ms``, ``segment.bytes``, ``max.message.bytes``,
...), so configs pass through by name; a key bayou does not know is INVALID_CONFIG. Only topic
resources are served (resource type 2); a broker resource is described with no entries and cannot
be altered. One broker: a replication factor above 1 is INVALID_REPLICATION_FACTOR, as Kafka
answers when there are fewer brokers than replicas; in cluster mode it is the topic's
``replication.factor`` (creation fails when fewer brokers are live).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from bayou.broker import Pace
from bayou.errors import BayouError, InvalidConfig, InvalidPartitions, UnknownTopic
from bayou.protocols.kafka.codes import ApiKey
from bayou.server.kafka_context import (
    ALL_OPERATIONS_OMITTED,
    CLUSTER_ID,
    CLUSTER_OPERATIONS,
    Fields,
    Handler,
    Request,
    cluster_brokers,
    code_of,
)

if TYPE_CHECKING:
    from bayou.server.kafka import KafkaService

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # Kafka's ConfigSource
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations (APPEND 2 and SUBTRACT 3 are for lists)


def _replication_ok(svc: KafkaService, factor: int) -> bool:
    return factor in (-1, 1) or svc.broker.clustered


def _factor(svc: KafkaService, asked: int) -> int:
    """The replication factor a created topic has: the one asked for, or the broker's default
    (-1); a single broker keeps one copy."""
    if not svc.broker.clustered:
        return 1
    return asked if asked != -1 else svc.broker.config.replication_factor


async def create_topics(svc: KafkaService, req: Request, body: Any) -> Fields:
    out = []
    pace = Pace()
    for t in body.topics:
        await pace()
        entry: Fields = {"name": t.name, "num_partitions": -1, "replication_factor": -1,
                         "error_message": None}
        try:
            if not _replication_ok(svc, t.replication_factor):
                entry["error_code"] = ErrorCode.invalid_replication_factor
                entry["error_message"] = f"replication factor {t.replication_factor}: this is one broker"
                out.append(entry)
                continue
            if t.assignments:
                raise InvalidPartitions("manual replica assignment is not supported")
            config = {c.name: c.value for c in t.configs if c.value is not None}
            if t.replication_factor != -1 and svc.broker.clustered:  # the copies to keep (-1: default)
                config["replication.factor"] = str(t.replication_factor)
            count = None if t.num_partitions == -1 else t.num_partitions
            svc.broker.check_topic_name(t.name)
            if body.validate_only:
                if await svc.broker.has_topic(t.name):
                    entry["error_code"] = ErrorCode.topic_already_exists
                else:
                    entry["num_partitions"] = count or svc.broker.config.default_partitions
                    entry["replication_factor"] = _factor(svc, t.replication_factor)
            else:
                topic = await svc.broker.create_topic(t.name, count, config)
                entry["num_partitions"] = len(topic.partitions)
                entry["replication_factor"] = _factor(svc, t.replication_factor)
                entry["configs"] = [{"name": k, "value": v, "read_only": False,
                                     "config_source": DYNAMIC_TOPIC_CONFIG if own else DEFAULT_CONFIG,
                                     "is_sensitive": False}
                                    for k, (v, own) in svc.broker.effective_topic_config(t.name).items()]
        except BayouError as exc:
            entry["error_code"] = code_of(exc)
            entry["error_message"] = exc.message
        out.append(entry)
    return {"topics": out}


async def delete_topics(svc: KafkaService, req: Request, body: Any) -> Fields:
    names = list(getattr(body, "topic_names", ()) or ()) or [
        t.name for t in getattr(body, "topics", ()) if t.name is not None]
    out = []
    pace = Pace()
    for name in names:
        await pace()
        entry: Fields = {"name": name, "error_message": None}
        try:
            if not await svc.broker.has_topic(name):
                raise UnknownTopic(f"unknown topic {name}")
            await svc.broker.delete_topic(name)
        except BayouError as exc:
            entry["error_code"] = code_of(exc)
            entry["error_message"] = exc.message
        out.append(entry)
    return {"responses": out}


async def create_partitions(svc: KafkaService, req: Request, body: Any) -> Fields:
    out = []
    pace = Pace()
    for t in body.topics:
        await pace()
        entry: Fields = {"name": t.name, "error_message": None}
        try:
            if not await svc.broker.has_topic(t.name):
                raise UnknownTopic(f"unknown topic {t.name}")
            if t.assignments:
                raise InvalidPartitions("manual replica assignment is not supported")
            have = svc.broker.partition_count(t.name)
            if t.count <= have:
                raise InvalidPartitions(f"topic {t.name} has {have} partitions; the new count must be larger")
            if not body.validate_only:
                await svc.broker.add_partitions(t.name, t.count)
        except BayouError as exc:
            entry["error_code"] = code_of(exc)
            entry["error_message"] = exc.message
        out.append(entry)
    return {"results": out}


async def describe_configs(svc: KafkaService, req: Request, body: Any) -> Fields:
    results = []
    pace = Pace()
    for r in body.resources:
        await pace(1 + len(r.configuration_keys or ()))
        entry: Fields = {"resource_type": r.resource_type, "resource_name": r.resource_name,
                         "error_message": None, "configs": []}
        try:
            if r.resource_type == TOPIC:
                if not await svc.broker.has_topic(r.resource_name):
                    raise UnknownTopic(f"unknown topic {r.resource_name}")
                wanted = None if r.configuration_keys is None else set(r.configuration_keys)
                entry["configs"] = [
                    {"name": k, "value": v, "read_only": False, "is_default": not own,
                     "config_source": DYNAMIC_TOPIC_CONFIG if own else DEFAULT_CONFIG,
                     "is_sensitive": False, "synonyms": [], "config_type": 0, "documentation": None}
                    for k, (v, own) in svc.broker.effective_topic_config(r.resource_name).items()
                    if wanted is None or k in wanted]
            elif r.resource_type != BROKER:
                raise InvalidConfig(f"resource type {r.resource_type} is not served")
        except BayouError as exc:
            entry["error_code"] = code_of(exc)
            entry["error_message"] = exc.message
        results.append(entry)
    return {"results": results}


async def _alter(svc: KafkaService, resource: Any, changes: dict[str, str | None],
                 validate_only: bool) -> Fields:
    entry: Fields = {"resource_type": resource.resource_type,
                     "resource_name": resource.resource_name, "error_message": None}
    try:
        if resource.resource_type != TOPIC:
            raise InvalidConfig(f"only topic configs can be altered (resource type {resource.resource_type})")
        if not await svc.broker.has_topic(resource.resource_name):
            raise UnknownTopic(f"unknown topic {resource.resource_name}")
        if not validate_only:
            await svc.broker.alter_topic_config(resource.resource_name, changes)
    except BayouError as exc:
        entry["error_code"] = code_of(exc)
        entry["error_message"] = exc.message
    return entry


async def alter_configs(svc: KafkaService, req: Request, body: Any) -> Fields:
    """AlterConfigs replaces the topic's whole set: keys it does not name go back to defaults."""
    out = []
    pace = Pace()
    topics = set(svc.broker.list_topics())
    for r in body.resources:
        await pace(1 + len(r.configs))
        changes: dict[str, str | None] = {c.name: c.value for c in r.configs}
        if r.resource_type == TOPIC and r.resource_name in topics:
            for key, (_v, own) in svc.broker.effective_topic_config(r.resource_name).items():
                if own and key not in changes and not key.startswith("cluster."):
                    changes[key] = None
        out.append(await _alter(svc, r, changes, body.validate_only))
    return {"responses": out}


async def incremental_alter_configs(svc: KafkaService, req: Request, body: Any) -> Fields:
    out = []
    pace = Pace()
    for r in body.resources:
        await pace(1 + len(r.configs))
        changes: dict[str, str | None] = {}
        bad = next((c for c in r.configs if c.config_operation not in (SET, DELETE)), None)
        if bad is not None:
            out.append({"resource_type": r.resource_type, "resource_name": r.resource_name,
                        "error_code": ErrorCode.invalid_config,
                        "error_message": f"{bad.name}: APPEND and SUBTRACT are for list configs"})
            continue
        for c in r.configs:
            changes[c.name] = c.value if c.config_operation == SET else None
        out.append(await _alter(svc, r, changes, body.validate_only))
    return {"responses": out}


async def describe_cluster(svc: KafkaService, req: Request, body: Any) -> Fields:
    ops = CLUSTER_OPERATIONS if body.include_cluster_authorized_operations else ALL_OPERATIONS_OMITTED
    brokers, controller = cluster_brokers(svc.broker, req.advertised)
    return {"cluster_id": CLUSTER_ID, "controller_id": controller,
            "brokers": [b.broker() for b in brokers], "endpoint_type": 1,
            "cluster_authorized_operations": ops}


HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.CREATE_PARTITIONS: create_partitions,
    ApiKey.DESCRIBE_CONFIGS: describe_configs,
    ApiKey.ALTER_CONFIGS: alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: describe_cluster,
}
