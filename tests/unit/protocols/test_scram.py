"""The server side of SCRAM (protocols/scram.py): RFC 7677's SCRAM-SHA-256 example byte for byte, a
SCRAM-SHA-512 exchange against a client computed here with hashlib (RFC 5802 section 3), and every
way an exchange fails: a wrong password, an unknown user, a nonce that does not match, malformed
messages, and random bytes (a ScramFailure, never anything else)."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bayou.protocols.scram import (
    ITERATIONS,
    MECHANISMS,
    ScramCredential,
    ScramExchange,
    ScramFailure,
    derive,
    derive_all,
)
from support.scram import ScramClient, attributes

# RFC 7677 section 3: user "user", password "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def users(**passwords: str) -> dict[tuple[str, str], ScramCredential]:
    return {(name, mech): derive(pw, mech) for name, pw in passwords.items() for mech in MECHANISMS}


def exchange(creds: dict[tuple[str, str], ScramCredential], mechanism: str = "SCRAM-SHA-512",
             nonce: str | None = None) -> ScramExchange:
    return ScramExchange(mechanism, lambda user, mech: creds.get((user, mech)), nonce=nonce)


def test_rfc_7677_sha_256_example_byte_for_byte() -> None:
    cred = derive("pencil", "SCRAM-SHA-256", salt=RFC_SALT)
    x = exchange({("user", "SCRAM-SHA-256"): cred}, "SCRAM-SHA-256", nonce=RFC_SERVER_NONCE)
    assert x.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert x.username == "user" and x.known
    assert x.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL


def test_rfc_7677_example_with_another_password_is_refused() -> None:
    cred = derive("pencil2", "SCRAM-SHA-256", salt=RFC_SALT)
    x = exchange({("user", "SCRAM-SHA-256"): cred}, "SCRAM-SHA-256", nonce=RFC_SERVER_NONCE)
    x.first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramFailure) as info:
        x.final(RFC_CLIENT_FINAL)
    assert info.value.proof and "invalid credentials" in str(info.value)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_client_computed_here_logs_in_and_checks_the_servers_signature(mechanism: str) -> None:
    creds = users(alice="wonder-land", bob="builder")
    client = ScramClient(mechanism, "alice", "wonder-land")
    x = exchange(creds, mechanism)
    server_first = x.first(client.first())
    server_final = x.final(client.final(server_first))
    client.check(server_final)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_is_refused(mechanism: str) -> None:
    client = ScramClient(mechanism, "alice", "not-her-password")
    x = exchange(users(alice="wonder-land"), mechanism)
    with pytest.raises(ScramFailure) as info:
        x.final(client.final(x.first(client.first())))
    assert info.value.proof


def test_the_other_mechanisms_credential_does_not_answer() -> None:
    """Each mechanism has its own salt and keys: a SHA-256 exchange never sees the SHA-512 ones."""
    creds = users(alice="wonder-land")
    del creds[("alice", "SCRAM-SHA-256")]
    client = ScramClient("SCRAM-SHA-256", "alice", "wonder-land")
    x = exchange(creds, "SCRAM-SHA-256")
    x.first(client.first())
    assert not x.known


def test_an_unknown_user_gets_a_stable_decoy_salt_and_fails_like_a_wrong_password() -> None:
    creds = users(alice="wonder-land")
    firsts = []
    for _ in range(2):
        client = ScramClient("SCRAM-SHA-512", "mallory", "guess")
        x = exchange(creds, "SCRAM-SHA-512")
        server_first = x.first(client.first())
        assert not x.known
        attrs = attributes(server_first)
        assert int(attrs["i"]) == ITERATIONS and len(base64.b64decode(attrs["s"])) == 32
        firsts.append(attrs["s"])
        with pytest.raises(ScramFailure) as info:
            x.final(client.final(server_first))
        assert info.value.proof and str(info.value) == "invalid credentials"
    assert firsts[0] == firsts[1]  # the same name: the same salt, as for a real user
    other = exchange(creds, "SCRAM-SHA-512").first(ScramClient("SCRAM-SHA-512", "trudy", "x").first())
    assert f"s={firsts[0]}".encode() not in other


def test_a_nonce_that_does_not_match_is_refused() -> None:
    client = ScramClient("SCRAM-SHA-256", "alice", "wonder-land")
    x = exchange(users(alice="wonder-land"), "SCRAM-SHA-256")
    server_first = x.first(client.first())
    forged = client.nonce + "someone-elses-server-nonce"
    with pytest.raises(ScramFailure) as info:
        x.final(client.final(server_first, nonce=forged))
    assert info.value.proof and "nonce" in str(info.value)


@pytest.mark.parametrize("message", [
    b"",
    b"\xff\xfe",  # not UTF-8
    b"n=user,r=abc",  # no gs2 header
    b"n,,",  # nothing after it
    b"n,,r=abc,n=user",  # attributes out of order
    b"n,,n=user",  # no nonce
    b"n,,n=,r=abc",  # empty user
    b"n,,n=us=er,r=abc",  # a bad escape in the name
    b"n,a=root,n=user,r=abc",  # an authorization id (acting as another user is not offered)
    b"p=tls-unique,,n=user,r=abc",  # channel binding (no -PLUS mechanism is served)
    b"x,,n=user,r=abc",
    b"n,,n=user,r=ab,c",
    b"n,,n=user,r=abc,tokenauth=true",  # Kafka's delegation tokens are not served
    b"n,,m=ext,n=user,r=abc",
])
def test_a_malformed_client_first_message_is_refused(message: bytes) -> None:
    x = exchange(users(user="pencil"), "SCRAM-SHA-256")
    with pytest.raises(ScramFailure) as info:
        x.first(message)
    assert not info.value.proof
    with pytest.raises(ScramFailure):  # and the exchange is over
        x.final(b"c=biws,r=abc,p=AAAA")


@pytest.mark.parametrize("message", [
    b"",
    b"\xff",
    b"c=biws",
    b"c=biws,r={nonce}",  # no proof
    b"c=biws,r={nonce},p=not*base64",
    b"r={nonce},c=biws,p=AAAA",  # out of order
    b"c=eSws,r={nonce},p=AAAA",  # channel binding data that is not the gs2 header ("y,,")
])
def test_a_malformed_client_final_message_is_refused(message: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    x = exchange(users(user="pencil"), "SCRAM-SHA-256")
    attrs = attributes(x.first(client.first()))
    with pytest.raises(ScramFailure):
        x.final(message.replace(b"{nonce}", attrs["r"].encode()))


def test_a_proof_of_the_wrong_length_is_a_failed_proof() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    x = exchange(users(user="pencil"), "SCRAM-SHA-256")
    attrs = attributes(x.first(client.first()))
    with pytest.raises(ScramFailure) as info:
        x.final(f"c=biws,r={attrs['r']},p={base64.b64encode(b'short').decode()}".encode())
    assert info.value.proof


def test_steps_out_of_order_are_refused() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    x = exchange(users(user="pencil"), "SCRAM-SHA-256")
    with pytest.raises(ScramFailure):
        x.final(b"c=biws,r=abc,p=AAAA")  # before the first message
    y = exchange(users(user="pencil"), "SCRAM-SHA-256")
    server_first = y.first(client.first())
    with pytest.raises(ScramFailure):
        y.first(client.first())  # twice
    z = exchange(users(user="pencil"), "SCRAM-SHA-256")
    final = client.final(z.first(client.first()))
    z.final(final)
    with pytest.raises(ScramFailure):
        z.final(final)  # a replay on the same exchange
    assert server_first


def test_an_unknown_mechanism_is_not_an_exchange() -> None:
    with pytest.raises(ValueError):
        ScramExchange("SCRAM-SHA-1", lambda u, m: None)


def test_derived_credentials() -> None:
    a, b = derive_all("same password")
    assert (a.mechanism, b.mechanism) == MECHANISMS
    assert a.iterations >= 4096 and b.iterations >= 4096
    assert len(a.salt) == len(b.salt) == 32 and a.salt != b.salt
    assert (len(a.stored_key), len(a.server_key), len(b.stored_key), len(b.server_key)) == (32, 32, 64, 64)
    again = derive("same password", "SCRAM-SHA-256")
    assert again.salt != a.salt and again.stored_key != a.stored_key  # a fresh salt each time
    assert derive("same password", "SCRAM-SHA-256", salt=a.salt) == a


@given(first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_random_bytes_give_a_message_or_a_scram_failure(first: bytes, final: bytes) -> None:
    x = exchange(users(user="pencil"), "SCRAM-SHA-256")
    with contextlib.suppress(ScramFailure):
        x.first(first)
        x.final(final)


@given(st.text(max_size=40))
def test_mutated_client_first_messages_give_a_message_or_a_scram_failure(tail: str) -> None:
    x = exchange(users(user="pencil"), "SCRAM-SHA-256")
    with contextlib.suppress(ScramFailure):
        assert x.first(f"n,,n=user,r={tail}".encode()).startswith(b"r=")
