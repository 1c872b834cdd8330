"""The replication listener (cluster mode): followers' FETCH requests, answered by the broker's
``ClusterNode`` with the partition's stored batches, and PRODUCE requests other brokers forward to
this partition leader (protocols/replica/codec.py)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from bayou.broker.authz import SYSTEM, Caller, bind_caller
from bayou.broker.cluster.node import ClusterNode
from bayou.protocols.replica.codec import (
    AUTH_FRAME_MAX,
    HEADER_SIZE,
    NONCE_SIZE,
    Auth,
    Challenge,
    Fetch,
    Produce,
    ReplicaProtocolError,
    auth_ok,
    decode,
    encode,
)
from bayou.server.base import Connection, Listener

log = logging.getLogger("bayou.replica")
AUTH_TIMEOUT_S = 10.0


async def _authenticate(conn: Connection, secret: str) -> bool:
    """The cluster's shared secret: challenge the peer, which must answer with the HMAC of the
    nonce before anything else (a frame longer than that answer is not even read)."""
    nonce = os.urandom(NONCE_SIZE)
    conn.writer.write(encode(Challenge(nonce)))
    await conn.writer.drain()
    try:
        head = await asyncio.wait_for(conn.reader.readexactly(HEADER_SIZE), AUTH_TIMEOUT_S)
        length = int.from_bytes(head[:4], "big")
        if length > AUTH_FRAME_MAX:
            raise ReplicaProtocolError(f"a frame of {length} bytes before AUTH")
        body = await asyncio.wait_for(conn.reader.readexactly(length - 1), AUTH_TIMEOUT_S)
        decoded = decode(head + body)
        ok = decoded is not None and isinstance(decoded[0], Auth) and auth_ok(secret, nonce, decoded[0])
    except (TimeoutError, asyncio.IncompleteReadError, ReplicaProtocolError) as exc:
        log.warning("refused a replication connection: %s", exc or type(exc).__name__,
                    extra={"peer": conn.peer})
        return False
    if not ok:
        log.warning("refused a replication connection: wrong cluster secret", extra={"peer": conn.peer})
    return ok


def replica_handler(node: ClusterNode) -> Callable[[Connection, Listener], Awaitable[None]]:
    async def serve(conn: Connection, listener: Listener) -> None:
        if node.secret is not None and not await _authenticate(conn, node.secret):
            return
        # Another broker of the cluster (it proved the secret, when one is set): its fetches and
        # forwarded produces are bayou's own work; the broker that took the client's produce
        # checked that client's principal before forwarding it.
        bind_caller(Caller(SYSTEM))
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
