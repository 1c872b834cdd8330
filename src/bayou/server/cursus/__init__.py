"""The Cursus front end (``service``), its handlers grouped by concern, and the event store of its
event sourcing commands (``eventstore``)."""

from bayou.server.cursus.context import Advertised, ConnState
from bayou.server.cursus.service import CursusService, cursus_handler

__all__ = ["Advertised", "ConnState", "CursusService", "cursus_handler"]
