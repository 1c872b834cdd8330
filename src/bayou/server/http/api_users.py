"""Iggy users in the admin API: list and show (read_users), create, delete and replace permissions
(manage_users). Never a password hash or a token: the store hands out ``User`` records, which hold
neither. Changes go through the Iggy front end (``IggyService.change_users``), so they are made as
Iggy's own commands make them (cluster-wide in cluster mode).

Permissions are bayou's model (broker/authz.py, Iggy's flags) as JSON::

    {"global_permissions": {"read_servers": true, ...},
     "streams": [{"stream_id": 1, "poll_messages": true, ..., "topics": [{"topic_id": 1, ...}]}]}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bayou.broker import authz
from bayou.server.http.api import PREFIX, BadInput, body_object, bool_field, endpoint, ok, str_field
from bayou.server.iggy.users import User, UserNotFound

if TYPE_CHECKING:
    from bayou.server.app import BayouServer
    from bayou.server.iggy import IggyService


def user_doc(user: User) -> dict[str, Any]:
    return {"id": user.id, "username": user.username, "active": user.active, "root": user.is_root,
            "created_at_us": user.created_at,
            "permissions": None if user.permissions is None else dataclasses.asdict(user.permissions)}


def _flags(cls: type[Any], raw: object, what: str, **fixed: Any) -> Any:
    if not isinstance(raw, dict):
        raise BadInput(f"{what} must be an object")
    names = {f.name for f in dataclasses.fields(cls)} - set(fixed)
    unknown = set(raw) - names
    if unknown:
        raise BadInput(f"{what}: unknown fields {', '.join(sorted(unknown))}")
    for k, v in raw.items():
        if not isinstance(v, bool):
            raise BadInput(f"{what}.{k} must be true or false")
    return cls(**raw, **fixed)


def _id(raw: dict[str, Any], name: str, what: str) -> int:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
        raise BadInput(f"{what}.{name} must be an id (a non-negative integer)")
    return value


def parse_permissions(raw: object) -> authz.Permissions | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"global_permissions", "streams"}:
        raise BadInput("permissions must be an object of global_permissions and streams")
    glob = _flags(authz.GlobalPermissions, raw.get("global_permissions", {}), "global_permissions")
    streams = raw.get("streams", [])
    if not isinstance(streams, list):
        raise BadInput("permissions.streams must be a list")
    parsed = []
    for i, s in enumerate(streams):
        what = f"streams[{i}]"
        if not isinstance(s, dict):
            raise BadInput(f"{what} must be an object")
        topics = s.get("topics", [])
        if not isinstance(topics, list):
            raise BadInput(f"{what}.topics must be a list")
        tps = []
        for j, t in enumerate(topics):
            tw = f"{what}.topics[{j}]"
            if not isinstance(t, dict):
                raise BadInput(f"{tw} must be an object")
            tps.append(_flags(authz.TopicPermissions, {k: v for k, v in t.items() if k != "topic_id"}, tw,
                              topic_id=_id(t, "topic_id", tw)))
        flags = {k: v for k, v in s.items() if k not in ("stream_id", "topics")}
        parsed.append(_flags(authz.StreamPermissions, flags, what, stream_id=_id(s, "stream_id", what),
                             topics=tuple(tps)))
    return authz.Permissions(glob, tuple(parsed))


def routes(server: BayouServer) -> Iterable[web.RouteDef]:
    def service() -> IggyService:
        if server.iggy is None:
            raise BadInput("the users live in the Iggy front end, which is off on this broker", "NO_USERS")
        return server.iggy

    def find(name: str) -> User:
        users = service().users
        user = users.get(int(name)) if name.isdigit() else users.get(name)
        if user is None:
            raise UserNotFound(f"no user {name}")
        return user

    @endpoint(server, "read_users")
    async def list_users(_request: web.Request) -> web.StreamResponse:
        return ok({"users": [user_doc(u) for u in service().users.users()]})

    @endpoint(server, "read_users")
    async def show(request: web.Request) -> web.StreamResponse:
        return ok(user_doc(find(request.match_info["user"])))

    @endpoint(server, "manage_users")
    async def create(request: web.Request) -> web.StreamResponse:
        doc = await body_object(request)
        username, password = str_field(doc, "username"), str_field(doc, "password")
        assert username is not None and password is not None
        active = bool_field(doc, "active", True)
        permissions = parse_permissions(doc.get("permissions"))
        iggy = service()
        user: User = await iggy.change_users(lambda: iggy.users.create_user(
            username, password, active=active, permissions=permissions))
        return ok(user_doc(user), status=201)

    @endpoint(server, "manage_users")
    async def delete(request: web.Request) -> web.StreamResponse:
        user = find(request.match_info["user"])
        iggy = service()
        await iggy.change_users(lambda: iggy.users.delete_user(user.id))
        return ok({"deleted": user.username})

    @endpoint(server, "manage_users")
    async def set_permissions(request: web.Request) -> web.StreamResponse:
        user = find(request.match_info["user"])
        doc = await body_object(request)
        if "permissions" not in doc:
            raise BadInput("permissions is required (null removes every permission)")
        permissions = parse_permissions(doc["permissions"])
        iggy = service()
        changed: User = await iggy.change_users(lambda: iggy.users.update_permissions(user.id, permissions))
        return ok(user_doc(changed))

    base = f"{PREFIX}/users"
    return [web.get(base, list_users), web.post(base, create), web.get(base + "/{user}", show),
            web.delete(base + "/{user}", delete), web.put(base + "/{user}/permissions", set_permissions)]


__all__ = ["parse_permissions", "routes", "user_doc"]
