"""Producers: records batched per partition by size and linger, sent by one background thread
(``Producer``) or task (``AsyncProducer``), several partitions' batches pipelined on one connection.

Partitioning follows Iggy's messages-key rule (xxHash32 of the key modulo the partition count), so a
key lands where an Iggy client's messages-key send of the same key does; unkeyed records go
round-robin, one batch at a time (Kafka's sticky partitioner).

Idempotence: with ``idempotent=True`` each message carries the id ``producer_id << 64 | sequence``
(one random 64-bit producer id per producer, one sequence per partition, from 1). On a topic
created with ``message.deduplication=true`` the broker stores a message only if its sequence is
above the last one it stored for that producer, so a batch resent after a lost reply or a
reconnect is stored once.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import xxhash

from bayou.client import ops
from bayou.client.client import AsyncClient, Client
from bayou.client.errors import BayouClientError, BrokerConnectionError, error_for
from bayou.client.tls import TlsConfig
from bayou.client.wire import HeaderList, UniformSend, codec, prepare_send
from bayou.records.compression import Compression


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition of ``key`` (xxHash32 modulo the count, as Iggy's messages-key sends)."""
    return xxhash.xxh32_intdigest(key) % partitions


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record went. The legacy transport's send reply carries no offset, so there is none."""

    topic: str
    partition: int


@dataclass(slots=True)
class _Batch:
    topic: str
    partition: int
    values: list[bytes | None] = field(default_factory=list)
    keys: list[bytes | None] | None = None  # made when the first key arrives
    headers: list[HeaderList] | None = None  # made when the first headers arrive
    future: Future[RecordMetadata] = field(default_factory=Future)
    size: int = 0
    created: float = field(default_factory=time.monotonic)

    def add_extras(self, key: bytes | None, headers: HeaderList | None) -> None:
        """Record the key and headers of the value just appended (the slow path)."""
        n = len(self.values)
        if key is not None and self.keys is None:
            self.keys = [None] * (n - 1)
        if self.keys is not None:
            self.keys.append(key)
            self.size += len(key) if key else 0
        if headers and self.headers is None:
            self.headers = [()] * (n - 1)
        if self.headers is not None:
            self.headers.append(headers or ())


class _Accumulator:
    """Open batches per (topic, partition) plus the partition choice; shared by both producers."""

    def __init__(self, batch_size: int, max_batch_records: int, idempotent: bool) -> None:
        self.batch_size = batch_size
        self.max_batch_records = max_batch_records
        self.open: dict[tuple[str, int], _Batch] = {}
        self.sticky: dict[str, int] = {}
        self.producer_id = secrets.randbits(63) | 1 if idempotent else 0
        self.sequences: dict[tuple[str, int], int] = {}

    def choose(self, topic: str, key: bytes | None, partitions: int) -> int:
        if key is not None:
            return xxhash.xxh32_intdigest(key) % partitions  # partition_for_key, inline
        p = self.sticky.get(topic)
        if p is None or p >= partitions:
            p = secrets.randbelow(partitions)
            self.sticky[topic] = p
        return p

    def add(self, topic: str, partition: int, value: bytes | None, key: bytes | None,
            headers: HeaderList | None) -> tuple[_Batch, bool]:
        """Add one record to its partition's open batch; return the batch and whether it became
        full (and so is no longer open)."""
        b = self.open.get((topic, partition))
        if b is None:
            b = self.open[(topic, partition)] = _Batch(topic, partition)
        b.values.append(value)
        b.size += (len(value) if value is not None else 0) + 64
        if key is not None and b.keys is not None and not headers and b.headers is None:
            b.keys.append(key)  # the common keyed case, inline
            b.size += len(key)
        elif key is not None or headers or b.keys is not None or b.headers is not None:
            b.add_extras(key, headers)
        if b.size >= self.batch_size or len(b.values) >= self.max_batch_records:
            del self.open[(topic, partition)]
            if key is None:  # sticky partitioner: the next unkeyed batch goes elsewhere
                self.sticky.pop(topic, None)
            return b, True
        return b, False

    def due(self, linger_s: float, now: float, everything: bool = False) -> list[_Batch]:
        out = [b for b in self.open.values() if everything or now - b.created >= linger_s]
        for b in out:
            del self.open[(b.topic, b.partition)]
            self.sticky.pop(b.topic, None)
        return out

    def ids(self, b: _Batch) -> range | None:
        """The batch's message ids: the producer's next sequences for its partition (a range,
        which the wire encoder turns into columns without a Python int per message)."""
        if not self.producer_id:
            return None
        start = self.sequences.get((b.topic, b.partition), 0)
        self.sequences[(b.topic, b.partition)] = start + len(b.values)
        base = self.producer_id << 64
        return range(base | (start + 1), (base | (start + 1)) + len(b.values))


