"""Test helpers for the TANK protocol (tank.md): an in-process broker with the TANK listener and a
raw socket client that sends bytes and reads frames."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from pathlib import Path

from bayou.broker import BrokerConfig
from bayou.server.app import BayouServer, ServerConfig

_HEAD = struct.Struct("<BI")
PING = b"\x03\x00\x00\x00\x00"


async def start_tank(data_dir: Path, *, with_rtes: bool = False, **broker_overrides: object) -> BayouServer:
    """An in-process server with the TANK listener (and the V1 one with ``with_rtes``)."""
    listeners: dict[str, tuple[str, int] | None] = {"tank": ("127.0.0.1", 0)}
    if with_rtes:
        listeners["rtes"] = ("127.0.0.1", 0)
    cfg = ServerConfig(broker=BrokerConfig(data_dir=data_dir, **broker_overrides),  # type: ignore[arg-type]
                       listeners=listeners, shutdown_grace_s=2.0)
    server = BayouServer(cfg)
    await server.start()
    return server


def tank_port(server: BayouServer) -> int:
    return server.listeners["tank"].port


class TankConn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> TankConn:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_exactly(self, n: int, timeout: float = 10.0) -> bytes:
        return await asyncio.wait_for(self.reader.readexactly(n), timeout)

    async def frame(self, timeout: float = 10.0) -> tuple[int, bytes]:
        """The next frame that is not the broker's ping."""
        while True:
            msg_id, size = _HEAD.unpack(await self.read_exactly(5, timeout))
            payload = await self.read_exactly(size, timeout)
            if msg_id != 3:
                return msg_id, payload

    async def is_closed(self, timeout: float = 5.0) -> bool:
        try:
            while True:
                data = await asyncio.wait_for(self.reader.read(1 << 16), timeout)
                if not data:
                    return True
        except (TimeoutError, ConnectionError):
            return False

    async def call(self, req: object) -> object:
        """Send a request encoded by bayou's codec and decode the answer (pings skipped)."""
        from bayou.protocols.tank import codec
        msg_id, payload = codec.encode_request(req)  # type: ignore[arg-type]
        await self.send(bytes([msg_id]) + len(payload).to_bytes(4, "little") + payload)
        rid, body = await self.frame()
        return codec.decode_response(rid, body, request=req)  # type: ignore[arg-type]

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


__all__ = ["PING", "TankConn", "start_tank", "tank_port"]
