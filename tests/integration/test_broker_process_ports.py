"""The test harness's broker restarts: a port another process took while the broker was down
(several test runs share a machine) sends it to fresh ports instead of failing the test."""

from __future__ import annotations

import socket
from pathlib import Path

from support.brokers import BrokerProcess, free_port


def test_a_taken_port_moves_the_broker_to_fresh_ports(tmp_path: Path) -> None:
    taken = free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        b = BrokerProcess(tmp_path / "data", port=taken).start(timeout=60)
        try:
            assert b.port != taken
            with socket.create_connection(("127.0.0.1", b.port), timeout=5) as s:
                s.sendall(b"V1|1|PING|\n")
                assert s.recv(100).startswith(b"V1|1|OK")
        finally:
            b.stop()
