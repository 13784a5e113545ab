"""One entry point that runs the right checkers for a workload model and merges their verdicts
(invalid beats unknown beats valid), for the CLI and the Spark job alike. A result marked
"advisory" (the set's linearizability search) only counts when invalid: its unknown, a spent
search budget, never overrides the decisive checker's verdict."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reports.checkers import consistency, linearizability
from reports.checkers.registry import Options, models
from reports.checkers.replies import check_replies
from reports.checkers.timestamps import check_client_order, check_timestamps
from reports.checkers.verdict import merge_results
from reports.history import Op


def check_history(ops: Iterable[Op], model: str, time_limit: float = linearizability.DEFAULT_TIME_LIMIT,
                  max_states: int = linearizability.DEFAULT_MAX_STATES, total: int | None = None,
                  initial: dict[str, Any] | None = None,
                  consistency_model: str = consistency.DEFAULT_MODEL,
                  nil_read_unknown: bool = False, wfr_keys: bool = False) -> dict[str, Any]:
    """{"model", "verdict", "ops", "results": [one result dict per checker]}. `consistency_model`
    is what the Elle checkers (list-append, rw-register) judge the history against;
    `nil_read_unknown`, whether a register's ok read of nil is unknown (Knossos) or a value;
    `wfr_keys`, whether rw-register may order a key's versions by each transaction's read
    before its write (Elle's :wfr-keys?)."""
    ops = list(ops)
    known = models()
    if model not in known:
        raise ValueError(f"unknown model {model!r} (known: {', '.join(known)})")
    results = known[model].check(ops, Options(
        time_limit=time_limit, max_states=max_states, total=total, initial=initial,
        consistency_model=consistency_model, nil_read_unknown=nil_read_unknown,
        wfr_keys=wfr_keys))
    replies = check_replies(ops)
    if replies["compared"]:
        # Every model: a completion must answer its own invocation (wrong-reply). Histories
        # without transactions or recorded mismatches have nothing to compare.
        results.append(replies)
    if any(op.hybrid_time is not None for op in ops):
        # Every model: ok writes' hybrid timestamps must follow real time per key, and rise
        # in each process's own order. Histories without them (recorded before writes
        # returned one) keep their results unchanged.
        results.append(check_timestamps(ops))
        results.append(check_client_order(ops))
    return {
        "model": model,
        "verdict": merge_results(results),
        "ops": len(ops),
        "results": results,
    }
