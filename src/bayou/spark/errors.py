"""The two errors the connector raises itself (everything else comes from ``bayou.client``)."""

from __future__ import annotations


class BayouOptionError(ValueError):
    """An option is missing, malformed or not allowed in this kind of query. The message starts
    with the option's name, so the error Spark wraps it in still says which option to fix."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"bayou option '{option}': {problem}")
        self.option = option


class BayouDataLossError(RuntimeError):
    """Offsets a query needs are gone (deleted by retention, a partition or topic deleted, a log
    that shrank). Raised only with ``failOnDataLoss=true``, which the message says how to change."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"{detail}. Some data may have been lost: it was deleted by retention, or the topic or "
            "partition was deleted or recreated. If you want the query to skip lost data and carry "
            "on, set the source option failOnDataLoss to false.")
