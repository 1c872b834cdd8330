"""One ``bayou.client.Client`` per process and broker/user, reused by every task.

A login costs the broker an argon2 check, and a Spark Python worker runs many tasks in turn, so
tasks share a client instead of logging in each time. The cache is module-level: it must never be
reached through a reader or writer instance, which Spark pickles and ships to executors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from bayou.client import Client
from bayou.client.errors import BrokerConnectionError
from bayou.spark.options import ConnectionSpec

T = TypeVar("T")

_CLIENTS: dict[ConnectionSpec, Client] = {}
_LOCK = threading.Lock()


def client_for(spec: ConnectionSpec) -> Client:
    with _LOCK:
        client = _CLIENTS.get(spec)
        if client is None:
            client = Client(spec.bootstrap, username=spec.username, password=spec.password,
                            timeout=spec.timeout, tls=spec.tls)
            _CLIENTS[spec] = client
        return client


def call(spec: ConnectionSpec, fn: Callable[[Client], T]) -> T:
    """``fn(client)``, tried once more on a fresh connection if the connection broke (a broker
    restart, an idle connection the network dropped). A retried send is safe on a deduplicating
    topic: the broker drops the messages it already stored."""
    try:
        return fn(client_for(spec))
    except BrokerConnectionError:
        drop(spec)
        return fn(client_for(spec))


def drop(spec: ConnectionSpec) -> None:
    with _LOCK:
        client = _CLIENTS.pop(spec, None)
    if client is not None:
        client.close()


def close_all() -> None:
    with _LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
    for client in clients:
        client.close()
