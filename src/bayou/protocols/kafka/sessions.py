"""Incremental fetch sessions (KIP-227), as Kafka's brokers keep them (FetchSession.scala).

A consumer that reads many partitions sends them all in every Fetch unless the broker keeps them
for it: from Fetch v7 a request names a session and an epoch, and then carries only what changed
(partitions added, fetch offsets moved, ``forgotten_topics_data`` removed). The broker answers only
the partitions with something new: records, a moved high watermark, log start or last stable
offset, or an error. kafka-python (2.1 on) and the Java client use sessions by default.

The request's (session_id, epoch) decide:

- epoch -1 (FINAL): a full fetch without a session; a session it names is closed.
- epoch 0 (INITIAL): a full fetch that asks for a session; a session it names is closed first. The
  new session's id is in the response (0 when the cache has no room: the client goes on with
  full fetches).
- epoch > 0: an incremental fetch of the named session, whose epoch must be the one expected
  (the response to epoch N expects N + 1 next). An unknown session is FETCH_SESSION_ID_NOT_FOUND,
  another epoch INVALID_FETCH_SESSION_EPOCH; either answers with no partitions and session 0, and
  the client starts over with a full fetch.

Partitions that returned records move to the end of the session's order, so that the next
response's byte budget goes to the others first (Kafka's rotation). A session belongs to the
principal that made it: another principal naming its id gets FETCH_SESSION_ID_NOT_FOUND.

The cache is bounded: ``max_sessions`` sessions (Kafka's max.incremental.fetch.session.cache.slots,
1,000) and ``max_partitions`` partitions over all of them, each named by at most 249 characters
(the longest topic name: a fetch naming a longer one is answered without a session). A new
session takes the place of the least recently used ones only when they have been idle
``eviction_ms`` (Kafka's min.incremental.fetch.session.eviction.ms, 120 s) and free room enough;
otherwise none is made and none is evicted. An incremental fetch that would take the cache past
its partition bound, or add a longer name, closes its session (FETCH_SESSION_ID_NOT_FOUND).

Sans-IO: the front end (server/kafka.py) asks ``begin`` what to fetch and ``finish`` what to answer.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
FIRST_SESSION_VERSION = 7  # Fetch v7 carries session_id and session_epoch
MAX_SESSIONS = 1_000
MAX_PARTITIONS = 100_000
EVICTION_MS = 120_000
MAX_TOPIC_NAME = 249  # Kafka's (and bayou's) longest topic name: no session keeps a longer one

Key = tuple[str, int]  # (topic, partition)


@dataclass(slots=True)
class Want:
    """One partition a fetch asks for: from the request, or kept by the session."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


@dataclass(slots=True)
class _Cached:
    want: Want
    # what the client was last told (-1: nothing yet, or an error: the next answer includes it)
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1


@dataclass(slots=True)
class FetchSession:
    id: int
    owner: Hashable
    epoch: int  # the epoch the next incremental fetch must carry
    partitions: OrderedDict[Key, _Cached] = field(default_factory=OrderedDict)
    last_used: float = 0.0


@dataclass(slots=True)
class FetchContext:
    """What ``begin`` decided: the partitions to fetch, and how ``finish`` answers."""

    wants: list[Want]
    kind: str  # "sessionless", "full" (asks for a session), "incremental", "error"
    owner: Hashable = None
    error: int = 0
    session: FetchSession | None = None
    expected_epoch: int = 0  # the session's epoch when the answer is made (incremental)
    # (incremental) what the client was last told of each of ``wants``: (high watermark, log
    # start, last stable offset); a partition whose bounds still equal these and that has nothing
    # to read at its offset is not answered, so the front end may skip its read
    told: list[tuple[int, int, int]] = field(default_factory=list)

    def idle(self, i: int, log_start: int, high_watermark: int, last_stable: int) -> bool:
        """Whether want ``i`` of an incremental fetch, at these bounds, has nothing to answer."""
        if self.kind != "incremental":
            return False
        return (self.wants[i].offset == last_stable
                and self.told[i] == (high_watermark, log_start, last_stable))


