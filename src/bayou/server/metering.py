"""Requests, errors and latency per front end, counted where each front end dispatches a request.

Each protocol's service owns one ``RequestMeter`` and calls ``record`` once per request from its
one dispatch point (V1 ``handle_line``, Cursus ``handle``, Iggy ``handle_legacy``/``handle_vsr``,
TANK ``handle``), naming the command from its own table of codes: an unknown command counts as
``unknown``, so what a client sends can never mint new label values. The server collects the
meters by protocol (server/app.py) for /metrics, which reads them at scrape time.
"""

from __future__ import annotations

import time

from bayou.stats import LATENCY_BUCKETS, Histogram

UNKNOWN = "unknown"


class RequestMeter:
    __slots__ = ("commands", "latency", "protocol")

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.commands: dict[str, list[int]] = {}  # command -> [requests, errors]
        self.latency = Histogram(LATENCY_BUCKETS)

    def record(self, command: str, started: float, failed: bool, *, timed: bool = True) -> None:
        """One request of ``command`` begun at ``started`` (``time.perf_counter()``) is answered.
        ``timed=False`` leaves it out of the latency histogram (a stream that lasts as long as
        its connection is not a request's latency)."""
        if timed:
            self.latency.observe(time.perf_counter() - started)
        counts = self.commands.get(command)
        if counts is None:
            counts = self.commands[command] = [0, 0]
        counts[0] += 1
        if failed:
            counts[1] += 1


__all__ = ["UNKNOWN", "RequestMeter"]
