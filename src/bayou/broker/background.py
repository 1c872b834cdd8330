"""Background tasks that never die silently: run a step forever, log failures, back off, retry.

Every periodic job of the broker (flush, retention, group expiry, group persistence, handle
cache sweeps) runs through ``run_forever``. A step that raises is logged with its traceback and
retried after a delay that doubles up to a maximum; the first success after failures is logged
too, so an operator sees both the outage and its end. Only cancellation stops the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("bayou.broker")


async def run_forever(name: str, step: Callable[[], Awaitable[object]],
                      interval: Callable[[], float] | float, *,
                      retry_s: float = 0.1, retry_max_s: float = 5.0,
                      logger: logging.Logger = log) -> None:
    """Await ``step()`` every ``interval`` seconds (a number, or a function read before each
    wait) until cancelled. A failure waits ``retry_s`` (doubling up to ``retry_max_s``) instead
    of the interval before the next attempt."""
    failures = 0
    delay = 0.0
    while True:
        wait = interval() if callable(interval) else interval
        await asyncio.sleep(max(wait, delay) if failures else wait)
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            failures += 1
            delay = min(retry_max_s, retry_s * 2 ** min(failures - 1, 30))
            logger.exception("background task %s failed (%d in a row); retrying in %.1f s",
                             name, failures, delay)
            continue
        if failures:
            logger.warning("background task %s recovered after %d failures", name, failures)
            failures = 0
