"""The admin REST API's shared parts (``/api/v1/...``, JSON), and its cluster route.

Every handler is wrapped by ``endpoint``: it says what the route needs (auth.py's ``guard``) and
turns a failure into the port's one error shape, ``{"error": {"code", "message"}}``, with a status
from ``STATUS``, the one table mapping bayou's errors (errors.py, and the Iggy user store's) to
HTTP. Bad input (unparsable JSON, a missing field, an integer out of range) is ``BadInput``, 400.
Nothing a client sends can produce a traceback: an unexpected exception is logged and answered
500 with no detail.

The resources (README, "Admin API"): ``api.py`` the cluster, ``api_topics.py`` topics and
messages, ``api_groups.py`` consumer groups, ``api_users.py`` Iggy users.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bayou.broker import admin
from bayou.broker.authz import current_principal
from bayou.errors import (
    BayouError,
    BrokerShuttingDown,
    CorruptRecord,
    GroupNotFound,
    GroupTopicMismatch,
    IllegalGeneration,
    InvalidConfig,
    InvalidPartitions,
    InvalidRequest,
    InvalidTopicName,
    NotEnoughReplicas,
    NotLeader,
    OffsetOutOfRange,
    OffsetRegression,
    PartitionLimitReached,
    RecordTooLarge,
    ReplicationTimeout,
    TopicAlreadyExists,
    Unauthorized,
    UnknownMember,
    UnknownPartition,
    UnknownTopic,
    UnsupportedCompression,
)
from bayou.protocols.iggy.framing import IggyError
from bayou.server.http.auth import Access, error_body, guard, refusal
from bayou.server.iggy.users import (
    AuthFailure,
    CannotChangeRootPermissions,
    CannotDeleteRoot,
    InvalidPassword,
    InvalidUsername,
    TooManyGrants,
    UserAlreadyExists,
    UserNotFound,
    UserStoreError,
)

if TYPE_CHECKING:
    from bayou.server.app import BayouServer

log = logging.getLogger("bayou.server.http")
PREFIX = "/api/v1"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadInput(Exception):
    """The request itself is wrong (its JSON, a field, a query parameter): 400."""

    def __init__(self, message: str, code: str = "BAD_REQUEST") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# The one table: an error class (or a base class of it) -> HTTP status. Looked up along the MRO,
# so a subclass without its own row gets its base's status.
STATUS: dict[type[Exception], int] = {
    BadInput: 400,
    InvalidRequest: 400,
    InvalidTopicName: 400,
    InvalidPartitions: 400,
    InvalidConfig: 400,
    OffsetOutOfRange: 400,
    CorruptRecord: 400,
    UnsupportedCompression: 400,
    RecordTooLarge: 413,
    UnknownTopic: 404,
    UnknownPartition: 404,
    GroupNotFound: 404,
    UserNotFound: 404,
    TopicAlreadyExists: 409,
    PartitionLimitReached: 409,
    admin.GroupNotEmpty: 409,
    GroupTopicMismatch: 409,
    IllegalGeneration: 409,
    UnknownMember: 409,
    OffsetRegression: 409,
    UserAlreadyExists: 409,
    CannotDeleteRoot: 409,
    CannotChangeRootPermissions: 409,
    InvalidUsername: 400,
    InvalidPassword: 400,
    TooManyGrants: 400,
    AuthFailure: 400,
    NotLeader: 421,  # Misdirected Request: the partition is led by another broker
    NotEnoughReplicas: 503,
    ReplicationTimeout: 504,
    BrokerShuttingDown: 503,
    Unauthorized: 403,
}


def status_of(exc: Exception) -> int:
    for cls in type(exc).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    if isinstance(exc, BayouError):
        return 503 if exc.retriable else 500
    return 500


def _code(exc: Exception) -> str:
    if isinstance(exc, BadInput):
        return exc.code
    if isinstance(exc, BayouError):
        return exc.code
    name = type(exc).__name__  # the user store's errors: UserNotFound -> USER_NOT_FOUND
    return "".join("_" + c if c.isupper() and i else c for i, c in enumerate(name)).upper()


def error_response(status: int, code: str, message: str) -> web.Response:
    return web.Response(status=status, text=error_body(code, message), content_type="application/json")


def endpoint(server: BayouServer, access: Access) -> Callable[[Handler], Handler]:
    """Guard a handler with ``access`` and map what it raises to the JSON error shape."""
    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except web.HTTPException:
                raise
            except Unauthorized as exc:
                raise refusal(server, current_principal(), exc.message) from None
            except (BayouError, BadInput, UserStoreError) as exc:
                status = status_of(exc)
                message = getattr(exc, "message", None) or str(exc)
                return error_response(status, _code(exc), message)
            except IggyError as exc:  # cluster mode: the users changed under the shared lock
                return error_response(503, "TRY_AGAIN", str(exc))
            except Exception:
                log.exception("admin API request failed: %s %s", request.method, request.path)
                return error_response(500, "INTERNAL", "the request failed; the broker log has the details")
        return guard(access)(run)
    return wrap


def ok(doc: object, status: int = 200) -> web.Response:
    return web.json_response(doc, status=status, dumps=lambda d: json.dumps(d, separators=(",", ":")))


# -- input --------------------------------------------------------------------------------------


async def body_object(request: web.Request) -> dict[str, Any]:
    """The request's JSON body, which must be an object."""
    try:
        raw = await request.read()
        doc = json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"the body is not valid JSON: {exc}", "INVALID_JSON") from None
    if not isinstance(doc, dict):
        raise BadInput("the body must be a JSON object", "INVALID_JSON")
    return doc


