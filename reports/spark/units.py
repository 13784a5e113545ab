"""Units of checking: the pieces of a run that can be judged independently, and merging their
verdicts back into one per run. Runs on the executors, so it imports only the checkers.

Per-key (P-compositional) models split a run into one unit per key; transactional and whole-state
models (list-append, bank, set) are one unit per run. A unit arrives as its raw JSON records, which
Python decodes with the project's own `Op` type, so values keep their exact JSON types.
"""

from __future__ import annotations

import msgspec

from reports.checkers.check import check_history
from reports.checkers.verdict import merge_verdicts
from reports.history import HistoryError, Op, Validator

CORRUPT = "\0corrupt"  # the unit that collects a run's unparseable lines
WHOLE_RUN = ""  # the unit of models that are not split per key
SEPARATOR = "\n"  # between a unit's records: JSON text never holds a raw newline

_records = msgspec.json.Decoder(list[Op])
_record = msgspec.json.Decoder(Op)


def decode(lines: str) -> list[Op]:
    """A unit's ops, in history (index) order, from its JSON records joined by SEPARATOR in any
    order; decoded in one call, and on failure the first bad record is named."""
    try:
        return sorted(_records.decode("[" + lines.replace(SEPARATOR, ",") + "]"), key=lambda op: op.index)
    except msgspec.DecodeError:
        for line in lines.split(SEPARATOR):
            try:
                _record.decode(line)
            except msgspec.DecodeError as e:
                raise HistoryError(f"bad op record {line[:120]!r}: {e}") from None
        raise


def check_unit(model: str, options: dict, unit: str, lines: str) -> dict:
    """Verdict of one unit; a malformed unit is `unknown` with `unreadable` saying why, because a
    malformed history must never yield valid or invalid."""
    if unit == CORRUPT:
        bad = lines.split(SEPARATOR)
        return {"verdict": "unknown",
                "unreadable": f"{len(bad)} unparseable line(s); one reads {bad[0][:120]!r}"}
    try:
        validator = Validator(f"unit {unit!r}", anonymous=False)
        ops = [validator.admit(op, op.index) for op in decode(lines)]
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
