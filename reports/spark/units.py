"""Units of checking: the pieces of a run that can be judged independently, and merging their
verdicts back into one per run. Runs on the executors, so it imports only the checkers.

Per-key (P-compositional) models split a run into one unit per key; transactional and whole-state
models (list-append, bank, set) are one unit per run. Rows arrive from the DataFrame with `value`
as raw JSON text (the schema keeps it a string, since its shape differs by workload).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from reports.checkers.check import check_history
from reports.checkers.linearizability import merge_verdicts
from reports.history import HistoryError, Op, _Validator

CORRUPT = "\0corrupt"  # the unit that collects a run's unparseable lines
WHOLE_RUN = ""  # the unit of models that are not split per key


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text  # a JSON string: Spark hands it over without its quotes


def row_to_op(row: Any) -> Op:
    process = row["process"]
    if process is None:
        raise HistoryError(f"op {row['index']} has no process")
    return Op(index=row["index"], type=row["type"],
              process=int(process) if process.lstrip("-").isdigit() else process,
              f=row["f"], value=_json(row["value"]), time=row["time"], key=row["key"],
              node=row["node"], error=_json(row["error"]))


def check_unit(model: str, options: dict, unit: str, rows: Iterable[Any]) -> dict:
    """Verdict of one unit; a malformed unit is `unknown` with `unreadable` saying why, because a
    malformed history must never yield valid or invalid."""
    rows = list(rows)
    if unit == CORRUPT:
        return {"verdict": "unknown",
                "unreadable": f"{len(rows)} unparseable line(s); one reads "
                              f"{(rows[0]['corrupt'] or '')[:120]!r}"}
    try:
        ops = [row_to_op(r) for r in rows]
        validator = _Validator(f"unit {unit!r}")
        for op in ops:
            validator.check(op, op.index)
    except HistoryError as e:
        return {"verdict": "unknown", "unreadable": str(e)}
    return check_history(ops, model, **options)


def merge_run(model: str, units: dict[str, dict]) -> dict:
    """One run's check result, in `check_history`'s shape, from its units' results."""
    unreadable = [f"{u or 'run'}: {r['unreadable']}" for u, r in sorted(units.items()) if "unreadable" in r]
    if unreadable:
        return {"model": model, "verdict": "unknown", "ops": 0, "results": [],
                "unreadable": "; ".join(unreadable)}
    if not units:
        return {"model": model, "verdict": "unknown", "ops": 0, "results": [],
                "reason": "no client operations in the history"}
    if WHOLE_RUN in units and len(units) == 1:
        return units[WHOLE_RUN]
    merged: dict[str, dict] = {}  # checker -> merged per-key result
    for unit in sorted(units):
        for r in units[unit]["results"]:
            m = merged.setdefault(r["checker"], {"checker": r["checker"], "model": r.get("model", model),
                                                 "keys": [], "invalid_keys": [], "unknown_keys": []})
            m["keys"].extend(r.get("keys", []))
            m["invalid_keys"].extend(r.get("invalid_keys", []))
            m["unknown_keys"].extend(r.get("unknown_keys", []))
    for m in merged.values():
        m["verdict"] = merge_verdicts(k["verdict"] for k in m["keys"])
    return {"model": model, "verdict": merge_verdicts(m["verdict"] for m in merged.values()),
            "ops": sum(u["ops"] for u in units.values()), "results": list(merged.values())}
