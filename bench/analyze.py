"""`tessera analyze` benchmark: N synthetic register runs of 10,000 ops each (linearizable by
construction, kill faults, node logs), analyzed end to end (Spark check, results.json,
report.html with plots, Parquet tables, index) with local[1] and then local[2] in the same
invocation, each as a fresh `tessera analyze --force` process (so JVM start-up is included).

Target: 200 runs in <= 120 s with local[2], and local[1]/local[2] speedup >= 1.6.

    python bench/analyze.py --json [--runs 200] [--ops 10000] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reports.spark.synth import register_history, write_run  # noqa: E402


def generate(store: Path, runs: int, ops: int) -> None:
    for i in range(runs):
        stamp = f"20260101T{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}"
        write_run(store, stamp, register_history(ops, seed=i), seed=i)


def timed_analyze(store: Path, master: str) -> tuple[float, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "harness.cli", "analyze", str(store), "--master", master,
                          "--force", "--json", "--quiet"], capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.monotonic() - started
    if out.returncode not in (0, 1, 2) or not out.stdout.strip():
        sys.exit(f"tessera analyze failed ({out.returncode}): {out.stderr[-2000:]}")
    return seconds, json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON line (the only output mode)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--ops", type=int, default=10_000, help="client operations per run")
    parser.add_argument("--dir", default="/var/tmp", help="where to create the synthetic store")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tessera-bench-analyze-", dir=args.dir))
    try:
        store = tmp / "store"
        t = time.monotonic()
        generate(store, args.runs, args.ops)
        gen_s = time.monotonic() - t
        s1, r1 = timed_analyze(store, "local[1]")
        s2, r2 = timed_analyze(store, "local[2]")
        verdicts = sorted({r["verdict"] for r in r2["runs"]})
        result = {
            "bench": "analyze", "runs": args.runs, "ops_per_run": args.ops,
            "seconds_local1": round(s1, 2), "seconds_local2": round(s2, 2),
            "speedup": round(s1 / s2, 2), "per_run_ms": round(1000 * s2 / args.runs, 1),
            "checked": [r1["checked"], r2["checked"]], "verdicts": verdicts, "generate_s": round(gen_s, 1),
            "phases_local1": r1["phases"], "phases_local2": r2["phases"],
            "targets_met": s2 <= 120 and s1 / s2 >= 1.6 and verdicts == ["valid"],
        }
        print(json.dumps(result))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
