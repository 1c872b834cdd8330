"""Password guessing is slowed and seen (issue 14.5): a budget of failed logins per connection
and per client address, with an exponential delay before each further attempt is judged, then
the connection is closed. Every protocol with a login (Iggy today) asks the same guard."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field


def client_ip(peer: str) -> str:
    """The address part of a ``host:port`` peer name (IPv6 hosts keep their colons)."""
    host, sep, _port = peer.rpartition(":")
    return host.strip("[]") if sep else peer


@dataclass(slots=True)
class LoginGuard:
    per_connection: int = 5  # failures on one connection, then it is closed after the answer
    window_s: float = 300.0  # an address's failures are forgotten this long after its last one
    base_delay_s: float = 0.25  # the wait before judging the attempt after the first failure
    max_delay_s: float = 10.0
    max_addresses: int = 10_000  # the oldest address is forgotten past this many
    _failures: OrderedDict[str, tuple[int, float]] = field(default_factory=OrderedDict)

    def _recent(self, ip: str, now: float) -> int:
        entry = self._failures.get(ip)
        if entry is None:
            return 0
        if now - entry[1] > self.window_s:
            del self._failures[ip]
            return 0
        return entry[0]

    def delay(self, ip: str, connection_failures: int) -> float:
        """Seconds to wait before judging the next attempt: doubling with the larger of the
        connection's and the address's recent failures."""
        n = max(connection_failures, self._recent(ip, time.monotonic()))
        return 0.0 if n == 0 else min(self.max_delay_s, self.base_delay_s * 2 ** min(n - 1, 30))

    def failed(self, ip: str) -> int:
        """Count a failure from ``ip``; its recent failures."""
        now = time.monotonic()
        n = self._recent(ip, now) + 1
        self._failures[ip] = (n, now)
        self._failures.move_to_end(ip)
        while len(self._failures) > self.max_addresses:
            self._failures.popitem(last=False)
        return n

    def succeeded(self, ip: str) -> None:
        self._failures.pop(ip, None)

    def exhausted(self, connection_failures: int) -> bool:
        return connection_failures >= self.per_connection
