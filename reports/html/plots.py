"""The report's matplotlib figures, written as PNG files beside the page.

Nemesis periods are shaded by fault kind on every plot over history time, so a latency spike or a
throughput gap can be read against the fault that caused it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: executors and CI have no display

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from reports.history import NEMESIS, Op  # noqa: E402

TYPE_COLORS = {"ok": "#2e9d4a", "fail": "#d6342c", "info": "#f0a020"}
FAULT_COLORS = ["#9ecae1", "#fdae6b", "#bcbddc", "#a1d99b", "#fc9272", "#d9d9d9", "#c7e9c0"]
DPI = 72
MAX_POINTS = 6_000  # latency points drawn; longer runs are sampled evenly


def _fault_color(kinds: list[str], kind: str) -> str:
    return FAULT_COLORS[kinds.index(kind) % len(FAULT_COLORS)]


def _shade(ax, periods: list[dict]) -> None:
    kinds = sorted({p["kind"] for p in periods})
    labelled = set()
    for p in periods:
        label = None if p["kind"] in labelled else p["kind"]
        labelled.add(p["kind"])
        ax.axvspan(p["start"], p["end"], color=_fault_color(kinds, p["kind"]), alpha=0.45, lw=0,
                   label=label, zorder=0)


RIGHT = 0.86  # the plot area's right edge: the legend goes beyond it, over no data


def _figure(height: float, left: float = 0.07, bottom: float = 0.55):
    """A full-width figure with fixed margins (tight_layout costs more than the drawing);
    `bottom` in inches."""
    fig, ax = plt.subplots(figsize=(11, height))
    fig.subplots_adjust(left=left, right=RIGHT, top=1 - 0.32 / height, bottom=bottom / height)
    return fig, ax


def _legend(ax, **kw) -> None:
    """The legend right of the plot area, where it can hide no point or line."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0, fontsize=7,
              **kw)


def _gapped(xs: list[float], ys: list[float], step: float) -> tuple[list[float], list[float]]:
    """The line broken (a NaN point) wherever consecutive xs are more than `step` apart: no
    segment is drawn across a stretch that has no data."""
    out_x, out_y = [], []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if i and x - xs[i - 1] > step * 1.5:
            out_x.append((x + xs[i - 1]) / 2)
            out_y.append(float("nan"))
        out_x.append(x)
        out_y.append(y)
    return out_x, out_y


def _save(fig, path: Path) -> str:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path.name


def completions(ops: list[Op]) -> list[tuple[Op, Op]]:
    """(invoke, completion) pairs of client ops with times, in completion order."""
    open_: dict = {}
    pairs = []
    for op in ops:
        if op.process == NEMESIS or op.time is None:
            continue
        if op.type == "invoke":
            open_[op.process] = op
        elif (inv := open_.pop(op.process, None)) is not None:
            pairs.append((inv, op))
    return pairs


