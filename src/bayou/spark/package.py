"""``python -m bayou.spark.package dist/bayou.zip``: the bayou package as a zip for
``spark-submit --py-files`` (``make spark-package`` runs it).

bayou is pure Python, so the zip is its source tree (``.py`` files), with fixed timestamps
and sorted entries: the same checkout gives the same bytes. Its compiled dependencies (pyarrow,
numpy, xxhash, crc32c, cramjam, lz4, zstandard) cannot travel in a zip; they must be installed in
the interpreter the executors run (``spark.pyspark.python``). The README's Spark section says
where the zip must be named for each kind of Python worker.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

import bayou

EPOCH = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: reproducible archives


def package_root() -> Path:
    """The directory holding the ``bayou`` package that is imported here."""
    return Path(bayou.__file__).resolve().parent


def build(out: Path) -> int:
    """Write the zip to ``out`` (replacing it atomically); returns the number of files."""
    root = package_root()
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and (p.suffix == ".py" or p.name == "py.typed"))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in files:
            info = zipfile.ZipInfo(str(Path("bayou") / path.relative_to(root)), EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, path.read_bytes())
    tmp.replace(out)
    return len(files)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default="dist/bayou.zip", help="zip to write")
    args = ap.parse_args(argv)
    out = Path(args.out)
    n = build(out)
    print(f"{out}: {n} files of {package_root()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
