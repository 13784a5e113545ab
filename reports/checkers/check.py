"""One entry point that runs the right checkers for a workload model and merges their verdicts
(invalid beats unknown beats valid), for the CLI and the Spark job alike."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reports.checkers import linearizability
from reports.checkers.bank import check_bank
from reports.checkers.counter import check_counter
from reports.checkers.elle import check_list_append, check_rw_register
from reports.checkers.models import MODELS, MultiRegister
from reports.checkers.sets import check_set
from reports.history import Op


def check_history(ops: Iterable[Op], model: str, time_limit: float = linearizability.DEFAULT_TIME_LIMIT,
                  max_states: int = linearizability.DEFAULT_MAX_STATES, total: int | None = None,
                  initial: dict[str, Any] | None = None) -> dict:
    """{"model", "verdict", "ops", "results": [one result dict per checker]}."""
    ops = list(ops)
    results = []
    if model == "list-append":
        results.append(check_list_append(ops))
    elif model == "rw-register":
        results.append(check_rw_register(ops))
    elif model == "bank":
        results.append(check_bank(ops, total=total))
    elif model == "counter":
        results.append(check_counter(ops))
    else:
        if model == "set":
            results.append(check_set(ops))
        spec = MultiRegister(initial) if model == "multi-register" else MODELS[model]()
        results.append(linearizability.check(ops, spec, time_limit=time_limit, max_states=max_states))
    return {
        "model": model,
        "verdict": linearizability.merge_verdicts(r["verdict"] for r in results),
        "ops": len(ops),
        "results": results,
    }
