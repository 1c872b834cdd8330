"""Who asks the HTTP port, and whether they may (the security model of the other listeners).

A request's principal is, in order: the Iggy user of its ``Authorization`` header (``Basic``
user:password, or ``Bearer`` a personal access token: what Prometheus' ``basic_auth`` and
``authorization`` scrape settings send), checked against the Iggy users through the same hash
pool and login guard as an Iggy login; else the user its connection's TLS client certificate
names; else anonymous. The broker's authorizer (broker/authz.py) then answers for the route's
action, so ``[security] anonymous`` applies here as on every protocol: with ``all`` (the default)
anyone may scrape, with ``read`` or ``none`` /metrics needs a principal allowed ``read_servers``.

The probes (/health, /ready) stay open: Kubernetes sends no credentials, and they say nothing
but whether the broker serves. Wrong or missing credentials get 401 with a ``WWW-Authenticate``
challenge, a principal without the permission 403; neither says which part was wrong.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from aiohttp import web

from bayou.broker.authz import Action, Principal, connection_principal
from bayou.server.iggy_users import AuthFailure

if TYPE_CHECKING:
    from bayou.server.app import BayouServer

OPEN_ROUTES = frozenset({"/health", "/ready"})
DEFAULT_ACTION: Action = "read_servers"  # /metrics; the admin API's routes will name their own
CHALLENGE = {"WWW-Authenticate": 'Basic realm="bayou", charset="UTF-8"'}


def _unauthorized(reason: str) -> web.HTTPUnauthorized:
    return web.HTTPUnauthorized(headers=CHALLENGE, text=f'{{"error": "{reason}"}}\n',
                                content_type="application/json")


async def principal_of(server: BayouServer, request: web.Request, peer: str,
                       peer_cn: str | None) -> Principal:
    """The request's principal (see the module docstring); raises 401 for bad credentials."""
    header = request.headers.get("Authorization")
    if header is None:
        return connection_principal(peer_cn)
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    username: str | None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise _unauthorized("malformed basic credentials") from None
        username, sep, secret = decoded.partition(":")
        if not sep:
            raise _unauthorized("malformed basic credentials")
    elif scheme.lower() == "bearer" and value:
        username, secret = None, value
    else:
        raise _unauthorized("unsupported authorization scheme (Basic or Bearer)")
    iggy = server.iggy
    if iggy is None:  # the users live in the Iggy front end
        raise _unauthorized("no users on this broker (the Iggy listener is off)")
    try:
        return await iggy.credentials_principal(peer, username, secret)
    except AuthFailure:
        raise _unauthorized("invalid credentials") from None


async def authorize(server: BayouServer, request: web.Request, route: str | None, peer: str,
                    peer_cn: str | None) -> None:
    """Raise 401/403 unless the request may reach ``route`` (None: no such route, answered 404)."""
    if route is None or route in OPEN_ROUTES:
        return
    principal = await principal_of(server, request, peer, peer_cn)
    if server.broker.authorizer.permits(principal, DEFAULT_ACTION):
        return
    if principal.kind == "anonymous" or server.broker.authorizer.permissions(principal) is None:
        raise _unauthorized("credentials required")
    raise web.HTTPForbidden(text=f'{{"error": "{principal} may not {DEFAULT_ACTION}"}}\n',
                            content_type="application/json")
