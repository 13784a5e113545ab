"""What each model's history looks like: the op functions (`f`) it knows and the shape of an ok
op's value for each. `tessera check` checks a history against its model's shapes before any
checker runs, so a history judged by the wrong model (a register history with `--model
list-append`, a `:value 5` where a transaction belongs) is one line naming the op and the shape
it lacks, never a traceback from deep inside a checker.

Pure: `misfit(model, op)` says what is wrong with one op, or None; `infer_f(model, ops)` fills
in the f an op left out where the model has only one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from reports.history import Op


def _any(_: Any) -> bool:
    return True


def _scalar(v: Any) -> bool:
    return not isinstance(v, (list, tuple, dict, set, frozenset))


def _pair(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and len(v) == 2


def _collection(v: Any) -> bool:
    return v is None or isinstance(v, (list, tuple, set, frozenset))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _txn(fs: frozenset[str]) -> Callable[[Any], bool]:
    """A transaction: a list of [f, key, value] micro-ops, each f one of `fs`."""
    def ok(v: Any) -> bool:
        return isinstance(v, (list, tuple)) and all(
            isinstance(m, (list, tuple)) and 2 <= len(m) <= 3 and str(m[0]) in fs
            and _scalar(m[1]) for m in v)
    return ok


TXN = "a transaction: a list of [f, key, value] micro-ops"

# model -> f -> (what an ok op's value must be, how to say it)
SHAPES: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "register": {"read": (_any, "any value"), "write": (_scalar, "a single value")},
    "cas-register": {"read": (_any, "any value"), "write": (_scalar, "a single value"),
                     "cas": (_pair, "[expected, new]")},
    "mutex": {"acquire": (_any, "anything"), "release": (_any, "anything")},
    "queue": {"enqueue": (_scalar, "a single value"), "dequeue": (_any, "any value")},
    "set": {"add": (_scalar, "a single element"), "read": (_collection, "a list of elements")},
    "counter": {"add": (_number, "a number"), "read": (_number, "a number")},
    "bank": {"read": (lambda v: isinstance(v, dict), "a map of account -> balance"),
             "init": (_any, "the initial balances"),
             "transfer": (_any, "a transfer")},
    "multi-register": {"txn": (_txn(frozenset({"read", "write"})), TXN + " (read, write)")},
    "list-append": {"txn": (_txn(frozenset({"r", "append"})), TXN + " (r, append)")},
    "rw-register": {"txn": (_txn(frozenset({"r", "w"})), TXN + " (r, w)")},
    "watch": {"write": (_any, "a value"), "watch": (_any, "events"),
              "final-watch": (_any, "events"), "read": (_any, "a value")},
}


def infer_f(model: str, ops: list[Op]) -> list[Op]:
    """`ops` with a missing f filled in where the model knows only one (a transaction model's
    "txn"), as Elle reads its minimal histories: ops with `:index`, `:type` and `:value` alone.
    Any other model's ops are returned as they are; `misfit` then names an op with no f."""
    only = next(iter(SHAPES.get(model, {})), None) if len(SHAPES.get(model, {})) == 1 else None
    if only is None:
        return ops
    return [msgspec.structs.replace(op, f=only) if op.f is None else op for op in ops]


def misfit(model: str, op: Op) -> str | None:
    """Why `op` cannot be an op of `model`'s histories, or None when it fits. Only an ok op's
    value is judged: an invocation's or a failure's may be anything the client recorded."""
    shapes = SHAPES.get(model)
    if shapes is None:
        return None
    f = str(op.f) if op.f is not None else None
    if f is None:
        return "it has no f"
    if f not in shapes:
        return f"{model} knows no f={f!r} (it knows {', '.join(sorted(shapes))})"
    fits, shape = shapes[f]
    if op.type == "ok" and not fits(op.value):
        return f"{model}'s {f} takes {shape}, not {_short(op.value)}"
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
