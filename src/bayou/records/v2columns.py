"""The walk of a v2 records section run by run (numpy): ``walk_v2``'s check for a batch whose
records come in runs of one layout, as a producer's batches do.

``walk_v2`` (records/v2.py) reads every record's seven or so varints one by one: about 0.5 us a
record, most of a Kafka produce's cost on the broker. Here a run's first record is walked as
``walk_v2`` walks it, which gives its *layout*: where each of its varints lies, which of them are
lengths (the record's, the key's, the value's, the header count and the header name and value
lengths) and which are deltas (the timestamp's, the offset's: any value). Every following record of
the same layout has the same size, so the run is an array of rows, one record each, and one
comparison checks them all: each length's bytes equal the first record's, each delta's
continuation bits are the first's (a varint of the same width), the attribute byte is the first's.
The run ends at the first row that differs (a record's size changes where a delta's varint widens:
the offset delta at 64 and 8,192, a value of another length) and the next run starts there.

``walk_columns`` decides only what it is sure of: ``False`` when every record is well formed and
none carries a message id. Anything else (an id, a varint past three bytes, runs too short to pay,
any fault) returns ``None``, and ``walk_v2`` walks the section record by record, which gives the
answer or the exact error. So the two agree by construction; a property test checks it
(tests/unit/records/test_v2_walk.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from bayou.errors import CorruptRecord
from bayou.records.varint import decode_varint

if TYPE_CHECKING:
    from bayou.records.batch import Buffer

COLUMN_WISE_FROM = 64  # records in a section from which this walk pays (numpy's fixed cost)
MAX_RUNS = 8  # runs tried before the record-by-record walk takes over
SHORT_RUN = 8  # a run of fewer records than this, before the last, gives up the same way
RECORD_HAS_MESSAGE_ID = 0x01  # the record attribute bit of bayou's message id (records/v2.py)

WHOLE, HIGH_BIT = 0xFF, 0x80  # what of a byte must equal the first record's: all of it, its top bit


def _varint(mv: memoryview, p: int, end: int) -> tuple[int, int] | None:
    """The zigzag varint at ``p`` and its width, if it ends before ``end`` within three bytes."""
    try:
        value, q = decode_varint(mv, p)
    except CorruptRecord:
        return None
    return (value, q - p) if q - p <= 3 and q <= end else None


def _layout(mv: memoryview, p: int, n: int) -> tuple[int, list[int], list[int]] | None:
    """The record at ``p``: its size, and the columns (offsets in it) whose bytes the records of
    its run must share, with what of each byte (``WHOLE`` or ``HIGH_BIT``). None when it is not a
    well-formed record without a message id, or a varint of it is longer than three bytes."""
    cols: list[int] = []
    masks: list[int] = []

    def take(q: int, end: int, mask: int) -> tuple[int, int] | None:
        """The varint at ``q`` and where the next field starts; its bytes become columns."""
        got = _varint(mv, q, end)
        if got is None:
            return None
        value, width = got
        cols.extend(range(q - p, q - p + width))
        masks.extend([mask] * width)
        return value, q + width

    first = take(p, n, WHOLE)
    if first is None or first[0] < 1:
        return None
    end = first[1] + first[0]
    q = first[1]
    if end > n or mv[q] & RECORD_HAS_MESSAGE_ID:
        return None
    cols.append(q - p)  # the attribute byte
    masks.append(WHOLE)
    q += 1
    for _delta in range(2):  # the timestamp delta, the offset delta: any value of one width
        got = take(q, end, HIGH_BIT)
        if got is None:
            return None
        q = got[1]
    for _field in range(2):  # the key, the value: -1 (null) or a length
        got = take(q, end, WHOLE)
        if got is None or got[0] < -1:
            return None
        q = got[1] + max(got[0], 0)
    got = take(q, end, WHOLE)  # the header count
    if got is None or got[0] < 0:
        return None
    hcount, q = got
    for _h in range(hcount):
        name = take(q, end, WHOLE)
        if name is None or name[0] < 0:
            return None
        value = take(name[1] + name[0], end, WHOLE)
        if value is None or value[0] < -1:
            return None
        q = value[1] + max(value[0], 0)
    if q != end:
        return None
    return end - p, cols, masks


def walk_columns(data: Buffer, count: int) -> bool | None:
    """``False`` when the section holds exactly ``count`` well-formed records, none with a message
    id; ``None`` when this walk cannot tell (see the module docstring)."""
    mv = memoryview(data).cast("B")
    d = np.frombuffer(mv, dtype=np.uint8)
    n = len(d)
    p = i = runs = 0
    while i < count:
        if runs == MAX_RUNS:
            return None
        runs += 1
        found = _layout(mv, p, n)
        if found is None:
            return None
        size, cols, masks = found
        m = min(count - i, (n - p) // size)
        rows = d[p : p + size * m].reshape(m, size)
        mask = np.array(masks, dtype=np.uint8)
        picked = rows[:, cols] & mask
        same = (picked == picked[0]).all(axis=1)
        k = m if bool(same.all()) else int(same.argmin())  # the first record of another layout
        i += k
        p += size * k
        if k < SHORT_RUN and i < count:
            return None
    return False if p == n else None


__all__ = ["COLUMN_WISE_FROM", "RECORD_HAS_MESSAGE_ID", "walk_columns"]
