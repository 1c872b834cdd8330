"""The admin REST API (``/api/v1``) from a test: one request, its status and JSON body."""

from __future__ import annotations

import base64
import http.client
import json
from typing import Any


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def call(port: int, method: str, path: str, body: object = None, *, raw: bytes | None = None,
         auth: str | None = None, timeout: float = 20.0) -> tuple[int, Any]:
    """``method path`` with ``body`` as JSON (or ``raw`` bytes); (status, the parsed JSON body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"}
        if auth is not None:
            headers["Authorization"] = auth
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, "/api/v1" + path, body=data, headers=headers)
        resp = conn.getresponse()
        text = resp.read()
        assert resp.getheader("Content-Type", "").startswith("application/json"), (resp.status, text)
        return resp.status, json.loads(text)
    finally:
        conn.close()


def error_code(doc: Any) -> str:
    """The ``code`` of the API's error shape (failing the test if the shape is not it)."""
    assert set(doc) == {"error"} and set(doc["error"]) == {"code", "message"}, doc
    assert isinstance(doc["error"]["message"], str) and doc["error"]["message"], doc
    return str(doc["error"]["code"])