def int_field(doc: dict[str, Any], name: str, *, required: bool = True, low: int | None = None,
              high: int | None = None) -> int | None:
    value = doc.get(name)
    if value is None:
        if required:
            raise BadInput(f"{name} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{name} must be an integer")
    _bounds(name, value, low, high)
    return value


def str_field(doc: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = doc.get(name)
    if value is None:
        if required:
            raise BadInput(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise BadInput(f"{name} must be a string")
    return value


def bool_field(doc: dict[str, Any], name: str, default: bool = False) -> bool:
    value = doc.get(name, default)
    if not isinstance(value, bool):
        raise BadInput(f"{name} must be true or false")
    return value


def query_int(request: web.Request, name: str, *, low: int | None = None,
              high: int | None = None) -> int | None:
    text = request.query.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"{name} must be an integer, not {text!r}") from None
    _bounds(name, value, low, high)
    return value


def path_int(request: web.Request, name: str) -> int:
    text = request.match_info[name]
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"{name} must be an integer, not {text!r}") from None
    _bounds(name, value, 0, (1 << 31) - 1)
    return value


def _bounds(name: str, value: int, low: int | None, high: int | None) -> None:
    if low is not None and value < low:
        raise BadInput(f"{name} must be at least {low}")
    if high is not None and value > high:
        raise BadInput(f"{name} must be at most {high}")


# -- the cluster --------------------------------------------------------------------------------


def cluster_doc(server: BayouServer) -> dict[str, Any]:
    endpoints = {name: listener.port for name, listener in server.listeners.items()}
    hosts = [listener.host for listener in server.listeners.values()]
    view = admin.cluster_view(server.broker, endpoints, str(hosts[0]) if hosts else "127.0.0.1")
    return {
        "mode": view.mode,
        "broker_id": view.broker_id,
        "controller": view.controller,
        "brokers": [{"id": b.id, "host": b.host, "endpoints": b.endpoints, "leaving": b.leaving,
                     "self": b.id == view.broker_id} for b in view.brokers],
        "topics": view.topics,
        "partitions": view.partitions,
        "under_replicated_partitions": view.under_replicated,
        "offline_partitions": view.offline,
    }


def routes(server: BayouServer) -> Iterable[web.RouteDef]:
    @endpoint(server, "read_servers")
    async def cluster(_request: web.Request) -> web.StreamResponse:
        return ok(cluster_doc(server))

    return [web.get(f"{PREFIX}/cluster", cluster)]


__all__ = ["PREFIX", "STATUS", "BadInput", "endpoint", "ok", "routes", "status_of"]
