"""apache-iggy 0.8.0 driver: ``.venv-iggy08/bin/python sdk08.py PORT SCENARIO [ARGS...]``.

The 0.8 API is small (see /tmp/notes on the SDK, summarised in tests/support/iggy_sdk.py): no
user headers, message ids, balanced/key partitioning, Consumer objects, stats, logout, offset
getters or low-level group calls. Polls always use the regular consumer with id 0; consumer groups
are reached only through the high-level ``consumer_group()``. The assertions live in
tests/integration/test_iggy_sdk08.py and test_iggy_cross_protocol.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import apache_iggy as ig
from common import RETRIES, RETRY_INTERVAL_MS, bounded, drain_consumers, error_of, main, messages, scenario


def url(port: int, password: str = "iggy") -> str:
    """A connection string: auto-login on connect and a finite number of reconnection attempts
    (a plain "host:port" client retries forever)."""
    return (f"iggy://iggy:{password}@127.0.0.1:{port}?reconnection_retries={RETRIES}"
            f"&reconnection_interval={RETRY_INTERVAL_MS}ms")


async def client(port: int) -> Any:
    c = ig.IggyClient.from_connection_string(url(port))
    await bounded(c.connect())
    return c


def stream_info(s: Any) -> dict[str, Any]:
    return {"id": s.id, "name": s.name, "topics_count": s.topics_count, "messages_count": s.messages_count}


def topic_info(t: Any) -> dict[str, Any]:
    return {"id": t.id, "name": t.name, "partitions_count": t.partitions_count,
            "messages_count": t.messages_count}


async def poll(c: Any, stream: str | int, topic: str | int, strategy: Any, count: int, *, partition: int = 0,
               auto_commit: bool = False) -> list[Any]:
    return messages(await bounded(c.poll_messages(stream, topic, partition, strategy, count, auto_commit)))


def group_consumer(c: Any, name: str, stream: str, topic: str, **kw: Any) -> Any:
    opts: dict[str, Any] = {
        "batch_length": 4, "auto_commit": ig.AutoCommit.When(ig.AutoCommitWhen.PollingMessages()),
        "poll_interval": dt.timedelta(milliseconds=50),
        "polling_retry_interval": dt.timedelta(milliseconds=100),
        "init_retries": 3, "init_retry_interval": dt.timedelta(milliseconds=100)}
    opts.update(kw)
    return c.consumer_group(name, stream, topic, **opts)


# -- scenarios ---------------------------------------------------------------------------------------


@scenario
async def login(port: int) -> dict[str, Any]:
    """Auto-login through the connection string, login_user, and wrong passwords."""
    out: dict[str, Any] = {}
    bad = ig.IggyClient.from_connection_string(url(port, "not-the-password"))
    out["connect_wrong_password"] = await error_of(bad.connect())
    out["call_after_failed_login"] = await error_of(bad.get_stream("any"))
    out["login_after_failed_login"] = await error_of(bad.login_user("iggy", "iggy"))
    out["call_after_login"] = await error_of(bad.get_stream("any"))
    c = ig.IggyClient.from_connection_string(url(port))
    out["connect"] = await error_of(c.connect())
    out["ping"] = await error_of(c.ping())
    out["login_user"] = await error_of(c.login_user("iggy", "iggy"))
    out["login_user_wrong_password"] = await error_of(c.login_user("iggy", "wrong-password"))
    out["login_user_unknown_user"] = await error_of(c.login_user("nobody", "secret"))
    # a refused login leaves the session as it was (the 0.8 server does the same)
    out["call_after_refused_login"] = await error_of(c.get_stream("any"))
    return out


@scenario
async def catalog(port: int, stream: str) -> dict[str, Any]:
    c = await client(port)
    out: dict[str, Any] = {}
    await bounded(c.create_stream(stream))
    s = await bounded(c.get_stream(stream))
    out["stream"] = stream_info(s)
    out["stream_by_id"] = stream_info(await bounded(c.get_stream(s.id)))
    out["duplicate_stream"] = await error_of(c.create_stream(stream))
    out["missing_stream_is_none"] = await bounded(c.get_stream(stream + "-missing")) is None
    await bounded(c.create_topic(stream, "orders", 3, compression_algorithm="gzip", replication_factor=1,
                                 message_expiry=dt.timedelta(hours=1), max_topic_size=10_000_000))
    await bounded(c.create_topic(stream, "plain", 1))
    out["duplicate_topic"] = await error_of(c.create_topic(stream, "orders", 1))
    out["zero_partitions"] = await error_of(c.create_topic(stream, "empty", 0))
    out["missing_topic_is_none"] = await bounded(c.get_topic(stream, "nope")) is None
    out["topics"] = {name: topic_info(await bounded(c.get_topic(stream, name)))
                     for name in ("orders", "plain")}
    out["topic_by_ids"] = topic_info(await bounded(c.get_topic(s.id, 1)))
    await bounded(c.send_messages(stream, "orders", 0, [ig.SendMessage(f"o-{i}") for i in range(4)]))
    await bounded(c.send_messages(stream, "orders", 2, [ig.SendMessage(b"x" * 100), ig.SendMessage(b"y")]))
    out["send_to_missing_partition"] = await error_of(
        c.send_messages(stream, "orders", 3, [ig.SendMessage("nowhere")]))
    out["orders_after_send"] = topic_info(await bounded(c.get_topic(stream, "orders")))
    out["stream_after_send"] = stream_info(await bounded(c.get_stream(stream)))
    return out


@scenario
async def sendpoll(port: int, stream: str) -> dict[str, Any]:
    c = await client(port)
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, "events", 2))
    await bounded(c.send_messages(stream, "events", 0, [
        ig.SendMessage(b"\x00\xff binary"), ig.SendMessage("two \u2713"), ig.SendMessage("three")]))
    await asyncio.sleep(0.05)  # batch 2 gets a later server timestamp
    await bounded(c.send_messages(stream, "events", 0, [ig.SendMessage(x) for x in ("four", "five", "six")]))
    await bounded(c.send_messages(stream, "events", 1, [ig.SendMessage("p1-a"), ig.SendMessage("p1-b")]))

    t, P = "events", ig.PollingStrategy
    out: dict[str, Any] = {"all": await poll(c, stream, t, P.Offset(0), 100)}
    ts3 = out["all"][3]["timestamp"]
    out["offset"] = await poll(c, stream, t, P.Offset(2), 3)
    out["offset_past_end"] = await poll(c, stream, t, P.Offset(100), 10)
    out["timestamp"] = await poll(c, stream, t, P.Timestamp(ts3), 10)
    out["timestamp_hour_ago"] = await poll(c, stream, t, P.Timestamp(int((time.time() - 3600) * 1e6)), 10)
    out["timestamp_future"] = await poll(c, stream, t, P.Timestamp(int((time.time() + 3600) * 1e6)), 10)
    out["first"] = await poll(c, stream, t, P.First(), 2)
    out["last"] = await poll(c, stream, t, P.Last(), 2)
    out["last_all"] = await poll(c, stream, t, P.Last(), 100)
    out["partition1"] = await poll(c, stream, t, P.First(), 10, partition=1)
    out["missing_partition"] = await error_of(c.poll_messages(stream, t, 9, P.First(), 1, False))
    out["next_no_commit"] = [await poll(c, stream, t, P.Next(), 2) for _ in range(2)]
    out["next_commit"] = [await poll(c, stream, t, P.Next(), 4, auto_commit=True) for _ in range(3)]
    out["next_partition1"] = await poll(c, stream, t, P.Next(), 10, partition=1)
    out["topic"] = topic_info(await bounded(c.get_topic(stream, t)))
    return out


@scenario
async def groups(port: int, stream: str) -> dict[str, Any]:
    """Two clients in one consumer group (the high-level consumer) on a 4-partition topic."""
    admin = await client(port)
    await bounded(admin.create_stream(stream))
    await bounded(admin.create_topic(stream, "work", 4))
    for p in range(4):
        await bounded(admin.send_messages(stream, "work", p,
                                          [ig.SendMessage(f"w-{i}") for i in range(40) if i % 4 == p]))
    a, b = await client(port), await client(port)
    ca = await bounded(group_consumer(a, "g8", stream, "work"))
    cb = await bounded(group_consumer(b, "g8", stream, "work"))
    out: dict[str, Any] = {"names": [ca.name(), cb.name(), ca.stream(), ca.topic()]}
    out["got"] = await drain_consumers([ca, cb], 40)
    # a third member joining late finds nothing left
    c = await client(port)
    cc = await bounded(group_consumer(c, "g8", stream, "work"))
    out["late"] = (await drain_consumers([cc], 1, deadline_s=1.0))[0]
    return out


@scenario
async def restart_a(port: int, stream: str) -> dict[str, Any]:
    """Before a broker restart: auto-commit for the regular consumer, store_offset for a group."""
    c = await client(port)
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, "durable", 2))
    await bounded(c.send_messages(stream, "durable", 0, [ig.SendMessage(f"d0-{i}") for i in range(10)]))
    await bounded(c.send_messages(stream, "durable", 1, [ig.SendMessage(f"d1-{i}") for i in range(6)]))
    P = ig.PollingStrategy
    out: dict[str, Any] = {
        "p0": await poll(c, stream, "durable", P.Next(), 4, auto_commit=True),
        "p1": await poll(c, stream, "durable", P.Next(), 2, partition=1, auto_commit=True),
    }
    g = await client(port)
    consumer = await bounded(group_consumer(g, "g-stored", stream, "durable",
                                            auto_commit=ig.AutoCommit.Disabled()))
    await bounded(consumer.store_offset(5, 0))
    out["stored_locally"] = consumer.get_last_stored_offset(0)
    return out


@scenario
async def restart_b(port: int, stream: str) -> dict[str, Any]:
    """After the restart: Next continues after the stored offsets."""
    c = await client(port)
    P = ig.PollingStrategy
    out: dict[str, Any] = {
        "topic": topic_info(await bounded(c.get_topic(stream, "durable"))),
        "p0": await poll(c, stream, "durable", P.Next(), 100),
        "p1": await poll(c, stream, "durable", P.Next(), 100, partition=1),
    }
    g = await client(port)
    consumer = await bounded(group_consumer(g, "g-stored", stream, "durable"))
    out["group"] = (await drain_consumers([consumer], 4 + 6))[0]  # p0 offsets 6..9, all of p1
    return out


@scenario
async def xp_send(port: int, stream: str, topic: str) -> dict[str, Any]:
    """For the cross-protocol test: STREAM/TOPIC with 2 partitions, 3 messages to p0, 2 to p1."""
    c = await client(port)
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, topic, 2))
    await bounded(c.send_messages(stream, topic, 0, [ig.SendMessage(f"l8-{i}") for i in range(3)]))
    await bounded(c.send_messages(stream, topic, 1, [ig.SendMessage(f"l8-p1-{i}") for i in range(2)]))
    return {"stream": stream_info(await bounded(c.get_stream(stream)))}


@scenario
async def read(port: int, stream: str, topic: str) -> dict[str, Any]:
    """Everything in STREAM/TOPIC (e.g. the ``default`` stream), partition by partition."""
    c = await client(port)
    s = await bounded(c.get_stream(stream))
    t = await bounded(c.get_topic(stream, topic))
    return {
        "stream": None if s is None else stream_info(s),
        "topic": None if t is None else topic_info(t),
        "partitions": [] if t is None else [
            await poll(c, stream, topic, ig.PollingStrategy.First(), 1000, partition=p)
            for p in range(t.partitions_count)],
        "by_ids": None if s is None or t is None else await poll(
            c, s.id, t.id, ig.PollingStrategy.Offset(0), 1000),
    }



@scenario
async def tls_sendpoll(port: int, ca_file: str, stream: str) -> dict[str, Any]:
    """Over TLS (connection string tls=true, tls_domain, tls_ca_file): send three, poll them back."""
    c = ig.IggyClient.from_connection_string(
        f"{url(port)}&tls=true&tls_domain=localhost&tls_ca_file={ca_file}")
    await bounded(c.connect())
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, "events", 1))
    await bounded(c.send_messages(stream, "events", 0, [ig.SendMessage(f"tls-{i}") for i in range(3)]))
    return {"polled": await poll(c, stream, "events", ig.PollingStrategy.Offset(0), 10)}


if __name__ == "__main__":
    main()
