"""Hybrid timestamps follow real time (external consistency, Kudu's commit-wait, KUDU-430).

The database returns each ok write's hybrid timestamp, and the harness records it in the
completion as `hybrid_time`. If write A completed before write B was invoked, A's timestamp
must be less than B's: otherwise a reader at B's timestamp may miss A, although A happened first.

Each completion is paired with its invocation (the invoke's `time`); then one sweep over the ok
ops with a timestamp, by invocation time, keeps the completed op with the largest timestamp
among those that completed before the current invocation (completions sorted once, consumed by a
pointer): O(n log n). Each violating op is reported once, against the earlier op with the
largest timestamp. A history without timestamps (recorded before writes carried them, or by a
client that does not return them) is valid, with a note: there is nothing to check.

Two scopes. Ops on one key (one tablet: one Raft log, whose leaders take their clocks past every
entry they apply) must be ordered whatever the clocks do. Across keys the order rests on the
engine's assumption that clocks stay within its max error; a run whose clock nemesis skewed
clocks broke that assumption on purpose, so across keys it is not judged, and the result says so.
"""

from __future__ import annotations

from collections.abc import Iterable

from reports.history import NEMESIS, Op

CHECKER = "timestamps"


def _brief(op: Op, invoked: int) -> dict:
    return {"index": op.index, "process": op.process, "f": op.f, "key": op.key, "value": op.value,
            "node": op.node, "hybrid_time": op.hybrid_time, "invoked": invoked,
            "completed": op.time}


def check_timestamps(ops: Iterable[Op]) -> dict:
    """{"checker", "verdict", "writes", "scope", "anomalies"[, "note"]}; each anomaly names both
    ops."""
    invoke_time: dict = {}
    timed: list[tuple[int, int, Op]] = []  # (invoked, completed, op) of ok ops with a timestamp
    untimed = 0
    clock_faults = False
    for op in ops:
        if op.process == NEMESIS:
            clock_faults = clock_faults or "clock" in str(op.f)
            continue
        if op.type == "invoke":
            invoke_time[op.process] = op.time
            continue
        invoked = invoke_time.pop(op.process, None)
        if op.type != "ok" or op.hybrid_time is None:
            continue
        if invoked is None or op.time is None:
            untimed += 1  # no real-time bounds: cannot be ordered against anything
            continue
        timed.append((invoked, op.time, op))
    result = {"checker": CHECKER, "writes": len(timed),
              "scope": "per key" if clock_faults else "all ops"}
    if not timed:
        return {**result, "verdict": "valid", "anomalies": [],
                "note": "no ok op carries a hybrid_time: nothing to check"}
    notes = []
    if clock_faults:
        groups: dict = {}
        for t in timed:
            if t[2].key is not None:
                groups.setdefault(repr(t[2].key), []).append(t)
        anomalies = [a for g in groups.values() for a in _sweep(g)]
        notes.append("clock faults skewed clocks past the assumed max error: order checked per "
                     "key only")
    else:
        anomalies = _sweep(timed)
    if untimed:
        notes.append(f"{untimed} ok op(s) with a hybrid_time but no invoke/complete time")
    if notes:
        result["note"] = "; ".join(notes)
    return {**result, "verdict": "invalid" if anomalies else "valid", "anomalies": anomalies}


def _sweep(timed: list[tuple[int, int, Op]]) -> list[dict]:
    """Every op whose timestamp is not above that of some op completed before its invocation."""
    by_completion = sorted(timed, key=lambda t: t[1])
    anomalies = []
    best: tuple[int, int, Op] | None = None  # the completed op with the largest timestamp
    done = 0
    for inv, _comp, op in sorted(timed, key=lambda t: t[0]):
        # Ops that completed strictly before this invocation precede it in real time.
        while done < len(by_completion) and by_completion[done][1] < inv:
            cand = by_completion[done]
            if best is None or cand[2].hybrid_time > best[2].hybrid_time:
                best = cand
            done += 1
        if best is not None and best[2].hybrid_time >= op.hybrid_time:
            a_inv, _, a = best
            anomalies.append({
                "type": "timestamp-order",
                "explanation": f"op {a.index} ({a.f}) completed before op {op.index} ({op.f}) "
                               f"was invoked, yet its hybrid time {a.hybrid_time} is not less "
                               f"than {op.hybrid_time}",
                "before": _brief(a, a_inv),
                "after": _brief(op, inv),
            })
    return anomalies
