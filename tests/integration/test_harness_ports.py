"""The test harness itself: a broker subprocess whose port another process took between
``free_port()`` and the broker's bind must not be taken for started (the other process's socket
accepts connections too). It comes back on fresh ports; without that, a cluster test waited 60 s
for a broker that had exited at once (a cluster-suite run failed so while another suite ran)."""

from __future__ import annotations

import socket
from pathlib import Path

from support.brokers import BrokerProcess


def test_a_port_another_process_holds_is_not_taken_for_the_brokers(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = BrokerProcess(tmp_path / "data", tank_port=port).start(timeout=60)
        try:
            assert broker.proc is not None and broker.proc.poll() is None, broker.log()
            assert broker.tank_port != port  # came back on fresh ports
            assert '"msg": "listening", "protocol": "tank"' in broker.log()
        finally:
            broker.kill()
