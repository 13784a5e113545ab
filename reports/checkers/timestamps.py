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

The order is judged per key. One key lives in one tablet, whose Raft leaders take their clocks
past every entry they apply, so its writes must be ordered whatever the clocks do. Across keys
the order rests on the assumption that clocks stay within the engine's max error, which a clock
nemesis breaks on purpose, and the Spark job checks per-key models one key at a time anyway; so
ops without a key (transactions) and pairs across keys are not judged here, and the result
counts what was left out. Commit-wait's cross-tablet order is tested on a cluster with one clock
(tests/test_timestamps_e2e.py).

What holds whatever the clocks do is each client's own order (`check_client_order`): a client
sends the highest timestamp it observed with each write, and the leader's clock witnesses it
first, so a process's ok writes' timestamps rise in the order it made them, across keys and
tablets, in both of Kudu's external consistency modes (node.protocol).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from reports.history import NEMESIS, Op

CHECKER = "timestamps"
CLIENT_ORDER = "client-order"


def _brief(op: Op, invoked: int | None) -> dict[str, Any]:
    return {"index": op.index, "process": op.process, "f": op.f, "key": op.key, "value": op.value,
            "node": op.node, "hybrid_time": op.hybrid_time, "invoked": invoked,
            "completed": op.time}


def check_timestamps(ops: Iterable[Op], across_keys: bool = False) -> dict[str, Any]:
    """{"checker", "verdict", "writes", "scope", "anomalies"[, "note"]}; each anomaly names both
    ops. `across_keys`: judge every pair, transactions too, as commit-wait promises while every
    clock stays within the max error (checker "commit-wait"; the whole-stack simulator asks
    for it in seeds whose clocks never left the bound)."""
    invoke_time: dict[Any, int | None] = {}  # process -> its open invoke's time
    timed: list[tuple[int, int, Op]] = []  # (invoked, completed, op) of ok ops with a timestamp
    untimed = 0
    for op in ops:
        if op.process == NEMESIS:
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
    groups: dict[str, list[tuple[int, int, Op]]] = {}
    for t in timed:
        if across_keys or t[2].key is not None:
            groups.setdefault("*" if across_keys else repr(t[2].key), []).append(t)
    judged = sum(len(g) for g in groups.values())
    result: dict[str, Any] = {"checker": "commit-wait" if across_keys else CHECKER, "writes": judged,
              "scope": "across keys" if across_keys else "per key"}
    notes = []
    if len(timed) > judged:
        notes.append(f"{len(timed) - judged} ok op(s) without a key (transactions) not judged")
    if untimed:
        notes.append(f"{untimed} ok op(s) with a hybrid_time but no invoke/complete time")
    if not judged:
        notes.insert(0, "no ok op on a key carries a hybrid_time: nothing to check")
    if notes:
        result["note"] = "; ".join(notes)
    anomalies = [a for g in groups.values() for a in _sweep(g)]
    return {**result, "verdict": "invalid" if anomalies else "valid", "anomalies": anomalies}


def check_client_order(ops: Iterable[Op]) -> dict[str, Any]:
    """Each process's ok writes' hybrid timestamps rise in the order it made them: what both of
    Kudu's external consistency modes promise a client that propagates the timestamps it
    observed (node.protocol), whatever the clocks do, since every leader's clock witnesses the
    propagated timestamp before it assigns one. A process makes one op at a time, so its
    history order is its real-time order. {"checker": "client-order", "verdict", "writes",
    "scope", "anomalies"}; each anomaly names both ops."""
    last: dict[Any, Op] = {}
    anomalies = []
    judged = 0
    for op in ops:
        if op.process == NEMESIS or op.type != "ok" or op.hybrid_time is None:
            continue
        judged += 1
        before = last.get(op.process)
        if before is not None and _hybrid_time(before) >= _hybrid_time(op):
            anomalies.append({
                "type": "client-order",
                "explanation": f"process {op.process}'s op {before.index} ({before.f}) came "
                               f"before its op {op.index} ({op.f}), yet its hybrid time "
                               f"{before.hybrid_time} is not less than {op.hybrid_time}",
                "before": _brief(before, None),
                "after": _brief(op, None),
            })
        last[op.process] = op
    result: dict[str, Any] = {"checker": CLIENT_ORDER, "writes": judged, "scope": "per process"}
    if not judged:
        result["note"] = "no ok op carries a hybrid_time: nothing to check"
    return {**result, "verdict": "invalid" if anomalies else "valid", "anomalies": anomalies}


def _hybrid_time(op: Op) -> int:
    """The timestamp of a timed op: check_timestamps times only ops that carry one."""
    return cast(int, op.hybrid_time)


def _sweep(timed: list[tuple[int, int, Op]]) -> list[dict[str, Any]]:
    """Every op whose timestamp is not above that of some op completed before its invocation."""
    by_completion = sorted(timed, key=lambda t: t[1])
    anomalies = []
    best: tuple[int, int, Op] | None = None  # the completed op with the largest timestamp
    done = 0
    for inv, _comp, op in sorted(timed, key=lambda t: t[0]):
        # Ops that completed strictly before this invocation precede it in real time.
        while done < len(by_completion) and by_completion[done][1] < inv:
            cand = by_completion[done]
            if best is None or _hybrid_time(cand[2]) > _hybrid_time(best[2]):
                best = cand
            done += 1
        if best is not None and _hybrid_time(best[2]) >= _hybrid_time(op):
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
