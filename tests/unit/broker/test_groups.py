"""Group coordinator semantics (rtes.md 6.3) and the state table."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.broker.groups import coordinator
from bayou.broker.groups.assignors import range_assignor, round_robin
from bayou.broker.groups.coordinator import GroupCoordinator, OffsetKey, render_offsets
from bayou.broker.groups.state import GroupEvent, GroupState, IllegalTransition, transition
from bayou.errors import GroupNotFound, IllegalGeneration, PartitionNotAssigned, UnknownMember


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def coord(partitions: int = 3) -> tuple[GroupCoordinator, Clock]:
    clock = Clock()
    return GroupCoordinator(10_000, lambda _t: partitions, clock), clock


def test_assignor_examples() -> None:
    assert round_robin(["c2", "c1"], 3) == {"c1": [0, 2], "c2": [1]}
    assert range_assignor(["a", "b"], 3) == {"a": [0, 1], "b": [2]}
    assert range_assignor(["x", "y", "z"], 4) == {"x": [0, 1], "y": [2], "z": [3]}
    assert round_robin(["c1", "c2", "c3", "c4"], 3)["c4"] == []
    assert range_assignor(list("abcd"), 3) == {"a": [0], "b": [1], "c": [2], "d": []}
    assert round_robin(["c10", "c2"], 2) == {"c10": [0], "c2": [1]}


def test_generations() -> None:
    c, _ = coord()
    assert c.join("g", "t", "c1").generation == 2
    assert c.join("g", "t", "c1").generation == 2  # re-join changes nothing
    assert c.join("g", "t", "c2").generation == 3
    g = c.join("g", "t", "c2", "range")  # assignor switch: +1
    assert g.generation == 4 and g.assignment == (2,)
    c.leave("g", "t", "c2", 4)
    assert c.sync("g", "t", "c1", 5).assignment == (0, 1, 2)
    # topic change resets the group (+1) and the joiner adds 1 more
    assert c.join("g", "other", "c9").generation == 7


def test_range_group_joined_with_round_robin_adds_two() -> None:
    c, _ = coord()
    c.join("g", "t", "a", "range")
    assert c.join("g", "t", "b", "round_robin").generation == 4


def test_checks_in_order() -> None:
    c, _ = coord()
    with pytest.raises(GroupNotFound):
        c.sync("g", "t", "c1", 2)
    c.join("g", "t", "c1")
    with pytest.raises(GroupNotFound):
        c.sync("g", "other", "c1", 2)
    with pytest.raises(IllegalGeneration):
        c.heartbeat("g", "t", "ghost", 1)
    with pytest.raises(UnknownMember):
        c.heartbeat("g", "t", "ghost", 2)
    c.join("g", "t", "c2")
    with pytest.raises(PartitionNotAssigned):
        c.check_commit("g", "t", "c2", 3, (0,))
    c.check_commit("g", "t", "c2", 3, (1,))


def test_lazy_expiry_bumps_once() -> None:
    c, clock = coord()
    c.join("g", "t", "c1")
    c.join("g", "t", "c2")
    c.join("g", "t", "c3")
    clock.now += 5_000
    c.heartbeat("g", "t", "c1", 4)
    clock.now += 6_000  # c2 and c3 are now 11 s silent, c1 only 6 s
    with pytest.raises(IllegalGeneration):
        c.heartbeat("g", "t", "c1", 4)
    d = c.describe("g")
    assert d.generation == 5 and [mm[0] for mm in d.members] == ["c1"]
    assert c.sync("g", "t", "c1", 5).assignment == (0, 1, 2)


def test_state_table() -> None:
    c, _ = coord()
    c.join("g", "t", "c1")
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    c.sync("g", "t", "c1", 2)
    assert c.groups["g"].state is GroupState.STABLE
    c.join("g", "t", "c2")
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    c.sync("g", "t", "c1", 3)
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    c.heartbeat("g", "t", "c2", 3)
    assert c.groups["g"].state is GroupState.STABLE
    c.leave("g", "t", "c1", 3)
    c.leave("g", "t", "c2", 4)
    assert c.groups["g"].state is GroupState.EMPTY
    with pytest.raises(IllegalTransition):
        transition(GroupState.DEAD, GroupEvent.MEMBERSHIP_CHANGED)


def test_persistence_shapes_round_trip() -> None:
    c, _clock = coord()
    c.join("analytics", "orders", "c1")
    c.join("analytics", "orders", "c<2>")
    c.store_offset("analytics", "orders", 2, 2)
    c.store_offset("analytics", "orders", 0, 1)
    gj = c.groups_json()
    assert gj.endswith(b"\n") and b"\\u003c" in gj
    assert json.loads(gj)["analytics"]["member_order"] == ["c1", "c<2>"]
    assert c.offsets_json() == b'{"analytics":{"orders":{"0":1,"2":2}}}\n'
    c2, _ = coord()
    c2.load_groups(gj)
    c2.load_offsets(c.offsets_json())
    assert c2.committed("analytics", "orders", 2) == 2
    assert c2.describe("analytics").generation == 3
    empty = json.loads(coord()[0].groups_json())
    assert empty == {}


def test_load_tolerates_nulls_and_bad_generation() -> None:
    c, _ = coord()
    c.load_groups(b'{"g":{"topic":"t","generation":0,"assignor":"","member_order":null,'
                  b'"assignments":null,"members":null}}')
    d = c.describe("g")
    assert d.generation == 1 and d.assignor == "round_robin" and d.members == ()


def _offsets_json_reference(offsets: dict[tuple[str, str, int], int]) -> bytes:
    """offsets.json as it was written before it was rendered a group at a time (one json.dumps)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for (group, topic, partition), off in sorted(offsets.items()):
        out.setdefault(group, {}).setdefault(topic, {})[str(partition)] = off
    text = json.dumps(out, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return (text + "\n").encode("utf-8", "backslashreplace")


_NAMES = st.text(alphabet=st.sampled_from(["a", "b", "<", "&", ">", "\u2028", "\udcff", "é", '"', "\\"]),
                 max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.tuples(_NAMES, _NAMES, st.integers(0, 300)), st.integers(-1, 2**62), max_size=40),
       st.sampled_from([1, 3, 7, 2048]))