class Producer:
    """A blocking producer. ``send`` queues a record and returns a future; a background thread
    sends each partition's batch when it reaches ``batch_size`` bytes (or ``max_batch_records``)
    or has waited ``linger_ms``. ``flush`` waits for everything queued; ``close`` flushes.

    ``acks``: 1 (or "all", the same on a single broker) completes a future when the broker has
    stored the batch (on disk under ``fsync=always``); 0 completes it once the batch is written to
    the socket, without waiting for the broker.

    ``compression`` (none, gzip, snappy, lz4, zstd) compresses each batch as a whole on the wire
    (``protocols.iggy.compressed``); the broker stores the records themselves, readable by every
    protocol.
    """

    def __init__(self, bootstrap: str = "127.0.0.1:8090", *, username: str = "iggy", password: str = "iggy",
                 linger_ms: float = 5.0, batch_size: int = 1 << 20, max_batch_records: int = 10_000,
                 acks: int | str = 1, idempotent: bool = False, retries: int = 3,
                 timeout: float = 30.0, compression: str | Compression = "none",
                 tls: TlsConfig | None = None) -> None:
        if str(acks) not in ("0", "1", "all", "-1"):
            raise ValueError(f"acks must be 0, 1 or all, not {acks!r}")
        self.compression = codec(compression)
        self.client = Client(bootstrap, username=username, password=password, timeout=timeout, tls=tls)
        self.acks = 0 if str(acks) == "0" else 1
        self.linger_s = linger_ms / 1000
        self.retries = retries
        self._acc = _Accumulator(batch_size, max_batch_records, idempotent)
        self._ready: list[_Batch] = []
        self._partitions: dict[str, int] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._inflight = 0
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bayou-producer", daemon=True)
        self._thread.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions_for(self, topic: str) -> int:
        n = self._partitions.get(topic)
        if n is None:
            n = self._partitions[topic] = self.client.partition_count(topic)
        return n

    def send(self, topic: str, value: bytes | None, *, key: bytes | None = None,
             headers: HeaderList | None = None, partition: int | None = None) -> Future[RecordMetadata]:
        """Queue one record; the future gives its topic and partition once sent (or the error).
        Records batched together share one future. Any key (None, empty, longer than Iggy's 255
        bytes), value (None is Kafka's null, a tombstone; b"" is empty) and header value is
        carried exactly (as bayou's record envelope where Iggy cannot carry it itself)."""
        if self._closed:
            raise BayouClientError("producer is closed")
        if partition is None:
            n = self._partitions.get(topic)
            partition = self._acc.choose(topic, key, n if n is not None else self.partitions_for(topic))
        with self._lock:
            batch, full = self._acc.add(topic, partition, value, key, headers)
            if full:
                self._ready.append(batch)
                self._inflight += 1
                self._cond.notify_all()
            elif len(batch.values) == 1:
                # a new batch: the sender may be asleep with no deadline (nothing was open), so
                # wake it to start this batch's linger clock; the future then completes once the
                # batch is acknowledged, without a flush
                self._cond.notify_all()
        return batch.future

    def send_batch(self, topic: str, partition: int, values: Sequence[bytes]) -> None:
        """Send ``values`` to one partition now, bypassing the accumulator (ordered after nothing
        queued earlier for it: call ``flush`` first if that matters)."""
        b = _Batch(topic, partition, list(values))
        self._send([b])
        b.future.result()

    def flush(self, timeout: float | None = None) -> None:
        with self._cond:
            for b in self._acc.due(0, 0, everything=True):
                self._ready.append(b)
                self._inflight += 1
            self._cond.notify_all()
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._inflight and self._error is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("flush timed out")
                self._cond.wait(left)
        if self._error is not None:
            raise BayouClientError(f"producer failed: {self._error}")

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join(5)
            self.client.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not self._closed:
                    now = time.monotonic()
                    due = self._acc.due(self.linger_s, now)
                    if due:
                        self._ready.extend(due)
                        self._inflight += len(due)
                        break
                    oldest = min((b.created for b in self._acc.open.values()), default=None)
                    self._cond.wait(None if oldest is None else max(oldest + self.linger_s - now, 0.0005))
                if self._closed and not self._ready:
                    return
                batches, self._ready = self._ready, []
            try:
                self._send(batches)
            finally:
                with self._cond:
                    self._inflight -= len(batches)
                    self._cond.notify_all()

    def _send(self, batches: list[_Batch]) -> None:
        """Pipeline one frame per batch, then read the replies in order; retry what failed to
        get an answer (same message ids, so an idempotent producer stores it once)."""
        frames: list[bytes | UniformSend] = []
        for b in batches:
            ids = self._acc.ids(b)
            try:
                addr: ops.Address = self.client.run(self.client.resolver.address(b.topic))
                frames.append(prepare_send(*addr, b.partition, b.values, b.keys, b.headers, ids,
                                           compression=self.compression))
            except (BayouClientError, ValueError) as exc:
                frames.append(b"")
                _fail(b, exc)
        pending = [(b, f) for b, f in zip(batches, frames, strict=True) if f]
        attempt = 0
        while pending:
            try:
                with self.client.conn.lock:
                    self.client.conn.send_frames([f for _b, f in pending])
                    if self.acks == 0:
                        for b, _f in pending:
                            _done(b)
                    replies = [self.client.conn.read_reply() for _ in pending]
            except BrokerConnectionError as exc:
                attempt += 1
                if attempt > self.retries:
                    for b, _f in pending:
                        _fail(b, exc)
                    self._error = exc
                    return
                time.sleep(min(0.05 * 2 ** attempt, 1.0))
                continue
            for (b, _f), (status, _payload) in zip(pending, replies, strict=True):
                if status:
                    _fail(b, error_for(status, f"send {b.topic}/{b.partition}"))
                elif self.acks:
                    _done(b)
            return


