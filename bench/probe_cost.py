"""What the engine's code probes cost when off: bench/replication.py's single-op point run back
to back from two copies of this tree, one with every `probe(...)` call in place (probes off, as
every daemon runs unless given --probes-file) and one with every probe call removed (each
statement that only calls `probe` becomes `pass`, so no call and no compare is left), both
rewritten the same way (`rewrite`), in ABBA order, K pairs, each on a fresh cluster.

Throughput on this VM spreads by about ±10 % between runs a minute apart, five times the 2 %
bound, so each point also reports the CPU the leader spent per op (from /proc, as
bench/replication.py measures it): the cost a probe adds is CPU on the write path, and CPU per
op is the steadier figure. Both ratios are with probes over stripped: the probes cost
something where ops/s falls below 1.0 or the leader's CPU per op rises above it. anchor_us (`sum(range(1000))`, µs, best of 5) is taken before each pair.

Prints one JSON line with --json (progress goes to stderr)."""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.replication import anchor_us  # noqa: E402

POINT = ["--only", "tessera", "--tessera-sweep", "64", "--batched-sweep", "none",
         "--reads-sweep", "none", "--pairs", "0", "--json"]


def _only_probes(e: ast.expr) -> bool:
    if isinstance(e, ast.Call):
        return isinstance(e.func, ast.Name) and e.func.id == "probe"
    if isinstance(e, ast.IfExp):  # probe("a") if cond else probe("b"): cond has no side effect
        return _only_probes(e.body) and _only_probes(e.orelse)
    return False


class _Strip(ast.NodeTransformer):
    def visit_Expr(self, node: ast.Expr) -> ast.stmt:
        return ast.copy_location(ast.Pass(), node) if _only_probes(node.value) else node


def probe_calls(source: str) -> int:
    return sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "probe"
               for n in ast.walk(ast.parse(source)))


def rewrite(tree: Path, remove: bool) -> int:
    """Rewrite every engine module under `tree`/node through ast.unparse, with every probe call
    removed if `remove`; how many were removed. Both trees go through the same rewrite, so the
    one difference between them is the calls. Fails if a call is left (one inside a larger
    expression would still cost)."""
    removed = 0
    for path in (tree / "node").rglob("*.py"):
        if path.name == "probes.py":
            continue
        source = path.read_text()
        module = ast.parse(source)
        before = probe_calls(source)
        if remove:
            module = ast.fix_missing_locations(_Strip().visit(module))
        text = ast.unparse(module)
        left = probe_calls(text)
        if remove and left:
            raise SystemExit(f"{path}: {left} probe call(s) left inside expressions")
        path.write_text(text + "\n")
        removed += before - left
    return removed


def point(tree: Path, seconds: float) -> dict:
    """One single-op point from `tree`: its daemons and load processes import its `node`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(tree / "bench" / "replication.py"), *POINT,
                          "--seconds", str(seconds)], cwd=tree, env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    best = json.loads(out.strip().splitlines()[-1])
    p = next(s for s in best["tessera_sweep"] if s["clients"] == 64)
    return {"ops_per_s": p["ops_per_s"], "leader_cpu_us_per_op": p["cpu_us_per_op"]["leader"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3, metavar="K")
    ap.add_argument("--seconds", type=float, default=6.0, help="each point's measuring window")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for name in ("with", "stripped"):
            trees[name] = Path(tmp) / name
            shutil.copytree(ROOT, trees[name], ignore=shutil.ignore_patterns(
                ".git", ".venv", "store", "__pycache__", "*.egg-info", "htmlcov"))
        rewrite(trees["with"], remove=False)
        removed = rewrite(trees["stripped"], remove=True)
        print(f"probe_cost: {removed} probe calls removed in {trees['stripped']}",
              file=sys.stderr)
        pairs = []
        for k in range(a.pairs):
            anchor = anchor_us()
            order = list(trees.items())
            if k % 2:
                order.reverse()  # ABBA: neither tree always runs first
            got = {name: point(tree, a.seconds) for name, tree in order}
            pairs.append({"anchor_us": anchor, **got,
                          "ops_ratio": round(got["with"]["ops_per_s"]
                                             / got["stripped"]["ops_per_s"], 3),
                          "cpu_ratio": round(got["with"]["leader_cpu_us_per_op"]
                                             / got["stripped"]["leader_cpu_us_per_op"], 3)})
            print(f"probe_cost: pair {k + 1}: {pairs[-1]}", file=sys.stderr)
    out = {"bench": "probe_cost", "probe_calls_removed": removed, "pairs": pairs,
           "median_ops_ratio": statistics.median(p["ops_ratio"] for p in pairs),
           "median_leader_cpu_ratio": statistics.median(p["cpu_ratio"] for p in pairs)}
    print(json.dumps(out) if a.json else json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
