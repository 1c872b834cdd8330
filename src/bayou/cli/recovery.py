"""The crash-recovery progress bar of ``bayou serve``: drawn on stderr (only when it is a terminal)
while the broker validates its partitions after an unclean stop.

The broker counts its progress in a plain ``Recovery`` record (bayou/stats.py: the one /ready and
/metrics read); a thread of this module reads it a few times a second and redraws the bar, so
recovery neither waits for the terminal nor knows it is watched, and storage stays free of UI."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

from bayou.cli.common import progress
from bayou.stats import Recovery

POLL_S = 0.1  # how often the bar reads the broker's progress


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _draw(rec: Recovery, stop: threading.Event) -> None:
    """Wait until the recovery's size is known, then draw it until it is done (or ``stop``)."""
    while not (rec.done or (rec.validated and rec.partitions_total)):
        if stop.wait(POLL_S):
            return
    if not (rec.validated and rec.partitions_total):
        return  # a clean shutdown (nothing validated) or no partition at all: nothing to show
    terminal = sys.stderr
    with progress("recovering", rec.partitions_total) as bar, _logs_above_bar(terminal):
        assert bar is not None  # _draw only runs on a terminal
        task = bar.task_ids[0]
        while True:
            done = rec.done  # read first: the counts read after it are final when it is True
            bar.update(task, completed=rec.partitions_done,
                       description=f"recovering: {_mb(rec.validated_bytes)} validated")
            if done:
                cut = (f", cut {rec.truncated_bytes} bytes from {rec.truncated_partitions} partitions"
                       if rec.truncated_bytes else "")
                bar.update(task, description=f"recovered: {_mb(rec.validated_bytes)} validated "
                                             f"in {rec.seconds:.1f} s{cut}")
                return
            if stop.wait(POLL_S):
                return


@contextlib.contextmanager
def _logs_above_bar(terminal: TextIO) -> Iterator[None]:
    """While the bar is drawn, log lines meant for the terminal go through rich's stderr proxy
    (``sys.stderr`` inside ``progress``), which prints them above the bar instead of through it."""
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.StreamHandler) and h.stream is terminal]
    for h in handlers:
        h.setStream(sys.stderr)
    try:
        yield
    finally:
        for h in handlers:
            h.setStream(terminal)


@contextlib.contextmanager
def recovery_bar(rec: Recovery) -> Iterator[None]:
    """Draw ``rec``'s progress on stderr while the body runs, if stderr is a terminal."""
    if not sys.stderr.isatty():
        yield
        return
    stop = threading.Event()
    drawer = threading.Thread(target=_draw, args=(rec, stop), name="bayou-recovery-bar", daemon=True)
    drawer.start()
    try:
        yield
    finally:
        stop.set()
        drawer.join(2)
