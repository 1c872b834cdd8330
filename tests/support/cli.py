"""The ``bayou`` command run as a real subprocess, and the broker and SDK client its tests share."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bayou.client import Client
from support.brokers import BrokerProcess

BAYOU = [sys.executable, "-m", "bayou"]


def bayou(*args: str, env: dict[str, str] | None = None,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m bayou ARGS`` with no stdin; ``env`` adds to this process's environment."""
    return subprocess.run([*BAYOU, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=None if env is None else dict(os.environ, **env))


def module_broker(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[BrokerProcess]:
    """A broker subprocess for a module's tests (``yield from`` it in a fixture)."""
    b = BrokerProcess(tmp_path_factory.mktemp(name) / "data", fsync="never").start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def sdk_client(b: BrokerProcess) -> Iterator[Client]:
    with Client(f"127.0.0.1:{b.iggy_port}") as c:
        yield c
