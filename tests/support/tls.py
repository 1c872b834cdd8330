"""Certificates for TLS tests, made by ``trustme``: a CA, the broker's certificate (localhost,
127.0.0.1), a client certificate with CN alice, and one from another CA (mallory)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class Certs:
    ca: str  # the CA that signs the broker's and alice's certificates
    cert: str  # the broker's certificate (localhost, 127.0.0.1)
    key: str
    alice_cert: str  # a client certificate with CN alice
    alice_key: str
    alice_pem: str  # alice's key and certificate in one file
    mallory_cert: str  # a client certificate from another CA
    mallory_key: str

    def client(self, *, alice: bool = False, mallory: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca)
        if alice:
            ctx.load_cert_chain(self.alice_cert, self.alice_key)
        if mallory:
            ctx.load_cert_chain(self.mallory_cert, self.mallory_key)
        return ctx

    def serve_args(self, client_auth: str = "optional") -> list[str]:
        return ["--tls-cert", self.cert, "--tls-key", self.key, "--tls-ca", self.ca,
                "--tls-client-auth", client_auth]


def make_certs(root: Path) -> Certs:
    root.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()
    broker = ca.issue_cert("localhost", "127.0.0.1", common_name="bayou-broker")
    alice = ca.issue_cert("alice.example", common_name="alice")
    mallory = other.issue_cert("mallory.example", common_name="mallory")

    def write(name: str, blob: trustme.Blob) -> str:
        path = root / name
        blob.write_to_path(str(path))
        return str(path)

    alice_pem = root / "alice-both.pem"
    alice_pem.write_bytes(alice.private_key_pem.bytes() + b"".join(b.bytes() for b in alice.cert_chain_pems))
    return Certs(ca=write("ca.pem", ca.cert_pem), cert=write("broker.pem", broker.cert_chain_pems[0]),
                 key=write("broker.key", broker.private_key_pem),
                 alice_cert=write("alice.pem", alice.cert_chain_pems[0]),
                 alice_key=write("alice.key", alice.private_key_pem), alice_pem=str(alice_pem),
                 mallory_cert=write("mallory.pem", mallory.cert_chain_pems[0]),
                 mallory_key=write("mallory.key", mallory.private_key_pem))
