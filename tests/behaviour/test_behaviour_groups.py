"""Consumer-group offsets are the broker's: what a member commits through one protocol, a member
of the same group reads (and moves on) through another. Groups are named as the broker knows
them; an adapter maps the name to its protocol's (an Iggy group ``g`` of topic ``t`` is the
broker group ``iggy.t.g``, so the shared name has that form)."""

from __future__ import annotations

import pytest

from behaviour.adapters import Adapter, Out
from behaviour.adapters import Feature as F
from behaviour.harness import for_pairs, pair
from support.brokers import BrokerProcess
from support.oracles import fnv1a_32

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


def keys_for_partition_0(n: int, partitions: int) -> list[bytes]:
    """Keys V1 routes to partition 0 (FNV-1a mod the partition count, rtes.md 6.1), so every
    protocol puts these records in the same place."""
    out = []
    for i in range(1000):
        key = f"key-{i}".encode()
        if fnv1a_32(key) % partitions == 0:
            out.append(key)
            if len(out) == n:
                return out
    raise AssertionError("no such keys")


@for_pairs(produce=(F.CREATE_TOPIC, F.GROUP_OFFSETS), read=(F.GROUP_OFFSETS,))
async def test_committed_offsets_are_shared_across_protocols(broker: BrokerProcess, producer: type[Adapter],
                                                             reader: type[Adapter]) -> None:
    async with pair(broker, producer, reader, 2) as (topic, p, r):
        group = f"iggy.{topic}.shared"
        await p.produce(topic, 0, [Out(b"v%d" % i, k) for i, k in enumerate(keys_for_partition_0(5, 2))])
        await p.commit(group, topic, 0, 3)
        assert await r.committed(group, topic, 0) == 3
        assert await r.committed(group, topic, 1) == 0  # nothing committed there
        await r.commit(group, topic, 0, 5)
        assert await p.committed(group, topic, 0) == 5
        assert await r.committed(group, topic, 0) == 5
