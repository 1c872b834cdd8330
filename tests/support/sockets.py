"""Raw-socket helpers for the connection-limit tests: connect from a chosen loopback address,
see whether the server closes a connection, and play a slowloris client."""

from __future__ import annotations

import asyncio
import contextlib


async def connect(port: int, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        try:
            return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """True when the server closes the connection within ``seconds`` (anything it sends, such as
    TANK's ping, is read and dropped)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    try:
        while (left := deadline - loop.time()) > 0:
            if not await asyncio.wait_for(reader.read(1 << 16), left):
                return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False
    return False


async def slowloris(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, prefix: bytes,
                    within: float) -> bool:
    """Send ``prefix`` one byte every 0.5 s; True when the server closes the connection before
    the bytes run out, failing if it is still open ``within`` seconds after the start."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    with contextlib.suppress(ConnectionError):
        for byte in prefix:
            writer.write(bytes([byte]))
            await writer.drain()
            if await closed_within(reader, 0.5):
                return True
            assert loop.time() - start < within, "still open long after the deadline"
    return False
