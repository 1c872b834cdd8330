"""The admin REST API under the broker's authorizer (issue 16 item 4): a ``bayou serve`` with
``[security] anonymous = "none"``. Without credentials every API route is 401 with a challenge;
a reader (read_servers, read_topics, poll) sees the cluster, topics, messages and groups but
changes nothing (403); users need read_users / manage_users; root does everything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.admin_api import basic, call, error_code
from support.brokers import BrokerProcess

pytestmark = pytest.mark.timeout(120)

ROOT = basic("iggy", "iggy")
READER = basic("reader", "pw-reader-1")
SENDER = basic("sender", "pw-sender-1")
NOBODY = basic("nobody", "pw-nobody-1")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp: Path = tmp_path_factory.mktemp("admin-auth")
    config = tmp / "bayou.toml"
    config.write_text('[security]\nanonymous = "none"\n')
    b = BrokerProcess(tmp / "data", "--config", str(config)).start()
    try:
        port = b.http_port
        reader = {"global_permissions": {"read_servers": True, "read_topics": True, "poll_messages": True}}
        sender = {"global_permissions": {"send_messages": True}}
        for name, password, perms in (("reader", "pw-reader-1", reader), ("sender", "pw-sender-1", sender),
                                      ("nobody", "pw-nobody-1", {"global_permissions": {}})):
            status, doc = call(port, "POST", "/users", {"username": name, "password": password,
                                                        "permissions": perms}, auth=ROOT)
            assert status == 201, doc
        assert call(port, "POST", "/topics", {"name": "secret", "partitions": 1}, auth=ROOT)[0] == 201
        assert call(port, "POST", "/topics/secret/partitions/0/messages", {"value": "v"}, auth=ROOT)[0] == 201
        status, doc = call(port, "POST", "/groups/g/reset-offsets", {"topic": "secret", "to": "earliest"},
                           auth=ROOT)
        assert status == 200, doc
        yield b
    finally:
        b.stop()


READS = ["/cluster", "/topics", "/topics/secret", "/topics/secret/partitions/0/messages", "/groups",
         "/groups/g", "/users", "/users/reader"]
CHANGES = [("POST", "/topics", {"name": "t2", "partitions": 1}), ("DELETE", "/topics/secret", None),
           ("PATCH", "/topics/secret/config", {"retention.ms": 1}),
           ("POST", "/topics/secret/partitions", {"count": 1}),
           ("POST", "/topics/secret/partitions/0/messages", {"value": "x"}),
           ("POST", "/groups/g/reset-offsets", {"topic": "secret", "to": "latest"}),
           ("DELETE", "/groups/g", None),
           ("POST", "/users", {"username": "eve", "password": "pw-eve-1"}), ("DELETE", "/users/reader", None),
           ("PUT", "/users/reader/permissions", {"permissions": None})]


@pytest.mark.parametrize("path", READS)
def test_anonymous_gets_401_with_a_challenge(broker: BrokerProcess, path: str) -> None:
    status, doc = call(broker.http_port, "GET", path)
    assert status == 401 and error_code(doc) == "UNAUTHORIZED", (path, doc)


@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
def test_anonymous_changes_nothing(broker: BrokerProcess, method: str, path: str, body: object) -> None:
    assert call(broker.http_port, method, path, body)[0] == 401


def test_wrong_password_is_401(broker: BrokerProcess) -> None:
    status, doc = call(broker.http_port, "GET", "/topics", auth=basic("reader", "wrong-pw"))
    assert status == 401 and error_code(doc) == "UNAUTHORIZED"


def test_a_reader_reads_everything_but_users(broker: BrokerProcess) -> None:
    port = broker.http_port
    for path in READS[:6]:
        status, doc = call(port, "GET", path, auth=READER)
        assert status == 200, (path, doc)
    assert [t["name"] for t in call(port, "GET", "/topics", auth=READER)[1]["topics"]] == ["secret"]
    page = call(port, "GET", "/topics/secret/partitions/0/messages", auth=READER)[1]
    assert [r["value"] for r in page["records"]] == ["v"]
    for path in READS[6:]:
        status, doc = call(port, "GET", path, auth=READER)
        assert status == 403 and error_code(doc) == "FORBIDDEN", (path, doc)


@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
def test_a_reader_changes_nothing(broker: BrokerProcess, method: str, path: str, body: object) -> None:
    status, doc = call(broker.http_port, method, path, body, auth=READER)
    assert status == 403 and error_code(doc) == "FORBIDDEN", (method, path, doc)


def test_a_sender_may_produce_but_not_browse(broker: BrokerProcess) -> None:
    port = broker.http_port
    status, doc = call(port, "POST", "/topics/secret/partitions/0/messages", {"value": "s"}, auth=SENDER)
    assert status == 201, doc
    status, doc = call(port, "GET", "/topics/secret/partitions/0/messages", auth=SENDER)
    assert status == 403 and error_code(doc) == "FORBIDDEN"
    assert call(port, "GET", "/cluster", auth=SENDER)[0] == 403  # read_servers


@pytest.mark.parametrize(("method", "suffix", "body"), [
    ("GET", "", None), ("DELETE", "", None), ("PATCH", "/config", {"retention.ms": 1}),
    ("POST", "/partitions", {"count": 1})])
def test_a_topic_the_caller_may_not_describe_is_403_whether_or_not_it_exists(
        broker: BrokerProcess, method: str, suffix: str, body: object) -> None:
    """A user with no rights may describe no topic (listings hide them all): an existing topic
    and a missing one get the same 403, so the API does not tell which names exist."""
    port = broker.http_port
    there = call(port, method, f"/topics/secret{suffix}", body, auth=NOBODY)
    missing = call(port, method, f"/topics/no-such-topic{suffix}", body, auth=NOBODY)
    assert there[0] == missing[0] == 403, (there, missing)
    assert error_code(there[1]) == error_code(missing[1]) == "FORBIDDEN"


def test_root_may_change(broker: BrokerProcess) -> None:
    port = broker.http_port
    status, doc = call(port, "PATCH", "/topics/secret/config", {"retention.ms": 86400000}, auth=ROOT)
    assert status == 200 and doc["config"]["retention.ms"] == "86400000"
    status, doc = call(port, "GET", "/users", auth=ROOT)
    assert status == 200 and {u["username"] for u in doc["users"]} >= {"iggy", "reader", "sender"}
