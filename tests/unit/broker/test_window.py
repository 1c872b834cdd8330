"""The fetch window (broker/window.py): stored batches of the reader's format pass through, any
other is decoded once; only the batches the reader asks for are decoded."""

from __future__ import annotations

import asyncio
import gc
import inspect
import sys

from bayou.broker.window import NO_STOP, Converted, Stored, served_as_stored, window
from bayou.records.batch import BatchHeader, decode_header, decode_records, encode_batch, iter_batches
from bayou.records.compression import Compression
from bayou.records.cursus import FORMAT_CURSUS
from bayou.records.model import Record


def batch(values: bytes, base: int, fmt: int = FORMAT_CURSUS, compression: Compression = Compression.NONE
          ) -> bytes:
    """One record per byte of ``values``; a Cursus batch unless ``fmt`` says otherwise (stored as
    records in that format's attribute bits: only the header matters to the window)."""
    return encode_batch([Record(bytes([v]), timestamp=1) for v in values], base_offset=base,
                        payload_format=fmt, compression=compression)


DATA = b"".join((batch(b"abc", 0), batch(b"de", 3, fmt=0), batch(b"f", 5),
                 batch(b"gh", 6, fmt=0, compression=Compression.GZIP)))


async def pieces(start: int, stop: int = NO_STOP, *, enough: int | None = None
                 ) -> tuple[list[Stored | Converted], list[int]]:
    decoded: list[int] = []

    async def decode(pos: int, h: BatchHeader) -> list[Record]:
        decoded.append(h.base_offset)
        return decode_records(DATA, pos)  # a records batch (fmt 0)

    out: list[Stored | Converted] = []
    async for piece in window(iter_batches(DATA), FORMAT_CURSUS, start, decode, stop=stop):
        out.append(piece)
        if enough is not None and len(out) >= enough:
            break
    return out, decoded


async def test_stored_pass_through_and_others_are_converted() -> None:
    out, decoded = await pieces(1)
    assert [type(p) for p in out] == [Stored, Converted, Stored, Converted]
    assert [(p.lo, p.hi) for p in out] == [(1, 3), (3, 5), (5, 6), (6, 8)]
    first = out[0]
    assert isinstance(first, Stored) and first.pos == 0 and first.header == decode_header(DATA)
    assert decoded == [3, 6]  # the compressed batch too, though its format is records
    converted = out[3]
    assert isinstance(converted, Converted) and [r.value for r in converted.records] == [b"g", b"h"]


async def test_the_window_cuts_converted_records_and_skips_batches_outside_it() -> None:
    out, decoded = await pieces(4, stop=7)
    assert [(type(p), p.lo, p.hi) for p in out] == [(Converted, 4, 5), (Stored, 5, 6), (Converted, 6, 7)]
    assert [[r.offset for r in p.records] for p in out if isinstance(p, Converted)] == [[4], [6]]
    assert decoded == [3, 6]


async def test_a_batch_past_what_the_reader_takes_is_never_decoded() -> None:
    out, decoded = await pieces(0, enough=2)
    assert len(out) == 2 and decoded == [3]


def test_served_as_stored_only_in_the_readers_format_uncompressed() -> None:
    headers = [h for _pos, h in iter_batches(DATA)]
    assert [served_as_stored(h, FORMAT_CURSUS) for h in headers] == [True, False, True, False]
    assert [served_as_stored(h, 0) for h in headers] == [False, True, False, False]


def test_a_reader_that_stops_early_leaves_nothing_for_the_loop_to_finalize() -> None:
    """``window`` is an iterator object, not an async generator: an abandoned async generator
    makes the running loop schedule its ``aclose()`` from the garbage collector's finalizer (a
    thread-safe call and a task), once per fetch that stopped early, which is most of them."""
    w = window(iter_batches(DATA), FORMAT_CURSUS, 0, _never_decode)
    assert not inspect.isasyncgen(w)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        finalized = 0
        first, finalize = sys.get_asyncgen_hooks()

        def counting(agen: object) -> None:
            nonlocal finalized
            finalized += 1
            if finalize is not None:
                finalize(agen)  # type: ignore[arg-type]

        sys.set_asyncgen_hooks(first, counting)
        try:
            for _ in range(3):
                out, _decoded = await pieces(0, enough=1)
                assert len(out) == 1
            gc.collect()
            await asyncio.sleep(0)
        finally:
            sys.set_asyncgen_hooks(first, finalize)
        assert loop.is_running()
        return finalized

    assert asyncio.run(main()) == 0


async def _never_decode(pos: int, h: BatchHeader) -> list[Record]:
    raise AssertionError("nothing is decoded before it is asked for")
