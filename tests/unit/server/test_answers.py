"""server/answers.py: a request's room in the broker-wide answer budget."""

from __future__ import annotations

import asyncio

import pytest

from bayou.server.answers import Room
from bayou.server.base import ByteBudget

pytestmark = pytest.mark.asyncio


async def test_a_room_reserves_keeps_what_the_answer_holds_and_gives_it_back() -> None:
    budget = ByteBudget(100)
    room = Room(budget)
    await room.reserve(80)
    assert (room.held, budget.used) == (80, 80)
    room.keep(30)  # the answer built holds less than its bound
    assert (room.held, budget.used) == (30, 30)
    room.keep(45)  # the batch begun under the bound: taken at once
    assert (room.held, budget.used) == (45, 45)
    room.release()
    room.release()  # twice is once
    assert (room.held, budget.used) == (0, 0)


async def test_a_waiting_request_holds_nothing_and_waits_in_arrival_order() -> None:
    budget = ByteBudget(100)
    first, second, third = Room(budget), Room(budget), Room(budget)
    await first.reserve(70)
    await second.reserve(20)
    second_again = asyncio.ensure_future(second.reserve(50))  # gives its 20 back, then waits
    third_task = asyncio.ensure_future(third.reserve(10))
    await asyncio.sleep(0)
    assert not second_again.done() and budget.used == 70 and second.held == 0
    assert not third_task.done()  # behind the one waiting: first come, first served
    first.release()
    await asyncio.wait_for(asyncio.gather(second_again, third_task), 5)
    assert (second.held, third.held, budget.used) == (50, 10, 60)


async def test_keep_past_the_total_is_held_within_it() -> None:
    budget = ByteBudget(100)
    room = Room(budget)
    await room.reserve(1_000)  # clamped, as a frame larger than the request budget
    room.keep(5_000)
    assert room.held == 100 and budget.used == 100
    room.release()
    assert budget.used == 0


async def test_claim_holds_at_once_when_there_is_room_and_else_hands_the_wait() -> None:
    budget = ByteBudget(100)
    room, other = Room(budget), Room(budget)
    assert room.claim(60) is None and (room.held, budget.used) == (60, 60)
    waiting = other.claim(60)
    assert waiting is not None and other.held == 0
    task = asyncio.ensure_future(waiting)
    await asyncio.sleep(0)
    assert not task.done()
    assert room.claim(10) is None  # its 60 given back first: granted to the waiter, then 10 more
    await asyncio.wait_for(task, 5)
    assert (room.held, other.held, budget.used) == (10, 60, 70)
