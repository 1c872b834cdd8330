"""Iggy's streams, topics and consumer groups laid over bayou's flat topic namespace.

Iggy addresses a partition as stream -> topic -> partition, each stream and topic by a numeric id
(server-assigned, 0-based, the lowest free one) or by name. bayou has one flat namespace of topics,
shared by every protocol. The catalog keeps the mapping, durably (``<data>/iggy/catalog.json``,
written temp + fsync + rename):

- a topic created through Iggy is the bayou topic ``<stream>.<topic>`` (characters outside
  ``[A-Za-z0-9_-]`` become ``_``; a name that is taken or was changed by that rule gets a short
  hash suffix), so V1, Cursus and TANK clients reach it by that name;
- every bayou topic no Iggy stream holds (created by another protocol) appears in the **default
  stream**, named ``default`` with id ``DEFAULT_STREAM_ID``, under its own name, and a topic an
  Iggy client creates in the default stream is the bayou topic of exactly its name (bayou's topic
  name rule). The default stream always resolves, by name and id (empty on an empty broker), but
  is listed only while it holds topics; its name is reserved;
- consumer groups live inside their topic (Iggy's model); the broker knows an Iggy group as
  ``iggy.<bayou topic>.<group name>``, so its committed offsets are the same ones a V1 or Cursus
  consumer of that group name would see.

The catalog never owns data: a topic deleted by another protocol disappears from it at the next
``sync``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayou.storage.fsutil import atomic_write

DEFAULT_STREAM_ID = 0x7FFF_FFFF
DEFAULT_STREAM_NAME = "default"
MAX_TOPIC_NAME = 249
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(slots=True)
class GroupEntry:
    id: int
    name: str


@dataclass(slots=True)
class TopicEntry:
    id: int
    name: str
    topic: str  # the bayou topic
    created_at: int  # microseconds
    compression: int = 1  # 1 none, 2 gzip (Iggy's codes; bayou stores batches as sent)
    message_expiry: int = 0  # microseconds as the client gave it; 0 = server default
    max_topic_size: int = 0  # bytes as the client gave it; 0 = server default
    replication_factor: int = 0
    groups: dict[int, GroupEntry] = field(default_factory=dict)

    def group(self, ident: int | str) -> GroupEntry | None:
        if isinstance(ident, int):
            return self.groups.get(ident)
        return next((g for g in self.groups.values() if g.name == ident), None)

    def add_group(self, name: str, group_id: int | None = None) -> GroupEntry:
        gid = _lowest_free(self.groups) if group_id is None else group_id
        entry = self.groups[gid] = GroupEntry(gid, name)
        return entry

    def broker_group(self, group: GroupEntry) -> str:
        return f"iggy.{self.topic}.{group.name}"


@dataclass(slots=True)
class StreamEntry:
    id: int
    name: str
    created_at: int
    topics: dict[int, TopicEntry] = field(default_factory=dict)

    @property
    def is_default(self) -> bool:
        return self.id == DEFAULT_STREAM_ID

    def topic(self, ident: int | str) -> TopicEntry | None:
        if isinstance(ident, int):
            return self.topics.get(ident)
        return next((t for t in self.topics.values() if t.name == ident), None)


def _lowest_free(taken: Iterable[int]) -> int:
    used = set(taken)
    n = 0
    while n in used:
        n += 1
    return n


class Catalog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.streams: dict[int, StreamEntry] = {}
        self.default = StreamEntry(DEFAULT_STREAM_ID, DEFAULT_STREAM_NAME, 0)
        self._changes = 0  # counts the changes to which topic is where (for ``locate``'s index)
        self._indexed = -1
        self._index: dict[str, tuple[int, int]] = {}
        self.on_change: Callable[[], None] | None = None  # after every change (the authorizer's epoch)

    # -- persistence ---------------------------------------------------------------------------

    def load(self) -> None:
        try:
            self.replace(self.path.read_bytes())
        except FileNotFoundError:
            return

    def replace(self, data: bytes) -> None:
        """Take the whole catalog from ``snapshot()`` bytes (cluster mode: the shared copy)."""
        raw = json.loads(data)
        self.changed()
        self.streams = {}
        self.default.topics = {}
        for s in raw.get("streams", []):
            entry = StreamEntry(int(s["id"]), str(s["name"]), int(s["created_at"]))
            for t in s.get("topics", []):
                topic = _topic_from_json(t)
                entry.topics[topic.id] = topic
            self.streams[entry.id] = entry
        for t in raw.get("default_topics", []):
            topic = _topic_from_json(t)
            self.default.topics[topic.id] = topic

    def snapshot(self) -> bytes:
        return json.dumps({
            "streams": [{"id": s.id, "name": s.name, "created_at": s.created_at,
                         "topics": [_topic_json(t) for t in s.topics.values()]}
                        for s in self.streams.values()],
            "default_topics": [_topic_json(t) for t in self.default.topics.values()],
        }, indent=1).encode()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, self.snapshot())

    # -- lookups -------------------------------------------------------------------------------

    def stream(self, ident: int | str) -> StreamEntry | None:
        """A stream by id or name; the default stream always resolves, even empty."""
        if isinstance(ident, int):
            if ident == DEFAULT_STREAM_ID:
                return self.default
            return self.streams.get(ident)
        if ident == DEFAULT_STREAM_NAME:
            return self.default
        return next((s for s in self.streams.values() if s.name == ident), None)

    def visible_streams(self) -> list[StreamEntry]:
        out = sorted(self.streams.values(), key=lambda s: s.id)
        if self.default.topics:
            out.append(self.default)
        return out

    def all_topics(self) -> Iterator[tuple[StreamEntry, TopicEntry]]:
        for s in self.visible_streams():
            for t in s.topics.values():
                yield s, t

    def changed(self) -> None:
        """Which topic is where may have changed (``locate``'s index, the authorizer's answers)."""
        self._changes += 1
        if self.on_change is not None:
            self.on_change()

    def locate(self, topic: str) -> tuple[int, int | None]:
        """The (stream id, topic id) a bayou topic has, for the permission check: the catalog's
        entry; else, for a topic it does not hold yet (being created, or made by another protocol
        a moment ago), the Iggy stream whose name prefix it bears (``<stream>.``, the longest), or
        the default stream, with no topic id. A dictionary look-up on the hot path."""
        if self._indexed != self._changes:
            self._index = {t.topic: (s.id, t.id) for s in (*self.streams.values(), self.default)
                           for t in s.topics.values()}
            self._indexed = self._changes
        hit = self._index.get(topic)
        if hit is not None:
            return hit
        best: tuple[int, int] | None = None  # (prefix length, stream id)
        for s in self.streams.values():
            prefix = f"{_UNSAFE.sub('_', s.name)}."
            if topic.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), s.id)
        return (DEFAULT_STREAM_ID, None) if best is None else (best[1], None)

    def stream_name_taken(self, name: str) -> bool:
        return name == DEFAULT_STREAM_NAME or any(s.name == name for s in self.streams.values())

    # -- changes -------------------------------------------------------------------------------

    def add_stream(self, name: str, created_at: int, stream_id: int | None = None) -> StreamEntry:
        sid = _lowest_free(self.streams) if stream_id is None else stream_id
        entry = self.streams[sid] = StreamEntry(sid, name, created_at)
        self.changed()
        return entry

    def remove_stream(self, stream: StreamEntry) -> None:
        self.streams.pop(stream.id, None)
        self.changed()

    def remove_topic(self, stream: StreamEntry, topic_id: int) -> None:
        stream.topics.pop(topic_id, None)
        self.changed()

    def bayou_topic_name(self, stream: str, topic: str, existing: set[str]) -> str:
        """The bayou topic a new Iggy topic gets (see the module docstring)."""
        clean = f"{_UNSAFE.sub('_', stream)}.{_UNSAFE.sub('_', topic)}"
        exact = clean == f"{stream}.{topic}"
        if exact and len(clean) <= MAX_TOPIC_NAME and clean not in existing:
            return clean
        digest = hashlib.sha256(f"{stream}\0{topic}".encode()).hexdigest()
        for n in range(8, 65):
            candidate = f"{clean[:MAX_TOPIC_NAME - n - 1]}-{digest[:n]}"
            if candidate not in existing:
                return candidate
        raise ValueError("no free topic name")  # 2**256 collisions: unreachable

    def add_topic(self, stream: StreamEntry, name: str, bayou_topic: str, created_at: int, *,
                  topic_id: int | None = None, compression: int = 1, message_expiry: int = 0,
                  max_topic_size: int = 0, replication_factor: int = 0) -> TopicEntry:
        tid = _lowest_free(stream.topics) if topic_id is None else topic_id
        entry = stream.topics[tid] = TopicEntry(tid, name, bayou_topic, created_at, compression,
                                                message_expiry, max_topic_size, replication_factor)
        self.changed()
        return entry

    def mapped_topics(self) -> set[str]:
        return {t.topic for s in self.streams.values() for t in s.topics.values()}

    def in_sync(self, broker_topics: Iterable[str]) -> bool:
        """Whether ``sync`` would change nothing."""
        present = set(broker_topics)
        mapped = self.mapped_topics()
        default = {t.topic for t in self.default.topics.values()}
        return (all(t.topic in present for s in self.streams.values() for t in s.topics.values())
                and not (default - present) and not (default & mapped)
                and not (present - mapped - default))

    def sync(self, broker_topics: Iterable[str], now_us: int) -> bool:
        """Reconcile with the broker's topics: forget Iggy topics deleted elsewhere, put every
        unmapped bayou topic in the default stream. Returns whether anything changed."""
        present = set(broker_topics)
        changed = False
        for s in self.streams.values():
            for tid in [tid for tid, t in s.topics.items() if t.topic not in present]:
                del s.topics[tid]
                changed = True
        mapped = self.mapped_topics()
        for tid in [tid for tid, t in self.default.topics.items()
                    if t.topic not in present or t.topic in mapped]:
            del self.default.topics[tid]
            changed = True
        known = {t.topic for t in self.default.topics.values()}
        for name in sorted(present - mapped - known):
            self.add_topic(self.default, name, name, now_us)
            changed = True
        if changed:
            self.changed()
        if changed and self.default.topics and not self.default.created_at:
            self.default.created_at = min(t.created_at for t in self.default.topics.values())
        return changed


def _topic_json(t: TopicEntry) -> dict[str, Any]:
    return {"id": t.id, "name": t.name, "topic": t.topic, "created_at": t.created_at,
            "compression": t.compression, "message_expiry": t.message_expiry,
            "max_topic_size": t.max_topic_size, "replication_factor": t.replication_factor,
            "groups": [{"id": g.id, "name": g.name} for g in t.groups.values()]}


def _topic_from_json(t: dict[str, Any]) -> TopicEntry:
    entry = TopicEntry(int(t["id"]), str(t["name"]), str(t["topic"]), int(t["created_at"]),
                       int(t.get("compression", 1)), int(t.get("message_expiry", 0)),
                       int(t.get("max_topic_size", 0)), int(t.get("replication_factor", 0)))
    for g in t.get("groups", []):
        entry.groups[int(g["id"])] = GroupEntry(int(g["id"]), str(g["name"]))
    return entry