def _done(b: _Batch) -> None:
    if not b.future.done():
        b.future.set_result(RecordMetadata(b.topic, b.partition))


def _fail(b: _Batch, exc: BaseException) -> None:
    if not b.future.done():
        b.future.set_exception(exc)


class AsyncProducer:
    """The asyncio producer: ``await send(...)`` queues a record and returns an awaitable of its
    ``RecordMetadata``; a task sends batches by size and linger, as ``Producer`` does."""

    def __init__(self, bootstrap: str = "127.0.0.1:8090", *, username: str = "iggy", password: str = "iggy",
                 linger_ms: float = 5.0, batch_size: int = 1 << 20, max_batch_records: int = 10_000,
                 idempotent: bool = False, timeout: float = 30.0,
                 compression: str | Compression = "none", tls: TlsConfig | None = None) -> None:
        self.compression = codec(compression)
        self.client = AsyncClient(bootstrap, username=username, password=password, timeout=timeout, tls=tls)
        self.linger_s = linger_ms / 1000
        self._acc = _Accumulator(batch_size, max_batch_records, idempotent)
        self._partitions: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._linger_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send(self, topic: str, value: bytes | None, *, key: bytes | None = None,
                   headers: HeaderList | None = None, partition: int | None = None
                   ) -> asyncio.Future[RecordMetadata]:
        if partition is None:
            n = self._partitions.get(topic)
            if n is None:
                n = self._partitions[topic] = await self.client.partition_count(topic)
            partition = self._acc.choose(topic, key, n)
        batch, full = self._acc.add(topic, partition, value, key, headers)
        if full:
            self._spawn(batch)
        elif self._linger_task is None or self._linger_task.done():
            self._linger_task = asyncio.create_task(self._linger())
        return asyncio.wrap_future(batch.future)

    def _spawn(self, b: _Batch) -> None:
        t = asyncio.create_task(self._send(b))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _linger(self) -> None:
        while self._acc.open:
            await asyncio.sleep(self.linger_s)
            for b in self._acc.due(self.linger_s, time.monotonic()):
                self._spawn(b)

    async def _send(self, b: _Batch) -> None:
        try:
            await self.client.send(b.topic, b.partition, b.values, b.keys, b.headers,
                                   self._acc.ids(b), compression=self.compression)
        except BayouClientError as exc:
            _fail(b, exc)
        else:
            _done(b)

    async def flush(self) -> None:
        for b in self._acc.due(0, 0, everything=True):
            self._spawn(b)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        await self.flush()
        if self._linger_task is not None:
            self._linger_task.cancel()
        await self.client.close()
