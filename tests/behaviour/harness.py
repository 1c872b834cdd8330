"""Helpers of the behavioural suite: brokers, fresh topic names, connected adapters, and the
parametrisations over protocols (``for_each``) and producer x reader pairs (``for_pairs``), which
skip with the reason only where a protocol lacks what the test needs."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from behaviour.adapters import ADAPTERS, Adapter, Feature
from support.brokers import BrokerProcess


def start_broker(root: Path, config: str) -> BrokerProcess:
    """A broker subprocess with every listener, configured by the TOML text ``config``."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "bayou.toml"
    path.write_text(config)
    # a generous start: the Iggy listener makes its root user (Argon2) first, slow on busy cores
    return BrokerProcess(root / "data", "--config", str(path), fsync="never").start(timeout=90)


def topic_name(prefix: str = "b") -> str:
    """A topic no other test uses (every test makes its own, so the session broker is shared)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def connected(cls: type[Adapter], broker: BrokerProcess) -> AsyncIterator[Adapter]:
    adapter = cls(broker)
    await adapter.open()
    try:
        yield adapter
    finally:
        await adapter.close()


@asynccontextmanager
async def pair(broker: BrokerProcess, producer: type[Adapter], reader: type[Adapter], partitions: int = 1
               ) -> AsyncIterator[tuple[str, Adapter, Adapter]]:
    """A fresh topic of ``partitions`` made through ``producer``, and a connection of each side."""
    topic = topic_name()
    async with connected(producer, broker) as p, connected(reader, broker) as r:
        await p.create_topic(topic, partitions)
        yield topic, p, r


def for_each(*needed: Feature) -> Any:
    """Parametrise ``proto`` over every adapter; those lacking ``needed`` are skipped, saying why."""
    return pytest.mark.parametrize("proto", [
        pytest.param(cls, id=cls.name,
                     marks=[pytest.mark.skip(reason=why)] if (why := cls.lacks(*needed)) else [])
        for cls in ADAPTERS])


def for_pairs(produce: tuple[Feature, ...] = (), read: tuple[Feature, ...] = ()) -> Any:
    """Parametrise ``producer`` and ``reader`` over every ordered pair of adapters (a protocol with
    itself included)."""
    params = []
    for p, r in itertools.product(ADAPTERS, ADAPTERS):
        why = p.lacks(*produce) or r.lacks(*read)
        params.append(pytest.param(p, r, id=f"{p.name}->{r.name}",
                                   marks=[pytest.mark.skip(reason=why)] if why else []))
    return pytest.mark.parametrize(("producer", "reader"), params)
