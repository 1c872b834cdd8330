"""Framing readers report what the frame in progress will hold (``pending``, for the server's
byte budget) and Iggy readers refuse a large frame before a login from its header alone."""

from __future__ import annotations

import struct

import pytest

from bayou.protocols.cursus.framing import FrameReader as CursusReader
from bayou.protocols.iggy.codes import Command, Operation, Status
from bayou.protocols.iggy.framing import (
    HEADER_SIZE,
    IggyError,
    LegacyFrameReader,
    RequestHeader,
    VsrFrameReader,
    encode_legacy_request,
)
from bayou.protocols.rtes.codec import LineReader
from bayou.protocols.tank.framing import FrameReader as TankReader


def test_pending_follows_the_header() -> None:
    tank = TankReader()
    head = b"\x01" + struct.pack("<I", 1000)
    tank.feed(head[:2])
    assert tank.pending == 2
    tank.feed(head[2:] + b"x" * 10)
    assert tank.pending == 1005
    cursus = CursusReader()
    cursus.feed(struct.pack(">I", 500) + b"y")
    assert cursus.pending == 504
    legacy = LegacyFrameReader()
    legacy.feed(struct.pack("<II", 300, 1))
    assert legacy.pending == 304
    vsr = VsrFrameReader()
    vsr.feed(RequestHeader(client=1, operation=Operation.NON_REPLICATED, code=1).encode(1000)[:60])
    assert vsr.pending == HEADER_SIZE + 1000
    lines = LineReader()
    lines.feed(b"V1|1|PI")
    assert lines.pending == 7
    assert lines.feed(b"NG|\n") == [b"V1|1|PING|"] and lines.pending == 0


def test_legacy_login_cap_refuses_from_the_header() -> None:
    reader = LegacyFrameReader()
    reader.login_cap = 1024
    with pytest.raises(IggyError) as e:
        reader.feed(struct.pack("<II", 100 * 1024 * 1024, Command.SEND_MESSAGES))
    assert e.value.status == Status.UNAUTHENTICATED and e.value.close


def test_legacy_login_cap_defers_a_frame_behind_a_login() -> None:
    reader = LegacyFrameReader()
    reader.login_cap = 1024
    login = encode_legacy_request(Command.LOGIN_USER, b"l" * 20)
    send = encode_legacy_request(Command.SEND_MESSAGES, b"s" * 5000)
    frames = reader.feed(login + send)
    assert [f.code for f in frames] == [Command.LOGIN_USER] and reader.deferred
    reader.login_cap = None  # the login succeeded
    frames = reader.feed(b"")
    assert [f.code for f in frames] == [Command.SEND_MESSAGES] and not reader.deferred


def test_vsr_login_cap_carries_the_refused_header() -> None:
    reader = VsrFrameReader()
    reader.login_cap = 1024
    header = RequestHeader(client=7, operation=Operation.NON_REPLICATED, request=3,
                           code=Command.SEND_MESSAGES)
    with pytest.raises(IggyError) as e:
        reader.feed(header.encode(50_000))
    assert e.value.status == Status.UNAUTHENTICATED
    assert e.value.request is not None and e.value.request.request == 3
