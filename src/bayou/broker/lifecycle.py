"""Start, stop and the background work: opening every partition's log (recovery after an unclean
stop), the clean-shutdown marker, and the periodic tasks (retention, interval fsync, group
persistence and expiry, the scrubber), each retried with backoff by broker/background.py."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bayou.broker.background import run_forever
from bayou.broker.consumers import ConsumerGroups
from bayou.broker.context import BrokerContext
from bayou.broker.model import Topic
from bayou.broker.partition import Partition
from bayou.broker.topics import split_topic_config
from bayou.errors import BayouError, StorageError
from bayou.stats import Recovery
from bayou.storage import PartitionLog, apply_overrides
from bayou.storage.handles import default_capacity, raise_fd_limit
from bayou.storage.scrub import Scrubber

log = logging.getLogger("bayou.broker")


class Lifecycle:
    def __init__(self, ctx: BrokerContext, consumers: ConsumerGroups) -> None:
        self.ctx = ctx
        self.consumers = consumers  # loads the group state at start, runs its periodic tasks
        self.tasks: list[asyncio.Task[None]] = []
        self.started = False
        self._scrubber: Scrubber | None = None
        self._scrub_pool: ThreadPoolExecutor | None = None
        self.recovery = Recovery()  # the start-up load's progress (/metrics, /ready)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        raise_fd_limit()
        if not self.ctx.config.log.max_open_files:  # derived from the limit now in force
            self.ctx.store.handles.capacity = default_capacity()
        await loop.run_in_executor(self.ctx.io, self._open_storage)
        self.ctx.metadata.register_broker(self.ctx.config.broker_id, "127.0.0.1", 0)
        for name, topic in self.ctx.topics.items():
            self.ctx.metadata.add_topic(name, len(topic.partitions), self.ctx.topic_rf(topic.meta))
        self.consumers.load()
        self.tasks = [
            loop.create_task(self._background("retention", self.run_retention,
                                              self.ctx.config.retention_check_interval_ms / 1000),
                             name="retention"),
            loop.create_task(self._background("flush", self._flush_due, self._flush_tick), name="flush"),
            loop.create_task(self._background("groups-persist", self.consumers.persist_if_dirty,
                                              self.ctx.config.heartbeat_persist_interval_ms / 1000),
                             name="groups-persist"),
            loop.create_task(self._background("group-expiry", self.consumers.expire_members,
                                              self.ctx.config.group_expiry_check_ms / 1000),
                             name="group-expiry"),
        ]
        if self.ctx.config.scrub_interval_ms > 0:
            # Its own thread: a throttled pass takes long and must not hold a worker of the I/O pool.
            self._scrubber = Scrubber(self._partition_logs, self.ctx.config.scrub_bytes_per_second)
            self._scrub_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bayou-scrub")
            self.tasks.append(loop.create_task(
                self._background("scrub", self._scrub_pass, self.ctx.config.scrub_interval_ms / 1000),
                name="scrub"))
        self.started = True

    def _partition_logs(self) -> list[tuple[str, PartitionLog]]:
        return [(f"{name}/{p.index}", p.log) for name, t in list(self.ctx.topics.items())
                for p in list(t.partitions)]

    async def _scrub_pass(self) -> None:
        """One scrub pass (storage/scrub.py) in the scrub's own thread, every ``scrub_interval_ms``
        through ``_background`` (a failed pass is logged and retried)."""
        assert self._scrubber is not None and self._scrub_pool is not None
        await asyncio.get_running_loop().run_in_executor(self._scrub_pool, self._scrubber.run_pass)

    def _open_storage(self) -> None:
        """Open every partition's log; after an unclean stop each active segment's tail is
        validated (CRCs from the last indexed point) and cut at the first bad byte. Progress is
        in ``self.recovery`` (/metrics, /ready); the summary is logged."""
        started = time.monotonic()
        rec = self.recovery
        clean = self.ctx.store.open()
        rec.validated = not clean
        if not clean:
            log.info("no clean-shutdown marker in %s: validating active segments", self.ctx.config.data_dir)
        metas = self.ctx.store.load_topics()
        rec.partitions_total = sum(meta.partitions for meta in metas.values())
        for name, meta in metas.items():
            cfg = apply_overrides(self.ctx.config.log, split_topic_config(meta.config)[1])
            topic = Topic(meta, cfg)
            self.ctx.store.prune_partitions(meta)
            for p in range(meta.partitions):
                plog = self.ctx.store.open_log(name, p, cfg)
                if rec.validated:
                    rec.validated_bytes += plog.active.size
                if plog.truncated_bytes:
                    log.warning("recovered %s/%d: cut %d bytes of torn or corrupt tail",
                                name, p, plog.truncated_bytes,
                                extra={"topic": name, "partition": p, "cut_bytes": plog.truncated_bytes})
                    rec.truncated_bytes += plog.truncated_bytes
                    rec.truncated_partitions += 1
                topic.partitions.append(Partition(name, p, plog, self.ctx.config))
                rec.partitions_done += 1
            self.ctx.topics[name] = topic
        rec.seconds = time.monotonic() - started
        rec.done = True
        log.info("%s %d partitions of %d topics in %.3f s%s", "validated" if rec.validated else "opened",
                 rec.partitions_done, len(self.ctx.topics), rec.seconds,
                 f": cut {rec.truncated_bytes} bytes from {rec.truncated_partitions} partitions"
                 if rec.truncated_bytes else " (nothing cut)" if rec.validated else " (clean shutdown)",
                 extra={"partitions": rec.partitions_done, "topics": len(self.ctx.topics),
                        "validated_bytes": rec.validated_bytes,
                        "seconds": round(rec.seconds, 3), "cut_bytes": rec.truncated_bytes,
                        "cut_partitions": rec.truncated_partitions})

    async def stop(self) -> None:
        """Flush everything, persist group state and leave the clean-shutdown marker."""
        if not self.started:
            return
        self.ctx.closing = True
        self.started = False
        if self._scrubber is not None:
            self._scrubber.stop()  # a pass in progress ends within one read
        self.ctx.classic_groups.close()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._scrub_pool is not None:
            await asyncio.to_thread(self._scrub_pool.shutdown, True)
        for topic in self.ctx.topics.values():
            for part in topic.partitions:
                part.notify()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.ctx.io, self._close_storage)
        self.ctx.io.shutdown(wait=True)

    def _close_storage(self) -> None:
        """Flush and close every log, write the state files, leave the clean marker when every
        log is on disk. A failure (a full disk) is logged and the stop goes on: the marker is
        only about the logs, so unwritable state files do not keep it from being written."""
        flushed = True
        for topic in self.ctx.topics.values():
            for part in topic.partitions:
                try:
                    part.log.flush()
                except (OSError, BayouError):
                    flushed = False
                    log.exception("could not flush %s/%d at shutdown", part.topic, part.index)
                part.log.close()
        for state in (self.ctx.groups_file, self.ctx.offsets_file):
            try:
                state.write_now()
            except OSError:
                log.exception("could not write %s at shutdown", state.path)
        try:
            if flushed:
                self.ctx.store.mark_clean()
            else:
                log.error("not every log reached the disk: the next start recovers them")
        except OSError:
            log.exception("could not write the clean-shutdown marker")
        finally:
            self.ctx.store.close()
        log.info("broker stopped%s", " cleanly" if flushed else "")

    def _background(self, name: str, step: Callable[[], Awaitable[object]],
                    interval: Callable[[], float] | float) -> Coroutine[Any, Any, None]:
        """A periodic task that logs failures and retries with backoff (broker/background.py)."""
        return run_forever(name, step, interval, retry_s=self.ctx.config.background_retry_ms / 1000,
                           retry_max_s=self.ctx.config.background_retry_max_ms / 1000, logger=log)

    async def run_retention(self, loop: asyncio.AbstractEventLoop | None = None) -> int:
        """Apply retention to every partition; one partition's failure does not stop the others
        (it is logged and retried on the next pass)."""
        loop = loop or asyncio.get_running_loop()
        deleted = 0
        failed = 0
        for topic in list(self.ctx.topics.values()):
            for part in list(topic.partitions):
                try:
                    deleted += await loop.run_in_executor(self.ctx.io, part.log.apply_retention, None)
                except (OSError, BayouError):
                    failed += 1
                    log.exception("retention failed for %s/%d", part.topic, part.index)
        self.ctx.store.handles.sweep()
        if failed:
            raise StorageError(f"retention failed for {failed} partitions")
        return deleted

    def _flush_tick(self) -> float:
        intervals = [p.log.config.fsync.interval_ms for t in self.ctx.topics.values()
                     for p in t.partitions if p.log.config.fsync.mode == "interval"]
        return max(0.005, min(intervals) / 1000) if intervals else 0.2

    async def _flush_due(self) -> None:
        """fsync the partitions under ``fsync = interval:<ms>`` whose interval has passed. A
        partition whose fsync fails is logged and retried on the next tick (its data stays
        dirty); the others are flushed regardless."""
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        failed = 0
        for topic in list(self.ctx.topics.values()):
            for part in list(topic.partitions):
                pol = part.log.config.fsync
                if pol.mode != "interval" or now - part.last_flush < pol.interval_ms / 1000:
                    continue
                if part.log.durable_offset < part.log.next_offset and part.log.fsync_error is None:
                    try:
                        await loop.run_in_executor(self.ctx.io, part.log.flush)
                    except (OSError, BayouError):
                        failed += 1
                        log.exception("flush failed for %s/%d", part.topic, part.index)
                        continue
                part.last_flush = now
        if failed:
            raise StorageError(f"flush failed for {failed} partitions")
