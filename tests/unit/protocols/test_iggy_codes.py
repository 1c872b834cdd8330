"""The Iggy code tables (iggy.md A.2, B.6, C.5) and the error mapping from bayou's registry."""

from __future__ import annotations

import pytest

from bayou import errors
from bayou.protocols.iggy.codes import (
    COMMAND_OF_OPERATION,
    ERROR_STATUS,
    NON_REPLICATED_COMMANDS,
    OPERATION_OF,
    RESULT_FRAMED,
    SEED_COMMANDS,
    Command,
    Operation,
    Status,
    not_found_status,
    status_for,
)


def test_seed_command_table() -> None:
    """A.2, verbatim."""
    assert sorted(int(c) for c in SEED_COMMANDS) == [
        1, 10, 20, 21, 22, 100, 101, 120, 121, 200, 201, 202, 203, 300, 301, 302, 303, 402, 403,
        600, 601, 602, 603, 604, 605]


def test_codes_the_sdks_send() -> None:
    assert (Command.LOGIN_USER, Command.LOGOUT_USER, Command.LOGIN_REGISTER) == (38, 39, 40)
    assert (Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN, Command.LOGIN_REGISTER_WITH_PAT) == (44, 45)
    assert Command.GET_CLUSTER_METADATA == 12 and Command.SYNC_CONSUMER_GROUP == 606
    assert (Command.UPDATE_STREAM, Command.PURGE_STREAM, Command.UPDATE_TOPIC, Command.PURGE_TOPIC) == (
        204, 205, 304, 305)
    assert Command.FLUSH_UNSAVED_BUFFER == 102 and Command.DELETE_CONSUMER_OFFSET == 122
    assert Command.DELETE_SEGMENTS == 503


def test_operation_tables_are_inverse() -> None:
    for op, command in COMMAND_OF_OPERATION.items():
        assert OPERATION_OF[command] == op
    assert OPERATION_OF[Command.LOGIN_REGISTER] == OPERATION_OF[Command.LOGIN_REGISTER_WITH_PAT] == (
        Operation.REGISTER)
    assert OPERATION_OF[Command.SEND_MESSAGES] == 160
    assert OPERATION_OF[Command.STORE_CONSUMER_OFFSET] == 161
    assert OPERATION_OF[Command.JOIN_CONSUMER_GROUP] == 148


def test_non_replicated_codes_match_c5() -> None:
    listed = {1, 10, 11, 12, 13, 20, 21, 22, 31, 32, 41, 100, 102, 120, 200, 201, 300, 301, 600, 601, 606}
    assert {int(c) for c in NON_REPLICATED_COMMANDS} == listed


def test_result_framed_operations_match_c6() -> None:
    assert {int(o) for o in RESULT_FRAMED} == set(range(128, 150)) | {161, 162, 1}


def test_statuses_of_b6() -> None:
    assert (Status.INVALID_COMMAND, Status.FEATURE_UNAVAILABLE, Status.UNAUTHENTICATED) == (3, 5, 40)
    assert (Status.INVALID_CREDENTIALS, Status.STREAM_NAME_ALREADY_EXISTS) == (42, 1012)
    assert (Status.INVALID_MESSAGE_CHECKSUM, Status.INVALID_BATCH_CHECKSUM) == (4027, 4039)
    assert Status.CONSUMER_GROUP_PARTITION_NOT_OWNED == 5009


def test_every_registry_error_has_an_iggy_code() -> None:
    assert set(ERROR_STATUS) == set(errors.REGISTRY.values())
    assert all(status != Status.OK for status in ERROR_STATUS.values())


@pytest.mark.parametrize(("exc", "status"), [
    (errors.UnknownTopic(), Status.TOPIC_ID_NOT_FOUND),
    (errors.TopicAlreadyExists(), Status.TOPIC_NAME_ALREADY_EXISTS),
    (errors.UnknownMember(), Status.CONSUMER_GROUP_MEMBER_NOT_FOUND),
    (errors.IllegalGeneration(), Status.CONSUMER_GROUP_PARTITION_NOT_OWNED),
    (errors.GroupTopicMismatch("a", "b"), Status.CONSUMER_GROUP_ID_NOT_FOUND),
    (errors.BayouError(), Status.ERROR),
])
def test_status_for(exc: errors.BayouError, status: Status) -> None:
    assert status_for(exc) == status


def test_status_for_a_subclass_uses_its_registered_base() -> None:
    class Sub(errors.UnknownPartition):
        pass
    assert status_for(Sub()) == Status.PARTITION_NOT_FOUND


def test_not_found_by_name() -> None:
    assert not_found_status(Status.STREAM_ID_NOT_FOUND, by_name=True) == Status.STREAM_NAME_NOT_FOUND
    assert not_found_status(Status.TOPIC_ID_NOT_FOUND, by_name=True) == Status.TOPIC_NAME_NOT_FOUND
    assert not_found_status(Status.CONSUMER_GROUP_ID_NOT_FOUND, by_name=True) == (
        Status.CONSUMER_GROUP_NAME_NOT_FOUND)
    assert not_found_status(Status.TOPIC_ID_NOT_FOUND, by_name=False) == Status.TOPIC_ID_NOT_FOUND
    assert not_found_status(Status.PARTITION_NOT_FOUND, by_name=True) == Status.PARTITION_NOT_FOUND
