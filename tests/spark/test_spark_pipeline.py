"""The reference pipeline (examples/pipeline.py), small, on the test session and broker."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from sparkutil import Broker

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_pipeline_end_to_end(spark: Any, broker: Broker, tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import pipeline
    finally:
        sys.path.remove(str(EXAMPLES))
    ok = pipeline.run(spark, broker.bootstrap, events=3000, rate=1_000_000, duration=150,
                      checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"),
                      trigger="200 milliseconds")
    assert ok
