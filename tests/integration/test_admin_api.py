"""The admin REST API (issue 16 item 4) against a real ``bayou serve`` subprocess: every endpoint
with data written through the wire protocols and through the API itself, and bad input answered
4xx with the JSON error shape, never a traceback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bayou.client import Client
from support.admin_api import call, error_code
from support.brokers import BrokerProcess
from support.cluster import v1
from support.http import scrape, value

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("admin-api") / "data").start()
    try:
        yield b
    finally:
        b.stop()


def _create(port: int, name: str, partitions: int = 1, **extra: object) -> dict[str, object]:
    status, doc = call(port, "POST", "/topics", {"name": name, "partitions": partitions, **extra})
    assert status == 201, doc
    return doc  # type: ignore[no-any-return]


def test_cluster_of_a_single_broker(broker: BrokerProcess) -> None:
    _create(broker.http_port, "cl-a", 2)
    status, doc = call(broker.http_port, "GET", "/cluster")
    assert status == 200, doc
    assert doc["mode"] == "single" and doc["broker_id"] == 0 and doc["controller"] == 0
    [me] = doc["brokers"]
    assert me["self"] and me["id"] == 0 and me["host"] == "127.0.0.1"
    assert me["endpoints"] == {"rtes": broker.port, "cursus": broker.cursus_port, "iggy": broker.iggy_port,
                               "tank": broker.tank_port, "http": broker.http_port}
    assert doc["topics"] >= 1 and doc["partitions"] >= 2
    assert doc["under_replicated_partitions"] == 0 and doc["offline_partitions"] == 0


def test_topic_lifecycle(broker: BrokerProcess) -> None:
    port = broker.http_port
    created = _create(port, "life", 3, config={"retention.ms": 3600000, "message.deduplication": False})
    assert [p["partition"] for p in created["partitions"]] == [0, 1, 2]  # type: ignore[index]
    assert created["config"] == {"retention.ms": "3600000", "message.deduplication": "false"}
    status, doc = call(port, "POST", "/topics", {"name": "life", "partitions": 1})
    assert status == 409 and error_code(doc) == "TOPIC_ALREADY_EXISTS"

    # records through V1 (partition of key "a") and the API; describe shows offsets and size
    assert all("|OK|" in v1(broker.port, f"V1|{i}|PRODUCE|life a:v{i}") for i in range(4))
    status, _ = call(port, "POST", "/topics/life/partitions/2/messages", {"value": "x"})
    assert status == 201
    status, doc = call(port, "GET", "/topics/life")
    assert status == 200, doc
    ends = {p["partition"]: p["log_end_offset"] for p in doc["partitions"]}
    assert ends == {0: 0, 1: 4, 2: 1}, ends  # fnv1a("a") % 3 == 1
    for p in doc["partitions"]:
        assert p["leader"] == 0 and p["replicas"] == [0] and p["isr"] == [0]
        assert p["high_watermark"] == p["log_end_offset"] and p["log_start_offset"] == 0
        assert p["segments"] == 1 and (p["size_bytes"] > 0) == (p["log_end_offset"] > 0)
    assert doc["replication_factor"] == 1

    status, listing = call(port, "GET", "/topics")
    [row] = [t for t in listing["topics"] if t["name"] == "life"]
    assert row["partitions"] == 3 and row["records"] == 5 and row["size_bytes"] > 0

    # alter config: set one key, remove another; a bad value is 400 and changes nothing
    status, doc = call(port, "PATCH", "/topics/life/config", {"retention.ms": None, "segment.bytes": 1048576})
    assert status == 200 and doc["config"] == {"message.deduplication": "false", "segment.bytes": "1048576"}
    status, doc = call(port, "PATCH", "/topics/life/config", {"message.deduplication": "maybe"})
    assert status == 400 and error_code(doc) == "INVALID_CONFIG"
    assert call(port, "GET", "/topics/life")[1]["config"]["segment.bytes"] == "1048576"

    # add partitions (count = how many more)
    status, doc = call(port, "POST", "/topics/life/partitions", {"count": 2})
    assert status == 200 and [p["partition"] for p in doc["partitions"]] == [0, 1, 2, 3, 4]
    status, doc = call(port, "POST", "/topics/life/partitions", {"count": 0})
    assert status == 400 and error_code(doc) == "BAD_REQUEST"

    status, doc = call(port, "DELETE", "/topics/life")
    assert status == 200 and doc == {"deleted": "life"}
    for method, path in (("GET", "/topics/life"), ("DELETE", "/topics/life"),
                         ("PATCH", "/topics/life/config"), ("GET", "/topics/life/partitions/0/messages")):
        status, doc = call(port, method, path, {} if method == "PATCH" else None)
        assert status == 404 and error_code(doc) == "UNKNOWN_TOPIC", (method, path, doc)


def test_browse_and_produce_messages(broker: BrokerProcess) -> None:
    port = broker.http_port
    _create(port, "browse", 1)
    before = int(time.time() * 1000)
    with Client(f"127.0.0.1:{broker.iggy_port}", username="iggy", password="iggy") as c:
        c.send("browse", 0, [f"iggy-{i}".encode() for i in range(10)])
    time.sleep(0.01)  # so the next records' timestamps are strictly later than the first ten
    middle = int(time.time() * 1000) + 1
    while int(time.time() * 1000) < middle:
        time.sleep(0.001)
    status, doc = call(port, "POST", "/topics/browse/partitions/0/messages",
                       {"key": "k1", "value": {"n": 1}, "headers": {"trace": "abc"}})
    assert status == 201 and doc["offset"] == 10 and doc["high_watermark"] == 11, doc
    status, doc = call(port, "POST", "/topics/browse/partitions/0/messages", {"value": "\u00e9t\u00e9"})
    assert status == 201 and doc["offset"] == 11

    # by offset, N at a time, next_offset pages on
    status, page = call(port, "GET", "/topics/browse/partitions/0/messages?offset=3&limit=4")
    assert status == 200, page
    assert [r["offset"] for r in page["records"]] == [3, 4, 5, 6] and page["next_offset"] == 7
    assert [r["value"] for r in page["records"]] == ["iggy-3", "iggy-4", "iggy-5", "iggy-6"]
    assert page["high_watermark"] == 12 and page["log_start_offset"] == 0
    assert all(before - 5000 <= r["timestamp"] <= middle + 60000 for r in page["records"])
    # no position: the newest ``limit``
    status, page = call(port, "GET", "/topics/browse/partitions/0/messages?limit=2")
    assert [r["offset"] for r in page["records"]] == [10, 11]
    # by timestamp: the first record at or after it
    status, page = call(port, "GET", f"/topics/browse/partitions/0/messages?timestamp={middle}")
    assert status == 200 and [r["offset"] for r in page["records"]] == [10, 11], page
    status, page = call(port, "GET", "/topics/browse/partitions/0/messages?timestamp=0&limit=1")
    assert [r["offset"] for r in page["records"]] == [0]
    # past the end: nothing, and where to ask next
    status, page = call(port, "GET", "/topics/browse/partitions/0/messages?offset=500")
    assert status == 200 and page["records"] == [] and page["next_offset"] == 500

    # rendering: json embeds JSON values, text keeps them as text, hex shows the bytes
    status, page = call(port, "GET", "/topics/browse/partitions/0/messages?offset=10&format=json")
    rec, accented = page["records"]
    assert rec["value"] == {"n": 1} and rec["value_format"] == "json"
    assert rec["key"] == "k1" and rec["key_format"] == "text"
    assert rec["headers"] == [{"key": "trace", "value": "abc", "format": "text"}]
    assert accented["value"] == "\u00e9t\u00e9" and accented["value_format"] == "text"
    assert accented["key"] is None
    status, page = call(port, "GET", "/topics/browse/partitions/0/messages?offset=10&limit=1&format=text")
    assert page["records"][0]["value"] == '{"n":1}' and page["records"][0]["value_format"] == "text"
    status, page = call(port, "GET", "/topics/browse/partitions/0/messages?offset=11&format=hex")
    assert page["records"][0]["value"] == "\u00e9t\u00e9".encode().hex()
    assert page["records"][0]["value_format"] == "hex"


def test_binary_values_fall_back_to_hex(broker: BrokerProcess) -> None:
    port = broker.http_port
    _create(port, "binary", 1)
    with Client(f"127.0.0.1:{broker.iggy_port}", username="iggy", password="iggy") as c:
        c.send("binary", 0, [b"\xff\x00\xfe"])
    status, page = call(port, "GET", "/topics/binary/partitions/0/messages?offset=0&format=json")
    assert status == 200 and page["records"][0]["value"] == "ff00fe"
    assert page["records"][0]["value_format"] == "hex"


@pytest.mark.parametrize(("query", "code"), [
    ("limit=0", "BAD_REQUEST"), ("limit=501", "BAD_REQUEST"), ("limit=x", "BAD_REQUEST"),
    ("offset=-1", "BAD_REQUEST"), ("offset=1&timestamp=2", "BAD_REQUEST"), ("format=xml", "BAD_REQUEST"),
])
def test_browse_bad_queries(broker: BrokerProcess, query: str, code: str) -> None:
    call(broker.http_port, "POST", "/topics", {"name": "badq", "partitions": 1})
    status, doc = call(broker.http_port, "GET", f"/topics/badq/partitions/0/messages?{query}")
    assert status == 400 and error_code(doc) == code, doc


def test_groups_lag_reset_and_delete(broker: BrokerProcess) -> None:
    port = broker.http_port
    _create(port, "grp", 2)
    for i in range(6):
        assert call(port, "POST", f"/topics/grp/partitions/{i % 2}/messages", {"value": f"m{i}"})[0] == 201
    # a V1 group with a member, which commits 1 on partition 0
    joined = v1(broker.port, "V1|1|JOIN|readers grp c1")
    assert "generation=" in joined, joined
    generation = joined.split("generation=")[1].split()[0]
    assert v1(broker.port, f"V1|2|COMMIT|readers grp c1 {generation} 0 1").endswith("committed=true")

    status, doc = call(port, "GET", "/groups/readers")
    assert status == 200, doc
    assert doc["topic"] == "grp" and doc["protocol"] == "rtes" and doc["state"] != "Empty"
    assert [m["id"] for m in doc["members"]] == ["c1"] and doc["members"][0]["partitions"] == [0, 1]
    rows = {p["partition"]: p for p in doc["partitions"]}
    assert rows[0]["committed_offset"] == 1 and rows[0]["high_watermark"] == 3 and rows[0]["lag"] == 2
    assert rows[1]["committed_offset"] is None and rows[1]["lag"] is None and rows[1]["member"] == "c1"
    assert doc["lag"] == 2
    status, listing = call(port, "GET", "/groups")
    [row] = [g for g in listing["groups"] if g["name"] == "readers"]
    assert row["members"] == 1 and row["lag"] == 2 and row["topics"] == ["grp"]

    # refused while the member is there (Kafka's rule), for reset and delete
    status, doc = call(port, "POST", "/groups/readers/reset-offsets", {"topic": "grp", "to": "earliest"})
    assert status == 409 and error_code(doc) == "GROUP_NOT_EMPTY"
    status, doc = call(port, "DELETE", "/groups/readers")
    assert status == 409 and error_code(doc) == "GROUP_NOT_EMPTY"
    assert v1(broker.port, f"V1|3|LEAVE|readers grp c1 {generation}").startswith("V1|3|OK")

    # dry run shows and changes nothing
    status, doc = call(port, "POST", "/groups/readers/reset-offsets",
                       {"topic": "grp", "to": "latest", "dry_run": True})
    assert status == 200 and doc["dry_run"] is True
    assert doc["partitions"] == [{"partition": 0, "before": 1, "after": 3},
                                 {"partition": 1, "before": None, "after": 3}]
    assert call(port, "GET", "/groups/readers")[1]["partitions"][0]["committed_offset"] == 1
    # latest, then back to earliest (a move back), an offset clamped into the log, a timestamp
    for body, want in (({"to": "latest"}, [3, 3]), ({"to": "earliest"}, [0, 0]),
                       ({"to": "offset", "value": 2}, [2, 2]), ({"to": "offset", "value": 99}, [3, 3]),
                       ({"to": "timestamp", "value": 0, "partitions": [1]}, [3, 0])):
        status, doc = call(port, "POST", "/groups/readers/reset-offsets", {"topic": "grp", **body})
        assert status == 200, (body, doc)
        got = call(port, "GET", "/groups/readers")[1]
        assert [p["committed_offset"] for p in got["partitions"]] == want, (body, got)
    assert got["lag"] == 3
    # the broker sees the new offsets: V1 reads the committed offset back
    assert v1(broker.port, "V1|9|OFFSET|readers grp 1") == "V1|9|OK|offset=0"

    for body in ({"topic": "grp", "to": "sideways"}, {"topic": "grp", "to": "offset"},
                 {"topic": "grp", "to": "offset", "value": -1}, {"to": "latest"},
                 {"topic": "grp", "to": "latest", "partitions": "all"},
                 {"topic": "grp", "to": "latest", "dry_run": "yes"}):
        status, doc = call(port, "POST", "/groups/readers/reset-offsets", body)
        assert status == 400 and error_code(doc) == "BAD_REQUEST", (body, doc)
    status, doc = call(port, "POST", "/groups/readers/reset-offsets",
                       {"topic": "grp", "to": "latest", "partitions": [7]})
    assert status == 404 and error_code(doc) == "UNKNOWN_PARTITION"

    status, doc = call(port, "DELETE", "/groups/readers")
    assert status == 200 and doc == {"deleted": "readers"}
    status, doc = call(port, "GET", "/groups/readers")
    assert status == 404 and error_code(doc) == "GROUP_NOT_FOUND"
    assert "readers" not in [g["name"] for g in call(port, "GET", "/groups")[1]["groups"]]


def test_iggy_consumer_offsets_are_a_group(broker: BrokerProcess) -> None:
    port = broker.http_port
    _create(port, "igg", 1)
    with Client(f"127.0.0.1:{broker.iggy_port}", username="iggy", password="iggy") as c:
        c.send("igg", 0, [b"a", b"b", b"c"])
        c.commit("billing", "igg", {0: 1})
    status, listing = call(port, "GET", "/groups")
    [row] = [g for g in listing["groups"] if "billing" in g["name"]]
    assert row["topics"] == ["igg"] and row["lag"] == 2 and row["members"] == 0
    status, doc = call(port, "GET", f"/groups/{row['name']}")
    assert status == 200 and doc["partitions"][0]["committed_offset"] == 1


def test_users(broker: BrokerProcess) -> None:
    port = broker.http_port
    status, doc = call(port, "GET", "/users")
    assert status == 200 and doc["users"][0]["username"] == "iggy"
    assert all("password" not in str(u) and "hash" not in str(u) for u in doc["users"])
    topic = {"topic_id": 2, "send_messages": True}
    perms = {"global_permissions": {"read_servers": True},
             "streams": [{"stream_id": 1, "poll_messages": True, "topics": [topic]}]}
    status, doc = call(port, "POST", "/users",
                       {"username": "carol", "password": "pw-carol-1", "permissions": perms})
    assert status == 201, doc
    assert doc["username"] == "carol" and doc["active"] and not doc["root"]
    assert doc["permissions"]["global_permissions"]["read_servers"] is True
    assert doc["permissions"]["streams"][0]["topics"][0] == {
        "topic_id": 2, "manage_topic": False, "read_topic": False, "poll_messages": False,
        "send_messages": True}
    status, doc = call(port, "POST", "/users", {"username": "carol", "password": "pw-carol-2"})
    assert status == 409 and error_code(doc) == "USER_ALREADY_EXISTS"
    status, doc = call(port, "GET", "/users/carol")
    assert status == 200 and "pw-carol" not in str(doc)
    assert call(port, "GET", f"/users/{doc['id']}")[1]["username"] == "carol"  # by id too
    # the new user can log in with Iggy (the same store)
    with Client(f"127.0.0.1:{broker.iggy_port}", username="carol", password="pw-carol-1"):
        pass
    status, doc = call(port, "PUT", "/users/carol/permissions", {"permissions": None})
    assert status == 200 and doc["permissions"] is None
    for body in ({"username": "x", "password": "pw-long"}, {"username": "dave", "password": "p"},
                 {"username": "dave"}, {"username": "dave", "password": "pw-dave-1",
                                        "permissions": {"global_permissions": {"fly": True}}},
                 {"username": "dave", "password": "pw-dave-1", "permissions": {"streams": [{"poll": 1}]}}):
        status, doc = call(port, "POST", "/users", body)
        assert status == 400, (body, doc)
        error_code(doc)
    # a user's permissions name at most 10,000 streams and topics, whichever way they come
    many = {"streams": [{"stream_id": 1, "topics": [{"topic_id": t} for t in range(10_000)]}]}
    status, doc = call(port, "POST", "/users",
                       {"username": "dave", "password": "pw-dave-1", "permissions": many})
    assert status == 400 and error_code(doc) == "TOO_MANY_GRANTS", doc
    assert call(port, "GET", "/users/dave")[0] == 404
    status, doc = call(port, "DELETE", "/users/iggy")
    assert status == 409 and error_code(doc) == "CANNOT_DELETE_ROOT"
    status, doc = call(port, "PUT", "/users/iggy/permissions", {"permissions": None})
    assert status == 409 and error_code(doc) == "CANNOT_CHANGE_ROOT_PERMISSIONS"
    assert call(port, "DELETE", "/users/carol") == (200, {"deleted": "carol"})
    status, doc = call(port, "GET", "/users/carol")
    assert status == 404 and error_code(doc) == "USER_NOT_FOUND"


@pytest.mark.parametrize(("method", "path", "raw", "status", "code"), [
    ("POST", "/topics", b"{not json", 400, "INVALID_JSON"),
    ("POST", "/topics", b"[1, 2]", 400, "INVALID_JSON"),
    ("POST", "/topics", b"", 400, "INVALID_JSON"),
    ("POST", "/topics", b'{"partitions": 1}', 400, "BAD_REQUEST"),
    ("POST", "/topics", b'{"name": 5}', 400, "BAD_REQUEST"),
    ("POST", "/topics", b'{"name": "ok-name", "partitions": "3"}', 400, "BAD_REQUEST"),
    ("POST", "/topics", b'{"name": "ok-name", "partitions": 0}', 400, "BAD_REQUEST"),
    ("POST", "/topics", b'{"name": "ok-name", "config": [1]}', 400, "BAD_REQUEST"),
    ("POST", "/topics", b'{"name": "ok-name", "config": {"no.such.key": 1}}', 400, "INVALID_CONFIG"),
    ("POST", "/topics", b'{"name": "bad name/../x", "partitions": 1}', 400, "INVALID_TOPIC_NAME"),
    ("POST", "/topics/nope/partitions/0/messages", b'{"value": "v"}', 404, "UNKNOWN_TOPIC"),
    ("POST", "/topics/badq/partitions/0/messages", b'{"key": "k"}', 400, "BAD_REQUEST"),
    ("POST", "/topics/badq/partitions/0/messages", b'{"value": "v", "headers": {"a": 1}}', 400,
     "BAD_REQUEST"),
    ("GET", "/topics/badq/partitions/99999999999/messages", None, 400, "BAD_REQUEST"),
    ("GET", "/no/such/route", None, 404, "NOT_FOUND"),
    ("PUT", "/topics", b"{}", 405, "METHOD_NOT_ALLOWED"),
    ("GET", "/groups/nobody-here", None, 404, "GROUP_NOT_FOUND"),
    ("DELETE", "/groups/nobody-here", None, 404, "GROUP_NOT_FOUND"),
])
def test_bad_input_gets_a_json_error(broker: BrokerProcess, method: str, path: str, raw: bytes | None,
                                     status: int, code: str) -> None:
    call(broker.http_port, "POST", "/topics", {"name": "badq", "partitions": 1})
    got, doc = call(broker.http_port, method, path, raw=raw)
    assert (got, error_code(doc)) == (status, code), doc
    assert "Traceback" not in str(doc)


def test_api_routes_count_in_metrics(broker: BrokerProcess) -> None:
    call(broker.http_port, "GET", "/cluster")
    s = scrape(broker.http_port)
    assert value(s, "bayou_requests_total", protocol="http", request="/api/v1/cluster") >= 1


def test_a_topic_made_elsewhere_is_visible(broker: BrokerProcess) -> None:
    assert "|OK|" in v1(broker.port, "V1|1|ADMIN_CREATE_TOPIC|from-v1 2 1")
    status, doc = call(broker.http_port, "GET", "/topics/from-v1")
    assert status == 200 and len(doc["partitions"]) == 2


def test_no_traceback_in_the_log(broker: BrokerProcess) -> None:
    """Runs last in the module: nothing above made the API log an unexpected failure."""
    assert "admin API request failed" not in broker.log() and "Traceback" not in broker.log()
