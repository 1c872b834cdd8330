"""Test helpers for the Cursus protocol (cursus.md): an in-process broker with the Cursus listener,
an asyncio frame connection, and batch builders that use bayou's own codec."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Sequence
from pathlib import Path

from bayou.broker import BrokerConfig
from bayou.protocols.cursus.batch import encode_batch, encode_messages
from bayou.protocols.cursus.framing import encode_frame
from bayou.records.cursus import CursusMessage
from bayou.server.app import BayouServer, ServerConfig

EPOCH = 1700000000  # the producer epoch the vectors pinned
PRODUCER = b"py-test"  # the producer id the vectors pinned

_U32 = struct.Struct(">I")


async def start_cursus(data_dir: Path, **broker_overrides: object) -> BayouServer:
    """A server in the running event loop with only the Cursus listener on 127.0.0.1:<ephemeral>,
    advertising 127.0.0.1 (METADATA / FIND_COORDINATOR then point at the real port)."""
    cfg = ServerConfig(
        broker=BrokerConfig(data_dir=data_dir, **broker_overrides),  # type: ignore[arg-type]
        listeners={"cursus": ("127.0.0.1", 0)},
        advertised_host="127.0.0.1",
        shutdown_grace_s=2.0,  # a STREAM connection counts as busy until its client goes away
    )
    server = BayouServer(cfg)
    await server.start()
    return server


def cursus_port(server: BayouServer) -> int:
    return server.listeners["cursus"].port


def envelope(text: str | bytes, topic: str | bytes = b"") -> bytes:
    """A text command inside the u16 topic envelope (cursus.md 2.1): ``u16 len | topic | command``."""
    t = topic.encode() if isinstance(topic, str) else topic
    c = text.encode() if isinstance(text, str) else text
    return len(t).to_bytes(2, "big") + t + c


def message(payload: bytes | str, seq: int = 1, *, key: bytes | str = b"", producer_id: bytes = PRODUCER,
            epoch: int = EPOCH, offset: int = 0) -> CursusMessage:
    p = payload.encode() if isinstance(payload, str) else payload
    k = key.encode() if isinstance(key, str) else key
    return CursusMessage(p, offset, seq, producer_id, k, epoch)


def build_batch(topic: str, partition: int, messages: Sequence[CursusMessage | bytes | str],
                acks: str = "1", *, idempotent: bool = False, seq_start: int | None = None,
                seq_end: int | None = None, count: int | None = None, framed: bool = False) -> bytes:
    """A batch body (cursus.md 5.1) built with bayou's codec, as a client would send it.

    Plain payloads become records of producer ``py-test`` / epoch 1700000000 numbered seq 1, 2, ...
    ``seq_start``/``seq_end`` default to the first/last record's seq; ``count`` overrides the
    header's message count (for malformed input). ``framed`` adds the u32 length prefix.
    """
    msgs = [m if isinstance(m, CursusMessage) else message(m, i + 1) for i, m in enumerate(messages)]
    first = msgs[0].seq_num if msgs else 0
    last = msgs[-1].seq_num if msgs else 0
    body = encode_batch(topic, partition, encode_messages(msgs), len(msgs) if count is None else count,
                        first if seq_start is None else seq_start, last if seq_end is None else seq_end,
                        acks, idempotent=idempotent)
    return encode_frame(body) if framed else body


def expected_batch(topic: str, partition: int, messages: Sequence[CursusMessage]) -> bytes:
    """The batch body the broker sends for stored ``messages`` (acks ``1``, idempotent 0)."""
    first = messages[0].seq_num if messages else 0
    last = messages[-1].seq_num if messages else 0
    return encode_batch(topic, partition, encode_messages(messages), len(messages), first, last)


class FrameConn:
    """An asyncio Cursus connection: send frame bodies (or raw bytes), read reply frame bodies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> FrameConn:
        r, w = await asyncio.open_connection(host, port, limit=1 << 24)
        return cls(r, w)

    async def send(self, body: bytes) -> None:
        """One frame: the u32 body length, then ``body``."""
        await self.send_raw(encode_frame(body))

    async def send_raw(self, data: bytes) -> None:
        """Bytes exactly as given (a complete frame from a vector, or a deliberately broken one)."""
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self, timeout: float = 10.0) -> bytes:
        """One reply frame body (``b""`` for a zero-length keepalive). ConnectionError on EOF."""
        try:
            head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
            (n,) = _U32.unpack(head)
            return await asyncio.wait_for(self.reader.readexactly(n), timeout) if n else b""
        except asyncio.IncompleteReadError as exc:
            raise ConnectionError(f"connection closed (partial {exc.partial!r})") from None

    async def recv_text(self, timeout: float = 10.0) -> str:
        return (await self.recv(timeout)).decode("utf-8", "surrogateescape")

    async def ask(self, body: bytes, timeout: float = 10.0) -> bytes:
        await self.send(body)
        return await self.recv(timeout)

    async def command(self, text: str | bytes, *, raw: bool = False, topic: str | bytes = b"",
                      timeout: float = 10.0) -> str:
        """Send a text command (in the envelope the Python client uses, or ``raw``) -> reply text."""
        t = text.encode() if isinstance(text, str) else text
        reply = await self.ask(t if raw else envelope(t, topic), timeout)
        return reply.decode("utf-8", "surrogateescape")

    async def is_closed(self, timeout: float = 2.0) -> bool:
        """True when the peer closed the connection (EOF or reset) within ``timeout`` without
        sending anything; False when it is still open. Data arriving instead is an AssertionError."""
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        assert data == b"", f"expected the connection to close, got {data!r}"
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


__all__ = ["EPOCH", "PRODUCER", "FrameConn", "build_batch", "cursus_port", "envelope", "expected_batch",
           "message", "start_cursus"]
