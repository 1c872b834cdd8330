"""TLS for bayou's clients (the SDK, the V1 client, the CLI, the Spark source and sink).

As Kafka clients do, the broker's certificate is verified against the CA (the system's when
``ca`` is not given) and its host name checked, unless ``check_hostname`` is turned off; a client
certificate (``cert`` and ``key``) is presented when the broker asks for one (mTLS).
"""

from __future__ import annotations

import functools
import socket
import ssl
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """Where the PEM files are; hashable, so it can key a connection cache."""

    ca: str | None = None  # CA certificates that sign the broker's certificate
    cert: str | None = None  # this client's certificate (chain), for mTLS
    key: str | None = None  # its private key (None: in the cert file)
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        return _context(self)

    def wrap(self, sock: socket.socket, host: str) -> ssl.SSLSocket:
        """``sock`` after the handshake with the broker at ``host``."""
        return self.context().wrap_socket(sock, server_hostname=host)


@functools.lru_cache(maxsize=16)
def _context(cfg: TlsConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cfg.ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not cfg.check_hostname:
        ctx.check_hostname = False
    if cfg.cert:
        ctx.load_cert_chain(cfg.cert, cfg.key)
    return ctx
