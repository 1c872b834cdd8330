"""The replication listener's challenge and answer (protocols/replica/codec.py): round trips,
every truncated prefix, exact bytes, and the MAC binding secret, nonce and broker id."""

from __future__ import annotations

import pytest

from bayou.protocols.replica.codec import (
    Auth,
    Challenge,
    ReplicaProtocolError,
    auth_mac,
    auth_ok,
    decode,
    encode,
)

NONCE = bytes(range(16))


@pytest.mark.parametrize("msg", [Challenge(NONCE), Auth(7, auth_mac("s", NONCE, 7)), Auth(-1, b"\xff" * 32)])
def test_round_trip_and_every_prefix(msg: Challenge | Auth) -> None:
    data = encode(msg)
    assert decode(data) == (msg, len(data))
    assert decode(data + b"\x00\x00") == (msg, len(data))
    for i in range(len(data)):
        assert decode(data[:i]) is None


def test_exact_bytes() -> None:
    assert encode(Challenge(NONCE)) == b"\x00\x00\x00\x11\x05" + NONCE
    assert encode(Auth(2, b"m" * 32)) == b"\x00\x00\x00\x25\x06\x00\x00\x00\x02" + b"m" * 32


@pytest.mark.parametrize("frame", [b"\x00\x00\x00\x10\x05" + NONCE[:15],
                                   b"\x00\x00\x00\x12\x05" + NONCE + b"x",
                                   b"\x00\x00\x00\x05\x06\x00\x00\x00\x02"])
def test_wrong_sizes_are_the_protocol_error(frame: bytes) -> None:
    with pytest.raises(ReplicaProtocolError):
        decode(frame)


def test_the_mac_binds_secret_nonce_and_broker() -> None:
    good = Auth(3, auth_mac("secret", NONCE, 3))
    assert auth_ok("secret", NONCE, good)
    assert not auth_ok("other", NONCE, good)
    assert not auth_ok("secret", bytes(16), good)
    assert not auth_ok("secret", NONCE, Auth(4, good.mac))
    assert len(good.mac) == 32
