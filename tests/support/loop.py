"""The event loop seen from another task: how often it got a turn while some work ran."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def turns_during(work: Awaitable[T]) -> tuple[T, int]:
    """``work``'s result, and how many turns another task got on the event loop meanwhile."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    try:
        return await work, ticks - before
    finally:
        task.cancel()
