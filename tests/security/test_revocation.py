"""Issue 14.4: revocation takes effect at once. An Iggy session's permissions are the user's as
they are now, checked on every request; deleting or deactivating the user, or deleting the
personal access token it logged in with, ends the session (UNAUTHENTICATED, then closed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Status
from bayou.server.app import BayouServer
from support.iggy import Closed, LegacyConn, create_topic, iggy_port, legacy_login, send, start_iggy

SENDER = m.Permissions(m.GlobalPermissions(send_messages=True, read_streams=True, read_topics=True))
ADMIN = m.Permissions(m.GlobalPermissions(manage_users=True, read_users=True, send_messages=True))


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[BayouServer]:
    srv = await start_iggy(tmp_path / "data")
    root = await legacy_login(iggy_port(srv))
    await root.call(m.CreateStream("sec"))
    await root.call(create_topic("sec", "t"))
    await root.close()
    yield srv
    await srv.stop()


async def _user(port: int, name: str, permissions: m.Permissions) -> tuple[LegacyConn, LegacyConn]:
    """(root's connection, a connection logged in as a new user ``name``)."""
    root = await legacy_login(port)
    await root.call(m.CreateUser(name, "pw-" + name, permissions=permissions))
    return root, await legacy_login(port, name, "pw-" + name)


async def _ends(conn: LegacyConn) -> None:
    assert (await conn.ask(send("sec", "t", 0, [b"after"]))).status == Status.UNAUTHENTICATED
    with pytest.raises(Closed):
        await conn.recv(timeout=5)


async def test_deleting_the_user_ends_its_session(server: BayouServer) -> None:
    root, alice = await _user(iggy_port(server), "alice", SENDER)
    assert (await alice.ask(send("sec", "t", 0, [b"before"]))).status == 0
    await root.call(m.DeleteUser(m.Identifier("alice")))
    await _ends(alice)
    await root.close()


async def test_deactivating_the_user_ends_its_session(server: BayouServer) -> None:
    root, bob = await _user(iggy_port(server), "bob", SENDER)
    await root.call(m.UpdateUser(m.Identifier("bob"), status=m.UserStatus.INACTIVE))
    await _ends(bob)
    await root.close()


async def test_permissions_taken_away_apply_to_the_next_request(server: BayouServer) -> None:
    root, carol = await _user(iggy_port(server), "carol", ADMIN)
    # granted, and kept by the session (server/iggy/context.py ``Session.granted``) until a change
    assert (await carol.ask(send("sec", "t", 0, [b"w"]))).status == 0
    assert (await carol.ask(m.GetUsers())).status == 0
    await root.call(m.UpdatePermissions(m.Identifier("carol"), None))
    assert (await carol.ask(send("sec", "t", 0, [b"x"]))).status == Status.UNAUTHORIZED
    assert (await carol.ask(m.CreateUser("mallory", "pw-mallory"))).status == Status.UNAUTHORIZED
    assert (await carol.ask(m.GetUsers())).status == Status.UNAUTHORIZED
    await carol.ping()  # still logged in, just allowed nothing
    # and given back, they apply at once too
    await root.call(m.UpdatePermissions(m.Identifier("carol"), SENDER))
    assert (await carol.ask(send("sec", "t", 0, [b"y"]))).status == 0
    await root.close()
    await carol.close()


async def test_deleting_the_token_ends_the_sessions_it_opened(server: BayouServer) -> None:
    port = iggy_port(server)
    root, dave = await _user(port, "dave", SENDER)
    raw = await dave.call(m.CreatePersonalAccessToken("ci-token", 0))
    by_token = await LegacyConn.open(port)
    await by_token.call(m.LoginWithToken(raw.token, "0.10.0"))
    assert (await by_token.ask(send("sec", "t", 0, [b"t"]))).status == 0
    await dave.call(m.DeletePersonalAccessToken("ci-token"))
    await _ends(by_token)
    assert (await dave.ask(send("sec", "t", 0, [b"pw"]))).status == 0  # the password session stays
    await dave.close()
    await root.close()
