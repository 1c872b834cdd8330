"""broker/admin.py: listing groups with their lag reads the committed offsets once per request,
not once per group (thousands of groups would otherwise hold the event loop for seconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bayou.broker import Broker, BrokerConfig, admin
from bayou.records import Record, encode_batch


class CountingOffsets(dict[Any, int]):
    scans = 0

    def __iter__(self) -> Any:
        CountingOffsets.scans += 1
        return super().__iter__()

    def items(self) -> Any:
        CountingOffsets.scans += 1
        return super().items()


async def test_listing_many_groups_scans_the_offsets_once(tmp_path: Path) -> None:
    b = Broker(BrokerConfig(data_dir=tmp_path / "d"))
    await b.start()
    try:
        await b.create_topic("t", 2)
        await b.produce("t", 0, encode_batch([Record(b"v%d" % i) for i in range(5)]))
        for g in range(60):
            await b.commit_offset(f"g{g}", "t", 0, g % 5)
        b.groups.offsets = CountingOffsets(b.groups.offsets)
        CountingOffsets.scans = 0
        index = admin.offsets_by_group(b)
        names = admin.group_names(b, index)
        lags = [await admin.group_lag(b, n, index) for n in names]
        assert len(names) == 60 and CountingOffsets.scans <= 2, CountingOffsets.scans
        assert {lag.name: lag.lag for lag in lags}["g3"] == 2  # hw 5 - committed 3
    finally:
        await b.stop()
