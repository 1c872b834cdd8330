"""TLS for the listeners: the ``[tls]`` settings, the server and broker-to-broker contexts, and
what a verified client certificate says about its holder.

The handshake itself runs in ``Listener._accept`` (server/base.py) after admission, so a
handshake flood is limited like any other connection and a stalled handshake meets the
connection's idle deadline. Every context is built when the configuration is read: a missing
file, a key that does not match its certificate or a CA file that is not PEM is a start-up error.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

from bayou.errors import InvalidConfig

CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """``[tls]``: the broker's certificate and key (PEM), the CA that signs client certificates,
    whether clients must present one, and the listeners left in plain text (``plain``)."""

    cert: str
    key: str
    ca: str | None = None
    client_auth: str = "none"  # none | optional | required
    plain: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.client_auth not in CLIENT_AUTH:
            raise InvalidConfig(f"[tls] client_auth must be one of {', '.join(CLIENT_AUTH)}, "
                                f"not {self.client_auth!r}")
        if self.client_auth != "none" and not self.ca:
            raise InvalidConfig(f"[tls] client_auth = {self.client_auth!r} needs [tls] ca "
                                "(the CA that signs client certificates; --tls-ca)")

    def server_context(self, client_auth: str | None = None) -> ssl.SSLContext:
        """The context of a TLS listener; ``client_auth`` overrides the setting (the replication
        listener always requires a certificate signed by the CA)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(ctx)
        mode = client_auth or self.client_auth
        if mode != "none":
            if not self.ca:
                raise InvalidConfig("the replication listener over TLS needs [tls] ca (the CA that signs "
                                    "the brokers' certificates), or \"replication\" in [tls] plain")
            ctx.verify_mode = CLIENT_AUTH[mode]
        return ctx

    def broker_client_context(self) -> ssl.SSLContext:
        """How this broker connects to other brokers' replication listeners: it verifies their
        certificate (and host) against the CA and presents its own certificate."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(ctx)
        return ctx

    def _load(self, ctx: ssl.SSLContext) -> None:
        try:
            ctx.load_cert_chain(self.cert, self.key)
        except FileNotFoundError as exc:
            raise InvalidConfig(f"[tls] cannot read {exc.filename or 'the certificate or key'}: no such "
                                "file (--tls-cert, --tls-key)") from None
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfig(f"[tls] cannot load certificate {self.cert} with key {self.key}: "
                                f"{_reason(exc)} (both PEM; the key must match the certificate)") from None
        if self.ca:
            try:
                ctx.load_verify_locations(cafile=self.ca)
            except FileNotFoundError:
                raise InvalidConfig(f"[tls] cannot read ca {self.ca}: no such file (--tls-ca)") from None
            except (OSError, ssl.SSLError) as exc:
                raise InvalidConfig(f"[tls] cannot load ca {self.ca}: {_reason(exc)} (PEM certificates)") \
                    from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc).replace("_", " ").lower()
    return str(getattr(exc, "strerror", None) or exc)


def peer_cn(writer: asyncio.StreamWriter) -> str | None:
    """The subject CN of the client certificate the handshake verified (None: no certificate)."""
    cert = writer.get_extra_info("peercert")
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def handshake_failure(exc: BaseException) -> str | None:
    """Why a handshake failed, for one INFO line; None when the client just went away (a port
    probe that connects and closes is not worth a line)."""
    if isinstance(exc, ssl.SSLError):
        if isinstance(exc, ssl.SSLEOFError) or exc.reason in ("UNEXPECTED_EOF_WHILE_READING",):
            return None
        return _reason(exc)
    if isinstance(exc, ConnectionError | asyncio.IncompleteReadError):
        return None
    return str(exc) or type(exc).__name__
