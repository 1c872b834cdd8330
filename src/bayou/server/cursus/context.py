"""What every group of Cursus handlers shares: a connection's state, the address the broker
advertises, the error a handler raises to answer, and the checks many commands make first."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bayou.broker import Broker
from bayou.protocols.cursus import replies
from bayou.protocols.cursus.requests import ErrorReply
from bayou.server.base import Connection

Body = bytes | list[bytes] | None  # one reply frame, several (READ_STREAM), or none


def err(code: str, *pairs: tuple[str, object]) -> ErrorReply:
    return ErrorReply(replies.error(code, *pairs))


def refuse(invalid: bytes | None) -> None:
    """Raise the argument error a request carries (H reports it after its topic checks)."""
    if invalid is not None:
        raise ErrorReply(invalid)


@dataclass(slots=True)
class ConnState:
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    streaming: bool = False


@dataclass(frozen=True, slots=True)
class Advertised:
    host: str
    port: int


Handler = Callable[[Any, ConnState, Connection | None], Awaitable[Body]]


class Context:
    """The handlers' common ground: the broker and the address clients are told to use (app.py
    replaces it once the listener is bound to an ephemeral port)."""

    def __init__(self, broker: Broker, advertised: Advertised) -> None:
        self.broker = broker
        self.advertised = advertised

    async def topic_exists(self, topic: str) -> None:
        if not await self.broker.has_topic(topic):  # cluster mode: one made elsewhere is waited for
            raise err("topic_not_found", ("topic", topic))
