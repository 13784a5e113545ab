"""The store: `store/<test>/<YYYYmmddTHHMMSS>/` per run, and `store/latest` for the newest."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def new_run_dir(root: Path, test: str, link: bool = True) -> Path:
    """A new `root/test/<timestamp>` directory; `link`: `root/latest` names it (a run does, a
    test-all summary does not)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime())
    base = root / test / stamp
    run = base
    n = 1
    while True:
        try:
            run.mkdir(parents=True)
            break
        except FileExistsError:  # two runs in one second: keep both
            n += 1
            run = base.with_name(f"{stamp}-{n}")
    if not link:
        return run
    latest = root / "latest"
    tmp = root / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run.relative_to(root))
    tmp.replace(latest)  # atomic: readers see the old or the new run, never none
    return run


def write_json(path: Path, obj: object) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
