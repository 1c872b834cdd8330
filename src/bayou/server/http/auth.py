"""Who asks the HTTP port, and whether they may (the security model of the other listeners).

A request's principal is, in order: the Iggy user of its ``Authorization`` header (``Basic``
user:password, or ``Bearer`` a personal access token: what Prometheus' ``basic_auth`` and
``authorization`` scrape settings send), checked against the Iggy users through the same hash
pool and login guard as an Iggy login; else the user its connection's TLS client certificate
names; else anonymous. The broker's authorizer (broker/authz.py) then answers for the route's
action, so ``[security] anonymous`` applies here as on every protocol: with ``all`` (the default)
anyone may scrape, with ``read`` or ``none`` /metrics needs a principal allowed ``read_servers``.

The probes (/health, /ready) stay open: Kubernetes sends no credentials, and they say nothing
but whether the broker serves; so do the console's static files (they hold no data: the data comes
from the admin API, under the API's checks). Wrong or missing credentials get 401 with a
``WWW-Authenticate`` challenge, a principal without the permission 403; neither says which part
was wrong.

Each route says what it needs through ``guard``: a global action checked before its handler runs
(``read_servers`` for /metrics and the cluster view, ``read_users``/``manage_users`` for users),
``"open"``, or ``"broker"``: the handler's broker calls check per topic (describe, poll, send,
manage_topics) against the request's principal, which the front end binds for the request
(broker/authz.py's ``Caller``), so the admin API obeys exactly the rules every protocol does.
"""

from __future__ import annotations

import base64
import binascii
import json
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from aiohttp import web

from bayou.broker.authz import Action, Principal, connection_principal
from bayou.server.iggy.users import AuthFailure

if TYPE_CHECKING:
    from bayou.server.app import BayouServer

OPEN_ROUTES = frozenset({"/health", "/ready"})
DEFAULT_ACTION: Action = "read_servers"  # /metrics, and any route that names no access of its own
CHALLENGE = {"WWW-Authenticate": 'Basic realm="bayou", charset="UTF-8"'}
Access = Action | Literal["open", "broker"]
H = TypeVar("H", bound=Callable[..., Any])
_ACCESS: weakref.WeakKeyDictionary[Callable[..., Any], Access] = weakref.WeakKeyDictionary()


def guard(access: Access) -> Callable[[H], H]:
    """Mark a route handler with what its requests need (see the module docstring)."""
    def mark(handler: H) -> H:
        _ACCESS[handler] = access
        return handler
    return mark


def access_of(handler: Callable[..., Any]) -> Access:
    return _ACCESS.get(handler, DEFAULT_ACTION)


def error_body(code: str, message: str) -> str:
    """The one JSON error shape of the HTTP port: ``{"error": {"code": ..., "message": ...}}``."""
    return json.dumps({"error": {"code": code, "message": message}}) + "\n"


def unauthorized(reason: str) -> web.HTTPUnauthorized:
    return web.HTTPUnauthorized(headers=CHALLENGE, text=error_body("UNAUTHORIZED", reason),
                                content_type="application/json")


def forbidden(reason: str) -> web.HTTPForbidden:
    return web.HTTPForbidden(text=error_body("FORBIDDEN", reason), content_type="application/json")


def refusal(server: BayouServer, principal: Principal, reason: str) -> web.HTTPException:
    """401 for a principal that could log in to get more (anonymous, an unknown certificate), else
    403."""
    if principal.kind == "anonymous" or server.broker.authorizer.permissions(principal) is None:
        return unauthorized("credentials required")
    return forbidden(reason)


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
            raise unauthorized("malformed basic credentials") from None
        username, sep, secret = decoded.partition(":")
        if not sep:
            raise unauthorized("malformed basic credentials")
    elif scheme.lower() == "bearer" and value:
        username, secret = None, value
    else:
        raise unauthorized("unsupported authorization scheme (Basic or Bearer)")
    iggy = server.iggy
    if iggy is None:  # the users live in the Iggy front end
        raise unauthorized("no users on this broker (the Iggy listener is off)")
    try:
        return await iggy.credentials_principal(peer, username, secret)
    except AuthFailure:
        raise unauthorized("invalid credentials") from None


async def authorize(server: BayouServer, request: web.Request, route: str | None, peer: str,
                    peer_cn: str | None) -> Principal | None:
    """Raise 401/403 unless the request may reach ``route`` (None: no such route, answered 404);
    the request's principal, or None for an open route."""
    if route is None or route in OPEN_ROUTES:
        return None
    access = access_of(request.match_info.handler)
    if access == "open":
        return None
    principal = await principal_of(server, request, peer, peer_cn)
    authorizer = server.broker.authorizer
    if access == "broker":
        # the broker checks each topic; but with anonymous access off, a request that could only
        # see nothing is asked for credentials (a browser then prompts) rather than shown nothing
        if authorizer.anonymous == "none" and (principal.kind == "anonymous"
                                                or authorizer.permissions(principal) is None):
            raise unauthorized("credentials required")
        return principal
    if authorizer.permits(principal, access):
        return principal
    raise refusal(server, principal, f"{principal} may not {access.replace('_', ' ')}")
