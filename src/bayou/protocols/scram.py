"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the credentials a server keeps for a
password, and the server's side of one exchange, sans-IO.

A server never keeps the password, only what SCRAM needs to check a proof of it: per mechanism a
salt, an iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"), SaltedPassword being PBKDF2 of the password (``derive``). That
derivation is deliberately slow: callers run it off the event loop. The exchange itself
(``ScramExchange``) costs a few HMACs and runs anywhere.

The messages are parsed and the proof checked by scramp (the SCRAM library pg8000 uses); this
module adds what a Kafka broker needs around it. The password is used as its UTF-8 bytes, without
SASLprep, as Kafka's own ScramFormatter, librdkafka, kafka-python and aiokafka hash it (SASLprep
would refuse some passwords the user store accepts, and map others to a key no Kafka client
derives). An unknown user, or one without credentials for the mechanism, is answered with a decoy
salt that is stable per name, so the exchange runs to its end and fails exactly as a wrong
password does: the server-first message does not tell which user names exist.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism
from scramp.utils import ServerError

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""The mechanisms served, by their SASL names, and their hash functions."""
MECHANISMS = tuple(HASHES)
ITERATIONS = 4096  # RFC 7677's minimum and Kafka's default (kafka-configs' SCRAM credentials)
SALT_BYTES = 32
_DECOY_KEY = secrets.token_bytes(32)  # this process's decoy salts for names it has no credentials for


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What checks a SCRAM proof of one password for one mechanism (never the password)."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


class ScramFailure(Exception):
    """The exchange failed; ``str(exc)`` is what the client may be told. ``proof`` is true when the
    client's proof was judged (a wrong password, an unknown user, a nonce that does not match):
    a login attempt that failed, as opposed to a message that could not be read."""

    def __init__(self, message: str, *, proof: bool = False) -> None:
        super().__init__(message)
        self.proof = proof


def derive(password: str, mechanism: str, *, salt: bytes | None = None,
           iterations: int = ITERATIONS) -> ScramCredential:
    """The credential of ``password`` for ``mechanism`` (PBKDF2: CPU heavy, keep it off the loop)."""
    name = HASHES[mechanism]
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", name)
    return ScramCredential(mechanism, salt, iterations, hashlib.new(name, client_key).digest(),
                           hmac.digest(salted, b"Server Key", name))


def derive_all(password: str) -> tuple[ScramCredential, ...]:
    """One credential per mechanism served, each with a salt of its own."""
    return tuple(derive(password, mech) for mech in MECHANISMS)


def _decoy(mechanism: str, username: str) -> ScramCredential:
    """Credentials no proof matches (random keys), under a salt that is the same for the same name
    each time it is asked in this process."""
    salt = hmac.digest(_DECOY_KEY, f"{mechanism}\0{username}".encode(), "sha256")
    size = hashlib.new(HASHES[mechanism]).digest_size
    return ScramCredential(mechanism, salt, ITERATIONS, secrets.token_bytes(size), secrets.token_bytes(size))


Lookup = Callable[[str, str], "ScramCredential | None"]
"""(user name, mechanism) -> that user's credential, or None (unknown, inactive, none stored)."""


class ScramExchange:
    """The server side of one SCRAM exchange: ``first`` answers the client-first message with the
    server-first, ``final`` checks the client-final's proof and answers the server-final. Each
    raises ScramFailure; after a failure the exchange is over."""

    def __init__(self, mechanism: str, lookup: Lookup, *, nonce: str | None = None) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism served: {mechanism}")
        self.mechanism = mechanism
        self.username: str | None = None  # once the client-first message named one
        self.known = False  # whether that user has credentials for the mechanism
        self._lookup = lookup
        self._done = False
        # the server's half of the nonce: 24 random bytes from secrets, base64url (printable, no ',')
        self._server = ScramMechanism(mechanism).make_server(
            self._credentials, s_nonce=secrets.token_urlsafe(24) if nonce is None else nonce)

    def _credentials(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        found = self._lookup(username, self.mechanism)
        self.username, self.known = username, found is not None
        cred = _decoy(self.mechanism, username) if found is None else found
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def first(self, client_first: bytes) -> bytes:
        """The server-first message (nonce, salt, iterations) for the client-first one."""
        if self._done or self.username is not None:
            raise ScramFailure("the client-first message was already received")
        try:
            self._server.set_client_first(_text(client_first))
            return str(self._server.get_server_first()).encode()
        except ScramException as exc:
            self._done = True
            raise ScramFailure(f"malformed client-first message: {exc}") from None

    def final(self, client_final: bytes) -> bytes:
        """The server-final message (the server's signature) once the client's proof holds."""
        if self._done or self.username is None:
            raise ScramFailure("a client-final message before the client-first")
        self._done = True
        text = _text(client_final)
        nonce = next((a[2:] for a in text.split(",") if a.startswith("r=")), None)
        if nonce is not None and not hmac.compare_digest(nonce.encode(), str(self._server.nonce).encode()):
            raise ScramFailure("invalid credentials (the nonce does not match)", proof=True)
        try:
            self._server.set_client_final(text)
        except ScramException as exc:
            if exc.server_error is ServerError.INVALID_PROOF:
                raise ScramFailure("invalid credentials", proof=True) from None
            raise ScramFailure(f"malformed client-final message: {exc}") from None
        if not self.known:  # a decoy's random keys match no proof; never let one through
            raise ScramFailure("invalid credentials", proof=True)
        return str(self._server.get_server_final()).encode()


def _text(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramFailure("a SCRAM message must be UTF-8") from None


__all__ = ["HASHES", "ITERATIONS", "MECHANISMS", "ScramCredential", "ScramExchange", "ScramFailure",
           "derive", "derive_all"]
