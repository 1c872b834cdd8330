"""Every TANK vector replayed over a real socket against one broker, in the capture order of
tank.md §15 (later vectors depend on the state earlier ones left), compared byte for byte with
what the real TANK 4.0 broker answered.

The concurrent producers of the long-poll vectors (written in their notes) are replayed on their
own connections while the consume waits. Where bayou answers differently on purpose, the test
says why and checks the rest:

* ``status``: the broker start time differs per run;
* ``reload_config_unknown_topic``: TANK sends 11, which tank-cli does not understand; bayou sends 1,
  the code tank-cli maps to "unknown topic" (answer the way the real client parses);
* ``setup_roll_*``, ``consume_segment_boundary`` and the retention vectors: a bayou segment holds
  a 61-byte batch header per bundle, so 64-byte segments roll after one bundle instead of a few;
  the replies keep TANK's structure (checked by decoding), with bayou's own boundaries;
* ``idle_connection_probe`` takes 16 s; the idle close is tested in the TANK integration tests.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.support.tank import PING, TankConn, start_tank, tank_port

from bayou.protocols.tank import codec
from bayou.protocols.tank import messages as m
from bayou.server.app import BayouServer

VECTORS = Path(__file__).parent / "vectors" / "tank"
ORDER = [
    "create_topic", "create_topic_exists", "create_topic_invalid_name", "create_topic_with_config",
    "create_topic_bad_config", "produce_single", "produce_bundle_3msgs", "produce_keys",
    "produce_snappy", "produce_pipelined_3reqs", "produce_unknown_topic", "produce_unknown_partition",
    "setup_sparse_topic", "produce_sparse_consecutive_0x5", "produce_sparse_gaps_0x5",
    "produce_sparse_single_0x5", "produce_sparse_stale_seq_0x5", "produce_plain_after_sparse",
    "discover_partitions", "discover_partitions_two_empty", "discover_partitions_unknown_topic",
    "status", "discover_topics", "consume_from_first", "consume_from_first_drain",
    "consume_from_middle", "consume_from_middle_compressed", "consume_small_fetch",
    "consume_tail_maxwait0", "consume_boundary_past_end", "consume_unknown_topic",
    "consume_unknown_partition", "consume_sparse_from_first", "consume_sparse_middle",
    "consume_empty_partition", "consume_tail_wakeup", "consume_tail_timeout_1000ms",
    "consume_tail_timeout_100ms", "consume_tail_minbytes", "setup_bench_topic", "bm_p2b_default",
    "bm_p2b_c100_B10", "bm_p2b_c200_B1", "bm_p2b_c20_B10_R", "discover_partitions_bench",
    "discover_topology", "reload_config_missing_file", "reload_config_ok",
    "reload_config_unknown_topic", "reload_config_unknown_partition", "produce_multi_topic_probe",
    "consume_multi_topic_probe", "consume_v3_opflags_probe", "unknown_msgid_0x4_probe",
    "setup_roll_topic", "setup_roll_produce", "consume_segment_boundary", "setup_ret_topic",
    "setup_ret_produce", "discover_partitions_after_retention", "consume_boundary_below_first",
    "consume_first_after_retention", "consume_peer_0x9_probe", "produce_16msgs_varint_count",
    "bm_p2c_default",
]
STRUCTURE_ONLY = {"setup_roll_produce", "consume_segment_boundary", "discover_partitions_after_retention",
                  "consume_boundary_below_first", "consume_first_after_retention"}
PRODUCER = re.compile(r"Concurrent producer connection \(tank-cli\) request_hex=([0-9a-f]+)")


def load(name: str) -> dict[str, str]:
    return json.loads((VECTORS / f"{name}.json").read_text())  # type: ignore[no-any-return]


def frames(data: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos + 5 <= len(data):
        size = int.from_bytes(data[pos + 1 : pos + 5], "little")
        out.append((data[pos], data[pos + 5 : pos + 5 + size]))
        pos += 5 + size
    return out


def test_every_vector_is_in_the_order() -> None:
    names = {p.stem for p in VECTORS.glob("*.json")}
    assert names - set(ORDER) == {"idle_connection_probe"}
    assert set(ORDER) <= names


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BayouServer]:
    srv = await start_tank(tmp_path_factory.mktemp("tank") / "data")
    yield srv
    await srv.stop()


async def replay(server: BayouServer, name: str) -> tuple[bytes, bytes]:
    v = load(name)
    expected = bytes.fromhex(v["response_hex"])
    port = tank_port(server)
    conn = await TankConn.open(port)
    got = b""

    async def read_some(timeout: float) -> bool:
        """Read what arrives within ``timeout``; False when nothing more will (timeout or EOF)."""
        nonlocal got
        try:
            chunk = await asyncio.wait_for(conn.reader.read(1 << 20), timeout)
        except TimeoutError:
            return False
        got += chunk
        return bool(chunk)

    requests = frames(bytes.fromhex(v["request_hex"]))
    producers = PRODUCER.findall(v["notes"])
    for i, (msg_id, payload) in enumerate(requests):
        # tank-cli sends its next request after reading an answer (a consume after a boundary
        # fault, say); a request that long-polls gets no answer yet, so wait only briefly
        await conn.send(bytes([msg_id]) + len(payload).to_bytes(4, "little") + payload)
        if i == 0:
            for hexdata in producers:  # the other connections of a long-poll vector
                await asyncio.sleep(0.2)
                producer = await TankConn.open(port)
                await producer.send(bytes.fromhex(hexdata))
                assert (await producer.frame())[0] == 1
                await producer.close()
        if i + 1 < len(requests):
            await read_some(0.3)
    # bayou's own segment boundaries can make a structure-only reply shorter than TANK's
    while len(got) < len(expected) and await read_some(1.0 if name in STRUCTURE_ONLY else 8.0):
        pass
    await conn.close()
    return got, expected


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", ORDER)
async def test_vector(server: BayouServer, name: str) -> None:
    if name == "reload_config_ok":  # the capture created this file between the two vectors
        path = Path(server.broker.config.data_dir) / "topics" / "vec2" / "0" / "config"
        path.write_text("flush.messages=1\n")
    got, expected = await replay(server, name)
    if name == "status":
        assert len(got) == len(expected)
        start = len(got) - 8  # start time u32, then version u32 (400)
        assert got[:start] == expected[:start] and got[-4:] == expected[-4:]
    elif name == "reload_config_unknown_topic":
        assert got[:-1] == expected[:-1] and expected[-1] == 11 and got[-1] == 1
    elif name in STRUCTURE_ONLY:
        assert got.startswith(PING)
        requests = {r.request_id: r for r in (codec.decode_request(i, p)
                                              for i, p in frames(bytes.fromhex(load(name)["request_hex"])))
                    if isinstance(r, m.Produce)}
        for msg_id, payload in frames(got)[1:]:
            request = requests.get(int.from_bytes(payload[:4], "little")) if msg_id == 1 else None
            resp = codec.decode_response(msg_id, payload, request=request)  # TANK's layout
            if isinstance(resp, m.ProduceResponse):
                assert all(e == 0 for t in resp.topics for e in t.errors)
            if isinstance(resp, m.ConsumeResponse):
                for t in resp.topics:
                    assert isinstance(t, m.ConsumeTopicResult)
                    assert all(p.flags in (0, 1, 0xFE) for p in t.partitions)
    else:
        assert got.hex() == expected.hex()
