"""`store/index.html`: every run in the store, newest first, with a trend plot of verdicts and
throughput over the runs (oldest to newest), and every `tessera test-all` summary."""

from __future__ import annotations

import json
from pathlib import Path

from reports.html import plots
from reports.html.report import ENV, _write
from reports.probes import across
from reports.spark import results as res
from reports.spark.runs import ANALYSIS_DIR, Run


def render_index(store: Path, runs: list[Run]) -> Path:
    rows = []
    for r in runs:
        row = res.run_row(r, r.previous_results())
        row["link"] = f"{r.name}/report.html" if r.report.is_file() else None
        rows.append(row)
    rows.sort(key=lambda row: (row["started"], row["run"]))
    out = store / ANALYSIS_DIR
    out.mkdir(exist_ok=True)
    trend = f"{ANALYSIS_DIR}/" + plots.trend_plot(rows, out / "trend.png") if rows else None
    counts = {v: sum(1 for row in rows if row["verdict"] == v) for v in ("valid", "invalid", "unknown")}
    reached = across([r.previous_results() for r in runs])
    _write(store / "index.html", ENV.get_template("index.html.j2").render(
        store=str(store), rows=list(reversed(rows)), trend=trend, counts=counts,
        matrices=matrix_rows(store), probes=reached if reached["runs_with_probes"] else None))
    return store / "index.html"


def matrix_rows(store: Path) -> list[dict]:
    """Each `tessera test-all` summary (store/test-all/<timestamp>/summary.json), newest first:
    its counts, exit code and, for a self-check, each flag's finding."""
    rows = []
    for path in sorted((store / "test-all").glob("*/summary.json"), reverse=True):
        try:
            s = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        findings = ", ".join(f"{f['flag']}: {f['status']}" for f in s.get("findings", []))
        rows.append({"started": path.parent.name, "mode": s.get("mode", ""),
                     "counts": s.get("counts", {}), "exit": s.get("exit"),
                     "budget": s.get("budget_s"), "seconds": s.get("seconds"),
                     "findings": findings, "link": str(path.relative_to(store))})
    return rows
