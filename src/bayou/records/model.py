"""The record model every protocol maps onto."""

from __future__ import annotations

from dataclasses import dataclass

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One record as every protocol sees it. ``offset`` is ignored when building a batch."""

    value: bytes
    key: bytes | None = None
    timestamp: int = 0
    headers: Headers = ()
    message_id: int | None = None
    offset: int = 0
