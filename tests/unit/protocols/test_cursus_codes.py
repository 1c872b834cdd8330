"""bayou's error registry onto Cursus replies: the one table."""

from __future__ import annotations

from bayou import errors
from bayou.protocols.cursus.codes import GROUP_ERRORS, Scope, error_reply

SCOPE = Scope("g", "m-1", generation=2, current_generation=5, partition=3)


def test_group_errors_name_the_request() -> None:
    assert error_reply(errors.GroupNotFound(), SCOPE) == b"ERROR: group_not_found group=g"
    assert error_reply(errors.UnknownMember(), SCOPE) == b"ERROR: member_not_found member=m-1 group=g"
    assert error_reply(errors.IllegalGeneration(), SCOPE) == (
        b"ERROR: GEN_MISMATCH current=5 requested=2 group=g member=m-1")
    assert error_reply(errors.GroupTopicMismatch("a", "b"), SCOPE) == (
        b"ERROR: topic_not_assigned_to_group expected=a actual=b")
    assert error_reply(errors.PartitionNotAssigned(), SCOPE) == (
        b"ERROR: NOT_OWNER partition=3 member=m-1 group=g generation=2")
    assert error_reply(errors.OffsetRegression("from 9 to 3"), SCOPE) == (
        b'ERROR: offset_regression reason="from 9 to 3"')


def test_group_errors_outside_a_group_request_are_command_failed() -> None:
    for cls in GROUP_ERRORS:
        reply = error_reply(cls("x y") if cls is not errors.GroupTopicMismatch else cls("a", "b"))
        assert reply.startswith(b"ERROR: command_failed reason=")


def test_errors_every_command_shares() -> None:
    assert error_reply(errors.NotLeader()) == b"ERROR: NOT_LEADER"
    led = errors.NotLeader(leader=(2, "10.0.0.2", {"cursus": 9001}))
    assert error_reply(led, SCOPE) == b"ERROR: NOT_LEADER LEADER_IS 10.0.0.2:9001"
    assert error_reply(errors.NotLeader(leader=(2, "h", {"tank": 1}))) == b"ERROR: NOT_LEADER"
    assert error_reply(errors.CorruptStorage("bad crc")) == b'ERROR: storage_error reason="bad crc"'
    assert error_reply(errors.Unauthorized("no")) == b"ERROR: unauthorized reason=no"
    # an error the table does not name, by its nearest registered class or command_failed
    assert error_reply(errors.StorageError("disk")) == b"ERROR: command_failed reason=disk"

    class Sub(errors.CorruptStorage):
        pass

    assert error_reply(Sub("x")) == b"ERROR: storage_error reason=x"
