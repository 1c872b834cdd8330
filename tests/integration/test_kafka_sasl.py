"""SASL on the Kafka front end (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512): a client logs in as one of
the broker's users (the Iggy listener's users, as the HTTP port's Basic login), and the broker's
authorizer then answers for that principal; wrong credentials end the connection; without a login,
``[security] anonymous = "none"`` leaves a client nothing. SCRAM works for users made after start-up
(admin API, Iggy's CREATE_USER and CHANGE_PASSWORD) and across a restart."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bayou.protocols.iggy import messages as m
from bayou.protocols.kafka.codes import ApiKey
from support import admin_api
from support.brokers import BrokerProcess
from support.iggy import ident, legacy_login
from support.kafka import KafkaConn, running_broker
from support.scram import ScramClient

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev dependency")

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("kafka-sasl")
    (root / "bayou.toml").write_text('[security]\nanonymous = "none"\n')
    with running_broker(root, "--config", str(root / "bayou.toml")) as b:
        yield b


SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def conf(b: BrokerProcess, password: str | None = "iggy", *, mechanism: str = "PLAIN", user: str = "iggy"
         ) -> dict[str, object]:
    base: dict[str, object] = {"bootstrap.servers": f"127.0.0.1:{b.port}"}
    if password is not None:
        base.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                     "sasl.username": user, "sasl.password": password})
    return base


def produce_and_consume(login: dict[str, object], topic: str | None = None) -> None:
    """With confluent-kafka logged in by ``login``: create a topic, produce a record, consume it."""
    topic = topic or f"sasl-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(login)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    p = Producer(login)
    p.produce(topic, key=b"k", value=b"logged in")
    assert p.flush(30) == 0
    c = Consumer({**login, "group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    try:
        while True:
            assert time.monotonic() < deadline, "nothing consumed"
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                assert (m.key(), m.value()) == (b"k", b"logged in")
                break
    finally:
        c.close()


def refused(login: dict[str, object]) -> None:
    """A client with these credentials gets nothing: its metadata request fails."""
    admin = AdminClient({**login, "socket.timeout.ms": 5000})
    with pytest.raises(KafkaException) as info:
        admin.list_topics(timeout=5)
    assert info.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT,
                                         KafkaError._TIMED_OUT), info.value


def test_a_user_logs_in_with_plain_and_produces_and_consumes(broker: BrokerProcess) -> None:
    produce_and_consume(conf(broker))


def test_wrong_credentials_are_refused(broker: BrokerProcess) -> None:
    refused(conf(broker, password="wrong"))


def test_without_a_login_anonymous_none_may_do_nothing(broker: BrokerProcess) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(conf(broker))  # kept: a destroyed handle fails its futures
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    anonymous = AdminClient(conf(broker, password=None))
    assert topic not in anonymous.list_topics(timeout=10).topics  # not even described
    failures: list[KafkaError] = []
    p = Producer({**conf(broker, password=None), "message.timeout.ms": 5000})
    p.produce(topic, value=b"x", partition=0, on_delivery=lambda err, _m: failures.append(err))
    p.flush(20)
    assert failures and failures[0] is not None


def test_kafka_python_and_aiokafka_log_in_with_plain(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    topic = f"sasl-{uuid.uuid4().hex[:10]}"
    login = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
             "sasl_plain_username": "iggy", "sasl_plain_password": "iggy"}
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.port}", **login)
    try:
        admin.create_topics([KpNewTopic(topic, 1, 1)])
        assert topic in admin.list_topics()
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.port}", acks="all", **login)
    p.send(topic, b"kafka-python").get(timeout=30)
    p.close()

    async def aio() -> int:
        q = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.port}", **login)
        await q.start()
        try:
            return int((await q.send_and_wait(topic, b"aiokafka")).offset)
        finally:
            await q.stop()

    assert asyncio.run(aio()) == 1


# -- SCRAM-SHA-256 and SCRAM-SHA-512 ----------------------------------------------------------------


@pytest.mark.parametrize("mechanism", SCRAM)
def test_confluent_kafka_logs_in_with_scram_and_produces_and_consumes(broker: BrokerProcess,
                                                                      mechanism: str) -> None:
    produce_and_consume(conf(broker, mechanism=mechanism))  # the root user of the first start


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_with_a_wrong_password_or_an_unknown_user_is_refused(broker: BrokerProcess,
                                                                   mechanism: str) -> None:
    refused(conf(broker, "wrong", mechanism=mechanism))
    refused(conf(broker, "iggy", mechanism=mechanism, user="nobody"))
    produce_and_consume(conf(broker, mechanism=mechanism))  # the right one still logs in


@pytest.mark.parametrize("mechanism", SCRAM)
def test_kafka_python_and_aiokafka_log_in_with_scram(broker: BrokerProcess, mechanism: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    topic = f"scram-{uuid.uuid4().hex[:10]}"
    bootstrap = f"127.0.0.1:{broker.port}"
    login = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
             "sasl_plain_username": "iggy", "sasl_plain_password": "iggy"}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **login)
    try:
        admin.create_topics([KpNewTopic(topic, 1, 1)])
        assert topic in admin.list_topics()
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **login)
    p.send(topic, b"kafka-python").get(timeout=30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      consumer_timeout_ms=20_000, **login)
    try:
        assert next(iter(c)).value == b"kafka-python"
    finally:
        c.close()

    async def aio() -> list[bytes]:
        q = AIOKafkaProducer(bootstrap_servers=bootstrap, **login)
        await q.start()
        try:
            await q.send_and_wait(topic, b"aiokafka")
        finally:
            await q.stop()
        r = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **login)
        await r.start()
        try:
            got: list[bytes] = []
            async with asyncio.timeout(30):
                async for record in r:
                    got.append(record.value)
                    if len(got) == 2:
                        return got
            return got
        finally:
            await r.stop()

    assert asyncio.run(aio()) == [b"kafka-python", b"aiokafka"]


async def _raw_scram(port: int, mechanism: str, user: str, password: str, *, nonce: str | None = None
                     ) -> tuple[Any, KafkaConn]:
    """One SCRAM exchange on a raw connection: the last SaslAuthenticate response, and the
    connection (a failed first step answers before the second is sent)."""
    conn = await KafkaConn.open(port)
    hs = await conn.call(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism)
    assert hs.error_code == 0 and set(hs.mechanisms) == {"PLAIN", *SCRAM}
    client = ScramClient(mechanism, user, password)
    first = await conn.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=client.first())
    if first.error_code:
        return first, conn
    final = await conn.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=client.final(bytes(first.auth_bytes),
                                                                               nonce=nonce))
    if not final.error_code:
        client.check(bytes(final.auth_bytes))
    return final, conn


@pytest.mark.parametrize("mechanism", SCRAM)
def test_raw_scram_failures_answer_sasl_authentication_failed_and_close(broker: BrokerProcess,
                                                                        mechanism: str) -> None:
    async def run() -> None:
        ok, conn = await _raw_scram(broker.port, mechanism, "iggy", "iggy")
        assert ok.error_code == 0  # and the server's signature checked out (client.check)
        assert (await conn.call(ApiKey.METADATA, 12, topics=[])).brokers  # and served
        await conn.close()
        cases = [("iggy", "wrong", None, "invalid credentials"),
                 ("nobody", "iggy", None, "invalid credentials"),
                 ("iggy", "iggy", "fyko+d2lbbFgONRv9qkxdawLnot-the-servers", "nonce")]
        for user, password, nonce, says in cases:
            resp, conn = await _raw_scram(broker.port, mechanism, user, password, nonce=nonce)
            assert resp.error_code == ErrorCode.sasl_authentication_failed, resp
            assert says in resp.error_message, resp.error_message
            assert await conn.is_closed()
        for message in (b"n=iggy,r=abc", b"p=tls-unique,,n=iggy,r=abc", b"\xff", b""):
            conn = await KafkaConn.open(broker.port)
            await conn.call(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism)
            resp = await conn.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=message)
            assert resp.error_code == ErrorCode.sasl_authentication_failed and resp.error_message, resp
            assert await conn.is_closed()
        ok, conn = await _raw_scram(broker.port, mechanism, "iggy", "iggy")  # resets the address's count
        assert ok.error_code == 0
        await conn.close()

    asyncio.run(run())


def test_scram_failures_are_throttled_as_plain_ones_are(broker: BrokerProcess) -> None:
    """The login guard: each failure from an address doubles the wait before its next attempt is
    judged (0.25 s after the first, 0.5 s after the second); a success forgets them."""
    async def timed(password: str) -> tuple[int, float]:
        started = time.monotonic()
        resp, conn = await _raw_scram(broker.port, "SCRAM-SHA-256", "iggy", password)
        took = time.monotonic() - started
        await conn.close()
        return resp.error_code, took

    async def run() -> None:
        assert (await timed("iggy"))[0] == 0
        assert (await timed("wrong"))[0] == ErrorCode.sasl_authentication_failed
        assert (await timed("wrong"))[0] == ErrorCode.sasl_authentication_failed
        code, took = await timed("iggy")
        assert code == 0 and took >= 0.45, took  # judged after the wait two failures earn
        assert (await timed("iggy"))[1] < 0.45  # forgotten after the success

    asyncio.run(run())


USER_PERMISSIONS = {"global_permissions": {"manage_topics": True, "read_topics": True, "poll_messages": True,
                                           "send_messages": True}}


def _create_user_over_http(b: BrokerProcess, name: str, password: str) -> None:
    status, doc = admin_api.call(b.http_port, "POST", "/users", {
        "username": name, "password": password, "permissions": USER_PERMISSIONS},
        auth=admin_api.basic("iggy", "iggy"))
    assert status == 201, doc


def _iggy_users(b: BrokerProcess, *requests: m.Request) -> None:
    async def run() -> None:
        root = await legacy_login(b.iggy_port)
        try:
            for req in requests:
                await root.call(req)
        finally:
            await root.close()

    asyncio.run(run())


IGGY_PERMISSIONS = m.Permissions(m.GlobalPermissions(manage_topics=True, read_topics=True,
                                                     poll_messages=True, send_messages=True))


@pytest.mark.parametrize("mechanism", SCRAM)
def test_users_made_after_start_up_log_in_with_scram(broker: BrokerProcess, mechanism: str) -> None:
    suffix = mechanism[-3:]
    _create_user_over_http(broker, f"http-{suffix}", "http-pw-1")
    _iggy_users(broker, m.CreateUser(f"iggy-{suffix}", "iggy-pw-1", permissions=IGGY_PERMISSIONS))
    produce_and_consume(conf(broker, "http-pw-1", mechanism=mechanism, user=f"http-{suffix}"))
    produce_and_consume(conf(broker, "iggy-pw-1", mechanism=mechanism, user=f"iggy-{suffix}"))
    _iggy_users(broker, m.ChangePassword(ident(f"iggy-{suffix}"), "iggy-pw-1", "iggy-pw-2"))
    refused(conf(broker, "iggy-pw-1", mechanism=mechanism, user=f"iggy-{suffix}"))
    produce_and_consume(conf(broker, "iggy-pw-2", mechanism=mechanism, user=f"iggy-{suffix}"))


def test_scram_credentials_survive_a_restart(tmp_path: Path) -> None:
    (tmp_path / "bayou.toml").write_text('[security]\nanonymous = "none"\n')
    with running_broker(tmp_path, "--config", str(tmp_path / "bayou.toml")) as b:
        _create_user_over_http(b, "kept", "kept-pw-1")
        _iggy_users(b, m.CreateUser("changed", "changed-pw-1", permissions=IGGY_PERMISSIONS),
                    m.ChangePassword(ident("changed"), "changed-pw-1", "changed-pw-2"))
        b.stop()
        b.start(timeout=90)
        for mechanism in SCRAM:
            produce_and_consume(conf(b, "kept-pw-1", mechanism=mechanism, user="kept"))
            produce_and_consume(conf(b, "changed-pw-2", mechanism=mechanism, user="changed"))
            produce_and_consume(conf(b, "iggy", mechanism=mechanism))
        refused(conf(b, "changed-pw-1", mechanism="SCRAM-SHA-256", user="changed"))


async def _plain_login(b: BrokerProcess, user: str, password: str) -> KafkaConn:
    """A Kafka connection logged in with SASL PLAIN."""
    conn = await KafkaConn.open(b.port)
    assert (await conn.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")).error_code == 0
    login = await conn.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=f"\0{user}\0{password}".encode())
    assert login.error_code == 0, login
    return conn


def test_a_fetch_session_is_told_at_once_when_its_read_permission_goes(broker: BrokerProcess) -> None:
    """An incremental fetch skips the reads of caught-up partitions (fetch sessions, KIP-227), but
    not the permission check: once the user may no longer poll, the next fetch says so, with no
    new record needed to bring it out."""
    user = f"fs-{uuid.uuid4().hex[:8]}"
    _create_user_over_http(broker, user, "fs-pw-1")
    topic = f"fs-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        conn = await _plain_login(broker, user, "fs-pw-1")
        try:
            made = await conn.call(ApiKey.CREATE_TOPICS, timeout=5000, topics=[
                {"name": topic, "num_partitions": 1, "replication_factor": 1}])
            assert made.topics[0].error_code == ErrorCode.none, made

            async def fetch(session_id: int, epoch: int, parts: list[dict[str, Any]]) -> Any:
                return await conn.call(ApiKey.FETCH, 12, replica_id=-1, max_wait=0, min_bytes=1,
                                       max_bytes=1 << 20, isolation_level=0, session_id=session_id,
                                       session_epoch=epoch, topics=parts, rack_id="")

            full = await fetch(0, 0, [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}])
            sid = full.session_id
            assert sid != 0 and full.responses[0].partitions[0].error_code == ErrorCode.none
            assert list((await fetch(sid, 1, [])).responses) == []  # caught up: nothing to say
            status, doc = admin_api.call(broker.http_port, "PUT", f"/users/{user}/permissions",
                                         {"permissions": None},
                                         auth=admin_api.basic("iggy", "iggy"))
            assert status == 200, doc
            resp = await fetch(sid, 2, [])
            assert [p.error_code for t in resp.responses for p in t.partitions] == [
                ErrorCode.topic_authorization_failed]
        finally:
            await conn.close()

    asyncio.run(run())


def test_a_user_without_permissions_cannot_probe_topic_names(broker: BrokerProcess) -> None:
    """Produce and Fetch check the user's permission before the topic's existence, as Kafka does:
    a user who may not send or poll gets TOPIC_AUTHORIZATION_FAILED for a topic that does not
    exist as for one that does (UNKNOWN_TOPIC_OR_PARTITION used to tell them apart)."""
    from bayou.records.batch import Record, encode_batch

    user = f"np-{uuid.uuid4().hex[:8]}"
    _create_user_over_http(broker, user, "np-pw-1")
    status, doc = admin_api.call(broker.http_port, "PUT", f"/users/{user}/permissions", {"permissions": None},
                                 auth=admin_api.basic("iggy", "iggy"))
    assert status == 200, doc
    missing = f"nope-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        conn = await _plain_login(broker, user, "np-pw-1")
        try:
            batch = encode_batch([Record(b"v", b"k", int(time.time() * 1000))])
            sent = await conn.call(ApiKey.PRODUCE, 7, transactional_id=None, acks=1, timeout=5000,
                                   topic_data=[{"name": missing, "partition_data": [
                                       {"index": 0, "records": batch}]}])
            assert [p.error_code for t in sent.responses for p in t.partition_responses] == [
                ErrorCode.topic_authorization_failed]
            read = await conn.call(ApiKey.FETCH, 12, replica_id=-1, max_wait=0, min_bytes=1,
                                   max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                                   topics=[{"topic": missing, "partitions": [
                                       {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
                                   rack_id="")
            assert [p.error_code for t in read.responses for p in t.partitions] == [
                ErrorCode.topic_authorization_failed]
        finally:
            await conn.close()

    asyncio.run(run())
