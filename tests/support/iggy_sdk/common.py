"""Shared by the driver scripts that run inside an SDK virtual environment (.venv-iggy08 / .venv-iggy09).

These scripts never import bayou or pytest: they run under the SDK venv's python, drive the
published ``apache_iggy`` package against a broker, and print ONE JSON line on stdout,
``{"sdk": <installed apache-iggy version>, "result": {...}}``. The pytest side
(``tests/support/iggy_sdk.py``) runs them and asserts on ``result``.

Rules every driver keeps (the SDK has no request timeout and, by default, retries a lost
connection forever): finite reconnection retries, and every await bounded by ``asyncio.wait_for``
(``bounded``). An unexpected exception prints its traceback on stderr and exits 1.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

TIMEOUT = 10.0  # seconds for one SDK call
RETRIES = 3  # reconnection attempts
RETRY_INTERVAL_MS = 200

Scenario = Callable[..., Awaitable[Any]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    """Register ``fn`` as the scenario named after it (``_`` -> ``-``)."""
    SCENARIOS[fn.__name__.replace("_", "-")] = fn
    return fn


async def bounded(aw: Awaitable[Any], timeout: float = TIMEOUT) -> Any:
    return await asyncio.wait_for(aw, timeout)


async def error_of(aw: Awaitable[Any], timeout: float = TIMEOUT) -> str | None:
    """The text of the error the call raises (RuntimeError from the SDK), None if it succeeds.
    A timeout is reported as ``"timeout"``."""
    try:
        await asyncio.wait_for(aw, timeout)
    except TimeoutError:
        return "timeout"
    except RuntimeError as exc:
        return str(exc) or type(exc).__name__
    return None


def enc(value: Any) -> Any:
    """A JSON-safe form: bytes become ``{"$bytes": hex}``; lists, tuples and dicts recurse."""
    if isinstance(value, bytes | bytearray):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, list | tuple):
        return [enc(v) for v in value]
    if isinstance(value, dict):
        return {str(k): enc(v) for k, v in value.items()}
    return value


def message(m: Any) -> dict[str, Any]:
    """A ReceiveMessage as plain data. Headers (0.9) are ``[key kind, key, value kind, value]``
    lists, the kinds being the SDK's HeaderKey / HeaderValue class names."""
    out: dict[str, Any] = {
        "partition": m.partition_id(), "offset": m.offset(), "id": m.id(), "payload": enc(m.payload()),
        "timestamp": m.timestamp(), "checksum": m.checksum(), "length": m.length(),
    }
    if hasattr(m, "user_headers"):
        out["origin_timestamp"] = m.origin_timestamp()
        h = m.user_headers()
        out["headers"] = None if h is None else [
            [type(k).__name__, enc(k.value), type(v).__name__, enc(v.value)] for k, v in h.items()]
    return out


def messages(ms: Any) -> list[dict[str, Any]]:
    return [message(m) for m in ms]


async def drain_consumers(consumers: list[Any], expected: int, *, deadline_s: float = 20.0,
                          grace_s: float = 0.5) -> list[list[dict[str, Any]]]:
    """Read high-level consumers (IggyConsumer.iter_messages) concurrently until together they
    returned ``expected`` messages (or ``deadline_s`` passed), then keep listening ``grace_s``
    longer so a message delivered twice would still show up. One ``__anext__`` per consumer is in
    flight at a time and none is cancelled before the end, so no message is lost to a timeout."""
    loop = asyncio.get_running_loop()
    iters = [c.iter_messages() for c in consumers]
    got: list[list[dict[str, Any]]] = [[] for _ in consumers]
    pending: dict[asyncio.Future[Any], int] = {
        asyncio.ensure_future(it.__anext__()): i for i, it in enumerate(iters)}
    end = loop.time() + deadline_s
    try:
        while pending:
            total = sum(len(g) for g in got)
            if total >= expected:
                end = min(end, loop.time() + grace_s)
            left = end - loop.time()
            if left <= 0:
                break
            done, _ = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                got[i].append(message(fut.result()))
                pending[asyncio.ensure_future(iters[i].__anext__())] = i
    finally:
        for fut in pending:
            fut.cancel()
    return got


def main() -> None:
    """``python <driver>.py PORT SCENARIO [ARGS...]``: run the scenario, print the JSON line."""
    if len(sys.argv) < 3 or sys.argv[2] not in SCENARIOS:
        print(f"usage: {sys.argv[0]} PORT {{{'|'.join(SCENARIOS)}}} [ARGS...]", file=sys.stderr)
        sys.exit(2)
    port, name, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    code = 0
    try:
        result = asyncio.run(SCENARIOS[name](port, *args))
        line = json.dumps({"sdk": importlib.metadata.version("apache-iggy"), "result": enc(result)})
        sys.stdout.write(line + "\n")
    except BaseException:  # everything, 0.8's pyo3 PanicException included
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The SDK's Tokio runtime can abort the interpreter at shutdown (SIGABRT, exit 134) while a
    # consumer's background tasks are alive; the result is already printed, so leave at once.
    os._exit(code)
