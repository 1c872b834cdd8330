"""A topic created or deleted through one protocol is there, with its partitions, or gone for
every protocol."""

from __future__ import annotations

import pytest

from behaviour.adapters import Adapter
from behaviour.adapters import Feature as F
from behaviour.harness import for_pairs, pair
from support.brokers import BrokerProcess

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


@for_pairs(produce=(F.CREATE_TOPIC, F.DELETE_TOPIC))
async def test_a_topic_made_and_deleted_through_one_protocol(broker: BrokerProcess, producer: type[Adapter],
                                                             reader: type[Adapter]) -> None:
    async with pair(broker, producer, reader, 2) as (topic, p, r):
        for partition in (0, 1):
            got = await r.fetch(topic, partition, 0)
            assert got.error is None and got.records == [], got
        assert (await r.fetch(topic, 2, 0)).error == "unknown_partition"
        await p.delete_topic(topic)
        gone = await r.fetch(topic, 0, 0)
        assert gone.records == [] and gone.error == (
            "unknown_topic" if reader.unknown_topic_read == "error" else None), gone
