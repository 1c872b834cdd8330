"""A broker's HTTP port from a test: plain GETs and a parsed /metrics scrape."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(port: int, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def get_json(port: int, path: str) -> tuple[int, dict[str, object]]:
    status, body = get(port, path)
    doc: dict[str, object] = json.loads(body)
    return status, doc


def scrape_text(port: int) -> str:
    status, body = get(port, "/metrics")
    assert status == 200, body
    return body.decode()


def scrape(port: int) -> Samples:
    """Every sample of /metrics: (name, labels) -> value."""
    out: Samples = {}
    for family in text_string_to_metric_families(scrape_text(port)):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str | int) -> float:
    """The sample ``name`` with exactly these labels (KeyError naming what exists otherwise)."""
    key = (name, frozenset((k, str(v)) for k, v in labels.items()))
    if key not in samples:
        have = sorted(str(dict(sorted(lbl))) for n, lbl in samples if n == name)
        raise KeyError(f"no {name}{labels}; present: {have}")
    return samples[key]


def total(samples: Samples, name: str, **labels: str | int) -> float:
    """The sum of ``name`` over the samples whose labels include these."""
    want = {(k, str(v)) for k, v in labels.items()}
    return sum(v for (n, lbl), v in samples.items() if n == name and want <= lbl)


def wait_for(cond: Callable[[], object], timeout: float, what: str) -> object:
    """Poll ``cond()`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while True:
        result = cond()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
