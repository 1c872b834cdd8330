"""bayou's permission model (Iggy's flags and implication chains), principals, the authorizer's
answers for anonymous, users and certificates, and the per-connection principal in the broker."""

from __future__ import annotations

import asyncio
import contextvars
from pathlib import Path

import pytest

from bayou.broker import Broker, BrokerConfig
from bayou.broker.authz import (
    ANONYMOUS,
    SYSTEM,
    Action,
    Authorizer,
    Caller,
    GlobalPermissions,
    Permissions,
    Principal,
    StreamPermissions,
    TopicPermissions,
    bind_caller,
    connection_principal,
    current_principal,
    permits,
)
from bayou.errors import Unauthorized

ALL_ACTIONS: tuple[Action, ...] = ("manage_servers", "read_servers", "manage_users", "read_users",
                                   "manage_streams", "read_streams", "manage_topics", "read_topics",
                                   "poll", "send")


def _global(**flags: bool) -> Permissions:
    return Permissions(GlobalPermissions(**flags))


def test_everything_and_nothing() -> None:
    assert all(permits(Permissions.everything(), a, 1, 2) for a in ALL_ACTIONS)
    assert all(permits(Permissions.everything(), a) for a in ALL_ACTIONS)
    assert not any(permits(None, a, 1, 2) for a in ALL_ACTIONS)
    assert not any(permits(Permissions(), a, 1, 2) for a in ALL_ACTIONS)


def test_global_permissions_and_their_implications() -> None:
    assert permits(_global(manage_servers=True), "read_servers")
    assert not permits(_global(read_servers=True), "manage_servers")
    assert permits(_global(manage_users=True), "read_users")
    assert not permits(_global(read_users=True), "manage_users")
    manage_streams = _global(manage_streams=True)
    actions: tuple[Action, ...] = ("manage_streams", "read_streams", "manage_topics", "read_topics", "poll")
    for action in actions:
        assert permits(manage_streams, action, 7, 1) and permits(manage_streams, action)
    assert not permits(manage_streams, "send", 7, 1)  # Iggy: only send_messages grants it globally
    read_streams = _global(read_streams=True)
    assert permits(read_streams, "read_topics", 7) and permits(read_streams, "poll", 7, 1)
    assert not permits(read_streams, "manage_topics", 7)
    manage_topics = _global(manage_topics=True)
    assert permits(manage_topics, "read_topics") and permits(manage_topics, "poll")
    assert not permits(manage_topics, "manage_streams")
    assert permits(_global(read_topics=True), "poll", 3, 3)
    assert not permits(_global(read_topics=True), "read_streams", 3)
    assert permits(_global(poll_messages=True), "poll", 9, 9)
    assert not permits(_global(poll_messages=True), "read_topics", 9, 9)
    assert permits(_global(send_messages=True), "send", 9, 9)
    assert not permits(_global(send_messages=True), "poll", 9, 9)


def test_stream_and_topic_permissions() -> None:
    p = Permissions(streams=(
        StreamPermissions(1, manage_stream=True),
        StreamPermissions(2, read_stream=True),
        StreamPermissions(3, send_messages=True, topics=(
            TopicPermissions(10, read_topic=True), TopicPermissions(11, manage_topic=True))),
    ))
    assert permits(p, "manage_streams", 1) and permits(p, "manage_topics", 1, 5)
    assert permits(p, "send", 1, 5) and permits(p, "poll", 1, 5)
    assert not permits(p, "manage_streams") and not permits(p, "read_streams")  # no stream named
    assert not permits(p, "manage_streams", 2)
    assert permits(p, "read_streams", 2) and permits(p, "read_topics", 2, 4)
    assert permits(p, "poll", 2)
    assert not permits(p, "send", 2, 4) and not permits(p, "manage_topics", 2, 4)
    assert permits(p, "send", 3, 99) and not permits(p, "poll", 3, 99)
    assert permits(p, "poll", 3, 10) and permits(p, "read_topics", 3, 10)
    assert not permits(p, "manage_topics", 3, 10) and not permits(p, "read_topics", 3)
    assert permits(p, "manage_topics", 3, 11) and permits(p, "poll", 3, 11)
    assert not permits(p, "read_streams", 3)
    assert not any(permits(p, a, 4, 10) for a in ("read_streams", "read_topics", "poll", "send"))
    assert not permits(p, "read_servers") and not permits(p, "read_users")


def test_topic_flags_count_only_in_their_stream() -> None:
    p = Permissions(streams=(StreamPermissions(1, topics=(TopicPermissions(5, poll_messages=True),)),))
    assert permits(p, "poll", 1, 5)
    assert not permits(p, "poll", 2, 5) and not permits(p, "poll", 1) and not permits(p, "poll")
    assert not permits(p, "send", 1, 5) and not permits(p, "read_topics", 1, 5)


