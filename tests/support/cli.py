"""The ``bayou`` command run as a real subprocess, and the broker and SDK client its tests share."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
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


def _terminal_env() -> dict[str, str]:
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="140")
    env.pop("NO_COLOR", None)
    return env


def on_terminal(args: list[str], stream: str) -> tuple[int, str, str]:
    """Run bayou with ``stream`` (stdout or stderr) on a pseudo-terminal and the other on a pipe:
    (exit code, what the terminal showed, what the pipe got)."""
    with TerminalProcess(args, stream) as term:
        out, err = term.proc.communicate(timeout=120)
    piped = (out if stream == "stderr" else err) or b""
    return term.proc.returncode, term.shown(), piped.decode(errors="replace")


class TerminalProcess:
    """A long-running ``bayou ARGS`` (``bayou serve``) with ``stream`` on a pseudo-terminal and the
    other on a pipe; what the terminal shows is read as it comes (``wait_for``)."""

    def __init__(self, args: list[str], stream: str) -> None:
        master, slave = pty.openpty()
        self._master = master
        self.proc = subprocess.Popen([*BAYOU, *args], stdin=subprocess.DEVNULL, env=_terminal_env(),
                                     stdout=slave if stream == "stdout" else subprocess.PIPE,
                                     stderr=slave if stream == "stderr" else subprocess.PIPE)
        os.close(slave)
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: the child closed its end
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    def shown(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def wait_for(self, text: str, timeout: float) -> str:
        """What the terminal has shown once it shows ``text`` (AssertionError at the deadline or
        if the command exits first)."""
        deadline = time.monotonic() + timeout
        while text not in (shown := self.shown()):
            assert time.monotonic() < deadline, f"{text!r} not shown in {timeout} s: {shown[-3000:]}"
            assert self.proc.poll() is None, f"exited with {self.proc.returncode}: {shown[-3000:]}"
            time.sleep(0.05)
        return shown

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.communicate(timeout=timeout)
        return self.proc.returncode

    def __enter__(self) -> TerminalProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:  # a command that never stopped must not outlive the test
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(20)
        os.close(self._master)
