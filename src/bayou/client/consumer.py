"""The consumer: assign partitions or join a group, poll records (or Arrow batches), commit, seek.

A group here is an Iggy consumer group of the topic (bayou knows it as ``iggy.<topic>.<group>``,
so an Iggy client of the same group shares its members, partitions and offsets). The broker deals
partitions to the members and rebalances when one joins or leaves (or its connection drops); the
consumer re-reads its share every ``rebalance_check_ms`` and on every commit. Committed offsets
follow Kafka's convention (the next offset to read); Iggy stores the last consumed one.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from bayou.client import ops
from bayou.client.client import Client
from bayou.client.errors import BayouClientError
from bayou.client.tls import TlsConfig
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Status

WAIT_SLICE_S = 1.0  # the longest one wait at the broker lasts (positions and assignment are re-read)
AHEAD_BYTES = 1 << 20  # what a fetch ahead asks for, about (Kafka's max.partition.fetch.bytes)
AHEAD_TOTAL_BYTES = 64 << 20  # and over all the assigned partitions (Kafka's fetch.max.bytes is 50 MB)
AHEAD_MAX_RECORDS = 100_000


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


class ConsumerRecord(NamedTuple):
    """One record as ``Consumer.poll`` returns it. A named tuple, as kafka-python's
    ``ConsumerRecord`` is: immutable, fields by name, and made a third as fast as a frozen
    dataclass (a poll makes one per record)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None  # None: a null value (Kafka's tombstone), as the producer sent it
    headers: tuple[tuple[str, bytes | None], ...] = ()


def records_of(batch: pa.RecordBatch) -> list[ConsumerRecord]:
    """The rows of a ``KAFKA_SCHEMA`` batch as records, converted column by column: integers and
    bytes straight from Arrow's buffers, the timestamp as integer milliseconds divided in numpy (no
    datetime or Python division per row), and a column holding one value (the topic and partition
    of a fetched batch, keys when none was sent, headers when there are none) as that one object
    repeated, so a poll makes a Python object per row only for what differs between rows."""
    n = batch.num_rows
    if not n:
        return []
    col = batch.column
    names = batch.schema.names
    headers_col = col(names.index("headers"))
    if len(pc.list_flatten(headers_col)) == 0:
        headers: Iterable[tuple[tuple[str, bytes | None], ...]] = itertools.repeat((), n)
    else:
        headers = [tuple((h["key"], h["value"]) for h in row) if row else ()
                   for row in headers_col.to_pylist()]
    rows = zip(_values(col(names.index("topic"))), _values(col(names.index("partition"))),
               col(names.index("offset")).to_pylist(), _millis(col(names.index("timestamp"))),
               _values(col(names.index("key"))), col(names.index("value")).to_pylist(), headers, strict=True)
    return list(map(tuple.__new__, itertools.repeat(ConsumerRecord), rows))  # no __new__ call per row


def _values(column: pa.Array) -> Iterable[object]:
    """A column's values as Python objects: one object repeated when every row holds the same
    value (null included), else one per row."""
    n = len(column)
    if column.null_count == n:
        return itertools.repeat(None, n)
    if column.null_count == 0 and (n == 1 or pc.all(pc.equal(column, column[0])).as_py()):
        return itertools.repeat(column[0].as_py(), n)
    return column.to_pylist()  # type: ignore[no-any-return]


