"""Checker speed: the Knossos reference corpus (parse + check), single-key cas-register stress
histories (100 ops, 10 processes, 20 writes/cas that never return), one key a whole-stack
simulator seed recorded while its tablet was unavailable (129 calls, 37 of them writes/cas that
timed out, tests/testdata/histories/sim-pending-key.jsonl), a 1,000,000-op register history
over 1,000 keys (read from history.jsonl, then checked; time and peak memory measured in a fresh
process), 100,000 list-append transactions, and a huge-scc list-append history (10,000
transactions whose stale reads tie them into one giant strongly connected component, the shape
of Elle's huge-scc test). Prints one JSON line with --json.

Targets: corpus <= 2 s total; each stress history <= 1 s; the simulator's key <= 5 s (the
simulator's budget a key; 44 s before its pending sets were kept as an antichain); the million ops <= 60 s and
<= 2 GiB on 2 cores; list-append 100k txns <= 60 s; huge-scc decided invalid (not unknown) in
<= 30 s. The speed anchor (`timeit('sum(range(1000))')`, µs) is taken before and after."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replication import anchor_us, interpreter  # noqa: E402
from reports.checkers.elle import check_list_append  # noqa: E402
from reports.checkers.generate import (  # noqa: E402
    corrupt_one_read,
    list_append_history,
    register_history,
    stale_read_history,
)
from reports.checkers.linearizability import check  # noqa: E402
from reports.checkers.models import CASRegister, MultiRegister, Mutex  # noqa: E402
from reports.history import read_history, read_jsonl, write_jsonl  # noqa: E402

KNOSSOS = Path(__file__).resolve().parents[2] / "shared/data/knossos"
MODELS = {"cas-register": CASRegister, "mutex": Mutex, "multi-register": lambda: MultiRegister({"x": 0, "y": 0})}


def corpus() -> dict:
    files = sorted(KNOSSOS.rglob("*.edn"))
    if not files:
        raise SystemExit(f"no knossos histories at {KNOSSOS}")
    per_file, wrong = [], 0
    started = time.perf_counter()
    for path in files:
        t = time.perf_counter()
        model_dir, verdict_dir = path.relative_to(KNOSSOS).parts[:2]
        result = check(read_history(path), MODELS[model_dir]())
        per_file.append(time.perf_counter() - t)
        wrong += result["verdict"] != {"good": "valid", "bad": "invalid"}[verdict_dir]
    return {"files": len(files), "total_s": round(time.perf_counter() - started, 3),
            "max_file_s": round(max(per_file), 3), "wrong_verdicts": wrong}


def stress(seeds: int) -> dict:
    times, corrupted_times, decided = [], [], 0
    for seed in range(seeds):
        ops = register_history(seed, 100, processes=10, pending=20)
        t = time.perf_counter()
        assert check(ops, "cas-register")["verdict"] == "valid"
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        verdict = check(corrupt_one_read(ops, seed), "cas-register", time_limit=1.0)["verdict"]
        corrupted_times.append(time.perf_counter() - t)
        decided += verdict == "invalid"
    return {"histories": seeds, "max_s": round(max(times), 4), "mean_s": round(sum(times) / seeds, 4),
            # not a target: the same histories with one read corrupted, each given a 1 s budget
            "corrupted_decided_invalid": decided, "corrupted_max_s": round(max(corrupted_times), 3)}


def sim_pending_key() -> dict:
    ops = read_jsonl(Path(__file__).resolve().parents[1] / "tests/testdata/histories/sim-pending-key.jsonl")
    t = time.perf_counter()
    result = check(ops, "cas-register", time_limit=120.0)
    key = result["keys"][0]
    return {"calls": key["ops"], "s": round(time.perf_counter() - t, 3), "states": key["states"],
            "verdict": result["verdict"]}


def million_worker(path: str) -> None:
    """Run in a fresh process so its peak RSS is the checker's alone."""
    t = time.perf_counter()
    ops = read_jsonl(path)
    read_s = time.perf_counter() - t
    result = check(ops, "cas-register")
    total = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"ops": len(ops), "keys": len(result["keys"]), "verdict": result["verdict"],
                      "read_s": round(read_s, 2), "total_s": round(total, 2), "peak_rss_mib": round(rss / 1024)}))


def million(n_ops: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.jsonl"
        write_jsonl(register_history(7, n_ops // 2 + 300, processes=50, keys=1000, pending=500), path)
        out = subprocess.run([sys.executable, __file__, "--million-worker", str(path)],
                             capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def list_append(n_txns: int) -> dict:
    ops = list_append_history(1, n_txns, processes=20, keys=200)
    t = time.perf_counter()
    result = check_list_append(ops)
    return {"txns": n_txns, "s": round(time.perf_counter() - t, 2), "verdict": result["verdict"]}


def huge_scc(n_txns: int) -> dict:
    ops = stale_read_history(1, n_txns)
    t = time.perf_counter()
    result = check_list_append(ops)
    return {"txns": n_txns, "s": round(time.perf_counter() - t, 2), "verdict": result["verdict"],
            "anomaly_types": result["anomaly_types"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("--quick", action="store_true", help="smaller generated cases (a smoke run)")
    ap.add_argument("--million-worker", metavar="PATH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.million_worker:
        million_worker(args.million_worker)
        return
    anchors = [anchor_us()]
    out = {
        "bench": "checker",
        "python": interpreter(),
        "knossos": corpus(),
        "stress_cas_100ops": stress(5 if args.quick else 20),
        "sim_pending_key": sim_pending_key(),
        "million_register": million(100_000 if args.quick else 1_000_000),
        "list_append": list_append(10_000 if args.quick else 100_000),
        "huge_scc": huge_scc(10_000),
    }
    anchors.append(anchor_us())
    out["anchor_us"] = anchors
    m = out["million_register"]
    out["targets_met"] = (
        out["knossos"]["total_s"] <= 2 and out["knossos"]["wrong_verdicts"] == 0
        and out["stress_cas_100ops"]["max_s"] <= 1
        and out["sim_pending_key"]["s"] <= 5 and out["sim_pending_key"]["verdict"] == "valid"
        and m["total_s"] <= 60 and m["peak_rss_mib"] <= 2048 and m["verdict"] == "valid"
        and out["list_append"]["s"] <= 60 and out["list_append"]["verdict"] == "valid"
        and out["huge_scc"]["s"] <= 30 and out["huge_scc"]["verdict"] == "invalid"
    )
    if args.json:
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
