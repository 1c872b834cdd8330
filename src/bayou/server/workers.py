"""Worker pools for CPU-bound work a request may bring, so the event loop never runs it.

Each kind of work has its own small pool: a flood of one (gzip bombs, a login storm hashing
passwords with argon2) queues behind its own workers and cannot take the threads another kind
needs (TANK's zero-copy sends run on the default executor). The queues are bounded by what feeds
them: decompression inputs are request bytes the server's byte budget already caps.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_CPUS = os.cpu_count() or 2


@functools.cache
def inflate_pool() -> ThreadPoolExecutor:
    """Decompression of client batches (zlib, lz4, zstd and snappy release the GIL while they
    work): at most one thread per core, so a bomb flood cannot starve the loop of CPU time."""
    return ThreadPoolExecutor(max_workers=max(1, min(4, _CPUS)), thread_name_prefix="bayou-inflate")


@functools.cache
def hash_pool() -> ThreadPoolExecutor:
    """Password hashing (argon2 is deliberately slow and memory-hard)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="bayou-hash")


async def run_in(pool: ThreadPoolExecutor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on ``pool``; its exceptions are raised here."""
    return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kwargs))
