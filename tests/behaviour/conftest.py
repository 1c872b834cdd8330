"""The behavioural suite's broker: one subprocess with every listener for the whole session
(each test makes its own topics, so they share it); the retention module starts its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from behaviour.harness import start_broker
from support.brokers import BrokerProcess

SMALL_SEGMENTS = "[broker]\nretention_check_interval_ms = 100\n\n[log]\nsegment_bytes = 256\n"


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("behaviour"), "")
    try:
        yield b
    finally:
        b.stop()




@pytest.fixture(scope="session")
def small_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A second broker for the retention tests: 256-byte segments (a few records fill several)
    and a retention pass every 100 ms."""
    b = start_broker(tmp_path_factory.mktemp("retention"), SMALL_SEGMENTS)
    try:
        yield b
    finally:
        b.stop()
