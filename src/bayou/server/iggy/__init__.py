"""The Apache Iggy front end (``service``), its handlers grouped by concern, and its own state:
the stream catalog (``catalog``) and the users (``users``)."""

from bayou.server.iggy.context import Session
from bayou.server.iggy.service import IggyService, iggy_handler

__all__ = ["IggyService", "Session", "iggy_handler"]
