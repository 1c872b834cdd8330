"""The web console: static files shipped in the package (``console/``), served at ``/``.

A dependency-free front end (vanilla JavaScript, no CDN, no build step: it works offline) that
reads and changes the broker only through the admin API (``/api/v1``) and ``/metrics``, so the
browser is held to exactly the rights of its credentials. The files hold no data and are open; a
broker with ``[security] anonymous = "none"`` answers the console's API calls 401 with a Basic
challenge, and the browser asks for an Iggy user.

The files are read once, when the routes are made; only the names listed in ``FILES`` are served.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from typing import TYPE_CHECKING

from aiohttp import web

from bayou.server.http.auth import guard

if TYPE_CHECKING:
    from bayou.server.app import BayouServer

FILES = {"index.html": "text/html", "console.js": "text/javascript", "console.css": "text/css"}
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'"
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff", "Content-Security-Policy": CSP}


def _load() -> dict[str, bytes]:
    folder = resources.files("bayou.server.http").joinpath("console")
    return {name: folder.joinpath(name).read_bytes() for name in FILES}


def routes(_server: BayouServer) -> Iterable[web.RouteDef]:
    files = _load()

    def response(name: str) -> web.Response:
        return web.Response(body=files[name], content_type=FILES[name], charset="utf-8", headers=HEADERS)

    @guard("open")
    async def index(_request: web.Request) -> web.Response:
        return response("index.html")

    @guard("open")
    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in files or name == "index.html":
            raise web.HTTPNotFound()
        return response(name)

    return [web.get("/", index), web.get("/console/{name}", asset)]


__all__ = ["FILES", "routes"]
