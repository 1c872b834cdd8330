"""SDK operations driven sans-IO: the poll falls back to POLL_MESSAGES where POLL_BATCHES is unknown."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from bayou.client import ops
from bayou.client.errors import BayouClientError, error_for
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import encode_legacy_polled, encode_vsr_polled
from bayou.protocols.iggy.codec import decode_request
from bayou.protocols.iggy.codes import Command, Status
from bayou.protocols.iggy.framing import Dialect

POLLED = m.PolledMessages(0, 4, tuple(m.PolledMessage(i, 1_000, 1_000, i + 1, b"v%d" % i) for i in range(5)))


class Broker:
    """Answers the SDK's frames as a broker with or without bayou's POLL_BATCHES does."""

    def __init__(self, batches: bool, poll_status: int = 0) -> None:
        self.batches, self.poll_status = batches, poll_status
        self.codes: list[int] = []

    def __call__(self, req: Any) -> bytes:
        assert isinstance(req, ops.Raw)
        code = struct.unpack_from("<I", req.frame, 4)[0]
        self.codes.append(code)
        if self.poll_status:
            raise error_for(self.poll_status, req.what)
        if code == Command.POLL_BATCHES:
            if not self.batches:
                raise error_for(Status.INVALID_COMMAND, req.what)
            return encode_vsr_polled(POLLED)
        assert code == Command.POLL_MESSAGES
        return encode_legacy_polled(POLLED)


def _resolver() -> ops.Resolver:
    r = ops.Resolver()
    r.cache["t"] = (m.Identifier("default"), m.Identifier("t"))
    return r


@pytest.mark.parametrize("batches", [True, False])
def test_a_poll_asks_for_batches_and_falls_back_once(batches: bool) -> None:
    r, broker = _resolver(), Broker(batches)
    for _ in range(3):
        got = ops.run_sync(broker, ops.fetch_arrow(r, "t", 0, 0, 100))
        assert got.column("value").to_pylist() == [b"v%d" % i for i in range(5)]
        assert got.column("offset").to_pylist() == list(range(5))
    if batches:
        assert broker.codes == [Command.POLL_BATCHES] * 3 and r.poll_batches
    else:  # refused once, then never asked again on this client
        assert broker.codes == [Command.POLL_BATCHES, Command.POLL_MESSAGES, Command.POLL_MESSAGES,
                                Command.POLL_MESSAGES]
        assert not r.poll_batches


def test_other_refusals_are_the_callers_and_keep_batches() -> None:
    r = _resolver()
    with pytest.raises(BayouClientError) as exc:
        ops.run_sync(Broker(True, poll_status=Status.UNAUTHORIZED), ops.fetch_arrow(r, "t", 0, 0, 100))
    assert exc.value.status == Status.UNAUTHORIZED and r.poll_batches


class ManyBroker(Broker):
    """Also answers pipelined polls (``RawMany``) as the broker does: each frame on its own, in
    order; a refusal is that reply's status."""

    def __init__(self, batches: bool, refuse: int | None = None, waits: bool = True,
                 partitions: bool = False) -> None:
        super().__init__(batches)
        self.refuse = refuse  # the partition whose poll is refused (PARTITION_NOT_FOUND)
        self.waits = waits  # whether it knows WAIT_FOR_MESSAGES
        self.partitions = partitions  # whether it knows POLL_PARTITIONS (bayou from stop 40)
        self.round_trips = 0
        self.waited: list[m.WaitForMessages] = []
        self.polled: list[m.PollPartitions] = []

    def _poll_partitions(self, req: ops.Raw) -> bytes:
        """POLL_PARTITIONS' reply: each listed partition's POLL_BATCHES reply, its values naming
        its topic and partition (``u/1:v0``), in the order listed."""
        if not self.partitions:
            raise error_for(Status.INVALID_COMMAND, req.what)
        poll = decode_request(Dialect.LEGACY, Command.POLL_PARTITIONS, req.frame[8:])
        assert isinstance(poll, m.PollPartitions)
        self.polled.append(poll)
        out = [struct.pack("<I", sum(len(t.partitions) for t in poll.topics))]
        for t in poll.topics:
            for partition, offset, _count in t.partitions:
                if partition == self.refuse:
                    raise error_for(Status.PARTITION_NOT_FOUND, req.what)
                polled = m.PolledMessages(partition, 4, tuple(
                    m.PolledMessage(offset + i, 1_000, 1_000, i + 1, b"%s/%d:v%d" % (
                        str(t.topic.value).encode(), partition, i)) for i in range(2)))
                reply = encode_vsr_polled(polled)
                out += [struct.pack("<I", len(reply)), reply]
        return b"".join(out)

    def __call__(self, req: Any) -> Any:
        self.round_trips += 1
        if isinstance(req, ops.Raw) and struct.unpack_from("<I", req.frame, 4)[0] == Command.POLL_PARTITIONS:
            self.codes.append(Command.POLL_PARTITIONS)
            return self._poll_partitions(req)
        if not isinstance(req, ops.RawMany):
            return super().__call__(req)
        replies = []
        for frame in req.frames:
            code = struct.unpack_from("<I", frame, 4)[0]
            if code == Command.WAIT_FOR_MESSAGES:
                self.codes.append(code)
                wait = decode_request(Dialect.LEGACY, code, frame[8:])
                assert isinstance(wait, m.WaitForMessages)
                self.waited.append(wait)
                replies.append((0, struct.pack("<I", 1)) if self.waits else (Status.INVALID_COMMAND, b""))
                continue
            partition = decode_request(Dialect.LEGACY, code, frame[8:]).partition_id  # type: ignore[attr-defined]
            try:
                if partition == self.refuse:
                    raise error_for(Status.PARTITION_NOT_FOUND, "poll")
                replies.append((0, super().__call__(ops.Raw(frame, "poll"))))
            except BayouClientError as exc:
                replies.append((exc.status, b""))
        return replies


