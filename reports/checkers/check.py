"""One entry point that runs the right checkers for a workload model and merges their verdicts
(invalid beats unknown beats valid), for the CLI and the Spark job alike. A result marked
"advisory" (the set's linearizability search) only counts when invalid: its unknown, a spent
search budget, never overrides the decisive checker's verdict."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reports.checkers import consistency, linearizability
from reports.checkers.bank import check_bank
from reports.checkers.counter import check_counter
from reports.checkers.elle import check_list_append, check_rw_register
from reports.checkers.models import MODELS, MultiRegister
from reports.checkers.replies import check_replies
from reports.checkers.sets import check_set
from reports.checkers.timestamps import check_timestamps
from reports.checkers.watch import check_watch
from reports.history import Op

ADVISORY_TIME_LIMIT = 5.0  # seconds per key for the set's linearizability search


def check_history(ops: Iterable[Op], model: str, time_limit: float = linearizability.DEFAULT_TIME_LIMIT,
                  max_states: int = linearizability.DEFAULT_MAX_STATES, total: int | None = None,
                  initial: dict[str, Any] | None = None,
                  consistency_model: str = consistency.DEFAULT_MODEL,
                  nil_read_unknown: bool = False) -> dict:
    """{"model", "verdict", "ops", "results": [one result dict per checker]}. `consistency_model`
    is what the Elle checkers (list-append, rw-register) judge the history against;
    `nil_read_unknown`, whether a register's ok read of nil is unknown (Knossos) or a value."""
    ops = list(ops)
    results = []
    if model == "list-append":
        results.append(check_list_append(ops, consistency_model=consistency_model))
    elif model == "rw-register":
        results.append(check_rw_register(ops, consistency_model=consistency_model))
    elif model == "bank":
        results.append(check_bank(ops, total=total))
    elif model == "counter":
        results.append(check_counter(ops))
    elif model == "watch":
        results.append(check_watch(ops))
    elif model == "set":  # set-full decides; the search may only add a real violation
        # A set's search space explodes with its size, so the advisory search mostly spends its
        # whole budget to say unknown: it gets a few seconds per key, not the decisive budget.
        lin = linearizability.check(ops, MODELS["set"](), time_limit=min(time_limit, ADVISORY_TIME_LIMIT),
                                    max_states=max_states)
        results += [check_set(ops), {**lin, "advisory": True}]
    else:
        if model == "multi-register":
            spec = MultiRegister(initial)
        elif model in ("register", "cas-register"):
            spec = MODELS[model](nil_read_unknown=nil_read_unknown)
        else:
            spec = MODELS[model]()
        results.append(linearizability.check(ops, spec, time_limit=time_limit, max_states=max_states))
    replies = check_replies(ops)
    if replies["compared"]:
        # Every model: a completion must answer its own invocation (wrong-reply). Histories
        # without transactions or recorded mismatches have nothing to compare.
        results.append(replies)
    if any(op.hybrid_time is not None for op in ops):
        # Every model: ok writes' hybrid timestamps must follow real time. Histories without
        # them (recorded before writes returned one) keep their results unchanged.
        results.append(check_timestamps(ops))
    return {
        "model": model,
        "verdict": linearizability.merge_verdicts(
            r["verdict"] for r in results if not (r.get("advisory") and r["verdict"] == "unknown")),
        "ops": len(ops),
        "results": results,
    }
