"""Issue 14.5: password guessing is slowed and seen. Failed Iggy logins (password or token, L or
V framing) are logged at WARNING with the address and user name (never the secret), each further
attempt from that connection or address waits (doubling) before it is judged, and a connection is
closed after its budget of failures; a good login later still works."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bayou.protocols.iggy import messages as m
from bayou.server.login_guard import LoginGuard, client_ip
from support.iggy import Closed, LegacyConn, iggy_port, legacy_login, start_iggy

WRONG = "not-the-password-3f9a"


def test_client_ip() -> None:
    assert client_ip("10.1.2.3:5555") == "10.1.2.3"
    assert client_ip("[::1]:5555") == "::1" and client_ip("::1:5555") == "::1"


def test_the_guard_doubles_its_delay_and_forgets() -> None:
    g = LoginGuard(base_delay_s=0.25, max_delay_s=2.0, window_s=60, max_addresses=2)
    assert g.delay("a", 0) == 0.0
    assert [g.failed("a") for _ in range(3)] == [1, 2, 3]
    assert g.delay("a", 0) == 1.0  # the address's three failures, even on a new connection
    assert g.delay("b", 1) == 0.25  # a connection's own failure
    assert g.delay("a", 9) == 2.0  # capped
    g.failed("b")
    g.failed("c")  # past max_addresses: the oldest address ("a") is forgotten
    assert g.delay("a", 0) == 0.0 and g.delay("c", 0) == 0.25
    g.succeeded("c")
    assert g.delay("c", 0) == 0.0
    assert not g.exhausted(4) and g.exhausted(5)


async def test_pipelined_wrong_logins_are_slowed_logged_and_cut_off(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    server = await start_iggy(tmp_path / "data")
    try:
        port = iggy_port(server)
        conn = await LegacyConn.open(port)
        frame = conn.frame(m.LoginUser("iggy", WRONG, "0.10.0"))
        with caplog.at_level(logging.WARNING, logger="bayou.iggy"):
            await conn.send_raw(frame * 200)  # 200 attempts at once
            statuses: list[int] = []
            with pytest.raises(Closed):
                while True:
                    statuses.append((await conn.recv(timeout=30)).status)
        await conn.close()
        assert len(statuses) == 5 and all(s != 0 for s in statuses), statuses  # then closed
        failures = [r for r in caplog.records if r.getMessage() == "iggy login failed"]
        assert len(failures) == 5
        assert all(getattr(r, "user", None) == "iggy" and getattr(r, "peer", "").startswith("127.0.0.1:")
                   for r in failures)
        assert WRONG not in caplog.text
        assert getattr(failures[-1], "closing", None) is True
        # the address's failures make the next attempt wait; the right password still gets in
        ok = await asyncio.wait_for(legacy_login(port), 30)
        await ok.ping()
        await ok.close()
    finally:
        await server.stop()
