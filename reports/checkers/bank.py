"""Bank: reads return every account's balance; transfers move money between accounts. Under
snapshot isolation or better, every read sees the same total, and no balance goes negative
(unless the workload allows it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reports.checkers.registry import Model, register
from reports.history import Op, client_ops


def check_bank(ops: Iterable[Op], total: int | None = None, negative_allowed: bool = False) -> dict[str, Any]:
    """`total` is the conserved sum; when None, the first ok read's total is taken as it."""
    errors = []
    reads = 0
    expected: float | None = total
    for op in client_ops(ops):
        if op.type != "ok" or op.f != "read" or not isinstance(op.value, dict):
            continue
        reads += 1
        balances = {str(k): v for k, v in op.value.items()}
        found = sum(v for v in balances.values() if isinstance(v, (int, float)))
        if expected is None:
            expected = found
        if found != expected:
            errors.append({"type": "wrong-total", "index": op.index, "process": op.process,
                           "total": found, "expected": expected, "balances": balances,
                           "explanation": f"read at index {op.index} sums to {found}, not {expected}"})
        negative = {k: v for k, v in balances.items() if isinstance(v, (int, float)) and v < 0}
        if negative and not negative_allowed:
            errors.append({"type": "negative-value", "index": op.index, "process": op.process,
                           "negative": negative, "balances": balances,
                           "explanation": f"read at index {op.index} has negative balances {negative}"})
    return {
        "checker": "bank",
        "verdict": "invalid" if errors else "valid" if reads else "unknown",
        "reads": reads,
        "total": expected,
        "errors": errors,
        **({} if reads else {"reason": "no ok reads"}),
    }


register(Model("bank", lambda ops, opts: [check_bank(ops, total=opts.total)]))
