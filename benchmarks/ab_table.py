"""The A/B table of benchmarks/ab.sh: per figure line of every script's output, the median of each
side's runs and after/before (rates: msg/s, records/s, rows/s; and "median N s|ms|us" figures).

    python3 benchmarks/ab_table.py OUTDIR
"""

from __future__ import annotations

import collections
import glob
import os
import re
import statistics
import sys

RATE = re.compile(r"([\d,]+(?:\.\d+)?)\s*(msg/s|records/s|rows/s)")
MEDIAN = re.compile(r"median\s+([\d.]+)\s*(s|us|ms)\b")


def label_of(line: str, section: str) -> str:
    """The line with its numbers blanked: the same figure in every run's output."""
    text = re.sub(r"\s+", " ", re.sub(r"[\d,]+(\.\d+)?", "#", line).strip())
    return (f"{section} {text}" if section else text)[:100]


def figure(line: str) -> float | None:
    m = RATE.search(line)
    if m:
        return float(m.group(1).replace(",", ""))
    m = MEDIAN.search(line)
    return float(m.group(1)) if m else None


def table(out: str) -> None:
    names = sorted({os.path.basename(f).split(".")[0] for f in glob.glob(f"{out}/*_bench.*.txt")})
    for name in names:
        values: dict[str, dict[str, list[float]]] = collections.defaultdict(
            lambda: {"before": [], "after": []})
        order: list[str] = []
        for side in ("before", "after"):
            for path in sorted(glob.glob(f"{out}/{name}.{side}.*.txt")):
                section = ""
                with open(path, errors="replace") as f:
                    for raw in f:
                        line = raw.strip()
                        if line.startswith("[") and line.endswith("]"):
                            section = line
                            continue
                        v = figure(line)
                        if v is None:
                            continue
                        key = label_of(line, section)
                        if key not in values:
                            order.append(key)
                        values[key][side].append(v)
        print(f"### {name}")
        for key in order:
            before, after = values[key]["before"], values[key]["after"]
            if not before or not after:
                continue
            mb, ma = statistics.median(before), statistics.median(after)
            ratio = f"{ma / mb:5.2f}" if mb else "  -  "
            print(f"{key:100s} | {mb:>14,.2f} | {ma:>14,.2f} | {ratio} | n={len(before)}/{len(after)}")


if __name__ == "__main__":
    table(sys.argv[1])
