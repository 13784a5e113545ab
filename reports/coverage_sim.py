"""`make coverage-sim`: what the whole-stack simulator reaches of the engine, as branch coverage.

Runs N seeds of `tessera sim --stack full` (swarm mixes, the nightly default) under coverage.py
with branch coverage of node/, in the simulator's own spawned workers, then writes an HTML
report and prints one JSON line: line and branch percent in all and per package. The
simulator itself (harness/sim) and the offline operator tools (node/tools), which no seed runs,
are left out: the figure is the engine's. Code probes say which named rare branches a run
reached; this says how much of everything, named or not, it did.

    python -m reports.coverage_sim --seeds 200 --jobs 2 [--out DIR]

With --suite it measures the test suite's own reach the same way (`make coverage-suite`), for
the figure docs/benchmarks.md sets beside the simulator's. The tests marked netns are left
out: their daemons run from the hosts' own install, which coverage does not follow, and a
daemon a test kills with SIGKILL saves nothing, so the figure is a lower bound.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

OMIT = ("node/tools/*",)


def rcfile(out: Path, root: Path) -> Path:
    rc = out / "coveragerc"
    rc.write_text("\n".join([
        "[run]", "branch = True", f"source = {root / 'node'}", "parallel = True",
        # the seeds run in spawned workers that a pool terminates: measure every Python
        # process started, and save on SIGTERM
        "concurrency = multiprocessing", "patch =", "    subprocess", "    _exit",
        "sigterm = True", f"data_file = {out / '.coverage'}",
        "omit =", *(f"    {root / o}" for o in OMIT), ""]))
    return rc


def per_package(report: dict, root: Path) -> dict:
    """coverage.json's files grouped by node/<package> (a module of node/ itself: node), each
    with line and branch percent; and the totals."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for path, f in report["files"].items():
        rel = Path(path).resolve().relative_to(root / "node")
        pkg = "node" if len(rel.parts) == 1 else f"node.{rel.parts[0]}"
        s = f["summary"]
        for i, k in enumerate(("num_statements", "covered_lines", "num_branches",
                               "covered_branches")):
            sums[pkg][i] += s.get(k, 0)

    def pct(part: int, whole: int) -> float:
        return round(100 * part / whole, 1) if whole else 100.0

    packages = {p: {"lines": pct(v[1], v[0]), "branches": pct(v[3], v[2]), "statements": v[0]}
                for p, v in sorted(sums.items())}
    t = report["totals"]
    return {"line_percent": pct(t["covered_lines"], t["num_statements"]),
            "branch_percent": pct(t.get("covered_branches", 0), t.get("num_branches", 0)),
            "packages": packages}


def main(argv: list[str] | None = None) -> int:
    from harness.cli import BadArgsParser  # usage errors exit 254, as every tessera command

    ap = BadArgsParser(prog="coverage-sim", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=200, help="swarm seeds (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--jobs", type=int, default=2, help="simulator workers (default 2)")
    ap.add_argument("--seconds", type=float, default=60.0,
                    help="virtual seconds a seed (default 60, as tessera sim)")
    ap.add_argument("--out", type=Path, default=None,
                    help="default store/coverage-sim/<UTC time>")
    ap.add_argument("--suite", action="store_true",
                    help="measure the test suite instead (pytest -m 'not netns': the tests on "
                         "this machine's processes; the netns hosts run their own install), "
                         "for the figure beside the simulator's")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1 or args.seconds <= 0:
        ap.error("--seeds and --jobs must be at least 1, --seconds positive")
    try:
        import coverage  # noqa: F401
    except ImportError:
        print("coverage-sim: coverage.py is not installed (make coverage-sim installs it)",
              file=sys.stderr)
        return 254
    root = Path(__file__).resolve().parent.parent
    out = (args.out or Path("store/coverage-sim") / time.strftime("%Y%m%dT%H%M%S",
                                                                   time.gmtime())).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rc = rcfile(out, root)
    cov = [sys.executable, "-m", "coverage"]
    t0 = time.monotonic()
    if args.suite:
        tests = subprocess.run([*cov, "run", f"--rcfile={rc}", "-m", "pytest", "-q", "-m",
                                "not netns", "-p", "no:cacheprovider"], cwd=root,
                               stdin=subprocess.DEVNULL)
        if tests.returncode not in (0, 1):
            print(f"coverage-sim: pytest exited {tests.returncode}", file=sys.stderr)
            return 255
        summary = {"tests_exit": tests.returncode}
    else:
        sim = subprocess.run([*cov, "run", f"--rcfile={rc}", "-m", "harness.cli", "sim",
                              "--stack", "full", "--seeds", str(args.seeds), "--seed",
                              str(args.seed), "--jobs", str(args.jobs), "--seconds",
                              str(args.seconds), "--out", str(out / "sim"), "--json"],
                             cwd=root, stdout=subprocess.PIPE, text=True)
        lines = sim.stdout.strip().splitlines()
        if sim.returncode not in (0, 1) or not lines:
            print(f"coverage-sim: the simulator exited {sim.returncode}", file=sys.stderr)
            return 255
        last = json.loads(lines[-1])
        summary = {"seeds": last["seeds"], "failed_seeds": last["failed_seeds"],
                   "probes_hit": last["probes"]["hit"],
                   "probes_declared": last["probes"]["declared"]}
    for step in (["combine", f"--rcfile={rc}"],
                 ["html", f"--rcfile={rc}", "-d", str(out / "html")],
                 ["json", f"--rcfile={rc}", "-o", str(out / "coverage.json")]):
        subprocess.run([*cov, *step], cwd=root, check=True, stdout=subprocess.DEVNULL)
    result = {"bench": "coverage_suite" if args.suite else "coverage_sim",
              **({} if args.suite else {"jobs": args.jobs}), **summary,
              **per_package(json.loads((out / "coverage.json").read_text()), root),
              "html": str(out / "html" / "index.html"),
              "seconds": round(time.monotonic() - t0, 1)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
