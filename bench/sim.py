"""Whole-stack simulator speed with swarm mixes beside the classic mix: the same seeds
run back to back, classic then swarm then classic again, each on every core, and the speed
anchor (`timeit('sum(range(1000))')`) measured before, between and after, since this VM's
speed drifts. Seeds per minute and virtual seconds per wall second for each; the ratio takes
the mean of the two classic runs. Also counts failed seeds: on a correct engine it must be 0.
Prints one JSON line with --json."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replication import anchor_us, interpreter  # noqa: E402
from harness.sim.stack import StackConfig, run_seeds  # noqa: E402
from harness.sim.swarm import mix_for, workload_for  # noqa: E402


def run(mix: str, first: int, seeds: int, seconds: float, jobs: int) -> dict:
    mixes = {s: mix_for(mix, s) for s in range(first, first + seeds)}
    configs = [StackConfig(seed=s, workload=workload_for(s, m), seconds=seconds, mix=m)
               for s, m in mixes.items()]
    with tempfile.TemporaryDirectory() as out:
        t0 = time.monotonic()
        results = run_seeds(configs, Path(out), jobs)
        wall = time.monotonic() - t0
    virtual = sum(r.virtual_s for r in results)
    return {"mix": mix, "seeds": len(results), "wall_s": round(wall, 1),
            "seeds_per_min": round(60 * len(results) / wall, 1),
            "virtual_s_per_wall_s": round(virtual / wall, 1),
            "ok_ops": sum(r.ops for r in results),
            "failed": [r.seed for r in results if not r.ok()]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=40)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--seconds", type=float, default=60.0, help="virtual seconds of workload")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    anchors = [anchor_us()]
    points = []
    for mix in ("classic", "swarm", "classic"):
        points.append(run(mix, a.first_seed, a.seeds, a.seconds, a.jobs))
        anchors.append(anchor_us())
    classic = (points[0]["seeds_per_min"] + points[2]["seeds_per_min"]) / 2
    out = {"bench": "sim", "python": interpreter(), "anchor_us": anchors, "jobs": a.jobs, "points": points,
           "swarm_to_classic_seeds_per_min": round(points[1]["seeds_per_min"] / classic, 2),
           "failed": sorted({s for pt in points for s in pt["failed"]})}
    print(json.dumps(out) if a.json else json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