@pytest.mark.parametrize(("anonymous", "allowed"), [
    ("all", set(ALL_ACTIONS)),
    ("read", {"read_streams", "read_topics", "poll"}),
    ("none", set()),
])
def test_anonymous_access(anonymous: str, allowed: set[str]) -> None:
    az = Authorizer(anonymous)  # type: ignore[arg-type]
    assert {a for a in ALL_ACTIONS if az.permits_topic(ANONYMOUS, a, "t")} == allowed
    assert all(az.permits_topic(SYSTEM, a, "t") for a in ALL_ACTIONS)  # bayou's own work


def _users(perms: dict[str, Permissions]) -> tuple[Authorizer, list[Principal]]:
    """An authorizer over a user table that can change (as the Iggy store does), and its asks."""
    asked: list[Principal] = []
    az = Authorizer("none")

    def lookup(principal: Principal) -> Permissions | None:
        asked.append(principal)
        return perms.get(principal.name or "")

    az.configure(resolver=lambda topic: (1, {"s.a": 10, "s.b": 11}.get(topic)), users=lookup)
    return az, asked


def test_user_permissions_are_asked_per_request_and_resolve_topics() -> None:
    perms = {"alice": Permissions(streams=(StreamPermissions(1, topics=(
        TopicPermissions(10, send_messages=True), TopicPermissions(11, poll_messages=True))),))}
    az, asked = _users(perms)
    alice = Principal.login(7, "alice")
    assert az.permits_topic(alice, "send", "s.a") and not az.permits_topic(alice, "poll", "s.a")
    assert az.permits_topic(alice, "poll", "s.b") and not az.permits_topic(alice, "send", "s.b")
    assert not any(az.permits_topic(alice, a, "s.c") for a in ALL_ACTIONS)
    assert asked and all(p == alice for p in asked)
    del perms["alice"]  # deleted, deactivated or its token gone: nothing at all, at once
    assert not az.permits_topic(alice, "send", "s.a")


def test_certificate_principal_maps_to_the_user_of_its_cn() -> None:
    """mTLS: a verified client certificate's CN names the user; a CN naming no (active) user is
    anonymous. (The TLS listener that sets ``Connection.peer_cn`` is built separately.)"""
    perms = {"carol": _global(send_messages=True)}
    az, _asked = _users(perms)
    az.configure(anonymous="read")
    carol = connection_principal("carol")
    assert carol == Principal.certificate("carol") and carol.user_id is None
    assert az.permits_topic(carol, "send", "s.a") and not az.permits_topic(carol, "poll", "s.a")
    stranger = connection_principal("mallory")
    assert az.permits_topic(stranger, "poll", "s.a") and not az.permits_topic(stranger, "send", "s.a")
    assert connection_principal(None) is ANONYMOUS
    del perms["carol"]  # revoked: the certificate is worth what anonymous is
    assert not az.permits_topic(carol, "send", "s.a") and az.permits_topic(carol, "poll", "s.a")


def test_describable_topics() -> None:
    perms = {"dave": Permissions(streams=(StreamPermissions(1, topics=(
        TopicPermissions(10, send_messages=True),)),))}
    az, _asked = _users(perms)
    ctx = contextvars.copy_context()

    def listing() -> list[str]:
        bind_caller(Caller(Principal.login(1, "dave")))
        return az.describable(["s.a", "s.b", "s.c"])

    assert ctx.run(listing) == ["s.a"]  # sending implies describing (Kafka's rule)


def test_a_connection_caller_logs_in_and_out() -> None:
    caller = Caller(ANONYMOUS)
    user = Principal.login(3, "erin", "hash")
    caller.login(user)
    assert caller.principal == user and caller.base is ANONYMOUS
    caller.logout()
    assert caller.principal is ANONYMOUS


async def test_the_broker_checks_the_principal_of_the_current_connection(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=tmp_path))
    await broker.start()
    try:
        assert current_principal() is SYSTEM  # outside any connection: bayou's own work
        await broker.create_topic("t", 1)
        broker.authorizer.configure(anonymous="read")

        async def as_anonymous() -> None:
            bind_caller(Caller(ANONYMOUS))
            with pytest.raises(Unauthorized):
                await broker.produce("t", 0, b"")
            with pytest.raises(Unauthorized):
                await broker.delete_topic("t")
            with pytest.raises(Unauthorized):
                await broker.create_topic("u", 1)
            assert (await broker.fetch("t", 0, 0)).data == b""
            assert broker.visible_topics() == ["t"]
            broker.authorizer.configure(anonymous="none")
            assert broker.visible_topics() == []
            with pytest.raises(Unauthorized):
                await broker.fetch("t", 0, 0)
            with pytest.raises(Unauthorized):
                broker.describe_topic("t")

        await asyncio.get_running_loop().create_task(as_anonymous())
        assert current_principal() is SYSTEM  # the connection's principal stayed in its task
        assert broker.list_topics() == ["t"]  # nothing denied was done
    finally:
        await broker.stop()
