"""Helpers for the Spark tests: a broker handle with an SDK client, and waiting."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from bayou.client import Client
from support.brokers import BrokerProcess

BROKER_CONFIG = """
[broker]
retention_check_interval_ms = 200
"""


class Broker:
    def __init__(self, proc: BrokerProcess) -> None:
        self.proc = proc
        self.bootstrap = f"127.0.0.1:{proc.iggy_port}"
        self.client = Client(self.bootstrap)

    def topic(self, partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.client.create_topic(name, partitions, config)
        return name

    def produce(self, topic: str, partition: int, values: list[bytes], **kw: Any) -> None:
        for lo in range(0, len(values), 5000):
            self.client.send(topic, partition, values[lo : lo + 5000], **{
                k: v[lo : lo + 5000] for k, v in kw.items()})

    def values(self, topic: str) -> list[bytes]:
        """Every value stored in ``topic``, partition by partition."""
        out: list[bytes] = []
        for po in self.client.describe_topic(topic).partitions:
            offset = po.earliest
            while offset < po.latest:
                batch = self.client.fetch_arrow(topic, po.partition, offset, 10_000)
                if batch.num_rows == 0:
                    break
                out.extend(batch.column("value").to_pylist())
                offset = batch.column("offset")[-1].as_py() + 1
        return out

    def options(self, **kw: str) -> dict[str, str]:
        return {"bayou.bootstrap.servers": self.bootstrap, **kw}


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def wait_for(cond: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


