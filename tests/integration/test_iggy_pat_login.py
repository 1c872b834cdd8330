"""Logging in with a personal access token, in the layouts the Iggy SDKs send (issue 13).

apache-iggy 0.9.0's ``AutoLogin.personal_access_token`` sends a V Register whose header code is 0
(as for a password login) and whose body holds the token; bayou read it as a password login and
evicted the client ("Invalid format"). The 0.8 SDKs speak L, where LOGIN_WITH_PERSONAL_ACCESS_TOKEN
(44) carries the token alone, and newer L clients follow it with LOGIN_USER's version and context
str32s. The 0.9 login runs through the SDK itself (its own venv, ``support.iggy_sdk``); the 0.8
Python SDK has no token login, so its L layouts are sent as raw frames.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, Status
from bayou.protocols.iggy.framing import encode_legacy_request
from bayou.protocols.iggy.wire import enc_name8, enc_str32
from support.brokers import BrokerProcess
from support.iggy import IggyStatusError, LegacyConn, vsr_login
from support.iggy_sdk import run, start_broker

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("iggypat") / "data")
    try:
        yield b
    finally:
        b.stop()


def new_token(port: int, name: str) -> str:
    async def create() -> str:
        c = await vsr_login(port)
        try:
            raw = await c.call(m.CreatePersonalAccessToken(name, 0))
            assert isinstance(raw, m.RawPersonalAccessToken)
            return raw.token
        finally:
            await c.close()
    return asyncio.run(create())


def test_sdk09_auto_login_with_a_personal_access_token(broker: BrokerProcess) -> None:
    token = new_token(broker.iggy_port, "sdk09-pat")
    r = run("0.9", broker.iggy_port, "pat-login", token, "pat-stream")
    assert r["connect"] is None
    assert r["create_stream"] is None and r["stream"] == "pat-stream"
    assert r["wrong_token"] is not None and r["wrong_token"] != "timeout"


@pytest.mark.parametrize(("name", "tail"), [
    ("pat-alone", b""),                                            # the 0.8 SDKs: the token alone
    ("pat-version-context", enc_str32("0.8.0") + enc_str32("ctx")),  # LOGIN_USER's trailing fields
    ("pat-empty-fields", enc_str32(None) + enc_str32(None)),
], ids=["alone", "version-context", "empty-fields"])
def test_legacy_token_login_layouts(broker: BrokerProcess, name: str, tail: bytes) -> None:
    body = enc_name8(new_token(broker.iggy_port, name)) + tail

    async def login() -> None:
        c = await LegacyConn.open(broker.iggy_port)
        try:
            reply = await c.ask_raw(encode_legacy_request(Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN, body))
            assert reply.status == 0, reply
            assert await c.status(m.GetStreams()) == 0  # logged in
        finally:
            await c.close()
    asyncio.run(login())


def test_legacy_token_login_refuses_a_wrong_token_and_a_broken_tail(broker: BrokerProcess) -> None:
    token = new_token(broker.iggy_port, "l-refusals")

    async def refused() -> list[int]:
        out = []
        for body in (enc_name8(token[:-1] + "x"),                 # unknown token
                     enc_name8(token) + enc_str32("0.8.0"),       # version without context
                     enc_name8(token) + b"\x05\x00\x00\x00ab"):   # str32 shorter than its length
            c = await LegacyConn.open(broker.iggy_port)
            try:
                reply = await c.ask_raw(encode_legacy_request(Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN, body))
                out.append(reply.status)
                with pytest.raises(IggyStatusError):
                    await c.call(m.GetStreams())
            finally:
                await c.close()
        return out
    statuses = asyncio.run(refused())
    assert statuses[0] == Status.INVALID_PERSONAL_ACCESS_TOKEN
    assert all(s != 0 for s in statuses[1:]), statuses


def test_sdk09_token_login_survives_a_restart(broker: BrokerProcess, tmp_path: Path) -> None:
    token = new_token(broker.iggy_port, "restart-pat")
    broker.stop()
    b = start_broker(broker.data_dir, like=broker)
    try:
        r = run("0.9", b.iggy_port, "pat-login", token, "pat-stream-2")
        assert r["connect"] is None and r["stream"] == "pat-stream-2"
    finally:
        broker.proc = b.proc  # the module fixture stops whichever process runs now