def test_offsets_json_rendered_a_group_at_a_time_is_byte_for_byte_what_it_was(
        offsets: dict[tuple[str, str, int], int], chunk: int) -> None:
    """A large table is rendered in chunks of about ``_RENDER_CHUNK`` offsets (set small here)."""
    saved = coordinator._RENDER_CHUNK
    coordinator._RENDER_CHUNK = chunk
    try:
        assert render_offsets(offsets) == _offsets_json_reference(offsets)
    finally:
        coordinator._RENDER_CHUNK = saved
    c = GroupCoordinator(10_000, lambda _t: 1)
    c.load_offsets(render_offsets(offsets))
    assert c.offsets == offsets


_OPS = st.lists(st.tuples(st.sampled_from(["set", "del", "pop", "popitem", "setdefault", "update", "ior",
                                           "clear", "delete_group"]),
                          st.tuples(st.sampled_from(["g1", "g2", "g3"]), st.sampled_from(["t", "u"]),
                                    st.integers(0, 3)),
                          st.integers(0, 100)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_the_offset_tables_group_index_follows_every_change(ops: list[tuple[str, OffsetKey, int]]) -> None:
    """``OffsetTable`` answers a group's offsets, topics and the groups holding offsets from an
    index; after any sequence of dict changes it equals what a scan of the table gives."""
    c = GroupCoordinator(10_000, lambda _t: 4)
    table = c.offsets
    for op, key, value in ops:
        if op == "set":
            table[key] = value
        elif op == "del" and key in table:
            del table[key]
        elif op == "pop":
            table.pop(key, None)
        elif op == "popitem" and table:
            table.popitem()
        elif op == "setdefault":
            table.setdefault(key, value)
        elif op == "update":
            table.update({key: value})
        elif op == "ior":
            table |= {key: value + 1}
        elif op == "clear" and value < 10:
            table.clear()
        elif op == "delete_group":
            c.delete_group(key[0])
        scan = {g for g, _t, _p in table}
        assert table.groups() == scan
        for g in ("g1", "g2", "g3"):
            assert table.of_group(g) == {(t, p): off for (h, t, p), off in table.items() if h == g}
            assert table.topics_of(g) == {t for h, t, _p in table if h == g}
            assert sorted(table.keys_of(g)) == sorted(k for k in table if k[0] == g)
