"""A run's `results.json` (verdict, anomalies, counterexamples, statistics, nemesis coverage) and
the flat rows the store's Parquet tables and index are built from.

`results.json` is what the report renders and what the next `tessera analyze` reads to skip a run
already analyzed with the same checker version. The verdict never passes a broken run: the stats
checker is part of it, and a run the harness did not finish (or whose record is unreadable) is
unknown whatever its partial history shows.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from reports.checkers.stats import stats
from reports.checkers.verdict import analysis_verdict, with_run_checks
from reports.history import NEMESIS, Op
from reports.probes import fired, run_probes
from reports.spark.runs import Run

ENDS = ("stop-", "heal-")


def fault_periods(ops: list[Op]) -> list[dict]:
    """Nemesis periods: from a fault's completed `start-<kind>` to its completed `stop-`/`heal-`
    (or the end of the history), in seconds since the run began."""
    end = max((op.time or 0 for op in ops), default=0) / 1e9
    open_: dict[str, dict] = {}
    periods: list[dict] = []
    for op in ops:
        if op.process != NEMESIS or op.value is None or not isinstance(op.f, str) or op.time is None:
            continue
        if op.f.startswith("start-"):
            kind = op.f[len("start-"):]
            if kind not in open_:
                open_[kind] = {"kind": kind, "start": op.time / 1e9, "value": op.value}
        elif op.f.startswith(ENDS):
            kind = op.f.split("-", 1)[1]
            if kind in open_:
                periods.append({**open_.pop(kind), "end": op.time / 1e9})
    periods.extend({**p, "end": end} for p in open_.values())
    return sorted(periods, key=lambda p: p["start"])


def clock_offsets(ops: list[Op]) -> list[dict]:
    """Clock-skew steps [{time, offsets_ms}] from `start-clock`/`stop-clock` ops (stop resets).
    A strobe flips its hosts by ± its delta (plotted as the delta) for its `seconds`, then
    leaves them at 0: a step back to 0 at its end, unless a stop came first."""
    steps: list[dict] = []
    ending: dict | None = None  # a strobe's end, not yet reached

    def reach(t: float) -> None:
        nonlocal ending
        if ending is not None and ending["time"] <= t:
            steps.append(ending)
            ending = None

    for op in ops:
        if op.process != NEMESIS or op.time is None or not isinstance(op.value, dict):
            continue
        t = op.time / 1e9
        reach(t)
        if op.f == "start-clock" and isinstance(op.value.get("offsets_ms"), dict):
            steps.append({"time": t, "offsets_ms": dict(op.value["offsets_ms"])})
            if op.value.get("fault") == "strobe" and isinstance(op.value.get("seconds"), (int, float)):
                ending = {"time": t + op.value["seconds"], "offsets_ms": {
                    **op.value["offsets_ms"], **{h: 0 for h in op.value.get("targets", [])}}}
        elif op.f in ("stop-clock", "heal-clock") and steps:
            ending = None
            steps.append({"time": t, "offsets_ms": {n: 0 for n in steps[-1]["offsets_ms"]}})
    reach(float("inf"))
    return steps


def nemesis_coverage(ops: list[Op], configured: list[str]) -> dict:
    counts = Counter(str(op.f) for op in ops if op.process == NEMESIS)
    periods = fault_periods(ops)
    fired = Counter(p["kind"] for p in periods)
    seconds: dict[str, float] = {}
    for p in periods:
        seconds[p["kind"]] = round(seconds.get(p["kind"], 0.0) + p["end"] - p["start"], 3)
    return {"counts": dict(counts), "fired": dict(fired), "fault_seconds": seconds,
            "never_fired": sorted(set(configured) - set(fired)), "periods": periods}


def run_checks(run: Run, ops: list[Op] | None) -> list[dict]:
    """What the harness checked beyond the history, for the analysis: the replica convergence and
    the masters' agreement it recorded (the cluster is gone by now), the node logs checked again
    from the run dir, and whether the faults were in force and what they found on the hosts
    (reports.checkers.faults, from the history's nemesis ops). Runs recorded before these
    checks existed lack them."""
    from reports.checkers.faults import check_fault_findings, check_faults
    from reports.checkers.logs import check_logs
    from reports.probes import check_alarms

    out = []
    for name in ("convergence", "masters"):
        try:
            out.append(json.loads((run.path / f"{name}.json").read_text()))
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            out.append({"checker": name, "verdict": "unknown",
                        "errors": [{"type": "unreadable", "explanation": f"{name}.json: {e}"}]})
    if (run.path / "nodes").is_dir():
        out.append(check_logs(run.path, ops))
    configured = list(run.test().get("nemesis") or [])
    if ops is not None and configured:
        out.append(check_faults(ops, configured))
        if (found := check_fault_findings(ops)) is not None:
            out.append(found)
    if (alarms := check_alarms(run.path)) is not None:
        out.append(alarms)
    return out


def incomplete(test: dict) -> str | None:
    """Why the harness's record says the run cannot be judged, or None. Runs recorded before
    test.json carried a status count as complete."""
    if not test:
        return "no readable test.json"
    status = test.get("status", "complete")
    if status == "complete":
        return None
    return f"the test did not complete ({status}{': ' + str(test['error']) if test.get('error') else ''})"


def anomalies(check: dict, st: dict | None) -> list[dict]:
    """Every failure a checker found, flattened: {checker, type, key?, explanation, quote?};
    `quote`, the first line a log finding quotes (what the node said, not only the rule)."""
    found = [{"checker": "stats", "type": "never-ok",
              "explanation": f"no {f} ever succeeded ({st['counts'][f]['fail']} failed, "
                             f"{st['counts'][f]['info']} unknown)"}
             for f in (st or {}).get("never_ok", [])]
    for r in check.get("results", []):
        before = len(found)
        for k in r.get("keys", []):
            if k["verdict"] == "invalid":
                found.append({"checker": r["checker"], "type": "nonlinearizable", "key": k["key"],
                              "explanation": k.get("counterexample", {}).get("explanation", "")})
        for a in r.get("anomalies", []) + r.get("errors", []):
            found.append({"checker": r["checker"], "type": a.get("type", "error"),
                          "explanation": a.get("explanation", json.dumps(a, default=str)[:300]),
                          **({"quote": a["text"].splitlines()[0]} if a.get("text") else {})})
        if r.get("verdict") == "invalid" and len(found) == before:
            # a check that judged the run invalid in a sentence of its own (the end check's
            # servers whose tables differ): named, not left for "no checker was sure"
            found.append({"checker": r["checker"], "type": "invalid",
                          "explanation": str(r.get("error") or "invalid")})
    return found


def failure_line(found: list[dict], width: int = 160) -> str:
    """Which checkers failed and why, in one line: each checker's anomaly types, then the first
    explanation (and the log line it quotes: a CI log then shows what the node said)."""
    by_checker: dict[str, set[str]] = {}
    for a in found:
        by_checker.setdefault(a["checker"], set()).add(a["type"])
    head = "; ".join(f"{c}: {','.join(sorted(t))}" for c, t in by_checker.items())
    quote = found[0].get("quote")
    first = " ".join(f"{found[0]['explanation']}{': ' + quote if quote else ''}".split())
    line = f"{head} — {first}" if first else head
    return line if len(line) <= width else line[: width - 1] + "…"


def counterexamples(check: dict) -> list[dict]:
    return [{"key": k["key"], **k["counterexample"]}
            for r in check.get("results", []) for k in r.get("keys", [])
            if k["verdict"] == "invalid" and "counterexample" in k]


def build(run: Run, check: dict, ops: list[Op] | None, error: str | None, version: str,
          extra: list[dict] | None = None) -> dict:
    """The analysis's results for one run. `extra`: the run's other checks when the caller has
    them (`tessera test`, which just ran them); else read from the run dir (`run_checks`)."""
    test = run.test()
    client = [op for op in ops or [] if op.process != NEMESIS]
    st = stats(client) if ops else None
    unreadable = error or check.get("unreadable")
    if not unreadable:
        check = with_run_checks(check, run_checks(run, ops) if extra is None else
                            [{k: v for k, v in r.items() if k != "scope"} for r in extra])
    problem = unreadable or incomplete(test)
    return {
        "verdict": analysis_verdict(check, st, problem),
        "status": "unreadable" if unreadable or not test else "incomplete" if problem else "analyzed",
        "error": problem,
        "checker": check.get("model"),
        "checker_version": version,
        "analyzed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "test": test,
        "duration_s": round(max((op.time or 0 for op in ops), default=0) / 1e9, 3) if ops else None,
        "check": check,
        "anomalies": anomalies(check, st),
        "counterexamples": counterexamples(check),
        "stats": st,
        "counts": {f"{f}:{t}": n for f, c in (st or {"counts": {}})["counts"].items() for t, n in c.items() if n},
        "nemesis": nemesis_coverage(ops, list(test.get("nemesis", []))) if ops else None,
        "clock": clock_offsets(ops) if ops else [],
        **({"probes": reached} if (reached := run_probes(run.path)) is not None else {}),
    }


def write(path: Path, results: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")
    tmp.replace(path)  # readers never see half a file


def settings(test: dict) -> str:
    """What a user chose for the run beyond workload and faults, in one string: the --flag
    values (MariaDB's topology and isolation, a daemon option) and the consistency model the
    history was judged by, so a store's runs group by setting (`test-all` draws them)."""
    flags = [f"{k}={v}" for k, v in sorted((test.get("flags") or {}).items())]
    model = (test.get("workload_options") or {}).get("consistency_model")
    return ",".join(flags + ([f"model={model}"] if model else []))


def run_row(run: Run, results: dict) -> dict:
    """One run as a flat row (Parquet `runs` table and the store index)."""
    test = results.get("test") or run.test()
    st = results.get("stats") or {}
    ok = sum(c.get("ok", 0) for c in st.get("counts", {}).values())
    duration = results.get("duration_s") or 0.0
    return {
        "run": run.name,
        "path": str(run.path),
        "test": run.path.parent.name,
        "started": _started(run.path.name),
        "db": str(test.get("db", "tessera")),
        "settings": settings(test),
        "workload": str(test.get("workload", "")),
        "nemeses": ",".join(map(str, test.get("nemesis", []))),
        "seed": int(test["seed"]) if isinstance(test.get("seed"), int) else None,
        "verdict": results.get("verdict", "unknown"),
        "status": results.get("status", "not analyzed"),
        "error": results.get("error"),
        "ops": int(sum(sum(c.values()) for c in st.get("counts", {}).values())),
        "ok_ops": int(ok),
        "duration_s": float(duration),
        "throughput": round(ok / duration, 3) if duration else 0.0,
        "anomaly_types": ",".join(sorted({a["type"] for a in results.get("anomalies", [])})),
        "checker_version": results.get("checker_version"),
        # the code probes the run's daemons fired (node.probes): the store's trend of which of
        # the engine's rare paths its runs reach
        "probes": ",".join(fired(results)),
    }


def key_rows(run: Run, results: dict) -> list[dict]:
    """Per key (per-key models) or per checker (whole-run models) verdict rows of the history's
    checks; the run's other checks count in the run's row (verdict, anomaly types)."""
    rows = []
    for r in (results.get("check") or {}).get("results", []):
        if r.get("scope") == "run":
            continue
        keys = r.get("keys")
        if keys is None:
            types = sorted({a.get("type", "error") for a in r.get("anomalies", []) + r.get("errors", [])})
            keys = [{"key": "", "verdict": r["verdict"], "ops": None, "reason": r.get("reason"),
                     "anomaly_types": ",".join(types)}]
        for k in keys:
            rows.append({"run": run.name, "checker": r["checker"], "key": str(k["key"]),
                         "verdict": k["verdict"], "ops": k.get("ops"), "states": k.get("states"),
                         "seconds": k.get("seconds"), "reason": k.get("reason"),
                         "anomaly_types": k.get("anomaly_types", "nonlinearizable" if k["verdict"] == "invalid" else "")})
    return rows


def _started(stamp: str) -> str:
    """`20261122T141554` -> `2026-11-22 14:15:54` (the run directory's creation time)."""
    s = stamp.split("-")[0]
    if len(s) == 15 and s[8] == "T":
        return f"{s[:4]}-{s[4:6]}-{s[6:8]} {s[9:11]}:{s[11:13]}:{s[13:15]}"
    return stamp


