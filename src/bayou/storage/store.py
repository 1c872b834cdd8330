"""The data directory: topic metadata, partition logs, the clean-shutdown marker and a lock.

    <data>/.lock                    held (flock) while a broker owns the directory
    <data>/.clean_shutdown          written last on a graceful stop; its absence means recovery
    <data>/topics/<topic>/topic.json
    <data>/topics/<topic>/<partition>/<20-digit base offset>.log|.index|.timeindex
    <data>/trash/                   deleted topics and partitions, removed at once and at start-up
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from bayou.errors import InvalidTopicName, StorageError
from bayou.storage.config import LogConfig
from bayou.storage.fsutil import atomic_write, fsync_dir
from bayou.storage.handles import HandleCache
from bayou.storage.log import PartitionLog

log = logging.getLogger("bayou.storage")

_TOPIC_RE = re.compile(r"\A[A-Za-z0-9._-]{1,249}\Z")  # \Z: '$' would accept a trailing newline
CLEAN_MARKER = ".clean_shutdown"


def validate_topic_name(name: str) -> str:
    """Letters, digits, ``.``, ``_`` and ``-``; 1 to 249 characters; not ``.`` or ``..``.

    Such a name is always a safe single path component inside the data directory.
    """
    if not isinstance(name, str) or not _TOPIC_RE.match(name) or name in (".", ".."):
        raise InvalidTopicName(f"invalid topic name {name!r}: use 1-249 of [A-Za-z0-9._-], not '.' or '..'")
    return name


@dataclass(slots=True)
class TopicMeta:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    created_ms: int = 0

    def to_json(self) -> bytes:
        return (json.dumps({"name": self.name, "partitions": self.partitions, "config": self.config,
                            "created_ms": self.created_ms}, sort_keys=True) + "\n").encode()


class Store:
    def __init__(self, data_dir: Path, max_open_files: int = 0) -> None:
        """``max_open_files``: how many segment and index files stay open (0: half the
        process's open-file limit); the rest are opened on use."""
        self.root = Path(data_dir)
        self.handles = HandleCache(max_open_files)
        self.topics_dir = self.root / "topics"
        self._lock_fd = -1
        self.was_clean = False

    def open(self) -> bool:
        """Take the directory lock and consume the clean marker. Returns True after a clean stop
        (and for a new, empty directory: there is nothing to recover)."""
        fresh = not self.topics_dir.exists()
        self.topics_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise StorageError(f"data directory {self.root} is in use by another broker") from None
        marker = self.root / CLEAN_MARKER
        self.was_clean = fresh or marker.exists()
        if marker.exists():
            marker.unlink()
            fsync_dir(self.root)
        shutil.rmtree(self.root / "trash", ignore_errors=True)
        return self.was_clean

    def mark_clean(self) -> None:
        """Leave the marker. It is empty (its existence is what counts), so it needs no data
        block and can still be written on a full disk."""
        atomic_write(self.root / CLEAN_MARKER, b"")

    def close(self) -> None:
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- topics --------------------------------------------------------------------------------

    def load_topics(self) -> dict[str, TopicMeta]:
        topics: dict[str, TopicMeta] = {}
        for tdir in sorted(self.topics_dir.iterdir()):
            meta_path = tdir / "topic.json"
            if not tdir.is_dir() or not meta_path.exists():
                continue
            try:
                raw = json.loads(meta_path.read_text())
                meta = TopicMeta(str(raw["name"]), int(raw["partitions"]),
                                 {str(k): str(v) for k, v in raw.get("config", {}).items()},
                                 int(raw.get("created_ms", 0)))
                validate_topic_name(meta.name)
            except (ValueError, KeyError, TypeError, InvalidTopicName) as exc:
                log.error("ignoring topic directory %s: unreadable topic.json (%s)", tdir, exc)
                continue
            topics[meta.name] = meta
        return topics

    def topic_dir(self, name: str) -> Path:
        return self.topics_dir / validate_topic_name(name)

    def write_topic(self, meta: TopicMeta) -> None:
        tdir = self.topic_dir(meta.name)
        tdir.mkdir(parents=True, exist_ok=True)
        if not meta.created_ms:
            meta.created_ms = int(time.time() * 1000)
        atomic_write(tdir / "topic.json", meta.to_json())

    def open_log(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        return PartitionLog(self.topic_dir(topic) / str(partition), config, recover=not self.was_clean,
                            handles=self.handles)

    def delete_topic(self, name: str) -> None:
        tdir = self.topic_dir(name)
        if tdir.exists():
            self._to_trash(tdir, name)

    def delete_partition(self, topic: str, partition: int) -> None:
        """Remove one partition's directory. Open descriptors of its log stay valid until closed.

        Write the topic's new partition count first: a crash before this leaves a directory
        that ``prune_partitions`` removes at the next start."""
        pdir = self.topic_dir(topic) / str(partition)
        if pdir.exists():
            self._to_trash(pdir, f"{topic}-{partition}")

    def prune_partitions(self, meta: TopicMeta) -> list[int]:
        """Remove partition directories at or beyond ``meta.partitions`` (left by a crash while
        partitions were removed or added), so a later ``add_partitions`` starts them empty."""
        tdir = self.topic_dir(meta.name)
        stray = sorted(int(d.name) for d in tdir.iterdir()
                       if d.is_dir() and d.name.isascii() and d.name.isdigit()
                       and d.name == str(int(d.name)) and int(d.name) >= meta.partitions)
        for p in stray:
            log.warning("removing directory %s/%d: topic %s has %d partitions",
                        tdir, p, meta.name, meta.partitions)
            self.delete_partition(meta.name, p)
        return stray

    def _to_trash(self, path: Path, label: str) -> None:
        """Move ``path`` into the trash in one rename (durable), then remove it there."""
        trash = self.root / "trash"
        trash.mkdir(exist_ok=True)
        tomb = trash / f"{label}-{time.time_ns()}"
        os.replace(path, tomb)
        fsync_dir(path.parent)
        shutil.rmtree(tomb, ignore_errors=True)
