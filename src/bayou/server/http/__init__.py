"""The broker's HTTP port: probes and Prometheus metrics now, the admin API and console later.

``frontend.py`` runs aiohttp over the shared connection path (server/base.py); each other module
contributes its routes (``routes(server)``), listed in ``ROUTE_MODULES``: a new module (the admin
REST API, the console's static files) is one more entry there.
"""

from __future__ import annotations

from bayou.server.http import metrics, probes
from bayou.server.http.frontend import HttpFrontEnd, RouteModule

ROUTE_MODULES: tuple[RouteModule, ...] = (probes.routes, metrics.routes)

__all__ = ["ROUTE_MODULES", "HttpFrontEnd"]
