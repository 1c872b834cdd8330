"""SASL/PLAIN on the Kafka front end: a client logs in as one of the broker's users (the Iggy
listener's users, as the HTTP port's Basic login), and the broker's authorizer then answers for
that principal; wrong credentials end the connection; without a login, ``[security] anonymous =
"none"`` leaves a client nothing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from support.brokers import BrokerProcess
from support.kafka import running_broker

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


def conf(b: BrokerProcess, password: str | None = "iggy") -> dict[str, object]:
    base: dict[str, object] = {"bootstrap.servers": f"127.0.0.1:{b.port}"}
    if password is not None:
        base.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                     "sasl.username": "iggy", "sasl.password": password})
    return base


def test_a_user_logs_in_with_plain_and_produces_and_consumes(broker: BrokerProcess) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(conf(broker))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    p = Producer(conf(broker))
    p.produce(topic, key=b"k", value=b"logged in")
    assert p.flush(30) == 0
    c = Consumer({**conf(broker), "group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"})
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


def test_wrong_credentials_are_refused(broker: BrokerProcess) -> None:
    admin = AdminClient({**conf(broker, password="wrong"), "socket.timeout.ms": 5000})
    with pytest.raises(KafkaException) as info:
        admin.list_topics(timeout=5)
    assert info.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT,
                                         KafkaError._TIMED_OUT), info.value


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
    import asyncio

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
