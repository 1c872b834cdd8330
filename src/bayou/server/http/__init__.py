"""The broker's HTTP port: probes, Prometheus metrics, the admin REST API (``/api/v1``), the console.

``frontend.py`` runs aiohttp over the shared connection path (server/base.py); each other module
contributes its routes (``routes(server)``), listed in ``ROUTE_MODULES``: a new module (the admin
REST API, the console's static files) is one more entry there.
"""

from __future__ import annotations

from bayou.server.http import api, api_groups, api_topics, api_users, console, metrics, probes
from bayou.server.http.frontend import HttpFrontEnd, RouteModule

ROUTE_MODULES: tuple[RouteModule, ...] = (probes.routes, metrics.routes, api.routes, api_topics.routes,
                                          api_groups.routes, api_users.routes, console.routes)

__all__ = ["ROUTE_MODULES", "HttpFrontEnd"]
