"""Token logins in every layout the Iggy SDKs send, at the codec (tests/integration/
test_iggy_pat_login.py runs them through the 0.9 SDK and a broker): the 0.9.0 SDK's Register with
header code 0 and a token body (captured from ``AutoLogin.personal_access_token``), the same with
code 45, and L's LOGIN_WITH_PERSONAL_ACCESS_TOKEN with the token alone or with version/context."""

from __future__ import annotations

import pytest

from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, EvictionReason, Operation, Status
from bayou.protocols.iggy.framing import Dialect, IggyError, RequestHeader, VsrFrame
from bayou.protocols.iggy.wire import enc_name8, enc_str32

TOKEN = "IGcFrBnIZNsvY9yNS-jVKaSYQOkCkasKSwjvPNhu2L4"
# the body apache-iggy 0.9.0 sent for AutoLogin.personal_access_token(TOKEN): version 0.11.0,
# "rust-sdk", "0.11.0", the token (u8 length), an empty context str32
CAPTURED = (bytes.fromhex("002c0000" "08" "727573742d73646b" "06" "302e31312e30" "2b") + TOKEN.encode()
            + bytes(4))
PAT = Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN


def register(body: bytes, code: int = 0) -> m.Request:
    frame = VsrFrame(RequestHeader(client=7, operation=Operation.REGISTER, code=code), body)
    return codec.decode_vsr_request(frame)


@pytest.mark.parametrize("code", [0, Command.LOGIN_REGISTER_WITH_PAT])
def test_sdk09_token_register(code: int) -> None:
    assert register(CAPTURED, code) == m.LoginRegisterWithToken(0x2C00, "rust-sdk", "0.11.0", TOKEN, None)


def test_token_register_with_a_context() -> None:
    body = CAPTURED[:-4] + enc_str32("ctx")
    assert register(body) == m.LoginRegisterWithToken(0x2C00, "rust-sdk", "0.11.0", TOKEN, "ctx")


def test_password_register_still_reads_as_a_password_login() -> None:
    body = codec.encode_request(m.LoginRegister(0x2C00, "rust-sdk", "0.11.0", "iggy", "secret"), Dialect.VSR)
    assert register(body) == m.LoginRegister(0x2C00, "rust-sdk", "0.11.0", "iggy", "secret", None)


@pytest.mark.parametrize("cut", [5, 20, len(CAPTURED) - 1])
def test_a_broken_register_is_still_a_malformed_login(cut: int) -> None:
    with pytest.raises(IggyError) as err:
        register(CAPTURED[:cut])
    assert err.value.eviction == EvictionReason.MALFORMED_LOGIN


@pytest.mark.parametrize(("tail", "version", "context"), [
    (b"", None, None),
    (enc_str32("0.8.0") + enc_str32("ctx"), "0.8.0", "ctx"),
    (enc_str32(None) + enc_str32(None), None, None),
])
def test_legacy_token_login(tail: bytes, version: str | None, context: str | None) -> None:
    req = codec.decode_request(Dialect.LEGACY, PAT, enc_name8(TOKEN) + tail)
    assert req == m.LoginWithToken(TOKEN, version, context)
    assert codec.decode_request(Dialect.LEGACY, req.command, codec.encode_request(req, Dialect.LEGACY)) == req


@pytest.mark.parametrize("tail", [enc_str32("0.8.0"), b"\x05\x00\x00\x00ab", b"\x00"])
def test_legacy_token_login_with_a_broken_tail(tail: bytes) -> None:
    with pytest.raises(IggyError) as err:
        codec.decode_request(Dialect.LEGACY, PAT, enc_name8(TOKEN) + tail)
    assert err.value.status != Status.OK
