"""Cursus event sourcing: aggregate streams with optimistic versions, and snapshots (cursus.md 4.19).

Events are ordinary records in an ``event_sourcing=true`` topic, keyed by aggregate and routed by
FNV-1a 64 of the key; each carries its aggregate version (header ``cursus.aggregate_version``).
The current version of every aggregate is rebuilt from the log the first time a topic is used after
a start, and kept up to date by appends. Snapshots live in ``<data>/cursus/snapshots.json``
(write temp, fsync, rename).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from bayou.broker import Acks, Broker
from bayou.broker.persist import StateFile
from bayou.records.batch import HEADER_SIZE, assemble_batch, iter_batches
from bayou.records.cursus import (
    FORMAT_CURSUS,
    H_AGGREGATE,
    CursusMessage,
    encode_message,
    record_to_message,
    stamp_offsets,
)
from bayou.records.hashing import fnv1a_64
from bayou.server.workers import decode_stored


class VersionConflict(Exception):
    def __init__(self, current: int, expected: int) -> None:
        super().__init__(f"version conflict: current {current}, expected {expected}")
        self.current = current
        self.expected = expected


class SnapshotAhead(Exception):
    def __init__(self, version: int, current: int) -> None:
        super().__init__(f"snapshot version {version} exceeds stream version {current}")
        self.version = version
        self.current = current


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    payload: str


class EventStore:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.versions: dict[str, dict[bytes, int]] = {}  # topic -> aggregate key -> version
        self.snapshots: dict[tuple[str, str], Snapshot] = {}
        path = broker.config.data_dir / "cursus"
        path.mkdir(parents=True, exist_ok=True)
        self._file = StateFile(path / "snapshots.json", self._snapshot_json)
        data = self._file.load()
        if data:
            try:
                for row in json.loads(data):
                    self.snapshots[(str(row["topic"]), str(row["key"]))] = Snapshot(
                        int(row["version"]), str(row["payload"]))
            except (ValueError, KeyError, TypeError):
                self.snapshots.clear()

    def _snapshot_json(self) -> bytes:
        rows = [{"topic": t, "key": k, "version": s.version, "payload": s.payload}
                for (t, k), s in sorted(self.snapshots.items())]
        return json.dumps(rows).encode() + b"\n"

    def partition_of(self, topic: str, key: bytes) -> int:
        return fnv1a_64(key) % self.broker.partition_count(topic)

    async def _versions(self, topic: str) -> dict[bytes, int]:
        known = self.versions.get(topic)
        if known is not None and self.broker.topic_exists(topic):
            return known
        known = {}
        for p in range(self.broker.partition_count(topic)):
            async for rec_key, version, _msg in self._scan(topic, p, None):
                if version > known.get(rec_key, 0):
                    known[rec_key] = version
        self.versions[topic] = known
        return known

    async def _scan(self, topic: str, partition: int, key: bytes | None):  # type: ignore[no-untyped-def]
        offset = self.broker.partition_bounds(topic, partition)[0]
        while offset < self.broker.partition_bounds(topic, partition)[1]:  # (the high watermark)
            res = await self.broker.fetch(topic, partition, offset, max_bytes=4 << 20,
                                          from_log_start=True)  # retention may move the start
            if not res.data:
                break
            for pos, _h in iter_batches(res.data):
                for rec in await decode_stored(res.data, pos):
                    if rec.offset < offset or (key is not None and rec.key != key):
                        continue
                    version = int(dict(rec.headers).get(H_AGGREGATE, b"0") or 0)
                    yield rec.key or b"", version, record_to_message(rec)
            offset = res.next_offset

    async def version(self, topic: str, key: bytes) -> int:
        return (await self._versions(topic)).get(key, 0)

    async def append(self, topic: str, key: bytes, version: int, payload: bytes, event_type: bytes,
                     schema_version: int, metadata: bytes, producer: bytes) -> tuple[int, int]:
        """Append event ``version`` of aggregate ``key``; returns (offset, partition)."""
        versions = await self._versions(topic)
        current = versions.get(key, 0)
        if version != current + 1:
            raise VersionConflict(current, version)
        p = self.partition_of(topic, key)
        out = bytearray()
        encode_message(CursusMessage(payload, 0, 0, producer, key, 0, event_type, schema_version,
                                     version, metadata), out)
        now = int(time.time() * 1000)
        batch = assemble_batch(bytes(out), record_count=1, base_offset=0,
                               attributes=FORMAT_CURSUS << 8, base_timestamp=now, max_timestamp=now,
                               producer_id=0)  # the last (only) message starts at 0
        versions[key] = version  # claimed before the append so a concurrent append conflicts
        try:
            res = await self.broker.produce(
                topic, p, batch, Acks.LEADER, create=False,
                stamp=lambda buf, base: stamp_offsets(buf, [HEADER_SIZE, HEADER_SIZE + len(out)], base))
        except BaseException:
            versions[key] = current
            raise
        return res.base_offset, p

    async def save_snapshot(self, topic: str, key: bytes, version: int, payload: str) -> int:
        current = await self.version(topic, key)
        if version > current:
            raise SnapshotAhead(version, current)
        self.snapshots[(topic, key.decode(errors="surrogateescape"))] = Snapshot(version, payload)
        await self._file.save()
        return self.partition_of(topic, key)

    def snapshot(self, topic: str, key: bytes) -> Snapshot | None:
        return self.snapshots.get((topic, key.decode(errors="surrogateescape")))

    async def events(self, topic: str, key: bytes, from_version: int) -> list[CursusMessage]:
        p = self.partition_of(topic, key)
        return [m async for _k, v, m in self._scan(topic, p, key) if v >= from_version]

    def forget(self, topic: str) -> None:
        self.versions.pop(topic, None)
