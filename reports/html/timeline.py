"""SVG timelines drawn as text: the counterexample of a non-linearizable key (Porcupine-style),
an Elle cycle, and the per-process op timeline. Inline SVG needs no image file to load."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from reports.history import Op

COLORS = {"ok": "#2e9d4a", "fail": "#d6342c", "info": "#f0a020", "linearized": "#4a7fc1",
          "blocked": "#d6342c"}
LANE = 26
LEFT = 90
WIDTH = 1000


def _short(v: Any, n: int = 28) -> str:
    s = v if isinstance(v, str) else repr(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def _svg(height: int, body: list[str], cls: str) -> str:
    return (f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">' + "".join(body) + "</svg>")


def counterexample_svg(path: dict, by_index: dict[int, Op], max_steps: int = 30) -> str:
    """One partial linearization: each op a bar from invoke to return in its process's lane,
    numbered in linearization order with the model state after it; the op that cannot be placed
    is red. Only the last `max_steps` steps are drawn (the ones near the contradiction)."""
    steps = path["linearized"][-max_steps:]
    skipped = len(path["linearized"]) - len(steps)
    items = [(i + skipped + 1, s["op"], s["state"], "linearized") for i, s in enumerate(steps)]
    items.append((None, path["blocked_op"], path["state"], "blocked"))

    def times(op: dict) -> tuple[float, float | None]:
        inv = by_index.get(op["invoke_index"])
        comp = by_index.get(op["complete_index"]) if op["complete_index"] is not None else None
        return (inv.time if inv and inv.time is not None else 0) / 1e6, \
            (comp.time / 1e6 if comp and comp.time is not None else None)

    spans = [times(op) for _, op, _, _ in items]
    lo = min(s for s, _ in spans)
    hi = max([e for _, e in spans if e is not None] + [s for s, _ in spans]) or lo + 1
    scale = (WIDTH - LEFT - 20) / max(hi - lo, 1e-3)
    processes = sorted({str(op["process"]) for _, op, _, _ in items}, key=lambda p: (len(p), p))
    body = []
    if skipped:
        body.append(f'<text x="4" y="14" fill="#666">… {skipped} earlier linearized ops not drawn</text>')
    for lane, p in enumerate(processes):
        y = 24 + lane * LANE * 2
        body.append(f'<text x="4" y="{y + 14}">process {escape(p)}</text>'
                    f'<line x1="{LEFT}" x2="{WIDTH - 10}" y1="{y + LANE}" y2="{y + LANE}" stroke="#eee"/>')
    for (n, op, state, kind), (start, end) in zip(items, spans, strict=True):
        lane = processes.index(str(op["process"]))
        # neighbours alternate between a lane's two rows so their labels do not overlap
        y = 24 + lane * LANE * 2 + (LANE if kind == "blocked" or n % 2 else 0)
        x = LEFT + (start - lo) * scale
        w = max(((end if end is not None else hi) - start) * scale, 4)
        dash = ' stroke-dasharray="4 3"' if end is None else ""
        label = f"{'#' + str(n) if n else 'cannot place:'} {op['f']} {_short(op['value'], 18)}"
        anchor, tx = ("end", x + w - 3) if x > WIDTH * 0.75 else ("start", x + 3)
        title = f"{op['f']} {op['value']!r} by process {op['process']}, history index {op['invoke_index']}" \
                f"–{op['complete_index']}; model state after: {state!r}"
        body.append(f'<g class="cx-op {kind}"><title>{escape(title)}</title>'
                    f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{LANE - 6}" rx="3" '
                    f'fill="{COLORS[kind]}" fill-opacity="0.25" stroke="{COLORS[kind]}"{dash}/>'
                    f'<text x="{tx:.1f}" y="{y + 15}" text-anchor="{anchor}">{escape(label)} → '
                    f'{escape(_short(state, 14))}</text></g>')
    return _svg(24 + len(processes) * LANE * 2 + 10, body, "counterexample")


def cycle_svg(anomaly: dict) -> str:
    """An Elle cycle: transactions on a circle, arrows labelled with the dependency kind."""
    names = [t["name"] for t in anomaly.get("transactions", [])]
    n = max(len(names), 1)
    size = 320
    cx = cy = size / 2
    r = size / 2 - 50
    pos = {name: (cx + r * math.cos(2 * math.pi * i / n - math.pi / 2),
                  cy + r * math.sin(2 * math.pi * i / n - math.pi / 2)) for i, name in enumerate(names)}
    body = ['<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
            'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>']
    for e in anomaly.get("edges", []):
        (x1, y1), (x2, y2) = pos.get(e["from"], (cx, cy)), pos.get(e["to"], (cx, cy))
        dx, dy = x2 - x1, y2 - y1
        d = math.hypot(dx, dy) or 1
        sx, sy, ex, ey = x1 + dx / d * 24, y1 + dy / d * 24, x2 - dx / d * 24, y2 - dy / d * 24
        # bend each edge to its right, so A->B and B->A stay apart
        mx, my = (sx + ex) / 2 - dy / d * 30, (sy + ey) / 2 + dx / d * 30
        body.append(f'<path d="M{sx:.1f},{sy:.1f} Q{mx:.1f},{my:.1f} {ex:.1f},{ey:.1f}" fill="none" '
                    f'stroke="#555" marker-end="url(#arrow)"/><text x="{mx:.1f}" y="{my:.1f}" '
                    f'fill="#b03" text-anchor="middle">{escape(str(e["type"]))}</text>')
    for name, (x, y) in pos.items():
        body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="20" fill="#fff" stroke="#4a7fc1" stroke-width="2"/>'
                    f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle">{escape(name)}</text>')
    return (f'<svg class="cycle" xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" '
            f'font-family="sans-serif" font-size="12">' + "".join(body) + "</svg>")


def pages(ops: list[Op], per_page: int = 400) -> list[list[tuple[Op, Op | None]]]:
    """Client ops paired (invoke, completion or None), cut into pages of `per_page` ops in invoke
    order: every op is on a page."""
    open_: dict = {}
    pairs: list[list] = []
    for op in ops:
        if op.process == "nemesis" or op.time is None:
            continue
        if op.type == "invoke":
            open_[op.process] = len(pairs)
            pairs.append([op, None])
        elif (at := open_.pop(op.process, None)) is not None:
            pairs[at][1] = op
    return [[tuple(p) for p in pairs[i:i + per_page]] for i in range(0, len(pairs), per_page)]


def _window(logs: str, start_s: float, end_s: float) -> str:
    return escape(f"{logs}?from={start_s:.3f}&to={end_s:.3f}")


def process_timeline_svg(page: list[tuple[Op, Op | None]], periods: list[dict] = (),
                         logs: str = "logs.html") -> str:
    """One page of the op timeline: a lane per process, a bar per op colored by its outcome,
    behind them a band for each nemesis period (`results.fault_periods`, seconds) the page's
    time window overlaps, labelled with its fault. Each bar and band links to the node-log
    viewer (`logs`) at its time window."""
    if not page:
        return _svg(20, ['<text x="4" y="14">no client ops</text>'], "timeline")
    lo = min(inv.time for inv, _ in page)
    hi = max((c.time if c is not None else inv.time) for inv, c in page)
    scale = (WIDTH - LEFT - 20) / max(hi - lo, 1)
    processes = sorted({inv.process for inv, _ in page}, key=lambda p: (not isinstance(p, int), str(p) if not isinstance(p, int) else p))
    lane_h = 16
    height = 30 + len(processes) * lane_h
    body = [f'<text x="{LEFT}" y="12" fill="#666">{lo / 1e9:.3f} s</text>'
            f'<text x="{WIDTH - 10}" y="12" fill="#666" text-anchor="end">{hi / 1e9:.3f} s</text>']
    for period in periods:
        start, end = max(period["start"] * 1e9, lo), min(period["end"] * 1e9, hi)
        if start >= end:
            continue
        x, w = LEFT + (start - lo) * scale, max((end - start) * scale, 2)
        title = (f"nemesis {period['kind']}: {period['start']:.3f}–{period['end']:.3f} s"
                 + (f" {_short(period.get('value'), 80)}" if period.get("value") else ""))
        body.append(f'<a href="{_window(logs, period["start"], period["end"])}">'
                    f'<g class="nemesis" data-kind="{escape(period["kind"])}" '
                    f'data-start="{period["start"]:.3f}" data-end="{period["end"]:.3f}">'
                    f'<title>{escape(title)}</title><rect x="{x:.1f}" y="14" width="{w:.1f}" '
                    f'height="{height - 14}" fill="#888" fill-opacity="0.12"/>'
                    f'<text x="{x + 2:.1f}" y="24" fill="#555" font-size="9">'
                    f'{escape(period["kind"])}</text></g></a>')
    for i, p in enumerate(processes):
        body.append(f'<text x="4" y="{30 + i * lane_h}" font-size="10">{escape(str(p))}</text>')
    for inv, c in page:
        y = 20 + processes.index(inv.process) * lane_h
        x = LEFT + (inv.time - lo) * scale
        end = c.time if c is not None else hi
        kind = c.type if c is not None else "info"
        title = f"process {inv.process} {inv.f} {_short(inv.value, 60)} → {kind}" + \
                (f" {_short(c.value, 60)}" if c is not None and c.value is not None else "") + \
                (f" key {inv.key}" if inv.key is not None else "") + f" (index {inv.index})"
        body.append(f'<a href="{_window(logs, inv.time / 1e9, end / 1e9)}">'
                    f'<rect x="{x:.1f}" y="{y}" width="{max((end - inv.time) * scale, 2):.1f}" '
                    f'height="{lane_h - 4}" fill="{COLORS[kind]}" fill-opacity="0.6">'
                    f'<title>{escape(title)}</title></rect></a>')
    return _svg(height, body, "timeline")
