"""The code executors need, as one zip for `SparkContext.addPyFile` (or spark-submit's
--py-files): the `reports` package, which holds the checkers, the history reader and the
renderer. Executors still need the `reports` extra's libraries (msgspec, matplotlib, jinja2)."""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

import reports


def package_zip(dest: Path | None = None) -> Path:
    root = Path(reports.__file__).parent
    if not root.is_dir():  # imported from a zip (spark-submit --py-files): ship that zip again
        return next(p for p in root.parents if p.is_file())
    dest = dest or Path(tempfile.mkdtemp(prefix="tessera-ship-")) / "tessera-reports.zip"
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(root.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                z.write(f, Path("reports") / f.relative_to(root))
    return dest
