"""Server-side partition assignors. Members are sorted by id (code-point order) first."""

from __future__ import annotations

from collections.abc import Callable, Sequence

Assignment = dict[str, list[int]]


def round_robin(members: Sequence[str], partitions: int) -> Assignment:
    """Partition p goes to member p mod M."""
    ordered = sorted(members)
    out: Assignment = {m: [] for m in ordered}
    if ordered:
        for p in range(partitions):
            out[ordered[p % len(ordered)]].append(p)
    return out


def range_assignor(members: Sequence[str], partitions: int) -> Assignment:
    """Contiguous blocks: N div M each, and one more for the first N mod M members."""
    ordered = sorted(members)
    out: Assignment = {m: [] for m in ordered}
    if not ordered:
        return out
    per, extra = divmod(partitions, len(ordered))
    start = 0
    for i, m in enumerate(ordered):
        n = per + (1 if i < extra else 0)
        out[m] = list(range(start, start + n))
        start += n
    return out


ASSIGNORS: dict[str, Callable[[Sequence[str], int], Assignment]] = {
    "round_robin": round_robin,
    "range": range_assignor,
}
