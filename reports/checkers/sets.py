"""Set: clients add unique elements and read the whole set. Acknowledged adds must be in the
final read (else lost); reads must hold only attempted elements (else unexpected), each once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from reports.history import Op, client_ops


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def _plain(items: Iterable[Any]) -> list:
    return sorted((list(x) if isinstance(x, tuple) else x for x in items), key=repr)


def check_set(ops: Iterable[Op]) -> dict:
    attempted: set = set()
    acknowledged: set = set()
    uncertain: set = set()  # :info adds and adds that never completed
    pending: dict[Any, Any] = {}
    reads: list[Op] = []
    for op in client_ops(ops):
        if op.f == "add":
            if op.type == "invoke":
                pending[op.process] = _freeze(op.value)
                attempted.add(pending[op.process])
            else:
                element = pending.pop(op.process, _freeze(op.value))
                if op.type == "ok":
                    acknowledged.add(element)
                elif op.type == "info":
                    uncertain.add(element)
        elif op.f == "read" and op.type == "ok":
            reads.append(op)
    uncertain |= set(pending.values())
    if not reads:
        return {"checker": "set", "verdict": "unknown", "reason": "no ok read of the set",
                "attempted": len(attempted), "acknowledged": len(acknowledged)}
    errors = []
    for op in reads:
        counts = Counter(_freeze(x) for x in (op.value or ()))
        duplicated = [x for x, n in counts.items() if n > 1]
        unexpected = set(counts) - attempted
        if duplicated:
            errors.append({"type": "duplicated", "index": op.index, "elements": _plain(duplicated)})
        if unexpected:
            errors.append({"type": "unexpected", "index": op.index, "elements": _plain(unexpected)})
    final = {_freeze(x) for x in (reads[-1].value or ())}
    lost = acknowledged - final
    if lost:
        errors.append({"type": "lost", "index": reads[-1].index, "elements": _plain(lost),
                       "explanation": f"{len(lost)} acknowledged adds are missing from the final read"})
    return {
        "checker": "set",
        "verdict": "invalid" if errors else "valid",
        "attempted": len(attempted),
        "acknowledged": len(acknowledged),
        "final_read_index": reads[-1].index,
        "lost": _plain(lost),
        "recovered": _plain(final & uncertain),
        "unexpected": _plain({e for err in errors if err["type"] == "unexpected" for e in map(_freeze, err["elements"])}),
        "errors": errors,
    }
