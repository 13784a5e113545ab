"""Counter: `add` deltas (ok, or :info that may have applied) and `read`s. A read must lie between
what had certainly been added when it began and what could have been added by the time it
ended."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reports.checkers.registry import Model, register
from reports.history import Op, client_ops


def check_counter(ops: Iterable[Op], initial: int = 0) -> dict[str, Any]:
    ops = list(client_ops(ops))
    outcome: dict[int, str] = {}  # position of an add's invoke -> its completion type
    open_at: dict[Any, int] = {}  # process -> position of its open invoke
    for pos, op in enumerate(ops):
        if op.type == "invoke":
            open_at[op.process] = pos
        elif (at := open_at.pop(op.process, None)) is not None:
            outcome[at] = op.type
    certain = 0  # ok adds completed so far
    invoked_pos: float = 0  # every add invoked so far that did not fail
    invoked_neg: float = 0
    certain_pos = certain_neg = 0
    started: dict[Any, tuple[Any, Any, Any]] = {}
    errors = []
    reads = 0
    open_add: dict[Any, Any] = {}
    for pos, op in enumerate(ops):
        if op.f == "add":
            delta = op.value if isinstance(op.value, (int, float)) else 0
            if op.type == "invoke" and outcome.get(pos, "info") != "fail":
                invoked_pos += max(0, delta)
                invoked_neg += min(0, delta)
                open_add[op.process] = delta
            elif op.type == "ok":
                d = open_add.pop(op.process, delta)
                certain += d
                certain_pos += max(0, d)
                certain_neg += min(0, d)
        elif op.f == "read":
            if op.type == "invoke":
                started[op.process] = (certain, certain_pos, certain_neg)
            elif op.type == "ok" and op.process in started:
                reads += 1
                base, base_pos, base_neg = started.pop(op.process)
                possible_pos = invoked_pos - base_pos
                possible_neg = invoked_neg - base_neg
                lower, upper = initial + base + possible_neg, initial + base + possible_pos
                if not isinstance(op.value, (int, float)) or not lower <= op.value <= upper:
                    errors.append({"type": "out-of-bounds", "index": op.index, "value": op.value,
                                   "lower": lower, "upper": upper,
                                   "explanation": f"read {op.value!r} at index {op.index}, outside the "
                                                  f"possible range [{lower}, {upper}]"})
    return {"checker": "counter", "verdict": "invalid" if errors else "valid", "reads": reads, "errors": errors}


register(Model("counter", lambda ops, opts: [check_counter(ops)]))