def _millis(column: pa.Array) -> list[int]:
    """A timestamp column (microseconds) as integer milliseconds, floored, a null as 0."""
    micros = pc.cast(column, pa.int64())
    if micros.null_count:
        return [0 if t is None else t // 1000 for t in micros.to_pylist()]
    return (micros.to_numpy() // 1000).tolist()  # type: ignore[no-any-return]


class Consumer:
    """A blocking consumer.

    ``assign([...])`` reads the given partitions with positions kept here (commits need a
    ``group_id``); ``subscribe([...])`` joins ``group_id`` on each topic and reads the partitions the
    broker gives this member. A partition without a committed offset starts at
    ``auto_offset_reset`` ("earliest" or "latest"). With ``enable_auto_commit`` the positions are
    committed every ``auto_commit_interval_ms`` and on ``close``.

    With ``fetch_ahead`` (the default), a poll that returns a full batch of a partition (more is
    likely behind it) has the next batch fetched at once, by a thread of its own on a second
    connection, while the caller handles the records: a consumer catching up does not wait for
    the broker between polls. That batch is about 1 MiB of records (``AHEAD_BYTES``, sized from
    the records just read, and 64 MiB over all the assigned partitions; at least
    ``max_poll_records``), and the polls after it take from it,
    so a small ``max_poll_records`` does not cost a round trip per poll. The batch is used only if
    the position is still where it was asked for (a seek or a new assignment drops it); records in
    the log do not change, so it is what a fetch at the next poll would read. A fetch ahead that
    fails turns fetching ahead off (the poll fetches on its own connection, which reports any
    error).

    With several partitions, a poll asks every partition it has nothing in hand for in one round
    trip (a wait at the broker in front of them when it has nothing at all), each for as many
    records as the poll may still return; what it does not return is kept for the next polls. So
    the consumer holds at most one batch per assigned partition: fetched ahead (about 1 MiB) or
    kept (at most ``max_poll_records`` records).
    """

    def __init__(self, bootstrap: str = "127.0.0.1:8090", *, group_id: str | None = None,
                 username: str = "iggy", password: str = "iggy", auto_offset_reset: str = "latest",
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 max_poll_records: int = 500, rebalance_check_ms: int = 1000, timeout: float = 30.0,
                 tls: TlsConfig | None = None, fetch_ahead: bool = True) -> None:
        if auto_offset_reset not in ("earliest", "latest"):
            raise ValueError(f"auto_offset_reset must be earliest or latest, not {auto_offset_reset!r}")
        self.client = Client(bootstrap, username=username, password=password, timeout=timeout, tls=tls)
        self._client_args = (bootstrap, username, password, timeout, tls)
        self.fetch_ahead = fetch_ahead
        # per partition: a batch fetched ahead, or rows fetched beyond what a poll returned (kept):
        # the position it starts at, the batch, how many rows were asked for it
        self._ahead: dict[TopicPartition, tuple[int, Future[pa.RecordBatch], int]] = {}
        self._fetcher: ThreadPoolExecutor | None = None  # the fetch-ahead thread, made when first needed
        self._fetch_client: Client | None = None  # its connection (used by that thread only)
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_s = auto_commit_interval_ms / 1000
        self.max_poll_records = max_poll_records
        self.rebalance_s = rebalance_check_ms / 1000
        self._subscribed: list[str] = []
        self._assigned: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._committed_pos: dict[TopicPartition, int] = {}
        self._next_check = 0.0
        self._next_commit = time.monotonic() + self.auto_commit_s
        self._rr = 0
        self._member_id: int | None = None
        self._server_wait = True  # until the broker answers WAIT_FOR_MESSAGES as unknown

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while True:
            yield from self.poll(1000)

    # -- assignment ------------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._leave()
        self._subscribed = []
        self._assigned = sorted(set(partitions))
        self._positions = {tp: p for tp, p in self._positions.items() if tp in self._assigned}

    def subscribe(self, topics: Iterable[str]) -> None:
        if self.group_id is None:
            raise BayouClientError("subscribe needs a group_id (or use assign)")
        self._leave()
        self._subscribed = list(dict.fromkeys(topics))
        for topic in self._subscribed:
            addr: ops.Address = self.client.run(ops.ensure_group(self.client.resolver, self.group_id, topic))
            self.client.conn.call(m.JoinConsumerGroup(*addr, m.Identifier(self.group_id)))
        self._refresh_assignment(force=True)

    def assignment(self) -> set[TopicPartition]:
        self._refresh_assignment()
        return set(self._assigned)

    def _refresh_assignment(self, force: bool = False) -> None:
        if not self._subscribed or self.group_id is None:
            return
        now = time.monotonic()
        if not force and now < self._next_check:
            return
        self._next_check = now + self.rebalance_s
        if self._member_id is None:
            me = self.client.conn.call(m.GetMe())
            self._member_id = me.client.client_id
        owned: list[TopicPartition] = []
        for topic in self._subscribed:
            desc = self.client.describe_group(self.group_id, topic)
            for member, parts in desc.members:
                if member == self._member_id:
                    owned.extend(TopicPartition(topic, p) for p in parts)
        owned.sort()
        if owned != self._assigned:
            lost = [tp for tp in self._assigned if tp not in owned]
            if lost and self.enable_auto_commit:
                self._commit_positions({tp: self._positions[tp] for tp in lost if tp in self._positions})
            self._assigned = owned
            self._positions = {tp: p for tp, p in self._positions.items() if tp in owned}

    def _leave(self) -> None:
        if self._subscribed and self.group_id is not None:
            if self.enable_auto_commit:
                self._commit_positions(dict(self._positions))
            for topic in self._subscribed:
                try:
                    addr: ops.Address = self.client.run(self.client.resolver.address(topic))
                    self.client.conn.call(m.LeaveConsumerGroup(*addr, m.Identifier(self.group_id)))
                except BayouClientError:
                    pass
        self._subscribed = []
        self._assigned = []

    # -- positions -------------------------------------------------------------------------------

    def position(self, tp: TopicPartition) -> int:
        pos = self._positions.get(tp)
        if pos is None:
            pos = self._initial_position(tp)
            self._positions[tp] = pos
        return pos

    def _initial_position(self, tp: TopicPartition) -> int:
        if self.group_id is not None:
            done = self.client.committed(self.group_id, tp.topic).get(tp.partition)
            if done is not None:
                self._committed_pos[tp] = done
                return done
        offsets = self.client.partition_offsets(tp.topic, tp.partition)
        return offsets.earliest if self.auto_offset_reset == "earliest" else offsets.latest

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        self._positions[tp] = offset

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp in tps or tuple(self.assignment()):
            self._positions[tp] = self.client.partition_offsets(tp.topic, tp.partition).earliest

    def seek_to_end(self, *tps: TopicPartition) -> None:
        for tp in tps or tuple(self.assignment()):
            self._positions[tp] = self.client.partition_offsets(tp.topic, tp.partition).latest

    def seek_to_timestamp(self, tp: TopicPartition, timestamp_ms: int) -> None:
        """Position at the first record at or after ``timestamp_ms`` (the log end if none is)."""
        found = self.client.offset_for_time(tp.topic, tp.partition, timestamp_ms)
        self._positions[tp] = (found if found is not None
                               else self.client.partition_offsets(tp.topic, tp.partition).latest)

    # -- polling ---------------------------------------------------------------------------------

    def poll_arrow(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[pa.RecordBatch]:
        """Record batches (``KAFKA_SCHEMA``) from the assigned partitions, waiting up to
        ``timeout_ms`` for the first record. Positions advance past what is returned."""
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        delay = 0.005
        while True:
            self._refresh_assignment()
            self._maybe_auto_commit()
            out: list[pa.RecordBatch] = []
            taken = 0
            waited = False
            n = len(self._assigned)
            for tp in [tp for tp in self._ahead if tp not in self._assigned]:
                self._ahead.pop(tp)[1].cancel()
            fetch: list[TopicPartition] = []  # partitions with nothing fetched ahead
            for i in range(n):
                tp = self._assigned[(self._rr + i) % n]
                if taken >= limit:
                    if n == 1:
                        break
                    # no room left, but a partition with nothing in hand is still polled (its rows
                    # kept): else partitions with data ahead would starve it
                    entry = self._ahead.get(tp)
                    if entry is None or entry[0] != self.position(tp):
                        fetch.append(tp)
                    continue
                pos = self.position(tp)
                want = limit - taken
                ahead = self._take_ahead(tp, pos)
                if ahead is not None:
                    taken += self._take(tp, *ahead, want, limit, out)
                elif n > 1:
                    fetch.append(tp)
                else:
                    # one partition: the poll itself waits at the broker for its next record (one
                    # round trip where a wait and a poll take two); several: below
                    wait_ms = self._wait_ms(deadline)
                    batch = self.client.fetch_arrow(tp.topic, tp.partition, pos, want, max_wait_ms=wait_ms)
                    resolver = self.client.resolver
                    waited = wait_ms > 0 and resolver.poll_batches and resolver.poll_waits
                    taken += self._take(tp, batch, want, want, limit, out)
            if fetch:
                # several partitions: polled in one request (POLL_PARTITIONS; to an older bayou, in
                # one round trip), each asked for all the poll still takes (rows past it are kept
                # for the next polls, not fetched again); with nothing fetched ahead either, the
                # request waits at the broker until a record is in any of them
                want = limit - taken or limit
                wait_ms = 0 if out else self._wait_ms(deadline)
                batches = self.client.fetch_arrow_many([(tp.topic, tp.partition, self.position(tp), want)
                                                        for tp in fetch], max_wait_ms=wait_ms)
                resolver = self.client.resolver
                if not resolver.waits:
                    self._server_wait = False
                waited = wait_ms > 0 and (resolver.poll_partitions
                                          or (resolver.waits and resolver.poll_batches))
                for tp, batch in zip(fetch, batches, strict=True):
                    taken += self._take(tp, batch, want, limit - taken, limit, out)
            self._rr = (self._rr + 1) % max(n, 1)
            left = deadline - time.monotonic()
            if out or left <= 0:
                return out
            if waited or (self._server_wait and self._assigned and self._wait(left)):
                continue
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.1)

    def _take(self, tp: TopicPartition, batch: pa.RecordBatch, asked: int, room: int, limit: int,
              out: list[pa.RecordBatch]) -> int:
        """Up to ``room`` rows of ``batch`` (``asked`` rows were asked for) into ``out``, the
        position moving past them; rows beyond are kept for the next polls of ``tp``. Once a batch
        that held all it was asked for (more is likely behind it) is taken to its end, the next
        one is fetched ahead: about ``AHEAD_BYTES`` of records, so that a small ``max_poll_records``
        does not make a round trip per poll. How many rows were taken."""
        head = batch if batch.num_rows <= room else batch.slice(0, room)
        taken = int(head.num_rows)
        if taken:
            self._positions[tp] = head.column(4)[taken - 1].as_py() + 1
            out.append(head)
        if taken < batch.num_rows:
            rest = batch.slice(taken)
            kept: Future[pa.RecordBatch] = Future()
            kept.set_result(rest)
            # "full" if the batch was: taken to its end at a later poll, it has the next fetched ahead
            self._ahead[tp] = (self.position(tp), kept,
                               rest.num_rows if batch.num_rows == asked else rest.num_rows + 1)
        elif self.fetch_ahead and taken and taken == asked:
            per_record = max(1, head.nbytes // taken)
            budget = min(AHEAD_BYTES, AHEAD_TOTAL_BYTES // max(1, len(self._assigned)))
            records = max(limit, self.max_poll_records, min(AHEAD_MAX_RECORDS, budget // per_record))
            self._fetch_next(tp, self._positions[tp], records)
        return taken

    def _take_ahead(self, tp: TopicPartition, pos: int) -> tuple[pa.RecordBatch, int] | None:
        """The batch fetched ahead (or kept) for ``tp`` if it starts at ``pos``, and how many rows
        were asked for it; else None: the caller fetches now (and so reports any error itself)."""
        entry = self._ahead.pop(tp, None)
        if entry is None:
            return None
        at, future, asked = entry
        if at != pos:
            future.cancel()
            return None
        try:
            batch = future.result()
            # an empty batch fetched ahead: polled again (and so waited on with the others)
            return (batch, asked) if batch.num_rows else None
        except Exception:  # fetched again by the caller, which raises it
            # and no more fetching ahead: a second connection that cannot log in (a connection
            # limit, a password changed meanwhile) must not be tried again at every poll
            self.fetch_ahead = False
            return None

    def _fetch_next(self, tp: TopicPartition, pos: int, limit: int) -> None:
        if self._fetcher is None:
            self._fetcher = ThreadPoolExecutor(1, thread_name_prefix="bayou-fetch-ahead")
        self._ahead[tp] = (pos, self._fetcher.submit(self._fetch_on_thread, tp, pos, limit), limit)

    def _fetch_on_thread(self, tp: TopicPartition, pos: int, limit: int) -> pa.RecordBatch:
        if self._fetch_client is None:
            bootstrap, username, password, timeout, tls = self._client_args
            self._fetch_client = Client(bootstrap, username=username, password=password, timeout=timeout,
                                        tls=tls)
        return self._fetch_client.fetch_arrow(tp.topic, tp.partition, pos, limit)

    def _wait_ms(self, deadline: float) -> int:
        """How long a poll may wait at the broker: until ``deadline``, the next rebalance check, and
        WAIT_SLICE_S (0: not at all, or a broker without the wait)."""
        if not self._server_wait:
            return 0
        left = deadline - time.monotonic()
        if self._subscribed:
            left = min(left, self._next_check - time.monotonic())
        return max(0, int(min(left, WAIT_SLICE_S) * 1000))

    def _wait(self, left: float) -> bool:
        """Wait at the broker until an assigned partition has a record past its position (at most
        ``left`` seconds, and no longer than the next rebalance check); False when the broker has
        no such wait (not bayou, or an older one: the consumer then polls on a timer)."""
        positions: dict[str, dict[int, int]] = {}
        for tp in self._assigned:
            positions.setdefault(tp.topic, {})[tp.partition] = self.position(tp)
        if self._subscribed:
            left = min(left, max(0.0, self._next_check - time.monotonic()))
        try:
            self.client.wait_for_messages(positions, max(1, int(min(left, WAIT_SLICE_S) * 1000)))
        except BayouClientError as exc:
            if exc.status != Status.INVALID_COMMAND:
                raise
            self._server_wait = False
            return False
        return True

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        return [r for b in self.poll_arrow(timeout_ms, max_records) for r in records_of(b)]

    # -- commits ---------------------------------------------------------------------------------

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (next offsets to read), or the current positions."""
        if self.group_id is None:
            raise BayouClientError("commit needs a group_id")
        self._commit_positions(dict(self._positions) if offsets is None else offsets)
        self._refresh_assignment(force=bool(self._subscribed))

    def committed(self, tp: TopicPartition) -> int | None:
        if self.group_id is None:
            return None
        return self.client.committed(self.group_id, tp.topic).get(tp.partition)

    def _commit_positions(self, positions: dict[TopicPartition, int]) -> None:
        assert self.group_id is not None
        by_topic: dict[str, dict[int, int]] = {}
        for tp, pos in positions.items():
            if self._committed_pos.get(tp) != pos:
                by_topic.setdefault(tp.topic, {})[tp.partition] = pos
        for topic, entries in by_topic.items():
            self.client.commit(self.group_id, topic, entries)
            for p, pos in entries.items():
                self._committed_pos[TopicPartition(topic, p)] = pos

    def _maybe_auto_commit(self) -> None:
        if self.enable_auto_commit and time.monotonic() >= self._next_commit:
            self._next_commit = time.monotonic() + self.auto_commit_s
            self._commit_positions(dict(self._positions))

    def close(self) -> None:
        try:
            if self.enable_auto_commit and self._positions:
                self._commit_positions(dict(self._positions))
            self._leave()
        except BayouClientError:
            pass
        finally:
            for _pos, future, _asked in self._ahead.values():
                future.cancel()
            self._ahead.clear()
            if self._fetcher is not None:
                self._fetcher.shutdown(wait=True)
                self._fetcher = None
            if self._fetch_client is not None:
                self._fetch_client.close()
                self._fetch_client = None
            self.client.close()
