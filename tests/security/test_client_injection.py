"""Issue 14.1: bayou's V1 client (the CLI's data commands, ``bayou.client.rtes``) refuses every
text that cannot travel as one V1 field, before anything is sent, naming the character: a newline
in a key used to end the PRODUCE and smuggle in further requests (``ADMIN_DELETE_TOPIC``)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from bayou.client.rtes import RtesClient, UnsafeField
from support.brokers import BrokerProcess

HOSTILE_KEYS = [
    ("k\nV1|7|ADMIN_DELETE_TOPIC|dup\nV1|8|PING|", "a newline"),
    ("k\rV1|7|PING|", "a carriage return"),
    ("k\tx", "a tab"),
    ("k x", "a space"),
    ("k|x", "'|'"),
    ("k:x", "':'"),
    ("k\u2028x", "U+2028"),  # Go's white space: the server splits arguments on it too
    ("k\x85x", "U+0085"),
]
HOSTILE_VALUES = [("v\nV1|9|ADMIN_DELETE_TOPIC|dup", "a newline"), ("a,b", "','"), ("a b", "a space"),
                  ("a|b", "'|'"), ("a\u3000b", "U+3000")]


class Recorder:
    """A TCP server that records every byte it receives (and answers nothing)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.accepted = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                while chunk := conn.recv(65536):
                    self.received += chunk


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    r = Recorder()
    yield r
    r.sock.close()


@pytest.mark.parametrize(("key", "named"), HOSTILE_KEYS)
def test_hostile_keys_are_refused_before_anything_is_sent(recorder: Recorder, key: str, named: str) -> None:
    with RtesClient("127.0.0.1", recorder.port) as c, \
            pytest.raises(UnsafeField, match=re.escape(f"key must not contain {named}")):
        c.produce("t", key, "v")
    assert recorder.received == b"" and recorder.accepted == 0


@pytest.mark.parametrize(("value", "named"), HOSTILE_VALUES)
def test_hostile_values_are_refused(recorder: Recorder, value: str, named: str) -> None:
    with RtesClient("127.0.0.1", recorder.port) as c, \
            pytest.raises(UnsafeField, match=re.escape(f"value must not contain {named}")):
        c.produce("t", "k", value)
    assert recorder.received == b""


@pytest.mark.parametrize("topic", ["a\nV1|1|PING|", "a b", "a|b", ""])
def test_hostile_topics_and_arguments_are_refused(recorder: Recorder, topic: str) -> None:
    with RtesClient("127.0.0.1", recorder.port) as c:
        for call in (lambda: c.produce(topic, "k", "v"), lambda: c.consume(topic, 0, 0),
                     lambda: c.delete_topic(topic), lambda: c.create_topic(topic, 1)):
            with pytest.raises(UnsafeField):
                call()
        with pytest.raises(UnsafeField, match="argument 4 must not contain a space"):
            c.create_topic("ok", 1, config={"retention.ms": "1 2"})
    assert recorder.received == b""


def test_empty_key_and_value_are_fine(recorder: Recorder) -> None:
    RtesClient.check_record("t", "", "")  # "t :" is a valid PRODUCE: empty key, empty value


def bayou(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bayou", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


def test_the_cli_injection_of_the_issue_deletes_nothing(tmp_path_factory: pytest.TempPathFactory) -> None:
    broker = BrokerProcess(tmp_path_factory.mktemp("inject") / "data", fsync="never").start()
    try:
        b = f"127.0.0.1:{broker.port}"
        assert bayou("topic", "create", "dup", "-b", b).returncode == 0
        r = bayou("produce", "nl", "--key", "k\nV1|7|ADMIN_DELETE_TOPIC|dup\nV1|8|PING|", "v", "-b", b)
        assert r.returncode != 0
        assert "key must not contain a newline (LF)" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        # several values: one bad value means none is sent
        r = bayou("produce", "nl", "good", "bad\nV1|9|ADMIN_DELETE_TOPIC|dup", "-b", b)
        assert r.returncode != 0 and "value must not contain a newline" in r.stderr, r.stderr
        r = bayou("produce", "nl", "-b", b, stdin="fine\nnot fine\n")  # stdin lines too
        assert r.returncode != 0 and "value must not contain a space" in r.stderr, r.stderr
        listing = bayou("topic", "list", "-b", b)
        assert listing.returncode == 0 and "dup" in listing.stdout.split(), listing.stdout
        assert "nl" not in listing.stdout.split()  # nothing was produced (no auto-created topic)
    finally:
        broker.stop()
