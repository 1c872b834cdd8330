"""Worker pools for CPU-bound work a request may bring, so the event loop never runs it.

Each kind of work has its own small pool: a flood of one (gzip bombs, a login storm hashing
passwords with argon2) queues behind its own workers and cannot take the threads another kind
needs (TANK's zero-copy sends run on the default executor). Pure-Python work (``parse_pool``)
does not run beside the loop but in turns with it, instead of holding it. The queues are bounded
by what feeds them: decompression inputs are request bytes the server's byte budget already
caps, or stored batches a fetch has read (``decode_stored``: a batch one protocol stored
compressed, converted for another).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from bayou.errors import CorruptRecord
from bayou.records.batch import HEADER_SIZE, BatchHeader, Buffer, Record, decode_header, decode_records
from bayou.records.tank import CODEC_NONE, FORMAT_TANK, stored_bundle

P = ParamSpec("P")
T = TypeVar("T")

_CPUS = os.cpu_count() or 2


@functools.cache
def inflate_pool() -> ThreadPoolExecutor:
    """Decompression of client batches (zlib, lz4, zstd and snappy release the GIL while they
    work): at most one thread per core, so a bomb flood cannot starve the loop of CPU time."""
    return ThreadPoolExecutor(max_workers=max(1, min(4, _CPUS)), thread_name_prefix="bayou-inflate")


@functools.cache
def parse_pool() -> ThreadPoolExecutor:
    """Reading large requests and writing wide answers: pure Python, so the thread holds the
    interpreter lock, which CPython hands back to the event loop's thread every 5 ms
    (``sys.getswitchinterval``): the loop keeps serving while a 100 MiB request is read. Two
    threads, so one such request does not queue every other large one behind it."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="bayou-parse")


@functools.cache
def hash_pool() -> ThreadPoolExecutor:
    """Password hashing (argon2 is deliberately slow and memory-hard)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="bayou-hash")


async def run_in(pool: ThreadPoolExecutor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on ``pool``; its exceptions are raised here."""
    return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kwargs))


OFF_LOOP_BYTES = 64 * 1024  # a request this large is read in the parse pool (``parsed``)


async def parsed(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``, reading a request (or a part of one) of ``size`` bytes whose cost
    grows with its entries: on the event loop up to OFF_LOOP_BYTES, past that in the parse pool."""
    if size > OFF_LOOP_BYTES:
        return await run_in(parse_pool(), fn, *args, **kwargs)
    return fn(*args, **kwargs)


INLINE_BATCH_BYTES = 64 * 1024  # a stored batch up to this size, not compressed, is decoded on the loop


def _heavy(buf: Buffer, pos: int, h: BatchHeader) -> bool:
    """Whether decoding the stored batch at ``pos`` means inflating it (batch compression, or a
    TANK bundle stored Snappy-compressed) or walking a large one."""
    if h.compression or h.size > INLINE_BATCH_BYTES:
        return True
    if h.payload_format != FORMAT_TANK:
        return False
    try:
        return stored_bundle(memoryview(buf)[pos + HEADER_SIZE : pos + h.size])[0] & 0x03 != CODEC_NONE
    except (CorruptRecord, IndexError):
        return False  # decode_records reports the damage


async def decode_stored(buf: Buffer, pos: int = 0) -> list[Record]:
    """``decode_records`` of a stored batch, in the inflate pool when that is real work: a fetch
    converting another protocol's compressed batch must not stall every other client."""
    if _heavy(buf, pos, decode_header(buf, pos)):
        return await run_in(inflate_pool(), decode_records, buf, pos)
    return decode_records(buf, pos)
