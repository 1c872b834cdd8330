import os
import sys
from pathlib import Path

# Subprocess brokers must import the same package as the tests.
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

# Property and fuzz tests are derandomized by default, so `make test` (and CI) gives the same
# answer every run; BAYOU_HYPOTHESIS_EXPLORE=1 draws fresh random examples to hunt for new bugs
# (a failure found that way gets pinned with @example or a test of its own).
from hypothesis import settings  # noqa: E402

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("BAYOU_HYPOTHESIS_EXPLORE") else "repeatable")
