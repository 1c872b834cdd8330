"""Test helpers for the Kafka protocol: a raw client on bayou's own codec (the behavioural suite's
adapter and the bad-input tests), the real clients' skips, and a broker whose V1 port serves Kafka."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bayou.protocols.kafka import codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import SUPPORTED, ApiKey
from bayou.protocols.kafka.framing import RequestHeader
from bayou.records.batch import Record, decode_records, encode_batch, iter_batches, refresh_crc
from support.brokers import BrokerProcess

_SIZE = struct.Struct(">i")
KCAT = shutil.which("kcat")
NO_KCAT = "kcat is not installed (Debian's kcat package: make test installs it)"


async def stored(c: KafkaConn, topic: str, partition: int = 0) -> list[bytes]:
    resp = await c.call(ApiKey.FETCH, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20,
                        session_epoch=-1, topics=[{"topic": topic, "partitions": [
                            {"partition": partition, "fetch_offset": 0, "current_leader_epoch": -1,
                             "last_fetched_epoch": -1, "log_start_offset": -1,
                             "partition_max_bytes": 1 << 20}]}])
    data = resp.responses[0].partitions[0].records or b""
    return [r.value for pos, _h in iter_batches(data) for r in decode_records(data, pos)]


def batch(*values: bytes, producer_id: int = -1, epoch: int = -1, sequence: int = -1) -> bytes:
    return encode_batch([Record(value=v, timestamp=1) for v in values], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence)


def txn_batch(*values: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    """A transactional producer's batch: attribute bit 4 set (inside the CRC)."""
    raw = bytearray(batch(*values, producer_id=producer_id, epoch=epoch, sequence=sequence))
    raw[22] |= 0x10
    refresh_crc(raw)
    return bytes(raw)


async def fetch_part(c: KafkaConn, topic: str, isolation: int) -> Any:
    resp = await c.call(ApiKey.FETCH, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20,
                        isolation_level=isolation, session_epoch=-1, topics=[{"topic": topic, "partitions": [
                            {"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                             "last_fetched_epoch": -1, "log_start_offset": -1,
                             "partition_max_bytes": 1 << 20}]}])
    return resp.responses[0].partitions[0]


async def produce(c: KafkaConn, topic: str, records: bytes, partition: int = 0, acks: int = -1,
                  transactional_id: str | None = None) -> Any:
    resp = await c.call(ApiKey.PRODUCE, acks=acks, timeout=5000, transactional_id=transactional_id,
                        topic_data=[{"name": topic,
                                     "partition_data": [{"index": partition, "records": records}]}])
    return resp.responses[0].partition_responses[0]


def read_values(c: Any, topic: str, partitions: int = 1, until: int | None = None,
                idle_s: float = 2.0, deadline_s: float = 30.0) -> dict[int, list[bytes]]:
    """Values per partition of ``topic`` read from the start with a confluent-kafka consumer
    ``c``: until ``until`` records in all, or (``until`` None) until nothing more comes for
    ``idle_s``; what came by ``deadline_s`` otherwise."""
    import time

    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + deadline_s
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        if until is not None and sum(map(len, got.values())) >= until:
            break
        m = c.poll(0.2)
        if m is None:
            if until is None and time.monotonic() - quiet_since > idle_s:
                break
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(m.error())
        got[m.partition()].append(m.value())
        quiet_since = time.monotonic()
    return got


@contextmanager
def running_broker(root: Path, *extra: str) -> Iterator[BrokerProcess]:
    """A broker subprocess (fsync=never) for a module's Kafka tests; its V1 port serves Kafka."""
    b = BrokerProcess(root / "data", *extra, fsync="never").start(timeout=90)
    try:
        yield b
    finally:
        b.stop()


def frame(api_key: int, version: int, correlation_id: int, body: Any, client_id: str = "bayou-test"
          ) -> bytes:
    """A whole request frame (size prefix included) of a kio body."""
    header = RequestHeader(api_key, version, correlation_id, client_id,
                           codec.request_is_flexible(api_key, version), 0)
    return codec.encode_request(header, body)


class KafkaConn:
    """One connection speaking Kafka: ``call`` sends a request built from fields (every version)
    and returns the decoded response body."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._ids = itertools.count(1)

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> KafkaConn:
        r, w = await asyncio.open_connection(host, port)
        return cls(r, w)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self, timeout: float = 10.0) -> bytes:
        """The next response frame, without its size."""
        (size,) = _SIZE.unpack(await asyncio.wait_for(self.reader.readexactly(4), timeout))
        return await asyncio.wait_for(self.reader.readexactly(size), timeout)

    async def call(self, api_key: ApiKey, version: int | None = None, *, wait_s: float = 10.0,
                   **fields: Any) -> Any:
        """(``timeout`` is a request field of Produce and the admin APIs: the reply's own wait is
        ``wait_s``.)"""
        v = SUPPORTED[api_key].max if version is None else version
        cid = next(self._ids)
        body = build(codec.request_schema(api_key, v), **fields)
        await self.send(frame(api_key, v, cid, body))
        got, resp = codec.decode_response(await self.recv(wait_s), api_key, v)
        assert got == cid, (got, cid)
        return resp

    async def is_closed(self, timeout: float = 5.0) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), timeout) == b""
        except (ConnectionError, TimeoutError):
            return True
