import os
import sys
from pathlib import Path

# Subprocess brokers must import the same package as the tests.
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
