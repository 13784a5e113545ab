"""A run's `report.html`: the verdict first, then what explains it (counterexample or Elle
cycle), the plots, the Raft track and the op timeline; plots in `plots/`, timeline pages in
`timeline/`, beside the page."""

from __future__ import annotations

from pathlib import Path

import jinja2

from harness.spec import load_line
from reports.history import Op
from reports.html import plots, timeline
from reports.html.raftlog import leader_tracks, raft_events
from reports.html.templates import TEMPLATES
from reports.spark.runs import Run

ENV = jinja2.Environment(loader=jinja2.DictLoader(TEMPLATES),
                         autoescape=jinja2.select_autoescape(["html", "j2"]))


def reproduce_command(run: Run, test: dict) -> str:
    """`tessera replay <run dir>` for a run that recorded its fault schedule; before schedules
    were recorded, the command line with its seed (which replays the op streams only)."""
    if (run.path / "schedule.json").is_file():
        return f"tessera replay {run.path}"
    cmd = str(test.get("command", ""))
    if cmd and "seed" in test and "--seed" not in cmd:
        cmd += f" --seed {test['seed']}"
    return cmd


def _write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def render_report(run: Run, results: dict, ops: list[Op] | None) -> Path:
    plot_dir = run.path / "plots"
    plot_dir.mkdir(exist_ok=True)
    ops = ops or []
    by_index = {op.index: op for op in ops}
    periods = (results.get("nemesis") or {}).get("periods", [])
    figures = []
    pairs = plots.completions(ops)
    if pairs:
        # throughput first: whether the system served at all under each fault is the first
        # question a reader has, before how slowly
        figures.append(("Throughput", "plots/" + plots.throughput_plot(pairs, periods, plot_dir / "throughput.png")))
        figures.append(("Latency", "plots/" + plots.latency_plot(pairs, periods, plot_dir / "latency.png")))
        figures.append(("Latency quantiles", "plots/" + plots.quantile_plot(
            pairs, periods, plot_dir / "quantiles.png")))
    if results.get("clock"):
        figures.append(("Clock offsets", "plots/" + plots.clock_plot(
            results["clock"], results.get("duration_s") or 0.0, plot_dir / "clock.png")))
    tracks = leader_tracks(raft_events(run.path))
    if any(tracks.values()):
        started = _started_at(run.path)
        figures.append(("Raft leaders", "plots/" + plots.raft_plot(tracks, plot_dir / "raft.png",
                                                                   started_at=started)))

    counterexamples = [{"key": cx["key"], "explanation": cx["explanation"],
                        "svgs": [timeline.counterexample_svg(p, by_index) for p in cx["paths"][:2]]}
                       for cx in results.get("counterexamples", [])[:10]]
    cycles = [{**a, "svg": timeline.cycle_svg(a)}
              for r in (results.get("check") or {}).get("results", [])
              for a in r.get("anomalies", []) if a.get("edges")]
    pages = timeline.pages(ops)
    page_dir = run.path / "timeline"
    page_dir.mkdir(exist_ok=True)
    for old in page_dir.glob("*.html"):  # a re-render of a run whose history shrank
        old.unlink()
    for i, page in enumerate(pages, 1):
        _write(page_dir / f"{i}.html", ENV.get_template("timeline.html.j2").render(
            run=run.name, page=i, pages=len(pages),
            svg=timeline.process_timeline_svg(page, periods, logs="../logs.html")))

    logs = [link for _, link in run_files(run.path) if link.startswith("nodes/") and link.endswith(".log")]
    _write(run.path / "logs.html", ENV.get_template("logs.html.j2").render(
        run=run.name, start=_wall_stamp(_started_at(run.path)), files=logs))
    test = results.get("test") or {}
    html = ENV.get_template("report.html.j2").render(
        run=run.name, r=results, test=test, command=reproduce_command(run, test),
        load=load_line(test), figures=figures, counterexamples=counterexamples, cycles=cycles,
        other_anomalies=[a for a in results.get("anomalies", []) if a["type"] != "nonlinearizable"
                         and not any(c["explanation"] == a["explanation"] for c in cycles)],
        first_page=timeline.process_timeline_svg(pages[0], periods) if pages else "",
        pages=len(pages), raft_tablets=len(tracks), files=run_files(run.path))
    _write(run.report, html)
    return run.report


# What a run directory may hold, in the order a reader wants it (node files are added after).
RUN_FILES = ("history.jsonl", "history.edn", "test.json", "outcome.json", "results.json",
             "schedule.json", "convergence.json", "masters.json", "control.log", "logs.html")


def run_files(run_dir: Path) -> list[tuple[str, str]]:
    """(label, link relative to the report) of every file the run left that a reader may want:
    the histories, the spec and results, the fault plan, the control log, each node's logs."""
    out = [(name, name) for name in RUN_FILES if (run_dir / name).is_file()]
    nodes = run_dir / "nodes"
    if nodes.is_dir():
        out += [(f"{f.parent.name}/{f.name}", f"nodes/{f.parent.name}/{f.name}")
                for f in sorted(nodes.glob("*/*")) if f.is_file()]
    return out


def _wall_stamp(epoch: float | None) -> str | None:
    """`epoch` as the daemons stamp their log lines (local time, milliseconds), the same
    reading raftlog gives their stamps back."""
    if epoch is None:
        return None
    from datetime import datetime

    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def _started_at(run_dir: Path) -> float | None:
    """The wall-clock time of the history's time 0, recorded by the harness in the run's
    record (outcome.json; test.json in runs recorded before it)."""
    from reports.spark.runs import read_record

    return read_record(run_dir).get("started_at")
