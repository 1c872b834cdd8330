"""The floor of a Python request/reply server on this machine: what any asyncio broker pays per
request before doing any work of its own. ``pipeline_bench.py --floor`` runs it beside bayou.

A uvloop server with a callback protocol (no stream reader, no task, no coroutine per request):
each Kafka-framed request (i32 size, then the header: api key, version, correlation id) gets a
fixed Produce v7 response for one partition (as long as bayou's) with the request's correlation
id, all replies of one read in one write. Nothing is decoded or stored: the CPU it spends per
request is the event loop's and the kernel's (socket reads and writes), which bayou pays too.

    python benchmarks/floor_server.py PORT
"""

from __future__ import annotations

import asyncio
import struct
import sys
from typing import cast

# the body of a Produce v7 response: one topic "pipe", one partition, no error, offsets; a
# throttle time (the same 49 bytes bayou answers with)
_BODY = (struct.pack(">i", 1) + struct.pack(">h", 4) + b"pipe" + struct.pack(">i", 1)
         + struct.pack(">ihqqq", 0, 0, 0, -1, 0) + struct.pack(">i", 0))
_SIZE = struct.pack(">i", 4 + len(_BODY))  # the correlation id, then the body
_LEN = struct.Struct(">i")


class FixedReply(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        out = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if end - pos - 4 < n:
                break
            out.append(_SIZE + bytes(buf[pos + 8:pos + 12]) + _BODY)  # the correlation id
            pos += 4 + n
        del buf[:pos]
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def main(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(FixedReply, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        import uvloop
        uvloop.run(main(int(sys.argv[1])))
    except KeyboardInterrupt:
        pass
