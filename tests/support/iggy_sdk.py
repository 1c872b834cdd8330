"""Running the published Iggy Python SDKs (apache-iggy 0.8.0 and 0.9.0) from the tests.

Both versions install under the same name (``apache-iggy`` / ``import apache_iggy``), so neither
can live in bayou's own ``.venv`` and they cannot share one: each has its own virtual environment,
``.venv-iggy08`` and ``.venv-iggy09`` at the repository root, which ``make test`` creates (CI runs
``make test`` on a fresh machine). A missing environment is a test FAILURE, never a skip.

The tests run driver scripts from ``tests/support/iggy_sdk/`` (``sdk08.py``, ``sdk09.py``; the
directory has no ``__init__``, so ``support.iggy_sdk`` is this module) with the venv's python as a
subprocess: ``python sdk09.py PORT SCENARIO ARGS...``. A driver prints one JSON line,
``{"sdk": "<installed version>", "result": {...}}``; ``run`` checks the version and returns
``result``, and the test asserts on it. Bytes travel as ``{"$bytes": "<hex>"}`` (``decode``), polled
messages as dicts that ``messages`` turns into ``Msg``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.brokers import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = Path(__file__).resolve().parent / "iggy_sdk"
VERSIONS = {"0.8": "0.8.0", "0.9": "0.9.0"}  # the pins in the Makefile
VENVS = {"0.8": ROOT / ".venv-iggy08", "0.9": ROOT / ".venv-iggy09"}
DRIVER_TIMEOUT = 60.0


def sdk_python(sdk: str) -> Path:
    """The python of the SDK's venv; the test fails (not skips) when it is missing."""
    python = VENVS[sdk] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run `make test` (it creates {VENVS[sdk].name} with "
                    f"apache-iggy=={VERSIONS[sdk]} from PyPI)", pytrace=False)
    return python


def run(sdk: str, port: int, scenario: str, *args: object, timeout: float = DRIVER_TIMEOUT) -> dict[str, Any]:
    """Run ``sdk0X.py PORT SCENARIO ARGS`` under the SDK's python (killed after ``timeout``) and
    return the ``result`` it printed."""
    python = sdk_python(sdk)
    script = DRIVERS / f"sdk{sdk.replace('.', '')}.py"
    cmd = [str(python), str(script), str(port), scenario, *map(str, args)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONUNBUFFERED="1", RUST_BACKTRACE="0")
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{scenario} ({sdk}) still running after {timeout:.0f} s\nstdout: {_tail(exc.stdout)}\n"
                    f"stderr: {_tail(exc.stderr)}", pytrace=False)
    out, err = _tail(proc.stdout), _tail(proc.stderr)
    lines = [ln for ln in proc.stdout.decode(errors="replace").splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        pytest.fail(f"{scenario} ({sdk}) exited with {proc.returncode}\nstdout: {out}\nstderr: {err}",
                    pytrace=False)
    report = json.loads(lines[-1])
    assert report["sdk"] == VERSIONS[sdk], \
        f"{VENVS[sdk].name} has apache-iggy {report['sdk']}, not {VERSIONS[sdk]}: run `make test`"
    result: dict[str, Any] = report["result"]
    return result


def start_broker(data_dir: Path, *, like: BrokerProcess | None = None) -> BrokerProcess:
    """A broker subprocess with V1, Cursus and Iggy listeners on loopback, returned once all three
    accept connections. ``like``: reuse that (stopped) broker's ports, e.g. to restart it on the
    same data directory."""
    ports = {} if like is None else {"port": like.port, "cursus_port": like.cursus_port,
                                     "iggy_port": like.iggy_port}
    b = BrokerProcess(data_dir, "--advertised-host", "127.0.0.1", **ports).start()
    for port in (b.cursus_port, b.iggy_port):
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    b.stop()
                    raise TimeoutError(f"nothing listens on {port}: {b.log()}") from None
                time.sleep(0.05)
    return b


def _tail(data: bytes | str | None, limit: int = 4000) -> str:
    if data is None:
        return ""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return text[-limit:]


def decode(value: Any) -> Any:
    """Undo the drivers' JSON encoding: ``{"$bytes": hex}`` -> bytes, recursively."""
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return bytes.fromhex(value["$bytes"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


Header = tuple[str, Any]  # (SDK HeaderKey/HeaderValue class name, value)


@dataclass(frozen=True, slots=True)
class Msg:
    """One polled message as the SDK returned it."""

    partition: int
    offset: int
    id: int
    payload: bytes
    timestamp: int  # server append time, microseconds
    origin_timestamp: int | None  # 0.9 only
    headers: dict[Header, Header] | None  # 0.9 only; None = no headers

    @property
    def text(self) -> str:
        return self.payload.decode()


def message(raw: dict[str, Any]) -> Msg:
    payload = decode(raw["payload"])
    headers = raw.get("headers")
    return Msg(
        partition=raw["partition"], offset=raw["offset"], id=raw["id"],
        payload=payload.encode() if isinstance(payload, str) else payload,
        timestamp=raw["timestamp"], origin_timestamp=raw.get("origin_timestamp"),
        headers=None if headers is None else {
            (kk, _hashable(decode(k))): (vk, decode(v)) for kk, k, vk, v in headers})


def messages(raw: list[dict[str, Any]]) -> list[Msg]:
    return [message(r) for r in raw]


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def offsets(msgs: list[Msg]) -> list[int]:
    return [m.offset for m in msgs]


def texts(msgs: list[Msg]) -> list[str]:
    return [m.text for m in msgs]


__all__ = ["DRIVERS", "VENVS", "VERSIONS", "Msg", "decode", "message", "messages", "offsets", "run",
           "sdk_python", "start_broker", "texts"]
