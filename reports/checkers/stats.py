"""Statistics: ok/fail/info counts per f, latency quantiles, and throughput per second. Like
Jepsen's stats checker, a history where some f never succeeded is flagged, since a workload
that cannot make progress proves nothing."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from reports.history import Op, client_ops

QUANTILES = (0.5, 0.9, 0.99, 1.0)


def _quantiles(values: list[int]) -> dict[str, int]:
    if not values:
        return {}
    values.sort()
    return {str(q): values[min(len(values) - 1, int(q * len(values)))] for q in QUANTILES}


def stats(ops: Iterable[Op], bucket_ns: int = 1_000_000_000) -> dict[str, Any]:
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"ok": 0, "fail": 0, "info": 0})
    latency: dict[str, list[int]] = defaultdict(list)
    throughput: dict[int, dict[str, int]] = defaultdict(lambda: {"ok": 0, "fail": 0, "info": 0})
    started: dict[Any, Op] = {}  # process -> its open invoke
    for op in client_ops(ops):
        f = str(op.f)
        if op.type == "invoke":
            started[op.process] = op
            continue
        counts[f][op.type] += 1
        inv = started.pop(op.process, None)
        if op.time is not None:
            throughput[op.time // bucket_ns][op.type] += 1
            if inv is not None and inv.time is not None and op.type != "info":
                latency[f].append(op.time - inv.time)
    for inv in started.values():  # invokes that never completed count as unknown outcomes
        counts[str(inv.f)]["info"] += 1
    never_ok = sorted(f for f, c in counts.items() if c["ok"] == 0)
    return {
        "checker": "stats",
        "verdict": "invalid" if never_ok else "valid",
        "never_ok": never_ok,
        "counts": dict(counts),
        "latency_ns": {f: _quantiles(v) for f, v in latency.items()},
        "throughput": [{"second": s * bucket_ns // 1_000_000_000, **c} for s, c in sorted(throughput.items())],
    }
