"""server/base.py: the byte budget and admission rules, without sockets."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bayou.errors import InvalidConfig
from bayou.server.base import Admission, ByteBudget, ConnectionLimits


async def test_budget_grants_whole_amounts_in_arrival_order() -> None:
    budget = ByteBudget(100)
    await budget.acquire(60)
    order: list[str] = []

    async def take(name: str, n: int) -> None:
        await budget.acquire(n)
        order.append(name)

    big = asyncio.ensure_future(take("big", 70))
    small = asyncio.ensure_future(take("small", 10))  # fits now, but waits behind "big" (no starving)
    await asyncio.sleep(0)
    assert order == [] and budget.waiting == 2
    budget.release(60)
    await asyncio.wait_for(asyncio.gather(big, small), 5)
    assert order == ["big", "small"] and budget.used == 80


async def test_budget_caps_a_request_at_the_total_and_recovers_from_cancellation() -> None:
    budget = ByteBudget(100)
    await budget.acquire(1_000)  # clamped: a frame the reader's cap let through never waits forever
    assert budget.used == 100
    waiter = asyncio.ensure_future(budget.acquire(50))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.waiting == 0
    budget.release(1_000)
    assert budget.used == 0


class _L:
    def __init__(self, n: int, draining: bool = False) -> None:
        self.connections = [object()] * n
        self.draining = draining


def test_admission_keeps_a_reserve_for_every_other_listener() -> None:
    adm = Admission(ConnectionLimits(max_connections=100, listener_reserve=10, max_connections_per_ip=1000))
    flooded, quiet1, quiet2 = _L(80), _L(0), _L(3)
    adm.listeners = [flooded, quiet1, quiet2]  # type: ignore[list-item]
    adm.total = 3
    x: Any = flooded
    # the others keep 10 + 7 unused slots: 100 - 17 = 83 may be used before the flood is refused
    adm.total = 82
    assert adm.refusal(x, "10.0.0.1") is None
    adm.total = 83
    assert adm.refusal(x, "10.0.0.1") == "limit"
    y: Any = quiet1  # a quiet listener still gets in
    assert adm.refusal(y, "10.0.0.2") is None


def test_admission_per_address() -> None:
    adm = Admission(ConnectionLimits(max_connections=100, max_connections_per_ip=2))
    listener: Any = _L(0)
    adm.listeners = [listener]
    adm.per_ip["10.0.0.1"] = 2
    assert adm.refusal(listener, "10.0.0.1") == "per-address limit"
    assert adm.refusal(listener, "10.0.0.2") is None


@pytest.mark.parametrize("field,value", [("idle_timeout_s", 0), ("max_connections_per_ip", 0),
                                         ("max_inflight_bytes", 1000), ("listener_reserve", -1)])
def test_limits_are_checked(field: str, value: float) -> None:
    with pytest.raises(InvalidConfig, match=field):
        ConnectionLimits(**{field: value})  # type: ignore[arg-type]


async def test_a_waiter_cancelled_just_before_a_release_is_not_granted_and_nothing_leaks() -> None:
    """Cancelling a waiting task cancels its future at once, but its entry leaves the queue only
    when the task runs again: a release in between granted the cancelled future (its bytes
    counted as used for ever, and set_result raised in the releasing handler)."""
    budget = ByteBudget(100)
    await budget.acquire(100)
    waiter = asyncio.ensure_future(budget.acquire(100))
    await asyncio.sleep(0)
    waiter.cancel()
    budget.release(100)  # the same pass: the cancelled waiter has not run yet
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (budget.used, budget.waiting) == (0, 0)
    await asyncio.wait_for(budget.acquire(100), 5)  # the whole budget is there again
