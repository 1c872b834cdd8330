"""``Client`` (blocking) and ``AsyncClient`` (asyncio): admin, offsets, groups and the raw data
calls the producer, the consumer and the Spark source are built on. Both run the operations of
``bayou.client.ops`` over one connection each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from bayou.client import ops
from bayou.client.connection import AsyncConnection, Connection
from bayou.client.errors import error_for
from bayou.client.ops import GroupDescription, PartitionOffsets, Raw, RawMany, TopicDescription
from bayou.client.tls import TlsConfig
from bayou.client.wire import HeaderList, codec
from bayou.protocols.iggy import messages as m
from bayou.records.compression import Compression


class Client:
    """A blocking client on one connection; safe to share between threads.

    ``bootstrap`` is ``host:port`` of a broker's Iggy listener (several, comma-separated: the
    first that answers). ``username``/``password`` are an Iggy user's (the root user by default).
    """

    def __init__(self, bootstrap: str = "127.0.0.1:8090", *, username: str = "iggy",
                 password: str = "iggy", timeout: float = 30.0, tls: TlsConfig | None = None) -> None:
        self.conn = Connection(bootstrap, username=username, password=password, timeout=timeout, tls=tls)
        self.resolver = ops.Resolver()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def _call(self, req: Any) -> Any:
        if isinstance(req, Raw):
            status, payload = self.conn.raw(req.frame)
            if status:
                raise error_for(status, req.what)
            return payload
        if isinstance(req, RawMany):
            return self.conn.raw_many(req.frames)
        return self.conn.call(req)

    def run(self, op: ops.Op[Any]) -> Any:
        with self.conn.lock:
            return ops.run_sync(self._call, op)

    def ping(self) -> None:
        self.conn.call(m.Ping())

    # -- topics ----------------------------------------------------------------------------------

    def list_topics(self) -> list[str]:
        result: list[str] = self.run(ops.list_topics())
        return result

    def create_topic(self, topic: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        """Create ``topic`` with per-topic config (Kafka-style keys: ``retention.ms``,
        ``segment.bytes``, ``message.deduplication``, ...)."""
        self.run(ops.create_topic(self.resolver, topic, partitions, config))

    def delete_topic(self, topic: str) -> None:
        self.run(ops.delete_topic(self.resolver, topic))

    def create_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (never shrinks)."""
        self.run(ops.create_partitions(self.resolver, topic, total))

    def describe_topic(self, topic: str) -> TopicDescription:
        result: TopicDescription = self.run(ops.describe_topic(self.resolver, topic))
        return result

    def partition_count(self, topic: str) -> int:
        return self.describe_topic(topic).partition_count

    # -- offsets ---------------------------------------------------------------------------------

    def partition_offsets(self, topic: str, partition: int) -> PartitionOffsets:
        result: PartitionOffsets = self.run(ops.partition_offset(self.resolver, topic, partition))
        return result

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.partition_offsets(topic, partition).earliest

    def latest_offset(self, topic: str, partition: int) -> int:
        return self.partition_offsets(topic, partition).latest

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is at or after ``timestamp_ms``; None if none is."""
        result: int | None = self.run(ops.offset_for_time(self.resolver, topic, partition, timestamp_ms))
        return result

    # -- data ------------------------------------------------------------------------------------

    def fetch_arrow(self, topic: str, partition: int, offset: int, max_records: int = 10_000, *,
                    end_offset: int | None = None, include_headers: bool = True,
                    max_wait_ms: int = 0) -> pa.RecordBatch:
        """Up to ``max_records`` records from ``offset`` (from the first stored one if ``offset``
        is below the log start; compare the first row's offset to notice), as a record batch in
        ``KAFKA_SCHEMA``; rows at or past ``end_offset`` are left out. ``max_wait_ms``: when
        nothing is there yet, wait at the broker up to that long for a record (cut to half the
        connection's ``timeout``; a broker without bayou's wait answers at once)."""
        max_wait_ms = min(max_wait_ms, int(self.conn.timeout * 500))
        op = ops.fetch_arrow(self.resolver, topic, partition, offset, max_records, end_offset,
                             include_headers, max_wait_ms=max_wait_ms)
        result: pa.RecordBatch = self.run(op)
        return result

    def fetch_arrow_many(self, wants: Sequence[tuple[str, int, int, int]], *, include_headers: bool = True,
                         max_wait_ms: int = 0) -> list[pa.RecordBatch]:
        """``fetch_arrow`` of several partitions, each (topic, partition, offset, max records), in
        one request (bayou's POLL_PARTITIONS; to an older bayou, the polls pipelined in one round
        trip); the batches in the order asked. ``max_wait_ms``: when none of them has a record
        yet, the broker answers once one has, or when the time passes (cut to half the
        connection's ``timeout``)."""
        max_wait_ms = min(max_wait_ms, int(self.conn.timeout * 500))
        result: list[pa.RecordBatch] = self.run(ops.fetch_arrow_many(self.resolver, wants, include_headers,
                                                                     max_wait_ms))
        return result

    def wait_for_messages(self, positions: dict[str, dict[int, int]], max_wait_ms: int) -> int:
        """Block until a partition of ``positions`` (topic -> partition -> next offset to read)
        holds a message at or past that offset, or ``max_wait_ms`` passes (at most 30 s); how
        many do. A server-side wait: bayou's extension of Iggy's protocol (WAIT_FOR_MESSAGES).
        The wait is cut to half the connection's ``timeout``, so the reply comes before it."""
        max_wait_ms = min(max_wait_ms, int(self.conn.timeout * 500))
        result: int = self.run(ops.wait_for_messages(self.resolver, positions, max_wait_ms))
        return result

    def send(self, topic: str, partition: int, values: Sequence[bytes | None],
             keys: Sequence[bytes | None] | None = None, headers: Sequence[HeaderList] | None = None,
             message_ids: Sequence[int] | None = None, *, compression: str | Compression = "none") -> None:
        """Append ``values`` (in order) to one partition, acknowledged once stored (on disk under
        ``fsync=always``). ``message_ids`` are u128; see ``message.deduplication``.
        ``compression`` (none, gzip, snappy, lz4, zstd) compresses the whole send on the wire."""
        self.run(ops.send(self.resolver, topic, partition, values, keys, headers, message_ids,
                          compression=codec(compression)))

    # -- groups ----------------------------------------------------------------------------------

    def list_groups(self, topic: str) -> list[str]:
        result: list[str] = self.run(ops.list_groups(self.resolver, topic))
        return result

    def describe_group(self, group: str, topic: str) -> GroupDescription:
        result: GroupDescription = self.run(ops.describe_group(self.resolver, group, topic))
        return result

    def delete_group(self, group: str, topic: str) -> None:
        self.run(ops.delete_group(self.resolver, group, topic))

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offsets per partition (the next offset it will read)."""
        result: dict[int, int] = self.run(ops.committed(self.resolver, group, topic))
        return result

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        self.run(ops.commit(self.resolver, group, topic, offsets))

    def lag(self, group: str, topic: str) -> dict[int, int]:
        """Records per partition between the group's committed offset and the log end."""
        result: dict[int, int] = self.run(ops.lag(self.resolver, group, topic))
        return result


class AsyncClient:
    """The asyncio twin of ``Client`` (same methods, awaited)."""

    def __init__(self, bootstrap: str = "127.0.0.1:8090", *, username: str = "iggy",
                 password: str = "iggy", timeout: float = 30.0, tls: TlsConfig | None = None) -> None:
        self.conn = AsyncConnection(bootstrap, username=username, password=password, timeout=timeout,
                                    tls=tls)
        self.resolver = ops.Resolver()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.conn.close()

    async def _call(self, req: Any) -> Any:
        if isinstance(req, Raw):
            status, payload = await self.conn.raw(req.frame)
            if status:
                raise error_for(status, req.what)
            return payload
        if isinstance(req, RawMany):
            return await self.conn.raw_many(req.frames)
        return await self.conn.call(req)

    async def run(self, op: ops.Op[Any]) -> Any:
        return await ops.run_async(self._call, op)

    async def ping(self) -> None:
        await self.conn.call(m.Ping())

    async def list_topics(self) -> list[str]:
        result: list[str] = await self.run(ops.list_topics())
        return result

    async def create_topic(self, topic: str, partitions: int = 1,
                           config: dict[str, str] | None = None) -> None:
        await self.run(ops.create_topic(self.resolver, topic, partitions, config))

    async def delete_topic(self, topic: str) -> None:
        await self.run(ops.delete_topic(self.resolver, topic))

    async def create_partitions(self, topic: str, total: int) -> None:
        await self.run(ops.create_partitions(self.resolver, topic, total))

    async def describe_topic(self, topic: str) -> TopicDescription:
        result: TopicDescription = await self.run(ops.describe_topic(self.resolver, topic))
        return result

    async def partition_count(self, topic: str) -> int:
        return (await self.describe_topic(topic)).partition_count

    async def partition_offsets(self, topic: str, partition: int) -> PartitionOffsets:
        result: PartitionOffsets = await self.run(ops.partition_offset(self.resolver, topic, partition))
        return result

    async def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        result: int | None = await self.run(ops.offset_for_time(self.resolver, topic, partition,
                                                                timestamp_ms))
        return result

    async def fetch_arrow(self, topic: str, partition: int, offset: int, max_records: int = 10_000, *,
                          end_offset: int | None = None, include_headers: bool = True,
                          max_wait_ms: int = 0) -> pa.RecordBatch:
        max_wait_ms = min(max_wait_ms, int(self.conn.timeout * 500))
        result: pa.RecordBatch = await self.run(ops.fetch_arrow(self.resolver, topic, partition, offset,
                                                                max_records, end_offset, include_headers,
                                                                max_wait_ms=max_wait_ms))
        return result

    async def fetch_arrow_many(self, wants: Sequence[tuple[str, int, int, int]], *,
                               include_headers: bool = True, max_wait_ms: int = 0) -> list[pa.RecordBatch]:
        max_wait_ms = min(max_wait_ms, int(self.conn.timeout * 500))
        result: list[pa.RecordBatch] = await self.run(ops.fetch_arrow_many(self.resolver, wants,
                                                                            include_headers, max_wait_ms))
        return result

    async def send(self, topic: str, partition: int, values: Sequence[bytes | None],
                   keys: Sequence[bytes | None] | None = None, headers: Sequence[HeaderList] | None = None,
                   message_ids: Sequence[int] | None = None, *,
                   compression: str | Compression = "none") -> None:
        await self.run(ops.send(self.resolver, topic, partition, values, keys, headers, message_ids,
                                compression=codec(compression)))

    async def list_groups(self, topic: str) -> list[str]:
        result: list[str] = await self.run(ops.list_groups(self.resolver, topic))
        return result

    async def committed(self, group: str, topic: str) -> dict[int, int]:
        result: dict[int, int] = await self.run(ops.committed(self.resolver, group, topic))
        return result

    async def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        await self.run(ops.commit(self.resolver, group, topic, offsets))

    async def lag(self, group: str, topic: str) -> dict[int, int]:
        result: dict[int, int] = await self.run(ops.lag(self.resolver, group, topic))
        return result
