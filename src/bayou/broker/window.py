"""Serve stored bytes or convert: the pieces of a fetched window of stored batches.

Every protocol's fetch walks the batches it read from the log the same way: a batch stored in the
reader's own payload format, uncompressed, is served as stored (the protocol cuts its bytes out);
any other batch is decoded once to records (records/formats.py), which the protocol encodes in its
own wire form. ``window`` yields one piece per batch that overlaps the offsets asked for and
holds a record there (a Kafka transaction marker holds none: its offset is a gap to every reader).

The caller decides when it has enough and stops iterating before asking for the next piece, so a
batch past what it serves is never decoded (and its damage, if any, never reported).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass

from bayou.records.batch import BatchHeader, Record

NO_STOP = 1 << 63  # past every offset: a window open at its end


@dataclass(frozen=True, slots=True)
class Stored:
    """A batch stored in the reader's format, at ``pos`` of the fetched bytes: served as stored.
    The window covers offsets ``lo..hi-1`` of it."""

    pos: int
    header: BatchHeader
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class Converted:
    """A batch stored in another format (or compressed), decoded: ``records`` are those of offsets
    ``lo..hi-1``, for the reader to encode its way."""

    header: BatchHeader
    lo: int
    hi: int
    records: list[Record]


Piece = Stored | Converted


def served_as_stored(h: BatchHeader, native: int) -> bool:
    """Whether a reader whose payload format is ``native`` is sent the batch's stored bytes."""
    return h.payload_format == native and not h.compression


def window(batches: Iterable[tuple[int, BatchHeader]], native: int, start: int,
           decode: Callable[[int, BatchHeader], Awaitable[list[Record]]], *,
           stop: int = NO_STOP) -> AsyncIterator[Piece]:
    """The pieces of ``batches`` ((position, header) pairs, in log order) for offsets
    ``start..stop-1``, for a reader whose payload format is ``native``. ``decode(pos, header)``
    returns every record of a batch to convert (the caller chooses where that work runs).

    An iterator object, not an async generator: a reader that stops early (it has enough) leaves
    nothing to finalize, where an abandoned async generator makes the event loop schedule its
    ``aclose()`` from a finalizer (a thread-safe call and a task on every such fetch)."""
    return _Window(iter(batches), native, start, decode, stop)


class _Window:
    __slots__ = ("_batches", "_decode", "_native", "_start", "_stop")

    def __init__(self, batches: Iterator[tuple[int, BatchHeader]], native: int, start: int,
                 decode: Callable[[int, BatchHeader], Awaitable[list[Record]]], stop: int) -> None:
        self._batches, self._native, self._decode = batches, native, decode
        self._start, self._stop = start, stop

    def __aiter__(self) -> _Window:
        return self

    async def __anext__(self) -> Piece:
        start, stop = self._start, self._stop
        for pos, h in self._batches:
            lo = max(start, h.base_offset)
            hi = min(h.next_offset, stop)
            if hi <= lo:
                continue
            if served_as_stored(h, self._native):
                return Stored(pos, h, lo, hi)
            records = await self._decode(pos, h)
            if lo > h.base_offset or hi < h.next_offset:
                records = [r for r in records if lo <= r.offset < hi]
            if records:  # none: a control batch (a Kafka transaction marker), or a sparse gap
                return Converted(h, lo, hi, records)
        raise StopAsyncIteration
