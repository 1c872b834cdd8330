"""The replication listener (cluster mode): followers' FETCH requests, answered by the broker's
``ClusterNode`` with the partition's stored batches, and PRODUCE requests other brokers forward to
this partition leader (protocols/replica/codec.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bayou.broker.cluster.node import ClusterNode
from bayou.protocols.replica.codec import Fetch, Produce, ReplicaProtocolError, decode, encode
from bayou.server.base import Connection, Listener

log = logging.getLogger("bayou.replica")


def replica_handler(node: ClusterNode) -> Callable[[Connection, Listener], Awaitable[None]]:
    async def serve(conn: Connection, listener: Listener) -> None:
        buf = bytearray()
        while not listener.draining:
            data = await conn.reader.read(listener.limits.read_size)
            if not data:
                return
            buf += data
            while True:
                try:
                    decoded = decode(buf)
                except ReplicaProtocolError as exc:
                    log.info("closing replication connection: %s", exc, extra={"peer": conn.peer})
                    return
                if decoded is None:
                    break
                msg, used = decoded
                del buf[:used]
                if not isinstance(msg, Fetch | Produce):
                    log.info("closing replication connection: unexpected %s", type(msg).__name__)
                    return
                conn.busy += 1
                try:
                    reply = (await node.serve_fetch(msg) if isinstance(msg, Fetch)
                             else await node.serve_produce(msg))
                finally:
                    conn.busy -= 1
                conn.writer.write(encode(reply))
                await conn.writer.drain()

    return serve
