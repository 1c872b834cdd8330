"""SDK operations driven sans-IO: the poll falls back to POLL_MESSAGES where POLL_BATCHES is unknown."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from bayou.client import ops
from bayou.client.errors import BayouClientError, error_for
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.batches import encode_legacy_polled, encode_vsr_polled
from bayou.protocols.iggy.codes import Command, Status

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
