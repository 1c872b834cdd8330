"""A SCRAM client computed from RFC 5802 section 3 with hashlib (not by the library the server
uses), to drive bayou's server exchange (protocols/scram.py) in tests."""

from __future__ import annotations

import base64
import hashlib
import hmac

from bayou.protocols.scram import HASHES, ScramExchange


def attributes(message: bytes) -> dict[str, str]:
    return dict(a.split("=", 1) for a in message.decode().split(","))


class ScramClient:
    def __init__(self, mechanism: str, user: str, password: str, nonce: str = "fyko+d2lbbFgONRv9qkxdawL"
                 ) -> None:
        self.hash = HASHES[mechanism]
        self.password = password.encode()
        self.bare = f"n={user},r={nonce}"
        self.nonce = nonce
        self.server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes, *, nonce: str | None = None) -> bytes:
        """The client-final message (``nonce``: send another nonce than the server's)."""
        attrs = attributes(server_first)
        assert attrs["r"].startswith(self.nonce) and len(attrs["r"]) > len(self.nonce)
        salted = hashlib.pbkdf2_hmac(self.hash, self.password, base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={attrs['r'] if nonce is None else nonce}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self.server_signature = hmac.digest(hmac.digest(salted, b"Server Key", self.hash), auth, self.hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        assert server_final == b"v=" + base64.b64encode(self.server_signature), server_final


def scram_login(exchange: ScramExchange, mechanism: str, user: str, password: str) -> None:
    """A whole exchange; raises ScramFailure as the server does."""
    client = ScramClient(mechanism, user, password)
    client.check(exchange.final(client.final(exchange.first(client.first()))))
