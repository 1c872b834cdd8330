"""protocols/kafka/sessions.py: Kafka's incremental fetch sessions (KIP-227), rule by rule, and a
model-based property: whatever mix of full and incremental fetches a client sends, the cache keeps
its bounds and every session holds exactly the partitions its client added and did not forget."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from bayou.protocols.kafka.sessions import FINAL_EPOCH, INITIAL_EPOCH, FetchSessions, Want

ALICE, BOB = "alice", "bob"  # owners are opaque (the front end passes the connection's principal)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wants(*keys: tuple[str, int], offset: int = 0) -> list[Want]:
    return [Want(t, p, offset, 1 << 20) for t, p in keys]


def fields(hw: int = 10, records: bytes = b"", error: int = 0, start: int = 0) -> dict[str, Any]:
    f: dict[str, Any] = {"high_watermark": hw, "last_stable_offset": hw, "log_start_offset": start,
                         "records": records}
    if error:
        f["error_code"] = error
    return f


def open_session(cache: FetchSessions, *keys: tuple[str, int], owner: str = ALICE) -> int:
    ctx = cache.begin(owner, 12, 0, INITIAL_EPOCH, wants(*keys), ())
    session_id, keep, error = cache.finish(ctx, [fields() for _ in ctx.wants])
    assert (keep, error) == (list(range(len(keys))), 0)
    assert session_id != 0
    return session_id


def test_before_v7_and_final_epoch_are_sessionless() -> None:
    cache = FetchSessions()
    for version, epoch in ((6, INITIAL_EPOCH), (12, FINAL_EPOCH)):
        ctx = cache.begin(ALICE, version, 0, epoch, wants(("t", 0), ("t", 1)), ())
        assert ctx.kind == "sessionless"
        assert cache.finish(ctx, [fields(), fields()]) == (0, [0, 1], 0)
    assert len(cache) == 0


def test_initial_epoch_creates_a_session_answering_every_partition() -> None:
    cache = FetchSessions()
    sid = open_session(cache, ("t", 0), ("t", 1))
    assert len(cache) == 1 and cache.partitions == 2
    # the next incremental fetch is epoch 1 and fetches the session's partitions at their offsets
    ctx = cache.begin(ALICE, 12, sid, 1, [], ())
    assert ctx.kind == "incremental"
    assert [(w.topic, w.partition, w.offset) for w in ctx.wants] == [("t", 0, 0), ("t", 1, 0)]


def test_incremental_answers_only_what_changed() -> None:
    cache = FetchSessions()
    sid = open_session(cache, ("t", 0), ("t", 1), ("t", 2))
    ctx = cache.begin(ALICE, 12, sid, 1, [], ())
    # nothing new anywhere: no partition
    assert cache.finish(ctx, [fields(), fields(), fields()]) == (sid, [], 0)
    ctx = cache.begin(ALICE, 12, sid, 2, [], ())
    # records on 1, a moved high watermark on 2, a moved log start on 0
    got = cache.finish(ctx, [fields(start=3), fields(records=b"x"), fields(hw=11)])
    assert got == (sid, [0, 1, 2], 0)
    # told once: the same values are not sent again (1 is last now: it returned records)
    ctx = cache.begin(ALICE, 12, sid, 3, [], ())
    assert [w.partition for w in ctx.wants] == [0, 2, 1]
    assert cache.finish(ctx, [fields(hw=10, start=3), fields(hw=11), fields()]) == (sid, [], 0)


def test_records_move_a_partition_to_the_end() -> None:
    cache = FetchSessions()
    sid = open_session(cache, ("t", 0), ("t", 1), ("t", 2))
    ctx = cache.begin(ALICE, 12, sid, 1, [], ())
    cache.finish(ctx, [fields(records=b"x"), fields(), fields()])
    ctx = cache.begin(ALICE, 12, sid, 2, [], ())
    assert [w.partition for w in ctx.wants] == [1, 2, 0]


def test_an_error_is_answered_and_answered_again_once_gone() -> None:
    cache = FetchSessions()
    sid = open_session(cache, ("t", 0))
    ctx = cache.begin(ALICE, 12, sid, 1, [], ())
    assert cache.finish(ctx, [fields(hw=-1, error=ErrorCode.not_leader_or_follower)]) == (sid, [0], 0)
    ctx = cache.begin(ALICE, 12, sid, 2, [], ())
    assert cache.finish(ctx, [fields(hw=10)]) == (sid, [0], 0)  # the high watermark again


def test_updates_and_forgotten_partitions() -> None:
    cache = FetchSessions()
    sid = open_session(cache, ("t", 0), ("t", 1))
    ctx = cache.begin(ALICE, 12, sid, 1, wants(("t", 1), ("u", 0), offset=7), [("t", 0), ("x", 9)])
    assert [(w.topic, w.partition, w.offset) for w in ctx.wants] == [("t", 1, 7), ("u", 0, 7)]
    assert cache.partitions == 2
    # forgetting every partition ends the session: the fetch is answered without one
    ctx = cache.begin(ALICE, 12, sid, 2, [], [("t", 1), ("u", 0)])
    assert ctx.kind == "sessionless" and ctx.wants == []
    assert len(cache) == 0 and cache.partitions == 0


def test_unknown_session_wrong_epoch_and_another_owner() -> None:
    cache = FetchSessions()
    sid = open_session(cache, ("t", 0))
    assert cache.finish(cache.begin(ALICE, 12, sid + 1, 1, [], ()), []) == (
        0, [], ErrorCode.fetch_session_id_not_found)
    assert cache.finish(cache.begin(ALICE, 12, sid, 5, [], ()), []) == (
        0, [], ErrorCode.invalid_fetch_session_epoch)
    assert cache.finish(cache.begin(BOB, 12, sid, 1, [], ()), []) == (
        0, [], ErrorCode.fetch_session_id_not_found)
    # and another owner cannot close it either
    cache.begin(BOB, 12, sid, FINAL_EPOCH, [], ())
    assert len(cache) == 1
    assert cache.begin(ALICE, 12, sid, 1, [], ()).kind == "incremental"  # still at epoch 1


def test_a_full_fetch_naming_a_session_closes_it() -> None:
    cache = FetchSessions()
    sid = open_session(cache, ("t", 0))
    ctx = cache.begin(ALICE, 12, sid, FINAL_EPOCH, wants(("t", 0)), ())
    assert cache.finish(ctx, [fields()]) == (0, [0], 0)
    assert len(cache) == 0
    sid = open_session(cache, ("t", 0))
    ctx = cache.begin(ALICE, 12, sid, INITIAL_EPOCH, wants(("t", 1)), ())  # closes, then opens anew
    new, keep, _ = cache.finish(ctx, [fields()])
    assert new not in (0, sid) and keep == [0]
    assert len(cache) == 1 and cache.partitions == 1


def test_two_fetches_of_one_session_at_once() -> None:
    cache = FetchSessions()
    sid = open_session(cache, ("t", 0))
    first = cache.begin(ALICE, 12, sid, 1, [], ())
    second = cache.begin(ALICE, 12, sid, 2, [], ())
    assert cache.finish(first, [fields()]) == (0, [], ErrorCode.invalid_fetch_session_epoch)
    assert cache.finish(second, [fields(records=b"x")]) == (sid, [0], 0)


def test_the_cache_is_bounded_and_evicts_only_idle_sessions() -> None:
    clock = Clock()
    cache = FetchSessions(max_sessions=2, max_partitions=5, eviction_ms=120_000, clock=clock)
    a = open_session(cache, ("t", 0), ("t", 1))
    b = open_session(cache, ("t", 2))
    # full: a third session is not made while the others are in use; its fetch is still answered
    ctx = cache.begin(ALICE, 12, 0, INITIAL_EPOCH, wants(("t", 3)), ())
    assert cache.finish(ctx, [fields()]) == (0, [0], 0)
    clock.now += 60
    cache.begin(ALICE, 12, b, 1, [], ())  # b is used; a is now idle longest
    clock.now += 61
    ctx = cache.begin(ALICE, 12, 0, INITIAL_EPOCH, wants(("t", 3)), ())
    c, _, _ = cache.finish(ctx, [fields()])
    assert c != 0 and cache.evicted == 1
    assert cache.begin(ALICE, 12, a, 1, [], ()).error == ErrorCode.fetch_session_id_not_found
    # an incremental fetch that would pass the partition bound closes its session
    assert cache.partitions == 2
    ctx = cache.begin(ALICE, 12, c, 1, wants(*[("u", i) for i in range(4)]), ())
    assert ctx.error == ErrorCode.fetch_session_id_not_found
    assert len(cache) == 1 and cache.partitions == 1


def test_epochs_wrap_past_i32_to_one() -> None:
    cache = FetchSessions()
    sid = open_session(cache, ("t", 0))
    session = cache._sessions[sid]
    session.epoch = 2**31 - 1
    assert cache.begin(ALICE, 12, sid, 2**31 - 1, [], ()).kind == "incremental"
    assert session.epoch == 1


key = st.tuples(st.sampled_from("abc"), st.integers(0, 3))
step = st.one_of(
    st.tuples(st.just("full"), st.lists(key, max_size=6)),
    st.tuples(st.just("inc"), st.lists(key, max_size=4), st.lists(key, max_size=4)),
    st.tuples(st.just("close")),
)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from([ALICE, BOB]), step), max_size=40))
def test_model(steps: list[tuple[str, tuple[Any, ...]]]) -> None:
    cache = FetchSessions(max_sessions=3, max_partitions=10)
    model: dict[str, tuple[int, int, set[tuple[str, int]]]] = {}  # owner -> (id, next epoch, partitions)
    for owner, (kind, *args) in steps:
        sid, epoch, held = model.get(owner, (0, 0, set()))
        if kind == "full":
            ctx = cache.begin(owner, 12, sid, INITIAL_EPOCH, wants(*args[0]), ())
            new, keep, error = cache.finish(ctx, [fields() for _ in ctx.wants])
            assert error == 0 and keep == list(range(len(args[0])))
            model.pop(owner, None)
            if new:
                model[owner] = (new, 1, set(args[0]))
        elif kind == "inc" and sid:
            ctx = cache.begin(owner, 12, sid, epoch, wants(*args[0]), args[1])
            if ctx.error:
                model.pop(owner)
                continue
            held = (held | set(args[0])) - set(args[1])
            assert {(w.topic, w.partition) for w in ctx.wants} == held
            if held:
                model[owner] = (sid, epoch + 1, held)
            else:
                model.pop(owner)
        elif kind == "close" and sid:
            cache.begin(owner, 12, sid, FINAL_EPOCH, [], ())
            model.pop(owner)
        assert len(cache) <= 3 and cache.partitions <= 10
        assert cache.partitions == sum(len(s.partitions) for s in cache._sessions.values())


def test_idle_partitions_of_an_incremental_fetch() -> None:
    cache = FetchSessions()
    ctx = cache.begin(ALICE, 12, 0, INITIAL_EPOCH, wants(("t", 0), ("t", 1)), ())
    assert not ctx.idle(0, 0, 10, 10)  # a full fetch answers everything
    sid, _, _ = cache.finish(ctx, [fields(hw=10), fields(hw=10)])
    ctx = cache.begin(ALICE, 12, sid, 1, wants(("t", 0), offset=10), ())
    assert ctx.idle(0, 0, 10, 10)  # at its end, bounds as told
    assert not ctx.idle(1, 0, 10, 10)  # offset 0 has records to read
    assert not ctx.idle(0, 0, 11, 11)  # the high watermark moved
    assert not ctx.idle(0, 5, 10, 10)  # the log start moved


def test_a_name_no_topic_can_have_is_answered_but_not_kept() -> None:
    cache = FetchSessions()
    long = "a" * 250  # past the longest topic name: a session would hold what anyone sends
    ctx = cache.begin(ALICE, 12, 0, INITIAL_EPOCH, wants((long, 0)), ())
    assert cache.finish(ctx, [fields(error=ErrorCode.unknown_topic_or_partition)]) == (0, [0], 0)
    assert len(cache) == 0
    sid = open_session(cache, ("t", 0))
    ctx = cache.begin(ALICE, 12, sid, 1, wants((long, 0)), ())
    assert ctx.error == ErrorCode.fetch_session_id_not_found
    assert len(cache) == 0 and cache.partitions == 0


def test_no_eviction_for_a_session_that_would_not_fit() -> None:
    clock = Clock()
    cache = FetchSessions(max_sessions=10, max_partitions=4, clock=clock)
    a = open_session(cache, ("t", 0))
    clock.now += 200  # a is idle long enough to be evicted, but evicting it leaves too little room
    b = open_session(cache, ("t", 1), ("t", 2), ("t", 3))
    ctx = cache.begin(ALICE, 12, 0, INITIAL_EPOCH, wants(*[("u", i) for i in range(4)]), ())
    assert cache.finish(ctx, [fields() for _ in range(4)])[0] == 0
    assert cache.evicted == 0 and len(cache) == 2
    assert cache.begin(ALICE, 12, a, 1, [], ()).kind == "incremental"
    assert cache.begin(ALICE, 12, b, 1, [], ()).kind == "incremental"
    # an incremental fetch that adds one and forgets one fits
    ctx = cache.begin(ALICE, 12, b, 2, wants(("t", 4)), [("t", 1)])
    assert ctx.kind == "incremental" and cache.partitions == 4
