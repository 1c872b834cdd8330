"""Produce requests pipelined on one connection under fsync=always (server/frames.py): each is
served as soon as the one before it has appended, so their fsyncs are shared, yet every reply is
the request's own, in order, and a read pipelined behind them sees them all. Over real sockets to
a broker subprocess (``--fsync always``, the default)."""

from __future__ import annotations

import json
import socket
import struct
import uuid
from collections.abc import Iterator

import pytest

from bayou.protocols.cursus.framing import encode_frame
from support.brokers import BrokerProcess

pytestmark = pytest.mark.timeout(120)
N = 50


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("pipelined") / "data").start(timeout=60)
    try:
        yield b
    finally:
        b.stop()


def _frames(sock: socket.socket, n: int) -> list[bytes]:
    out, buf = [], b""
    while len(out) < n:
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">I", buf)[0]:
            size = struct.unpack_from(">I", buf)[0]
            out.append(buf[4:4 + size])
            buf = buf[4 + size:]
        if len(out) >= n:
            break
        data = sock.recv(65536)
        assert data, f"the broker closed the connection after {len(out)} replies"
        buf += data
    return out


def test_pipelined_cursus_publishes_get_their_own_offsets_in_order(broker: BrokerProcess) -> None:
    topic = f"pipe-{uuid.uuid4().hex[:8]}"
    with socket.create_connection(("127.0.0.1", broker.cursus_port), timeout=30) as s:
        s.sendall(encode_frame(f"CREATE topic={topic} partitions=1".encode()))
        assert _frames(s, 1)[0].startswith(b"OK")
        s.sendall(b"".join(encode_frame(f"PUBLISH topic={topic} acks=1 producerId=p message=m{i}".encode())
                           for i in range(N))
                  + encode_frame(f"CONSUME topic={topic} partition=0 offset=0 member=m".encode()))
        replies = _frames(s, N + 1)
    acks = [json.loads(r) for r in replies[:N]]
    assert [a["status"] for a in acks] == ["OK"] * N
    # each PUBLISH's own offset, not the log end after its fsync (which pipelined ones move)
    assert [a["last_offset"] for a in acks] == list(range(N))
    assert replies[N]  # the CONSUME behind them was served after them: it reads them (below)
    for i in range(N):
        assert f"m{i}".encode() in replies[N]
