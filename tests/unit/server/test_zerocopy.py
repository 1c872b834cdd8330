"""server.zerocopy over real sockets, on uvloop (which has no loop.sendfile) and on asyncio's own
loop: file ranges arrive intact and in order after bytes written through the transport."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import uvloop

from bayou.server import zerocopy


async def _roundtrip(path: Path, ranges: list[tuple[int, int]]) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    done = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        zerocopy.prepare(writer)
        writer.write(b"HEAD")
        await zerocopy.send_ranges(writer, fd, ranges)
        writer.write(b"TAIL")
        await writer.drain()
        writer.close()
        done.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = await asyncio.wait_for(reader.read(-1), 30)
    await done.wait()
    writer.close()
    server.close()
    os.close(fd)
    return data


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_ranges_arrive_in_order(tmp_path: Path, loop_kind: str) -> None:
    blob = os.urandom(3 * 1024 * 1024)
    path = tmp_path / "seg.log"
    path.write_bytes(blob)
    ranges = [(10, 100), (1_000_000, 2_000_000), (5, 1), (3 * 1024 * 1024 - 7, 7)]
    run = uvloop.run if loop_kind == "uvloop" else asyncio.run
    got = run(_roundtrip(path, ranges))
    assert got == b"HEAD" + b"".join(blob[o : o + n] for o, n in ranges) + b"TAIL"


def test_a_range_past_the_end_of_the_file_fails(tmp_path: Path) -> None:
    path = tmp_path / "short.log"
    path.write_bytes(b"abc")
    with pytest.raises(ConnectionResetError):
        zerocopy._send_blocking(os.open(os.devnull, os.O_WRONLY), os.open(path, os.O_RDONLY), [(0, 10)])
