"""Every captured V1 vector (tests/conformance/vectors/rtes, copied from shared/vectors/rtes),
replayed byte for byte against a fresh broker over a real socket."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from support.brokers import LineConn, start_inprocess

VECTORS = Path(__file__).parent / "vectors" / "rtes"
SETUP = re.compile(r"`(V1\|[^`]*)`")


def _config(preconditions: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    if "configured with min ISR 1" in preconditions:
        cfg["min_insync_replicas"] = 1
    m = re.search(r"configured with (\d+) partitions", preconditions)
    if m:
        cfg["default_partitions"] = int(m.group(1))
    return cfg


def _single_vectors() -> list[Any]:
    out = []
    for path in sorted(VECTORS.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            out.append(pytest.param(data, id=path.stem))
    return out


def test_vector_files_are_all_here() -> None:
    assert len(_single_vectors()) == 39
    assert (VECTORS / "scenario-basic.json").exists()


@pytest.mark.parametrize("vector", _single_vectors())
async def test_vector(vector: dict[str, str], tmp_path: Path) -> None:
    server = await start_inprocess(tmp_path / "data", **_config(vector["preconditions"]))
    try:
        conn = await LineConn.open(server.listeners["rtes"].port)
        for setup in SETUP.findall(vector["preconditions"]):
            await conn.ask(setup)
        reply = await conn.ask(vector["request"], timeout=10)
        assert reply == vector["expected_response"], vector["description"]
        await conn.close()
    finally:
        await server.stop()


async def test_scenario_basic(tmp_path: Path) -> None:
    steps = json.loads((VECTORS / "scenario-basic.json").read_text())
    assert len(steps) == 21
    server = await start_inprocess(tmp_path / "data")
    try:
        conn = await LineConn.open(server.listeners["rtes"].port)
        for step in steps:
            assert await conn.ask(step["request"]) == step["expected_response"], step["description"]
        await conn.close()
    finally:
        await server.stop()
    # The state the scenario leaves is what the original broker persisted (rtes.md 6.4).
    groups = json.loads((tmp_path / "data" / "groups.json").read_text())
    g = groups["analytics"]
    assert (g["topic"], g["generation"], g["assignor"]) == ("orders", 4, "round_robin")
    assert g["member_order"] == ["c1"] and g["assignments"] == {"c1": [0, 1, 2]}
    assert [m["consumer_id"] for m in g["members"]] == ["c1"]
    offsets = json.loads((tmp_path / "data" / "offsets.json").read_text())
    assert offsets == {"analytics": {"orders": {"0": 1, "2": 2}}}


async def test_vectors_pipelined_on_one_connection(tmp_path: Path) -> None:
    """The scenario sent in one write: replies come back in request order."""
    steps = json.loads((VECTORS / "scenario-basic.json").read_text())
    server = await start_inprocess(tmp_path / "data")
    try:
        conn = await LineConn.open(server.listeners["rtes"].port)
        conn.writer.write(b"".join(s["request"].encode() + b"\n" for s in steps))
        await conn.writer.drain()
        for step in steps:
            assert (await conn.recv()).decode() == step["expected_response"]
        await conn.close()
    finally:
        await server.stop()