class FetchSessions:
    """The broker's fetch session cache (one per Kafka front end, shared by its listeners)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, max_partitions: int = MAX_PARTITIONS,
                 eviction_ms: int = EVICTION_MS, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions = max_sessions
        self.max_partitions = max_partitions
        self.eviction_s = eviction_ms / 1000
        self.clock = clock
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._partitions = 0
        self._random = random.SystemRandom()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partitions(self) -> int:
        return self._partitions

    def begin(self, owner: Hashable, version: int, session_id: int, epoch: int, wants: Sequence[Want],
              forgotten: Iterable[Key]) -> FetchContext:
        """What a Fetch request asks for, by its session fields (Kafka's FetchManager.newContext)."""
        if version < FIRST_SESSION_VERSION:
            return FetchContext(list(wants), "sessionless")
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                session = self._sessions.get(session_id)
                if session is not None and session.owner == owner:
                    self._remove(session)
            return FetchContext(list(wants), "full" if epoch == INITIAL_EPOCH else "sessionless", owner)
        session = self._sessions.get(session_id)
        if session is None or session.owner != owner:
            return FetchContext([], "error", error=ErrorCode.fetch_session_id_not_found)
        if epoch != session.epoch:
            return FetchContext([], "error", error=ErrorCode.invalid_fetch_session_epoch)
        parts = session.partitions
        forgotten = set(forgotten)
        added = {(w.topic, w.partition) for w in wants} - parts.keys()
        dropped = (forgotten & parts.keys()) | (forgotten & added)
        if (self._partitions + len(added) - len(dropped) > self.max_partitions
                or any(len(topic) > MAX_TOPIC_NAME for topic, _p in added)):
            self._remove(session)
            return FetchContext([], "error", error=ErrorCode.fetch_session_id_not_found)
        for w in wants:
            key = (w.topic, w.partition)
            cached = parts.get(key)
            if cached is None:
                parts[key] = _Cached(Want(w.topic, w.partition, w.offset, w.max_bytes))
                self._partitions += 1
            else:
                cached.want.offset, cached.want.max_bytes = w.offset, w.max_bytes
        for key in forgotten:
            if parts.pop(key, None) is not None:
                self._partitions -= 1
        if not parts:
            self._remove(session)
            return FetchContext([], "sessionless", owner)
        session.epoch = _next_epoch(session.epoch)
        session.last_used = self.clock()
        self._sessions.move_to_end(session.id)
        return FetchContext([c.want for c in parts.values()], "incremental", owner, session=session,
                            expected_epoch=session.epoch,
                            told=[(c.high_watermark, c.log_start_offset, c.last_stable_offset)
                                  for c in parts.values()])

    def finish(self, ctx: FetchContext, results: Sequence[dict[str, Any]]) -> tuple[int, list[int], int]:
        """(session id to answer, indexes of ``results`` to include, top-level error code):
        ``results`` are the response fields of ``ctx.wants``, in order."""
        if ctx.kind == "error":
            return INVALID_SESSION_ID, [], ctx.error
        if ctx.kind == "sessionless":
            return INVALID_SESSION_ID, list(range(len(results))), 0
        if ctx.kind == "full":
            return self._create(ctx, results), list(range(len(results))), 0
        session = ctx.session
        assert session is not None
        if session.epoch != ctx.expected_epoch or self._sessions.get(session.id) is not session:
            # another fetch of this session got in between, or it was closed meanwhile
            return INVALID_SESSION_ID, [], ErrorCode.invalid_fetch_session_epoch
        keep: list[int] = []
        moved: list[Key] = []
        for i, (want, f) in enumerate(zip(ctx.wants, results, strict=True)):
            key = (want.topic, want.partition)
            cached = session.partitions.get(key)
            if cached is None:
                continue
            if _changed(cached, f):
                keep.append(i)
                if f.get("records"):
                    moved.append(key)
        for key in moved:
            session.partitions.move_to_end(key)
        return session.id, keep, 0

    # -- the cache -----------------------------------------------------------------------------

    def _create(self, ctx: FetchContext, results: Sequence[dict[str, Any]]) -> int:
        keys = {(w.topic, w.partition) for w in ctx.wants}
        if not keys or any(len(topic) > MAX_TOPIC_NAME for topic, _p in keys):
            return INVALID_SESSION_ID  # (a name no topic can have is answered, not kept)
        now = self.clock()
        # the idle sessions to evict, least recently used first, only if they make room enough
        evict: list[FetchSession] = []
        sessions, partitions = len(self._sessions), self._partitions
        it = iter(self._sessions.values())
        while sessions >= self.max_sessions or partitions + len(keys) > self.max_partitions:
            oldest = next(it, None)
            if oldest is None or now - oldest.last_used < self.eviction_s:
                return INVALID_SESSION_ID  # no room for one more: the client goes on with full fetches
            evict.append(oldest)
            sessions, partitions = sessions - 1, partitions - len(oldest.partitions)
        for old in evict:
            self._remove(old)
            self.evicted += 1
        session_id = self._new_id()
        session = FetchSession(session_id, ctx.owner, _next_epoch(INITIAL_EPOCH), last_used=now)
        for want, f in zip(ctx.wants, results, strict=True):
            key = (want.topic, want.partition)
            cached = session.partitions.get(key)
            if cached is None:
                cached = session.partitions[key] = _Cached(Want(want.topic, want.partition, want.offset,
                                                                want.max_bytes))
            _changed(cached, f)  # what the client is told now
        self._sessions[session_id] = session
        self._partitions += len(session.partitions)
        return session_id

    def _new_id(self) -> int:
        while True:
            session_id = self._random.randint(1, 2**31 - 1)
            if session_id not in self._sessions:
                return session_id

    def _remove(self, session: FetchSession) -> None:
        if self._sessions.pop(session.id, None) is session:
            self._partitions -= len(session.partitions)


def _next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: it wraps past i32's end to 1, never to 0 or -1 (Kafka's nextEpoch)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


def _changed(cached: _Cached, f: dict[str, Any]) -> bool:
    """Whether a partition's response fields must be sent (Kafka's maybeUpdateResponseData), the
    cached values updated to them."""
    must = bool(f.get("records"))
    hw = f.get("high_watermark", -1)
    if cached.high_watermark != hw:
        must = True
        cached.high_watermark = hw
    start = f.get("log_start_offset", -1)
    if cached.log_start_offset != start:
        must = True
        cached.log_start_offset = start
    stable = f.get("last_stable_offset", -1)
    if cached.last_stable_offset != stable:
        must = True
        cached.last_stable_offset = stable
    if f.get("preferred_read_replica", -1) >= 0:
        must = True
    if f.get("error_code"):
        cached.high_watermark = -1  # sent again once the error is gone
        must = True
    return must


__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "INVALID_SESSION_ID", "FetchContext", "FetchSession",
           "FetchSessions", "Want"]