def test_several_partitions_are_polled_in_one_request() -> None:
    r, broker = _resolver(), ManyBroker(True, partitions=True)
    r.cache["u"] = (m.Identifier("default"), m.Identifier("u"))
    wants = [("t", 0, 3, 9), ("u", 1, 0, 9), ("t", 2, 7, 9)]  # topics interleaved
    got = ops.run_sync(broker, ops.fetch_arrow_many(r, wants, max_wait_ms=250))
    assert broker.round_trips == 1 and broker.codes == [Command.POLL_PARTITIONS]
    [poll] = broker.polled
    assert poll.max_wait_ms == 250
    assert [(t.topic.value, t.partitions) for t in poll.topics] == [
        ("t", ((0, 3, 9), (2, 7, 9))), ("u", ((1, 0, 9),))]  # listed topic by topic
    # ... and answered in the order asked
    assert [b.column("value").to_pylist() for b in got] == [
        [b"t/0:v0", b"t/0:v1"], [b"u/1:v0", b"u/1:v1"], [b"t/2:v0", b"t/2:v1"]]
    assert [b.column("offset").to_pylist() for b in got] == [[3, 4], [0, 1], [7, 8]]
    assert [b.column("topic").to_pylist() for b in got] == [["t", "t"], ["u", "u"], ["t", "t"]]
    assert [b.column("partition").to_pylist() for b in got] == [[0, 0], [1, 1], [2, 2]]
    ops.run_sync(broker, ops.fetch_arrow_many(r, [("t", 5, 0, 9)], max_wait_ms=100))  # one, waiting
    assert broker.codes == [Command.POLL_PARTITIONS] * 2 and broker.polled[1].max_wait_ms == 100
    assert r.poll_partitions and r.waits and r.poll_batches


def test_a_refused_partition_fails_the_poll_of_several() -> None:
    with pytest.raises(BayouClientError) as exc:
        ops.run_sync(ManyBroker(True, refuse=1, partitions=True),
                     ops.fetch_arrow_many(_resolver(), [("t", p, 0, 9) for p in range(3)]))
    assert exc.value.status == Status.PARTITION_NOT_FOUND and "t/1" in str(exc.value)


