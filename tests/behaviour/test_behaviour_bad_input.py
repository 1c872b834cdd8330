"""Malformed requests, per protocol: the protocol's documented error (or, where the protocol
says so, a closed connection), the connection still serving where the protocol allows, the broker
serving new connections, and nothing stored altered."""

from __future__ import annotations

import pytest

from behaviour.adapters import ADAPTERS, Adapter, BadInput, Out
from behaviour.harness import connected
from support.brokers import BrokerProcess

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


def topic_of(proto: type[Adapter]) -> str:
    return f"bad-input-{proto.name}"  # one topic per protocol, shared by its cases


CASES = [pytest.param(cls, case, id=f"{cls.name}-{case.name}")
         for cls in ADAPTERS for case in cls.bad_inputs(topic_of(cls))]


@pytest.mark.parametrize(("proto", "case"), CASES)
async def test_malformed_request(broker: BrokerProcess, proto: type[Adapter], case: BadInput) -> None:
    topic = topic_of(proto)
    async with connected(proto, broker) as a:
        first = await a.fetch(topic, 0, 0)
        if first.error == "unknown_topic" or not first.records:  # the protocol's first case makes it
            await a.create_topic(topic, 1)
            await a.produce(topic, 0, [Out(b"kept-0", b"k0"), Out(b"kept-1", b"k1")])
        before = await a.fetch_all(topic, 0)
        reply, alive = await a.send_bad(case)
        assert reply == case.reply
        assert alive == case.stays_open, "connection " + ("closed" if case.stays_open else "still serving")
    async with connected(proto, broker) as fresh:
        assert await fresh.fetch_all(topic, 0) == before