def latency_plot(pairs: list[tuple[Op, Op]], periods: list[dict], path: Path) -> str:
    """Latency of every op over time, colored ok/fail/info, with per-second p50/p99 lines."""
    fig, ax = _figure(3.6)
    _shade(ax, periods)
    step = max(1, len(pairs) // MAX_POINTS)
    for t in ("ok", "fail", "info"):
        xs = [inv.time / 1e9 for inv, c in pairs[::step] if c.type == t]
        ys = [max(c.time - inv.time, 1) / 1e6 for inv, c in pairs[::step] if c.type == t]
        if xs:  # markers on a Line2D draw far faster than a scatter collection
            ax.plot(xs, ys, "o", ms=1.6, mew=0, color=TYPE_COLORS[t], alpha=0.7, label=t, zorder=2)
    by_second: dict[int, list[float]] = defaultdict(list)
    for inv, c in pairs:
        if c.type == "ok":
            by_second[inv.time // 1_000_000_000].append(max(c.time - inv.time, 1) / 1e6)
    if by_second:
        secs = sorted(by_second)
        for q, style in ((0.5, "-"), (0.99, "--")):
            qs = [sorted(by_second[s])[min(len(by_second[s]) - 1, int(q * len(by_second[s])))] for s in secs]
            ax.plot(*_gapped([s + 0.5 for s in secs], qs, 1.0), style, color="#333", lw=1,
                    label=f"ok p{int(q * 100)}", zorder=3)
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the run began")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency")
    _legend(ax, markerscale=3)
    return _save(fig, path)


QUANTILES = (0.5, 0.95, 0.99, 1.0)


def latency_quantiles(pairs: list[tuple[Op, Op]], window_s: float) -> dict[str, list[tuple]]:
    """Per op type (f), for each `window_s` window of invoke time that has ok ops: (window
    midpoint in s, {quantile: latency ms}). Nearest-rank quantiles; 1.0 is the maximum."""
    buckets: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for inv, c in pairs:
        if c.type == "ok":
            buckets[str(inv.f)][int(inv.time / 1e9 // window_s)].append(
                max(c.time - inv.time, 1) / 1e6)
    out = {}
    for f, by_window in sorted(buckets.items()):
        rows = []
        for w in sorted(by_window):
            lat = sorted(by_window[w])
            rows.append(((w + 0.5) * window_s,
                         {q: lat[min(len(lat) - 1, max(0, int(q * len(lat) + 0.999999) - 1))]
                          for q in QUANTILES}))
        out[f] = rows
    return out


def quantile_plot(pairs: list[tuple[Op, Op]], periods: list[dict], path: Path) -> str:
    """Latency quantiles of ok ops over time, one panel per op type: a tail that grows under a
    fault, or a p50 that never comes back after it, shows here when the scatter hides it."""
    end = max((inv.time for inv, _ in pairs), default=0) / 1e9
    window = max(1.0, round(end / 60))  # about 60 windows, never under a second
    series = latency_quantiles(pairs, window)
    fs = list(series) or ["(no ok ops)"]
    fig, axes = plt.subplots(len(fs), 1, figsize=(11, 1.2 + 1.6 * len(fs)), sharex=True,
                             squeeze=False)
    fig.subplots_adjust(left=0.07, right=RIGHT, top=1 - 0.32 / (1.2 + 1.6 * len(fs)),
                        bottom=0.55 / (1.2 + 1.6 * len(fs)), hspace=0.25)
    styles = {0.5: "-", 0.95: "--", 0.99: "-.", 1.0: ":"}
    for ax, f in zip(axes[:, 0], fs, strict=True):
        _shade(ax, periods)
        rows = series.get(f, [])
        for q in QUANTILES:
            ax.plot(*_gapped([t for t, _ in rows], [qs[q] for _, qs in rows], window),
                    styles[q], lw=1.1, color="#333",
                    label="max" if q == 1.0 else f"p{round(q * 100)}", zorder=3)
        ax.set_yscale("log")
        ax.set_ylabel(f"{f} (ms)")
        _legend(ax)
    axes[0, 0].set_title(f"Latency quantiles of ok ops per {window:g} s, per op type")
    axes[-1, 0].set_xlabel("seconds since the run began")
    return _save(fig, path)


def throughput_plot(pairs: list[tuple[Op, Op]], periods: list[dict], path: Path) -> str:
    """Completions per second for each op type (f) and outcome."""
    fig, ax = _figure(3.2)
    _shade(ax, periods)
    series: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for _, c in pairs:
        series[(str(c.f), c.type)][c.time // 1_000_000_000] += 1
    end = max((c.time // 1_000_000_000 for _, c in pairs), default=0)
    styles = {"ok": "-", "fail": ":", "info": "--"}
    for (f, t), counts in sorted(series.items()):
        xs = list(range(end + 1))
        ax.plot([x + 0.5 for x in xs], [counts.get(x, 0) for x in xs], styles[t], lw=1.2,
                label=f"{f} {t}", zorder=2)
    ax.set_xlabel("seconds since the run began")
    ax.set_ylabel("ops/s")
    ax.set_title("Throughput per op type")
    _legend(ax)
    return _save(fig, path)


def clock_plot(steps: list[dict], end: float, path: Path) -> str:
    """Each node's clock offset (a step function) while the clock nemesis skewed them."""
    fig, ax = _figure(2.8)
    nodes = sorted({n for s in steps for n in s["offsets_ms"]})
    for n in nodes:
        xs, ys = [0.0], [0.0]
        for s in steps:
            xs.append(s["time"])
            ys.append(s["offsets_ms"].get(n, ys[-1]))
        xs.append(max(end, xs[-1]))
        ys.append(ys[-1])
        ax.step(xs, ys, where="post", label=n)
    ax.set_xlabel("seconds since the run began")
    ax.set_ylabel("clock offset (ms)")
    ax.set_title("Clock offsets")
    _legend(ax)
    return _save(fig, path)


def raft_plot(tracks: dict[str, list[dict]], path: Path, max_tablets: int = 24,
              started_at: float | None = None) -> str:
    """Per tablet, which host led in which term: one lane per tablet, colored by host. With the
    run's wall-clock start its x axis is the other plots' (seconds since the run began)."""
    tablets = sorted(tracks)[:max_tablets]
    starts = [s["start"] for t in tablets for s in tracks[t]]
    t0 = started_at if started_at is not None else (min(starts) if starts else 0.0)
    hosts = sorted({s["host"] for t in tablets for s in tracks[t]})
    cmap = plt.get_cmap("tab10")
    fig, ax = _figure(0.9 + 0.35 * max(1, len(tablets)), left=0.14)
    for i, tab in enumerate(tablets):
        for s in tracks[tab]:
            color = cmap(hosts.index(s["host"]) % 10)
            ax.barh(i, max(s["end"] - s["start"], 0.05), left=s["start"] - t0, height=0.6, color=color)
            ax.text(s["start"] - t0, i, f"t{s['term']}", va="center", fontsize=6)
    ax.set_yticks(range(len(tablets)), tablets, fontsize=7)
    ax.set_xlabel("seconds since the run began (node wall clocks)" if started_at is not None
                  else "seconds since the first Raft event (node wall clocks)")
    ax.set_title("Raft leader and term per tablet")
    if hosts:
        _legend(ax, handles=[Patch(color=cmap(i % 10), label=h) for i, h in enumerate(hosts)])
    return _save(fig, path)


def trend_plot(rows: list[dict], path: Path) -> str:
    """The nightly view: each run's verdict and throughput, oldest to newest."""
    fig, ax = _figure(3.4, bottom=1.0)
    xs = list(range(len(rows)))
    ax.bar(xs, [r["throughput"] for r in rows], color="#c6dbef", label="ok ops/s")
    colors = {"valid": TYPE_COLORS["ok"], "invalid": TYPE_COLORS["fail"], "unknown": TYPE_COLORS["info"]}
    top = max([r["throughput"] for r in rows] + [1.0]) * 1.08
    for v, c in colors.items():
        sel = [x for x, r in zip(xs, rows, strict=True) if r["verdict"] == v]
        if sel:
            ax.scatter(sel, [top] * len(sel), c=c, marker="s", s=30, label=v, zorder=3)
    every = max(1, len(rows) // 40)  # at most ~40 date labels
    ax.set_xticks(xs[::every], [r["started"][5:16] for r in rows[::every]], rotation=60, fontsize=6)
    ax.set_ylabel("ok ops/s")
    ax.set_title("Verdicts and throughput over runs")
    ax.legend(loc="lower right", fontsize=7, ncol=4)
    return _save(fig, path)
