"""Finding runs in a store and reading what the harness recorded about them.

A run is a directory `store/<test>/<YYYYmmddTHHMMSS>/` holding `test.json` and `history.jsonl`;
its store is two levels up. Pure Python, shared by the Spark job and the report renderer.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import reports

# Workload name -> checker model, for runs recorded before test.json carried the workload's
# checker (the model name itself is accepted too).
MODELS = {
    "register": "cas-register",
    "list-append": "list-append",
    "bank": "bank",
    "set": "set",
}
PER_KEY = frozenset({"cas-register", "register", "mutex", "queue"})  # P-compositional models
LEGACY_BANK_TOTAL = 100  # the bank's fixed total in runs recorded before test.json carried it
ANALYSIS_DIR = "analysis"  # Parquet tables under the store root


PLANNED, OUTCOME = "test.json", "outcome.json"


def read_record(run_dir: Path) -> dict:
    """What a run was planned to be (test.json: the spec and the facts fixed before it starts,
    written once) with what became of it (outcome.json: its status, the error that stopped it,
    the wall time of the history's time 0, the final reads it tried, how the client batched),
    as one dict. {} when test.json is missing or unreadable. Runs recorded before outcome.json
    existed kept all of it in test.json, and read the same."""
    try:
        planned = json.loads((run_dir / PLANNED).read_text())
    except (OSError, ValueError):
        return {}
    try:
        outcome = json.loads((run_dir / OUTCOME).read_text())
    except FileNotFoundError:
        return planned
    except (OSError, ValueError) as e:  # a record that lies about its end is no record
        return {**planned, "status": "unreadable", "error": f"{OUTCOME}: {e}"}
    return {**planned, **outcome}


@dataclass(frozen=True)
class Run:
    path: Path  # the run directory (absolute)

    @property
    def store(self) -> Path:
        return self.path.parent.parent

    @property
    def name(self) -> str:
        """`<test>/<timestamp>`: unique within its store."""
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def history(self) -> Path:
        return self.path / "history.jsonl"

    @property
    def results(self) -> Path:
        return self.path / "results.json"

    @property
    def report(self) -> Path:
        return self.path / "report.html"

    def test(self) -> dict:
        """The run's record (`read_record`), or {} when test.json is missing or unreadable (the
        report says so)."""
        return read_record(self.path)

    def previous_results(self) -> dict:
        try:
            return json.loads(self.results.read_text())
        except (OSError, ValueError):
            return {}


def model_for(test: dict) -> str:
    """The model of the checker the workload carried, as test.json recorded it."""
    if isinstance(test.get("checker"), dict):
        return str(test["checker"]["model"])
    workload = str(test.get("workload", "register"))
    return MODELS.get(workload, workload)


def check_options(test: dict, model: str) -> dict:
    """The checker options the harness recorded in test.json when the run started (the bank's
    total), so the check never guesses them from the history."""
    if isinstance(test.get("checker"), dict):
        return dict(test["checker"].get("options", {}))
    return {"total": LEGACY_BANK_TOTAL} if model == "bank" else {}


def _is_run(path: Path) -> bool:
    return (path / "history.jsonl").is_file() or (path / "test.json").is_file()


def find_runs(paths: list[Path]) -> list[Run]:
    """Runs under each path (a run directory, a test directory, or a store), oldest first by
    their timestamp directory name; `latest` links are not followed twice."""
    found: dict[Path, Run] = {}
    for path in paths:
        path = path.resolve()
        if _is_run(path):
            candidates = [path]
        elif any(_is_run(p) for p in path.iterdir() if p.is_dir() and not p.is_symlink()):
            candidates = [p for p in path.iterdir() if p.is_dir() and not p.is_symlink()]
        else:
            candidates = [r for t in path.iterdir() if t.is_dir() and not t.is_symlink()
                          for r in t.iterdir() if r.is_dir()]
        for c in candidates:
            if _is_run(c):
                found[c.resolve()] = Run(c.resolve())
    return sorted(found.values(), key=lambda r: (r.path.name, r.name))


def checker_version() -> str:
    """A digest of the code a verdict depends on (checkers, history reader, unit splitting, the
    composition of the run's verdict), so a run is re-analyzed exactly when that code changed."""
    root = resources.files(reports)  # a directory, or inside the zip spark-submit shipped
    checkers = sorted((f for f in root.joinpath("checkers").iterdir() if f.name.endswith(".py")),
                      key=lambda f: f.name)
    h = hashlib.sha256()
    for f in checkers + [root.joinpath("history.py"), root.joinpath("spark", "units.py"),
                         root.joinpath("spark", "results.py")]:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]
