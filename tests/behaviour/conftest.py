"""The behavioural suite's broker: one subprocess with every listener for the whole session
(each test makes its own topics, so they share it); the retention module starts its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from behaviour.harness import start_broker
from support.brokers import BrokerProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("behaviour"), "")
    try:
        yield b
    finally:
        b.stop()


