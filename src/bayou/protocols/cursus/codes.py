"""bayou's error registry onto Cursus replies: the one table (STYLE habit 11).

A registry error becomes ``ERROR: <code> k=v ...`` here and nowhere else. The group errors name
what the request was about (group, member, generations, partition): the handler passes that as a
``Scope``. Without one (an error outside a group request) they are ``command_failed``, like every
error the table does not name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from bayou import errors
from bayou.protocols.cursus.replies import ErrorCode, error


@dataclass(frozen=True, slots=True)
class Scope:
    """The group request an error answers."""

    group: str
    member: str = ""
    generation: int | None = None  # the one the request gave
    current_generation: int = 0  # the group's own (GEN_MISMATCH tells the client)
    partition: int | None = None  # the partition the member does not own (NOT_OWNER)


def _not_leader(exc: errors.BayouError, _scope: Scope | None) -> bytes:
    # cluster mode: Cursus' distributed brokers' redirect, which its clients follow
    assert isinstance(exc, errors.NotLeader)
    addr = exc.leader_address("cursus")
    code = ErrorCode.NOT_LEADER
    return error(code if addr is None else f"{code} LEADER_IS {addr[0]}:{addr[1]}")


def _group_mismatch(exc: errors.BayouError, _scope: Scope) -> bytes:
    assert isinstance(exc, errors.GroupTopicMismatch)
    return error(ErrorCode.TOPIC_NOT_ASSIGNED_TO_GROUP, ("expected", exc.expected), ("actual", exc.actual))


Rule = Callable[[errors.BayouError, Scope], bytes]

GROUP_ERRORS: Mapping[type[errors.BayouError], Rule] = MappingProxyType({
    errors.GroupNotFound: lambda _e, s: error(ErrorCode.GROUP_NOT_FOUND, ("group", s.group)),
    errors.UnknownMember: lambda _e, s: error(ErrorCode.MEMBER_NOT_FOUND, ("member", s.member),
                                              ("group", s.group)),
    errors.IllegalGeneration: lambda _e, s: error(
        ErrorCode.GEN_MISMATCH, ("current", s.current_generation), ("requested", s.generation),
        ("group", s.group), ("member", s.member)),
    errors.GroupTopicMismatch: _group_mismatch,
    errors.PartitionNotAssigned: lambda _e, s: error(
        ErrorCode.NOT_OWNER, ("partition", s.partition), ("member", s.member), ("group", s.group),
        ("generation", s.generation)),
    errors.OffsetRegression: lambda e, _s: error(ErrorCode.OFFSET_REGRESSION, ("reason", e.message)),
})
"""Errors of group requests, which name the request's group and member."""

ERRORS: Mapping[type[errors.BayouError], Callable[[errors.BayouError, Scope | None], bytes]] = \
    MappingProxyType({
        errors.NotLeader: _not_leader,
        errors.CorruptStorage: lambda e, _s: error(ErrorCode.STORAGE_ERROR, ("reason", e.message)),
        errors.Unauthorized: lambda e, _s: error(ErrorCode.UNAUTHORIZED, ("reason", e.message)),
    })
"""Errors answered the same way by every command (the connection stays open)."""


def error_reply(exc: errors.BayouError, scope: Scope | None = None) -> bytes:
    """The reply for a registry error: its nearest registered class, else ``command_failed``."""
    for cls in type(exc).__mro__:
        if scope is not None:
            group_rule = GROUP_ERRORS.get(cls)
            if group_rule is not None:
                return group_rule(exc, scope)
        rule = ERRORS.get(cls)
        if rule is not None:
            return rule(exc, scope)
    return error(ErrorCode.COMMAND_FAILED, ("reason", exc.message))
