"""The client side of the replication listener (server/replica.py): how this broker connects to
another broker's listener, proves the cluster's secret, and sends FETCH and PRODUCE frames
(protocols/replica/codec.py). The cluster node (broker/cluster/) gets it as its ``ReplicaDialer``
from server/app.py and speaks only in the requests and answers of broker/cluster/transport.py;
this module maps those to the codec's messages and back, in both directions (the listener maps
with the same functions)."""

from __future__ import annotations

import asyncio
import ssl
from typing import Literal

from bayou.broker.cluster.transport import (
    FetchAnswer,
    FetchRequest,
    FetchStatus,
    LinkDropped,
    LinkError,
    ProduceAnswer,
    ProduceRequest,
    ProduceStatus,
)
from bayou.protocols.replica.codec import (
    HEADER_SIZE,
    NONCE_SIZE,
    Auth,
    Challenge,
    Fetch,
    FetchError,
    FetchReply,
    Produce,
    ProduceError,
    ProduceReply,
    ReplicaProtocolError,
    auth_mac,
    decode,
    encode,
)

# -- the transport's requests and answers <-> the codec's messages --------------------------------


def fetch_to_wire(req: FetchRequest) -> Fetch:
    return Fetch(req.topic, req.partition, req.replica_id, req.leader_epoch, req.fetch_offset,
                 req.last_fetched_epoch, req.max_bytes, req.max_wait_ms)


def fetch_from_wire(msg: Fetch) -> FetchRequest:
    return FetchRequest(msg.topic, msg.partition, msg.replica_id, msg.leader_epoch, msg.fetch_offset,
                        msg.last_fetched_epoch, msg.max_bytes, msg.max_wait_ms)


def fetch_answer_to_wire(a: FetchAnswer) -> FetchReply:
    return FetchReply(FetchError(a.error), a.leader_epoch, a.high_watermark, a.log_start_offset,
                      a.diverging_end_offset, a.diverging_epoch, a.data)


def fetch_answer_from_wire(msg: FetchReply) -> FetchAnswer:
    return FetchAnswer(FetchStatus(msg.error), msg.leader_epoch, msg.high_watermark, msg.log_start_offset,
                       msg.diverging_end_offset, msg.diverging_epoch, msg.data)


def produce_to_wire(req: ProduceRequest) -> Produce:
    return Produce(req.topic, req.partition, req.acks, req.flags, req.batch)


def produce_from_wire(msg: Produce) -> ProduceRequest:
    return ProduceRequest(msg.topic, msg.partition, msg.acks, msg.flags, msg.batch)


def produce_answer_to_wire(a: ProduceAnswer) -> ProduceReply:
    return ProduceReply(ProduceError(a.error), a.base_offset, a.last_offset, a.high_watermark,
                        a.log_start_offset, a.message)


def produce_answer_from_wire(msg: ProduceReply) -> ProduceAnswer:
    return ProduceAnswer(ProduceStatus(msg.error), msg.base_offset, msg.last_offset, msg.high_watermark,
                         msg.log_start_offset, msg.message)


# -- the client ------------------------------------------------------------------------------


class ReplicaConnection:
    """One connection to a replication listener (a ``ReplicaLink``): one request in flight."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def fetch(self, req: FetchRequest, timeout: float | None = None) -> FetchAnswer:
        reply = await self._call(fetch_to_wire(req), FetchReply, timeout)
        assert isinstance(reply, FetchReply)
        return fetch_answer_from_wire(reply)

    async def produce(self, req: ProduceRequest, timeout: float | None = None) -> ProduceAnswer:
        reply = await self._call(produce_to_wire(req), ProduceReply, timeout)
        assert isinstance(reply, ProduceReply)
        return produce_answer_from_wire(reply)

    async def _call(self, req: Fetch | Produce, want: type[FetchReply | ProduceReply],
                    timeout: float | None) -> FetchReply | ProduceReply:
        got = b""
        try:
            self.writer.write(encode(req))
            await self.writer.drain()
            got = await asyncio.wait_for(self.reader.readexactly(5), timeout)
            got += await asyncio.wait_for(self.reader.readexactly(int.from_bytes(got[:4], "big") - 1),
                                          timeout)
        except (ConnectionError, EOFError) as exc:
            if not got:  # closed before anything came back: the request may go again elsewhere
                raise LinkDropped(str(exc) or type(exc).__name__) from None
            raise
        try:
            decoded = decode(got)
        except ReplicaProtocolError as exc:
            raise LinkError(str(exc)) from None
        if decoded is None or not isinstance(decoded[0], want):
            raise LinkError(f"expected a {want.__name__}")
        return decoded[0]

    def close(self) -> None:
        self.writer.close()


class ReplicaClient:
    """Opens ``ReplicaConnection``s to other brokers' replication listeners: past their challenge
    when the cluster has a shared secret, over TLS when the cluster's replication listeners use it
    (mTLS: this broker's certificate)."""

    def __init__(self, broker_id: int, secret: str | None, tls: ssl.SSLContext | None) -> None:
        self.me = broker_id
        self.secret = secret
        self.tls = tls

    async def connect(self, host: str, port: int, *, limit: int = 1 << 16) -> ReplicaConnection:
        """A connection past the handshake; ``LinkError`` when the handshake fails."""
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=limit, ssl=self.tls,
                                                           server_hostname=host if self.tls else None)
        except ssl.SSLError as exc:
            raise LinkError(f"TLS handshake with {host}:{port} failed: {exc}") from None
        if self.secret is None:
            return ReplicaConnection(reader, writer)
        try:
            head = await asyncio.wait_for(reader.readexactly(HEADER_SIZE), 10)
            if int.from_bytes(head[:4], "big") != NONCE_SIZE + 1:
                raise ReplicaProtocolError("expected the replication listener's CHALLENGE")
            decoded = decode(head + await asyncio.wait_for(reader.readexactly(NONCE_SIZE), 10))
            if decoded is None or not isinstance(decoded[0], Challenge):
                raise ReplicaProtocolError("expected the replication listener's CHALLENGE")
            writer.write(encode(Auth(self.me, auth_mac(self.secret, decoded[0].nonce, self.me))))
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ReplicaProtocolError) as exc:
            writer.close()
            raise LinkError(f"replication handshake with {host}:{port} failed: "
                            f"{exc or type(exc).__name__}") from None
        return ReplicaConnection(reader, writer)

    async def probe(self, host: str, port: int, timeout: float) -> Literal["open", "refused", "unknown"]:
        try:
            _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except ConnectionRefusedError:
            return "refused"
        except (OSError, TimeoutError):
            return "unknown"  # unreachable is no proof
        writer.close()
        return "open"
