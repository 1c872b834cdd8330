"""The Iggy front end's own durable state: the stream catalog (``catalog``) and the users
(``users``), their files, and in cluster mode the copies every broker shares.

A write that fails (a full disk, EIO) does not lose the change: it stays in memory, the request
answers Iggy's generic error, and the file is written again once the disk allows.

Cluster mode: the catalog (streams, topics, consumer groups) and the users are JSON documents in
ZooKeeper that every broker serves (``Broker.shared_documents``); the commands that change them
run under a cluster lock (``shared_change``), and a broker takes the cluster's copies whenever a
watch says they changed (``refresh_shared``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

from bayou.broker import Broker
from bayou.broker.background import run_forever
from bayou.broker.views import SharedDocuments
from bayou.errors import StorageError
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import IggyError
from bayou.server.iggy.catalog import Catalog
from bayou.server.iggy.users import UserStore

log = logging.getLogger("bayou.iggy")

CATALOG_DOC = "iggy/catalog"
SHARED_LOCK = "iggy"
USERS_DOC = "iggy/users"
CATALOG_FILE = "catalog"  # what a failed write names (logs, errors)
USERS_FILE = "users file"
REWRITE_INTERVAL_S = 1.0  # how soon a write that failed (a full disk) is tried again
_HOLDING_SHARED: contextvars.ContextVar[bool] = contextvars.ContextVar("iggy_shared", default=False)


def now_us() -> int:
    return time.time_ns() // 1000


class IggyState:
    def __init__(self, broker: Broker, data: Path, root_username: str, root_password: str) -> None:
        self.broker = broker
        self.catalog = Catalog(data / "catalog.json")
        self.users = UserStore(data / "users.json", root_username, root_password)
        self._doc_seen: dict[str, int] = {}  # cluster mode: shared documents' change counts taken
        self._doc_version: dict[str, int] = {}  # and their znode versions
        self._unsaved: set[str] = set()  # files whose last write failed (ENOSPC, EIO): kept in memory
        self._rewriter: asyncio.Task[None] | None = None

    @property
    def shared(self) -> SharedDocuments | None:
        """The cluster's shared documents; None when standalone."""
        return self.broker.shared_documents()

    # -- the files -----------------------------------------------------------------------------

    def load(self) -> None:
        """Read the catalog and the users. A write that fails here (a full disk) does not stop
        the listener: the state stays in memory and is written later (``rewrite_later``)."""
        self.catalog.load()
        self.users.load()
        if self.users.unsaved:
            self._unsaved.add(USERS_FILE)
        if self.catalog.sync(self.broker.list_topics(), now_us()):
            try:
                self.catalog.save()
            except OSError as exc:
                self._write_failed(CATALOG_FILE, exc)

    def _write(self, what: str) -> None:
        (self.catalog.save if what == CATALOG_FILE else self.users.save_copy)()

    def _write_failed(self, what: str, exc: OSError) -> None:
        self._unsaved.add(what)
        log.warning("cannot write the Iggy %s, kept in memory and retried: %s", what, exc)

    def unsaved(self, what: str, exc: OSError) -> StorageError:
        """A write of ``what`` that failed: kept in memory, retried; the request's error."""
        self._write_failed(what, exc)
        self.rewrite_later()
        return StorageError(f"cannot write the Iggy {what}: {exc.strerror or exc}")

    async def save(self, what: str) -> None:
        """Write the catalog or the users file; a failure is the request's StorageError (Iggy's
        generic error), the change stays in memory and is written once the disk allows."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._write, what)
        except OSError as exc:
            raise self.unsaved(what, exc) from None
        self._unsaved.discard(what)

    async def save_catalog(self) -> None:
        await self.save(CATALOG_FILE)

    def rewrite_later(self) -> None:
        if self._unsaved and (self._rewriter is None or self._rewriter.done()):
            self._rewriter = asyncio.get_running_loop().create_task(run_forever(
                "iggy-unsaved-writes", self._rewrite, REWRITE_INTERVAL_S, retry_max_s=10.0, logger=log),
                name="iggy-unsaved-writes")

    async def _rewrite(self) -> None:
        """One retry of every write that failed; stops the task once all are written."""
        for what in sorted(self._unsaved):
            await asyncio.get_running_loop().run_in_executor(None, self._write, what)
            self._unsaved.discard(what)
            log.info("wrote the Iggy %s after earlier failures", what)
        if not self._unsaved and self._rewriter is not None:
            self._rewriter.cancel()

    async def sync(self) -> None:
        """Take in the topics other protocols created or deleted (the default stream)."""
        shared = self.shared
        if shared is not None:  # the cluster's topics, and the default stream's ids are shared
            if self.catalog.in_sync(await shared.topic_names()):
                return
            async with self.shared_change():
                if self.catalog.sync(await shared.topic_names(), now_us()):
                    await self.save_catalog()
            return
        if self.catalog.sync(self.broker.list_topics(), now_us()):
            await self.save_catalog()

    # -- cluster mode: the catalog and the users are shared by every broker ---------------------

    async def seed_shared(self) -> None:
        """The first broker's catalog and users seed the cluster's; the others take those."""
        shared = self.shared
        assert shared is not None
        async with self.shared_change():
            for name, target in ((CATALOG_DOC, self.catalog), (USERS_DOC, self.users)):
                data, version = await shared.read_doc(name)
                if not data:
                    await shared.write_doc(name, target.snapshot(), version)
                await self.refresh_shared(force=True)

    async def refresh_shared(self, force: bool = False) -> bool:
        """Take the cluster's copies of the catalog and the users when they changed (a watch
        counts the changes; ``force`` reads them anyway). Whether anything changed here."""
        shared = self.shared
        assert shared is not None
        changed = False
        if not _HOLDING_SHARED.get() and shared.is_locked(SHARED_LOCK):
            return False  # a change is being made here: it writes the copies (replacing them now
            # would leave it changing orphaned objects)
        for name, target in ((CATALOG_DOC, self.catalog), (USERS_DOC, self.users)):
            seen = shared.doc_changes(name)
            if not force and self._doc_seen.get(name) == seen:
                continue
            data, version = await shared.read_doc(name)
            self._doc_seen[name] = seen
            self._doc_version[name] = version
            if data and data != target.snapshot():
                target.replace(data)
                changed = True
                with contextlib.suppress(StorageError):  # this broker's copy: retried (save)
                    await self.save(CATALOG_FILE if target is self.catalog else USERS_FILE)
        return changed

    @contextlib.asynccontextmanager
    async def shared_change(self) -> AsyncIterator[None]:
        """Change the catalog or the users cluster-wide: under the cluster lock, from the newest
        copies, and written back (whatever the change did before an error too)."""
        if _HOLDING_SHARED.get():
            yield
            return
        shared = self.shared
        assert shared is not None
        async with shared.exclusive(SHARED_LOCK):
            token = _HOLDING_SHARED.set(True)
            try:
                await self.refresh_shared(force=True)
                before = {CATALOG_DOC: self.catalog.snapshot(), USERS_DOC: self.users.snapshot()}
                try:
                    yield
                finally:
                    for name, target in ((CATALOG_DOC, self.catalog), (USERS_DOC, self.users)):
                        data = target.snapshot()
                        if data != before[name]:
                            if not await shared.write_doc(name, data, self._doc_version[name]):
                                raise IggyError(Status.ERROR, f"the cluster's {name} changed under its lock")
                            self._doc_version[name] += 1
            finally:
                _HOLDING_SHARED.reset(token)
