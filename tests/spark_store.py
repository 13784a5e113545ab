"""The small store the Spark tests analyze (tests/conftest.py's `spark_store`), and the one
`tessera analyze` of it in local mode they share: a valid register run, a non-linearizable one
(a stale read), one whose history.jsonl is cut mid-record, and a list-append run with a G1c
cycle. One local-mode analysis serves both the local tests and the standalone cluster's
comparison (each costs a JVM)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from reports.history import Op
from reports.spark.synth import register_history, write_run

ROOT = Path(__file__).resolve().parent.parent


def g1c_history() -> list[Op]:
    """Two list-append transactions that each read the other's append: a G1c cycle."""
    return [Op(0, "invoke", 0, "txn", [["append", "x", 1], ["r", "y", None]], time=1_000),
            Op(1, "invoke", 1, "txn", [["append", "y", 1], ["r", "x", None]], time=2_000),
            Op(2, "ok", 0, "txn", [["append", "x", 1], ["r", "y", [1]]], time=3_000),
            Op(3, "ok", 1, "txn", [["append", "y", 1], ["r", "x", [1]]], time=4_000)]


def write_store(root: Path, corrupt: bool = True) -> dict[str, Path]:
    """The runs under `root`, by name; without `corrupt`, the three readable ones only."""
    runs = {
        "valid": write_run(root, "20260101T000001", register_history(400, seed=1), seed=1),
        "stale": write_run(root, "20260101T000002", register_history(400, seed=2, stale_read=True), seed=2),
    }
    if corrupt:
        runs["corrupt"] = write_run(root, "20260101T000003", register_history(400, seed=3), seed=3)
    runs["g1c"] = write_run(root, "20260101T000004", g1c_history(), seed=4, test="append",
                            workload="list-append")
    if corrupt:
        history = runs["corrupt"] / "history.jsonl"
        history.write_bytes(history.read_bytes()[:-25])  # cut the last line mid-record
    return runs


def analyze(store: Path, master: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The real command, in its own process with its own JVM."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "harness.cli", "analyze", str(store),
                           "--master", master], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)
