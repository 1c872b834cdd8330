"""The replication listener (cluster mode): followers' FETCH requests, answered by the cluster
node's leader side with the partition's stored batches, and PRODUCE requests other brokers forward
to this partition leader (protocols/replica/codec.py; the client side is server/replica_client.py)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Protocol

from bayou.broker.authz import SYSTEM, Caller, bind_caller
from bayou.broker.cluster.transport import FetchAnswer, FetchRequest, ProduceAnswer, ProduceRequest
from bayou.protocols.replica.codec import (
    AUTH_FRAME_MAX,
    MAX_FRAME,
    NONCE_SIZE,
    Auth,
    Challenge,
    Fetch,
    Message,
    Produce,
    ReplicaProtocolError,
    auth_ok,
    decode,
    encode,
)
from bayou.protocols.replica.framing import FrameReader
from bayou.server.base import Connection, Listener
from bayou.server.frames import serve_frames
from bayou.server.replica_client import (
    fetch_answer_to_wire,
    fetch_from_wire,
    produce_answer_to_wire,
    produce_from_wire,
)

log = logging.getLogger("bayou.replica")
AUTH_TIMEOUT_S = 10.0


async def _next_frame(conn: Connection, buf: bytearray, cap: int) -> Message | None:
    """The next frame from the peer (None at EOF), read through ``Connection.read`` so the idle
    and request deadlines and the byte budget apply; a frame declared longer than ``cap`` is
    refused from its header (``ReplicaProtocolError``) before its body is read."""
    while True:
        if len(buf) >= 4:
            length = int.from_bytes(buf[:4], "big")
            if length > cap:
                raise ReplicaProtocolError(f"a frame of {length} bytes (at most {cap})")
            pending = 4 + length
        else:
            pending = len(buf)
        decoded = decode(buf)
        if decoded is not None:
            msg, used = decoded
            del buf[:used]
            return msg
        data = await conn.read(pending)
        if not data:
            return None
        buf += data


async def _authenticate(conn: Connection, buf: bytearray, secret: str) -> bool:
    """The cluster's shared secret: challenge the peer, which must answer with the HMAC of the
    nonce before anything else (a frame longer than that answer is not even read)."""
    nonce = os.urandom(NONCE_SIZE)
    conn.writer.write(encode(Challenge(nonce)))
    await conn.writer.drain()
    try:
        async with asyncio.timeout(AUTH_TIMEOUT_S):
            msg = await _next_frame(conn, buf, AUTH_FRAME_MAX)
        ok = isinstance(msg, Auth) and auth_ok(secret, nonce, msg)
    except (TimeoutError, ReplicaProtocolError) as exc:
        log.warning("refused a replication connection: %s", exc or type(exc).__name__,
                    extra={"peer": conn.peer})
        return False
    if not ok:
        log.warning("refused a replication connection: wrong cluster secret", extra={"peer": conn.peer})
    else:
        conn.busy += 1  # a complete request: the connection is past its idle deadline
        conn.busy -= 1
    return ok


class LeaderSide(Protocol):
    """What the listener calls: the cluster node's leader side (broker/cluster/leader.py)."""

    secret: str | None

    async def serve_fetch(self, req: FetchRequest) -> FetchAnswer: ...

    async def serve_produce(self, req: ProduceRequest) -> ProduceAnswer: ...


def replica_handler(node: LeaderSide) -> Callable[[Connection, Listener], Awaitable[None]]:
    async def serve(conn: Connection, listener: Listener) -> None:
        buf = bytearray()
        if node.secret is not None and not await _authenticate(conn, buf, node.secret):
            return
        # Another broker of the cluster (it proved the secret, when one is set): its fetches and
        # forwarded produces are bayou's own work; the broker that took the client's produce
        # checked that client's principal before forwarding it.
        bind_caller(Caller(SYSTEM))

        async def handle(msg: Message) -> bytes:
            if isinstance(msg, Fetch):
                return encode(fetch_answer_to_wire(await node.serve_fetch(fetch_from_wire(msg))))
            if isinstance(msg, Produce):
                return encode(produce_answer_to_wire(await node.serve_produce(produce_from_wire(msg))))
            raise ReplicaProtocolError(f"unexpected {type(msg).__name__}")

        async def refuse(exc: ReplicaProtocolError) -> None:
            log.info("closing replication connection: %s", exc, extra={"peer": conn.peer})

        # what came after the AUTH frame in the same read is the first of the stream
        await serve_frames(conn, listener, FrameReader(listener.limits.frame_cap(MAX_FRAME)), handle,
                           error=ReplicaProtocolError, refuse=refuse, first=bytes(buf))

    return serve
