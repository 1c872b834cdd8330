"""The Kafka tables: served APIs and versions, and the error mapping from bayou's registry."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map

from bayou import errors
from bayou.protocols.kafka.codes import (
    AUTHORIZATION_CODE,
    ERROR_CODE,
    SASL_APIS,
    SUPPORTED,
    TRANSACTION_APIS,
    ApiKey,
    VersionRange,
    error_code,
    is_supported,
)


def test_the_apis_of_issue_17() -> None:
    assert {k.name for k in ApiKey} == {
        "PRODUCE", "FETCH", "LIST_OFFSETS", "METADATA", "OFFSET_COMMIT", "OFFSET_FETCH",
        "FIND_COORDINATOR", "JOIN_GROUP", "HEARTBEAT", "LEAVE_GROUP", "SYNC_GROUP",
        "DESCRIBE_GROUPS", "LIST_GROUPS", "SASL_HANDSHAKE", "API_VERSIONS", "CREATE_TOPICS",
        "DELETE_TOPICS", "INIT_PRODUCER_ID", "OFFSET_FOR_LEADER_EPOCH", "ADD_PARTITIONS_TO_TXN",
        "ADD_OFFSETS_TO_TXN", "END_TXN", "TXN_OFFSET_COMMIT", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
        "SASL_AUTHENTICATE", "CREATE_PARTITIONS", "DELETE_GROUPS", "INCREMENTAL_ALTER_CONFIGS",
        "DESCRIBE_CLUSTER"}
    assert set(SUPPORTED) == set(ApiKey)
    assert set(SUPPORTED) > TRANSACTION_APIS | SASL_APIS


def test_api_keys_are_kafkas() -> None:
    for key in ApiKey:
        assert api_key_map[int(key)].upper() == key.name


@pytest.mark.parametrize("key", list(ApiKey), ids=lambda k: k.name)
def test_every_served_version_has_both_schemas(key: ApiKey) -> None:
    served = SUPPORTED[key]
    known = schema_name_map[api_key_map[int(key)]]
    assert served.min <= served.max
    for version in range(served.min, served.max + 1):
        assert version in known
        assert load_request_schema(int(key), version).__version__ == version
        assert load_response_schema(int(key), version).__version__ == version


def _names_topics_by_id(schema: typing.Any, seen: set[typing.Any] | None = None) -> bool:
    seen = set() if seen is None else seen
    if schema in seen:
        return False
    seen.add(schema)
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        if field.name == "topic_id":
            return True
        for arg in (hints[field.name], *typing.get_args(hints[field.name])):
            for inner in (arg, *typing.get_args(arg)):
                if dataclasses.is_dataclass(inner) and _names_topics_by_id(inner, seen):
                    return True
    return False


@pytest.mark.parametrize("key", list(ApiKey), ids=lambda k: k.name)
def test_no_served_request_names_topics_by_id(key: ApiKey) -> None:
    """bayou has no topic ids: every served request names its topics (responses may carry the
    zero UUID, as Metadata v10+ and CreateTopics v7 do). Metadata v10+ requests carry an id beside
    the name; the clients captured send the name and the zero UUID."""
    if key is ApiKey.METADATA:
        pytest.skip("an id beside the name")
    served = SUPPORTED[key]
    for version in range(served.min, served.max + 1):
        assert not _names_topics_by_id(load_request_schema(int(key), version)), version
    if served.max + 1 in schema_name_map[api_key_map[int(key)]] and key in (
            ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH,
            ApiKey.DELETE_TOPICS):
        assert _names_topics_by_id(load_request_schema(int(key), served.max + 1))


def test_version_range() -> None:
    r = VersionRange(3, 5)
    assert 3 in r and 5 in r and 2 not in r and 6 not in r and "4" not in r
    assert is_supported(0, 3) and not is_supported(0, 2) and not is_supported(0, 13)
    assert not is_supported(7, 0)  # ControlledShutdown: not served
    assert not is_supported(-1, 0)


def test_every_registry_error_has_a_kafka_code() -> None:
    assert set(ERROR_CODE) == set(errors.REGISTRY.values())
    assert all(code is not ErrorCode.none for code in ERROR_CODE.values())


def test_codes_the_issue_names() -> None:
    assert ERROR_CODE[errors.CorruptRecord] is ErrorCode.corrupt_message
    assert ERROR_CODE[errors.InvalidTopicName] is ErrorCode.invalid_topic_exception
    assert ERROR_CODE[errors.RecordTooLarge] is ErrorCode.message_too_large
    assert ERROR_CODE[errors.UnknownTopic] is ErrorCode.unknown_topic_or_partition
    assert ERROR_CODE[errors.UnknownPartition] is ErrorCode.unknown_topic_or_partition
    assert ERROR_CODE[errors.NotLeader] is ErrorCode.not_leader_or_follower
    assert ERROR_CODE[errors.NotEnoughReplicas] is ErrorCode.not_enough_replicas
    assert ERROR_CODE[errors.NotEnoughReplicasAfterAppend] is ErrorCode.not_enough_replicas_after_append


def test_retriable_errors_stay_retriable() -> None:
    """A client retries what Kafka calls retriable; bayou's retriable errors must map there, or a
    client would give up on a transient state (the reverse is allowed: Kafka's client decides).
    The group errors are the exception: Kafka calls ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and
    REBALANCE_IN_PROGRESS fatal to the request, and the client's group state machine rejoins on
    them."""
    rejoin = {errors.IllegalGeneration, errors.UnknownMember, errors.RebalanceInProgress}
    for cls, code in ERROR_CODE.items():
        if cls.retriable and cls not in rejoin:
            assert code.retriable, cls.__name__
    assert all(ERROR_CODE[cls] in (ErrorCode.illegal_generation, ErrorCode.unknown_member_id,
                                   ErrorCode.rebalance_in_progress) for cls in rejoin)


def test_error_code_lookup() -> None:
    class Narrower(errors.UnknownTopic):
        pass

    assert error_code(errors.UnknownTopic()) is ErrorCode.unknown_topic_or_partition
    assert error_code(Narrower()) is ErrorCode.unknown_topic_or_partition
    assert error_code(errors.NotEnoughReplicas()) is ErrorCode.not_enough_replicas  # not its base's
    assert error_code(RuntimeError("bug")) is ErrorCode.unknown_server_error


def test_authorization_codes() -> None:
    assert {code for code in AUTHORIZATION_CODE.values()} == {
        ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
        ErrorCode.cluster_authorization_failed, ErrorCode.transactional_id_authorization_failed}