def test_several_partitions_are_polled_in_one_round_trip_by_a_broker_without_poll_partitions() -> None:
    r, broker = _resolver(), ManyBroker(True)
    got = ops.run_sync(broker, ops.fetch_arrow_many(r, [("t", p, 0, 100) for p in range(3)]))
    # asked once, refused as unknown, never asked again: the polls pipelined in one round trip
    assert broker.codes == [Command.POLL_PARTITIONS] + [Command.POLL_BATCHES] * 3
    assert not r.poll_partitions and r.poll_batches
    assert [b.column("partition").to_pylist() for b in got] == [[p] * 5 for p in range(3)]
    assert all(b.column("value").to_pylist() == [b"v%d" % i for i in range(5)] for b in got)
    broker.round_trips = 0
    ops.run_sync(broker, ops.fetch_arrow_many(r, [("t", p, 0, 100) for p in range(3)]))
    assert broker.round_trips == 1 and broker.codes[4:] == [Command.POLL_BATCHES] * 3


def test_no_partitions_ask_nothing() -> None:
    broker = ManyBroker(True, partitions=True)
    assert ops.run_sync(broker, ops.fetch_arrow_many(_resolver(), [], max_wait_ms=500)) == []
    assert broker.round_trips == 0


def test_without_poll_batches_several_partitions_are_polled_one_by_one() -> None:
    r, broker = _resolver(), ManyBroker(False)
    got = ops.run_sync(broker, ops.fetch_arrow_many(r, [("t", p, 0, 100) for p in range(3)]))
    assert [b.column("partition").to_pylist() for b in got] == [[p] * 5 for p in range(3)]
    assert broker.codes == ([Command.POLL_PARTITIONS] + [Command.POLL_BATCHES] * 3
                            + [Command.POLL_MESSAGES] * 3) and not r.poll_batches
    ops.run_sync(broker, ops.fetch_arrow_many(r, [("t", p, 0, 100) for p in range(2)]))
    assert broker.codes[7:] == [Command.POLL_MESSAGES] * 2  # never asked again


def test_a_refused_partition_among_several_raises_its_error() -> None:
    with pytest.raises(BayouClientError) as exc:
        ops.run_sync(ManyBroker(True, refuse=1),
                     ops.fetch_arrow_many(_resolver(), [("t", p, 0, 9) for p in range(3)]))
    assert exc.value.status == Status.PARTITION_NOT_FOUND and "t/1" in str(exc.value)


@pytest.mark.parametrize("waits", [True, False])
def test_a_wait_goes_first_in_the_same_round_trip(waits: bool) -> None:
    """A broker without POLL_PARTITIONS: the wait, then the polls, in one write."""
    r, broker = _resolver(), ManyBroker(True, waits=waits)
    r.poll_partitions = False  # as after its refusal (above)
    r.cache["u"] = (m.Identifier("default"), m.Identifier("u"))
    got = ops.run_sync(broker, ops.fetch_arrow_many(r, [("t", 0, 3, 9), ("t", 2, 7, 9), ("u", 1, 0, 9)],
                                                    max_wait_ms=250))
    assert broker.round_trips == 1 and len(got) == 3
    assert broker.codes == [Command.WAIT_FOR_MESSAGES] + [Command.POLL_BATCHES] * 3
    [wait] = broker.waited
    assert wait.max_wait_ms == 250
    assert [(t.topic.value, t.partitions) for t in wait.topics] == [("t", ((0, 3), (2, 7))), ("u", ((1, 0),))]
    assert r.waits is waits
    ops.run_sync(broker, ops.fetch_arrow_many(r, [("t", 0, 3, 9), ("t", 1, 0, 9)], max_wait_ms=250))
    assert broker.codes[4:] == ([Command.WAIT_FOR_MESSAGES] if waits else []) + [Command.POLL_BATCHES] * 2


def test_more_partitions_than_one_poll_lists_go_the_pipelined_way() -> None:
    """POLL_PARTITIONS lists at most 10,000 partitions (a broker refuses more as INVALID_COMMAND,
    which must not read as "unknown command"): past that the polls are pipelined, and the next
    poll of fewer partitions still uses POLL_PARTITIONS."""
    r, broker = _resolver(), ManyBroker(True, partitions=True, waits=True)
    got = ops.run_sync(broker, ops.fetch_arrow_many(r, [("t", p, 0, 1) for p in range(10_001)]))
    assert len(got) == 10_001 and Command.POLL_PARTITIONS not in broker.codes and r.poll_partitions
    ops.run_sync(broker, ops.fetch_arrow_many(r, [("t", p, 0, 1) for p in range(10_000)]))
    assert broker.codes[-1] == Command.POLL_PARTITIONS
