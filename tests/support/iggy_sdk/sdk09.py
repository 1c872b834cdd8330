"""apache-iggy 0.9.0 driver: ``.venv-iggy09/bin/python sdk09.py PORT SCENARIO [ARGS...]``.

Each scenario drives the SDK against the broker on 127.0.0.1:PORT and returns what it observed;
``common.main`` prints it as one JSON line for the pytest side (tests/integration/test_iggy_sdk09.py
and test_iggy_cross_protocol.py), which holds the assertions. Names passed as ARGS keep scenarios
independent of each other on a shared broker.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import struct
import time
from typing import Any

import apache_iggy as ig
from common import (
    RETRIES,
    RETRY_INTERVAL_MS,
    bounded,
    drain_consumers,
    error_of,
    main,
    messages,
    scenario,
)

# -- connecting ------------------------------------------------------------------------------------


def config(port: int, auto_login: Any = None) -> Any:
    return ig.TcpConfig(
        server_address=f"127.0.0.1:{port}",
        auto_login=auto_login if auto_login is not None else ig.AutoLogin.disabled(),
        # finite retries; reestablish_after (default 5 s) is the pause before reconnecting after
        # the server closed the connection, as it does after a refused V login (eviction)
        reconnection=ig.TcpReconnectionConfig(
            max_retries=RETRIES, interval=dt.timedelta(milliseconds=RETRY_INTERVAL_MS),
            reestablish_after=dt.timedelta(milliseconds=RETRY_INTERVAL_MS)),
        nodelay=True,
    )


async def client(port: int, *, login: bool = True) -> Any:
    c = ig.IggyClient(config(port))
    await bounded(c.connect())
    if login:
        await bounded(c.login_user("iggy", "iggy"))
    return c


# -- raw commands (no typed API in 0.9.0) ------------------------------------------------------------

GET_CONSUMER_OFFSET = 120
STORE_CONSUMER_OFFSET = 121
SINGLE, GROUP = 1, 2


def ident(v: int | str) -> bytes:
    """Identifier: kind u8 (1 numeric, 2 string), length u8, value."""
    if isinstance(v, int):
        return struct.pack("<BBI", 1, 4, v)
    b = v.encode()
    return struct.pack("<BB", 2, len(b)) + b


def offset_body(kind: int, consumer: int | str, stream: int | str, topic: int | str, partition: int) -> bytes:
    return bytes([kind]) + ident(consumer) + ident(stream) + ident(topic) + struct.pack("<BI", 1, partition)


async def get_offset(c: Any, kind: int, consumer: int | str, stream: str, topic: str,
                     partition: int) -> dict[str, int] | None:
    """GET_CONSUMER_OFFSET through send_binary_request: {partition, current, stored}, or None when
    nothing is stored (empty reply)."""
    raw = await bounded(c.send_binary_request(GET_CONSUMER_OFFSET,
                                              offset_body(kind, consumer, stream, topic, partition)))
    if not raw:
        return None
    p, current, stored = struct.unpack("<IQQ", raw[:20])
    return {"partition": p, "current": current, "stored": stored}


async def store_offset(c: Any, kind: int, consumer: int | str, stream: str, topic: str, partition: int,
                       offset: int) -> None:
    """STORE_CONSUMER_OFFSET: the GET body + u64 offset + u8 ack level (V, iggy.md H.24)."""
    body = offset_body(kind, consumer, stream, topic, partition) + struct.pack("<QB", offset, 1)
    await bounded(c.send_binary_request(STORE_CONSUMER_OFFSET, body))


# -- describing objects ------------------------------------------------------------------------------


def stream_info(s: Any) -> dict[str, Any]:
    return {"id": s.id, "name": s.name, "topics_count": s.topics_count, "messages_count": s.messages_count,
            "size": s.size, "created_at": s.created_at,
            "topics": [[t.id, t.name, t.messages_count] for t in getattr(s, "topics", [])]}


def topic_info(t: Any) -> dict[str, Any]:
    expiry, size = t.message_expiry, t.max_topic_size
    return {
        "id": t.id, "name": t.name, "partitions_count": t.partitions_count,
        "messages_count": t.messages_count, "size": t.size, "compression": str(t.compression_algorithm),
        "expiry": [type(expiry).__name__,
                   expiry.duration.total_seconds() if hasattr(expiry, "duration") else None],
        "max_size": [type(size).__name__, getattr(size, "bytes", None)],
        "partitions": [{"id": p.id, "messages_count": p.messages_count, "current_offset": p.current_offset,
                        "segments_count": p.segments_count} for p in t.partitions],
    }


def group_info(g: Any) -> dict[str, Any]:
    return {"id": g.id, "name": g.name, "partitions_count": g.partitions_count,
            "members_count": g.members_count,
            "members": sorted([m.id, sorted(m.partitions)] for m in g.members)}


def confirmations(r: Any) -> list[list[int]]:
    return [[c.stream_id, c.topic_id, c.partition_id, c.base_offset] for c in r.confirmations]


async def poll(c: Any, stream: str | int, topic: str | int, strategy: Any, count: int, *,
               consumer: Any = None, partition: int | None = 0, auto_commit: bool = False) -> list[Any]:
    ms = await bounded(c.poll_messages(
        stream, topic, consumer=consumer if consumer is not None else ig.Consumer.Single("reader"),
        polling_strategy=strategy, count=count, auto_commit=auto_commit, partition_id=partition))
    return messages(ms)


# -- scenarios ---------------------------------------------------------------------------------------


@scenario
async def login(port: int) -> dict[str, Any]:
    """Login, a wrong password, logout; auto-login and connection-string clients."""
    out: dict[str, Any] = {}
    c = ig.IggyClient(config(port))
    await bounded(c.connect())
    out["ping_before_login"] = await error_of(c.ping())
    out["streams_before_login"] = await error_of(c.get_streams())
    out["wrong_password"] = await error_of(c.login_user("iggy", "wrong-password"))
    out["unknown_user"] = await error_of(c.login_user("nobody", "secret"))
    out["login"] = await error_of(c.login_user("iggy", "iggy"))
    out["streams_after_login"] = await error_of(c.get_streams())
    out["logout"] = await error_of(c.logout_user())
    out["streams_after_logout"] = await error_of(c.get_streams())
    out["login_again"] = await error_of(c.login_user("iggy", "iggy"))
    out["streams_after_login_again"] = await error_of(c.get_streams())

    auto = ig.IggyClient(config(port, ig.AutoLogin.username_password("iggy", "iggy")))
    out["auto_login"] = await error_of(auto.connect())
    out["auto_login_streams"] = await error_of(auto.get_streams())
    bad = ig.IggyClient(config(port, ig.AutoLogin.username_password("iggy", "not-the-password")))
    out["auto_login_wrong"] = await error_of(bad.connect(), timeout=5)

    cs = ig.IggyClient.from_connection_string(
        f"iggy://iggy:iggy@127.0.0.1:{port}?reconnection_retries={RETRIES}"
        f"&reconnection_interval={RETRY_INTERVAL_MS}ms")
    out["connection_string"] = await error_of(cs.connect())
    out["connection_string_ping"] = await error_of(cs.ping())
    out["connection_string_streams"] = await error_of(cs.get_streams())
    return out


@scenario
async def catalog(port: int, stream: str) -> dict[str, Any]:
    """Streams and topics: ids, options (expiry, max size, compression), lookups, counts."""
    c = await client(port)
    out: dict[str, Any] = {"streams_before": sorted(s.id for s in await bounded(c.get_streams()))}
    await bounded(c.create_stream(stream))
    s = await bounded(c.get_stream(stream))
    out["stream"] = stream_info(s)
    out["stream_by_id"] = (await bounded(c.get_stream(s.id))).name
    out["duplicate_stream"] = await error_of(c.create_stream(stream))
    out["missing_stream_is_none"] = await bounded(c.get_stream(stream + "-missing")) is None

    await bounded(c.create_topic(
        stream, "orders", 3, compression_algorithm="gzip",
        message_expiry=ig.IggyExpiry.ExpireDuration(dt.timedelta(hours=1)),
        max_topic_size=ig.MaxTopicSize.Custom(10_000_000)))
    await bounded(c.create_topic(stream, "audit", 1, message_expiry=ig.IggyExpiry.NeverExpire(),
                                 max_topic_size=ig.MaxTopicSize.Unlimited()))
    await bounded(c.create_topic(stream, "plain", 2))
    out["duplicate_topic"] = await error_of(c.create_topic(stream, "orders", 1))
    out["zero_partitions"] = await error_of(c.create_topic(stream, "empty", 0))
    out["missing_topic_is_none"] = await bounded(c.get_topic(stream, "nope")) is None
    out["topics"] = {name: topic_info(await bounded(c.get_topic(stream, name)))
                     for name in ("orders", "audit", "plain")}
    out["topic_by_ids"] = (await bounded(c.get_topic(s.id, 0))).name
    out["topics_list"] = sorted([t.id, t.name, t.partitions_count]
                                for t in await bounded(c.get_topics(stream)))

    await bounded(c.send_messages(stream, "orders", 0, [ig.SendMessage(f"o-{i}") for i in range(4)]))
    await bounded(c.send_messages(stream, "orders", ig.Partitioning.partition_id(2),
                                  [ig.SendMessage(b"x" * 100), ig.SendMessage(b"y")]))
    out["orders_after_send"] = topic_info(await bounded(c.get_topic(stream, "orders")))
    out["stream_after_send"] = stream_info(await bounded(c.get_stream(stream)))
    out["streams_after"] = sorted([x.id, x.name, x.topics_count, x.messages_count]
                                  for x in await bounded(c.get_streams()))
    return out


@scenario
async def lifecycle(port: int, stream: str) -> dict[str, Any]:
    """Partitions added and removed, topic and stream updated, purged and deleted; the high-level
    producer creating its topic."""
    c = await client(port)
    out: dict[str, Any] = {}
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, "t", 2))
    await bounded(c.create_topic(stream, "other", 1))
    await bounded(c.send_messages(stream, "t", 0, [ig.SendMessage("a"), ig.SendMessage("b")]))
    await bounded(c.create_partitions(stream, "t", 2))
    out["after_create_partitions"] = topic_info(await bounded(c.get_topic(stream, "t")))
    await bounded(c.delete_partitions(stream, "t", 1))
    out["after_delete_partitions"] = topic_info(await bounded(c.get_topic(stream, "t")))
    out["update_topic"] = await error_of(c.update_topic(
        stream, "t", "renamed", compression_algorithm="gzip",
        message_expiry=ig.IggyExpiry.ExpireDuration(dt.timedelta(minutes=5)),
        max_topic_size=ig.MaxTopicSize.Custom(3_000_000)))
    out["old_name_is_none"] = await bounded(c.get_topic(stream, "t")) is None
    out["after_update_topic"] = topic_info(await bounded(c.get_topic(stream, "renamed")))
    out["update_topic_name_taken"] = await error_of(c.update_topic(stream, "renamed", "other"))
    await bounded(c.purge_topic(stream, "renamed"))
    out["after_purge_topic"] = topic_info(await bounded(c.get_topic(stream, "renamed")))
    await bounded(c.send_messages(stream, "renamed", 0, [ig.SendMessage("after-purge")]))
    out["poll_after_purge"] = await poll(c, stream, "renamed", ig.PollingStrategy.First(), 10)
    await bounded(c.update_stream(stream, stream + "-x"))
    out["renamed_stream"] = stream_info(await bounded(c.get_stream(stream + "-x")))
    await bounded(c.delete_topic(stream + "-x", "other"))
    out["deleted_topic_is_none"] = await bounded(c.get_topic(stream + "-x", "other")) is None
    await bounded(c.purge_stream(stream + "-x"))
    out["after_purge_stream"] = stream_info(await bounded(c.get_stream(stream + "-x")))
    await bounded(c.delete_stream(stream + "-x"))
    out["deleted_stream_is_none"] = await bounded(c.get_stream(stream + "-x")) is None
    out["streams_after_delete"] = [s.name for s in await bounded(c.get_streams())]

    producer = await bounded(c.producer(stream + "-p", "auto", topic_partitions_count=2))
    await bounded(producer.send([ig.SendMessage(f"p-{i}") for i in range(3)]))
    out["producer_topic"] = topic_info(await bounded(c.get_topic(stream + "-p", "auto")))
    return out


def batch1() -> list[Any]:
    """Three messages with user headers of every plain kind, typed headers and explicit ids."""
    return [
        ig.SendMessage(b"\x00\xff binary", {"s": "text", "i": 7, "neg": -3, "big": 2**40, "flag": True,
                                            "f": 1.5, "f64": 0.1, "raw": b"\x00\x01"}, id=1),
        ig.SendMessage("two \u2713", {
            ig.HeaderKey.String("u64"): ig.HeaderValue.UnsignedInt64(2**63),
            ig.HeaderKey.String("i128"): ig.HeaderValue.Int128(-(2**100)),
            ig.HeaderKey.String("f32"): ig.HeaderValue.Float32(0.25),
            5: "int key",
            b"\x01bk": "bytes key",
        }, id=2**128 - 1),
        ig.SendMessage("three"),  # no headers; id left to the client (UUIDv4)
    ]


@scenario
async def sendpoll(port: int, stream: str) -> dict[str, Any]:
    """Send with headers and ids, then every polling strategy and auto-commit."""
    c = await client(port)
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, "events", 2))
    out: dict[str, Any] = {"confirmations": []}
    out["confirmations"] += confirmations(await bounded(c.send_messages(stream, "events", 0, batch1())))
    await asyncio.sleep(0.05)  # batch 2 gets a later server timestamp
    out["confirmations"] += confirmations(await bounded(c.send_messages(stream, "events", 0, [
        ig.SendMessage("four", {"batch": 2}, id=4), ig.SendMessage("five", id=5),
        ig.SendMessage("six", id=6)])))
    out["confirmations"] += confirmations(await bounded(c.send_messages(
        stream, "events", 1, [ig.SendMessage("p1-a"), ig.SendMessage("p1-b")])))

    t, P = "events", ig.PollingStrategy
    out["all"] = await poll(c, stream, t, P.Offset(0), 100)
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
    out["no_partition"] = await poll(c, stream, t, P.First(), 1, partition=None)

    nc = ig.Consumer.Single("next-reader")
    out["next_no_commit"] = [await poll(c, stream, t, P.Next(), 2, consumer=nc) for _ in range(2)]
    out["offset_before_commit"] = await get_offset(c, SINGLE, "next-reader", stream, t, 0)
    out["next_commit"] = [await poll(c, stream, t, P.Next(), 4, consumer=nc, auto_commit=True)
                          for _ in range(3)]
    out["offset_after_commit"] = await get_offset(c, SINGLE, "next-reader", stream, t, 0)
    # a numeric consumer id is a different consumer with its own offsets
    out["next_numeric_consumer"] = await poll(c, stream, t, P.Next(), 1, consumer=ig.Consumer.Single(7),
                                              auto_commit=True)
    out["offset_numeric_consumer"] = await get_offset(c, SINGLE, 7, stream, t, 0)
    out["topic"] = topic_info(await bounded(c.get_topic(stream, t)))
    return out


@scenario
async def partitioning(port: int, stream: str) -> dict[str, Any]:
    """Balanced and messages-key partitioning (resolved by the 0.9 client, iggy.md C.10)."""
    c = await client(port)
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, "routed", 3))
    out: dict[str, Any] = {"balanced": [], "keyed": []}
    for i in range(6):
        r = await bounded(c.send_messages(stream, "routed", ig.Partitioning.balanced(),
                                          [ig.SendMessage(f"bal-{i}")]))
        out["balanced"].append(confirmations(r)[0][2])
    r = await bounded(c.send_messages(stream, "routed", ig.Partitioning.balanced(),
                                      [ig.SendMessage(f"batch-{i}") for i in range(3)]))
    out["balanced_batch"] = confirmations(r)
    keys = ["user-42", "user-7", "user-42", "a", "user-42", "b"]
    for i, key in enumerate(keys):
        r = await bounded(c.send_messages(stream, "routed", ig.Partitioning.messages_key(key),
                                          [ig.SendMessage(f"key-{key}-{i}")]))
        out["keyed"].append([key, confirmations(r)[0][2]])
    r = await bounded(c.send_messages(stream, "routed", ig.Partitioning.messages_key(b"\x00bin"),
                                      [ig.SendMessage("bin-key")]))
    out["binary_key"] = confirmations(r)[0][2]
    out["by_partition"] = [await poll(c, stream, "routed", ig.PollingStrategy.First(), 100, partition=p)
                           for p in range(3)]
    return out


@scenario
async def groups(port: int, stream: str) -> dict[str, Any]:
    """A 4-partition topic read by two members of one group: low level (join + group polls) and
    high level (consumer_group() on two clients)."""
    admin = await client(port)
    await bounded(admin.create_stream(stream))
    await bounded(admin.create_topic(stream, "work", 4))
    for p in range(4):
        await bounded(admin.send_messages(stream, "work", p,
                                          [ig.SendMessage(f"w-{i}") for i in range(40) if i % 4 == p]))
    out: dict[str, Any] = {}
    group = ig.Consumer.Group("g-low")
    a, b = await client(port), await client(port)
    await bounded(admin.create_consumer_group(stream, "work", "g-low"))
    out["low_created"] = group_info(await bounded(admin.get_consumer_group(stream, "work", "g-low")))
    await bounded(a.join_consumer_group(stream, "work", "g-low"))
    await bounded(b.join_consumer_group(stream, "work", "g-low"))
    out["low_joined"] = group_info(await bounded(admin.get_consumer_group(stream, "work", "g-low")))
    out["low_groups"] = [[g.id, g.name, g.members_count] for g in
                         await bounded(admin.get_consumer_groups(stream, "work"))]
    got: dict[str, list[Any]] = {"a": [], "b": []}
    idle = 0
    for _ in range(100):
        moved = False
        for name, cl in (("a", a), ("b", b)):
            ms = await poll(cl, stream, "work", ig.PollingStrategy.Next(), 3, consumer=group, partition=None,
                            auto_commit=True)
            got[name] += ms
            moved = moved or bool(ms)
        idle = 0 if moved else idle + 1
        if idle >= 4:  # each member polls one of its partitions per call
            break
    out["low_got"] = got
    out["low_offsets"] = [await get_offset(admin, GROUP, "g-low", stream, "work", p) for p in range(4)]
    out["low_non_member_poll"] = await error_of(admin.poll_messages(
        stream, "work", consumer=group, polling_strategy=ig.PollingStrategy.Next(), count=1,
        auto_commit=False))
    await bounded(a.leave_consumer_group(stream, "work", "g-low"))
    out["low_after_leave"] = group_info(await bounded(admin.get_consumer_group(stream, "work", "g-low")))

    c, d = await client(port), await client(port)
    kw: dict[str, Any] = {
        "batch_length": 4, "auto_commit": ig.AutoCommit.When(ig.AutoCommitWhen.PollingMessages()),
        "poll_interval": dt.timedelta(milliseconds=50),
        "polling_retry_interval": dt.timedelta(milliseconds=100),
        "init_retries": 3, "init_retry_interval": dt.timedelta(milliseconds=100)}
    cc = await bounded(c.consumer_group("g-high", stream, "work", **kw))
    dc = await bounded(d.consumer_group("g-high", stream, "work", **kw))
    out["high_joined"] = group_info(await bounded(admin.get_consumer_group(stream, "work", "g-high")))
    out["high_got"] = await drain_consumers([cc, dc], 40)
    out["high_offsets"] = [await get_offset(admin, GROUP, "g-high", stream, "work", p) for p in range(4)]
    return out


@scenario
async def restart_a(port: int, stream: str) -> dict[str, Any]:
    """Before a broker restart: store offsets by auto-commit, by STORE_CONSUMER_OFFSET and by
    IggyConsumer.store_offset, for a regular consumer and for groups."""
    c = await client(port)
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, "durable", 2))
    await bounded(c.send_messages(stream, "durable", 0, [ig.SendMessage(f"d0-{i}") for i in range(10)]))
    await bounded(c.send_messages(stream, "durable", 1, [ig.SendMessage(f"d1-{i}") for i in range(6)]))
    keeper, P = ig.Consumer.Single("keeper"), ig.PollingStrategy
    out: dict[str, Any] = {}
    out["keeper_p0"] = await poll(c, stream, "durable", P.Next(), 4, consumer=keeper, auto_commit=True)
    await store_offset(c, SINGLE, "keeper", stream, "durable", 1, 2)
    await bounded(c.create_consumer_group(stream, "durable", "g-durable"))
    await bounded(c.join_consumer_group(stream, "durable", "g-durable"))
    out["group_p1"] = await poll(c, stream, "durable", P.Next(), 3, consumer=ig.Consumer.Group("g-durable"),
                                 partition=1, auto_commit=True)
    hl = ig.IggyClient(config(port, ig.AutoLogin.username_password("iggy", "iggy")))
    await bounded(hl.connect())
    consumer = await bounded(hl.consumer_group(
        "g-stored", stream, "durable", auto_commit=ig.AutoCommit.Disabled(), init_retries=3,
        init_retry_interval=dt.timedelta(milliseconds=100)))
    await bounded(consumer.store_offset(6, 0))
    out["offsets"] = {
        "keeper": [await get_offset(c, SINGLE, "keeper", stream, "durable", p) for p in range(2)],
        "g-durable": [await get_offset(c, GROUP, "g-durable", stream, "durable", p) for p in range(2)],
        "g-stored": [await get_offset(c, GROUP, "g-stored", stream, "durable", p) for p in range(2)],
    }
    return out


@scenario
async def restart_b(port: int, stream: str) -> dict[str, Any]:
    """After the restart: the stored offsets are back and Next continues after them."""
    c = await client(port)
    P = ig.PollingStrategy
    out: dict[str, Any] = {
        "topic": topic_info(await bounded(c.get_topic(stream, "durable"))),
        "groups": sorted(g.name for g in await bounded(c.get_consumer_groups(stream, "durable"))),
        "offsets": {
            "keeper": [await get_offset(c, SINGLE, "keeper", stream, "durable", p) for p in range(2)],
            "g-durable": [await get_offset(c, GROUP, "g-durable", stream, "durable", p) for p in range(2)],
            "g-stored": [await get_offset(c, GROUP, "g-stored", stream, "durable", p) for p in range(2)],
        },
    }
    keeper = ig.Consumer.Single("keeper")
    out["keeper"] = [await poll(c, stream, "durable", P.Next(), 100, consumer=keeper, partition=p)
                     for p in range(2)]
    out["members_after_restart"] = group_info(
        await bounded(c.get_consumer_group(stream, "durable", "g-durable")))
    for group in ("g-durable", "g-stored"):
        await bounded(c.join_consumer_group(stream, "durable", group))
        out[group] = [await poll(c, stream, "durable", P.Next(), 100, consumer=ig.Consumer.Group(group),
                                 partition=p) for p in range(2)]
    return out


@scenario
async def stats(port: int) -> dict[str, Any]:
    """GET_STATS next to what the getters report at the same moment (nothing else runs)."""
    c = await client(port)
    _other = await client(port)  # a second connected client
    st = await bounded(c.get_stats())
    streams = await bounded(c.get_streams())
    topics = [(s.id, t) for s in streams for t in await bounded(c.get_topics(s.id))]
    groups_count = 0
    for sid, t in topics:
        groups_count += len(await bounded(c.get_consumer_groups(sid, t.id)))
    return {
        "stats": {k: getattr(st, k) for k in (
            "process_id", "cpu_usage", "total_cpu_usage", "memory_usage", "total_memory", "available_memory",
            "read_bytes", "written_bytes", "messages_size_bytes", "streams_count", "topics_count",
            "partitions_count", "segments_count", "messages_count", "clients_count", "consumer_groups_count",
            "hostname", "os_name", "os_version", "kernel_version", "iggy_server_version",
            "iggy_server_semver", "threads_count", "free_disk_space", "total_disk_space", "start_time")},
        "run_time_s": st.run_time.total_seconds(),
        "cache_metrics": len(st.cache_metrics),
        "expected": {
            "streams_count": len(streams), "topics_count": len(topics),
            "partitions_count": sum(t.partitions_count for _s, t in topics),
            "messages_count": sum(s.messages_count for s in streams),
            "messages_size_bytes": sum(s.size for s in streams),
            "consumer_groups_count": groups_count,
        },
        "now_us": int(time.time() * 1e6),
    }


@scenario
async def xp_send(port: int, stream: str, topic: str) -> dict[str, Any]:
    """For the cross-protocol test: create STREAM/TOPIC (2 partitions), send plain messages with
    headers to partition 0 and keyed ones, then consume 2 as group ``gx`` with auto-commit."""
    c = await client(port)
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, topic, 2))
    out: dict[str, Any] = {"sent": []}
    r = await bounded(c.send_messages(stream, topic, 0, [
        ig.SendMessage(f"iggy-{i}", {"trace": f"t{i}", "n": i}, id=1000 + i) for i in range(4)]))
    out["sent"] += confirmations(r)
    r = await bounded(c.send_messages(stream, topic, ig.Partitioning.messages_key("cust-1"), [
        ig.SendMessage("keyed-0", {"k": True}), ig.SendMessage("keyed-1")]))
    out["sent"] += confirmations(r)
    await bounded(c.create_consumer_group(stream, topic, "gx"))
    await bounded(c.join_consumer_group(stream, topic, "gx"))
    out["group_polled"] = await poll(c, stream, topic, ig.PollingStrategy.Next(), 2,
                                     consumer=ig.Consumer.Group("gx"), partition=0, auto_commit=True)
    out["stream"] = stream_info(await bounded(c.get_stream(stream)))
    return out


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
        "last": None if t is None else await poll(c, stream, topic, ig.PollingStrategy.Last(), 1),
        "by_ids": None if s is None or t is None else await poll(
            c, s.id, t.id, ig.PollingStrategy.Offset(0), 1000),
        "timestamp_zero": None if t is None else await poll(
            c, stream, topic, ig.PollingStrategy.Timestamp(0), 1000),
    }


@scenario
async def pat_login(port: int, token: str, stream: str) -> dict[str, Any]:
    """Log in with a personal access token through ``AutoLogin.personal_access_token`` (a Register
    whose header code is 0 and whose body holds the token), use the session, and try a wrong token."""
    out: dict[str, Any] = {}
    c = ig.IggyClient(config(port, ig.AutoLogin.personal_access_token(token)))
    out["connect"] = await error_of(c.connect())
    out["create_stream"] = await error_of(c.create_stream(stream))
    s = await bounded(c.get_stream(stream))
    out["stream"] = None if s is None else s.name
    bad = ig.IggyClient(config(port, ig.AutoLogin.personal_access_token(token[:-1] + "x")))
    out["wrong_token"] = await error_of(bad.connect(), timeout=5)
    return out



@scenario
async def tls_sendpoll(port: int, ca_file: str, stream: str) -> dict[str, Any]:
    """Over TLS (TcpConfig tls_*): log in, send three messages, poll them back."""
    c = ig.IggyClient(ig.TcpConfig(
        server_address=f"127.0.0.1:{port}", auto_login=ig.AutoLogin.disabled(), nodelay=True,
        reconnection=ig.TcpReconnectionConfig(max_retries=RETRIES,
                                              interval=dt.timedelta(milliseconds=RETRY_INTERVAL_MS)),
        tls_enabled=True, tls_domain="localhost", tls_ca_file=ca_file))
    await bounded(c.connect())
    await bounded(c.login_user("iggy", "iggy"))
    await bounded(c.create_stream(stream))
    await bounded(c.create_topic(stream, "events", 1))
    await bounded(c.send_messages(stream, "events", 0, [ig.SendMessage(f"tls-{i}") for i in range(3)]))
    return {"polled": await poll(c, stream, "events", ig.PollingStrategy.Offset(0), 10)}


if __name__ == "__main__":
    main()
