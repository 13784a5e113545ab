"""Whether the faults a run asked for were in force: a run-level check read from the nemesis's
ops in the history.

A run is only as strong as the faults it ran. A start that raised (a helper missing on a host,
an SSH channel gone) or whose check on the hosts found it not in force (`nemeses.observe`: a
cut pair that still connects, a "paused" process still running) means the history was made
under less than the run says; so such a run is `unknown`, never `valid`, and the check names
each such start; so is a disk fault whose damaged replica's state could not be read (nobody
judged how the system took the damage). A stop or heal that raised is a note: it leaves a fault
in force longer than planned, which is more fault, not less, and the history records it. A
check that could not be made (nobody answered it) counts as unchecked, never as verified. A package the run asked for that never fired (every
start skipped, e.g. no tablet had a leader to isolate) is named in `never_fired`, a note that
leaves the verdict alone: nothing false was claimed, and the report's first screen shows it.

Pure: `check_faults(ops, configured)` reads ops and returns the check's result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from reports.history import NEMESIS, Op

ACTIONS = ("start", "stop", "heal")


def check_faults(ops: Iterable[Op], configured: list[str]) -> dict[str, Any]:
    """{"checker": "faults", "verdict", "starts": counts by outcome, "by_fault": outcome counts
    per package, "errors": one per failed or unverified start and failed stop or heal,
    "never_fired": packages asked for that never fired}."""
    outcomes: Counter[str] = Counter()
    by_fault: dict[str, Counter[str]] = {}
    errors: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    opened: set[str] = set()
    for op in ops:
        if op.process != NEMESIS or not isinstance(op.f, str) or "-" not in op.f:
            continue
        action, fault = op.f.split("-", 1)
        if action not in ACTIONS:
            continue
        if op.f not in opened:  # the invoke; its completion follows
            opened.add(op.f)
            continue
        opened.discard(op.f)
        at = f"{op.f} at {op.time / 1e9:.1f} s" if op.time is not None else op.f
        if op.error is not None and action != "start":
            # a fault left in force longer than planned: more fault, not less, and the
            # history says so; a note, not a reason to doubt the verdict
            notes.append({"type": "heal-failed", "fault": fault,
                          "explanation": f"{at} failed: {op.error}"})
            continue
        if op.error is not None:
            errors.append({"type": "fault-failed", "fault": fault,
                           "explanation": f"{at} failed: {op.error}"})
            outcome = "failed"
        elif action != "start":
            continue
        else:
            outcome = _start_outcome(op.value)
            replica = op.value.get("replica") if isinstance(op.value, dict) else None
            if isinstance(replica, dict) and replica.get("state") == "UNKNOWN":
                errors.append({"type": "damage-outcome-unknown", "fault": fault,
                               "explanation": f"{at}: how the system took the damage to "
                                              f"{op.value.get('file')} was never read: "
                                              f"{replica.get('error')}"})
            if outcome == "unverified":
                seen = {k: v for k, v in op.value["observed"].items() if k != "ok"}
                errors.append({"type": "fault-not-in-force", "fault": fault,
                               "explanation": f"{at}: not in force when checked on the hosts: "
                                              f"{_short(seen)}"})
        if action == "start":
            outcomes[outcome] += 1
            by_fault.setdefault(fault, Counter())[outcome] += 1
    fired = {f for f, c in by_fault.items() if c["verified"] + c["unverified"] + c["unchecked"]}
    never = sorted(set(configured) - fired)
    return {"checker": "faults", "verdict": "unknown" if errors else "valid",
            "starts": {k: outcomes[k] for k in ("verified", "unverified", "unchecked", "failed",
                                                "skipped")},
            "by_fault": {f: dict(c) for f, c in sorted(by_fault.items())},
            "errors": errors, "notes": notes, "never_fired": never}


def check_fault_findings(ops: Iterable[Op]) -> dict[str, Any] | None:
    """What faults judged on the hosts when they stopped: a stop's `found`, each a promise the
    system broke under that fault that no history shows (server-cut: a member its leader
    could not reach, never replaced). None when no stop judged anything (a run-level check
    that did not run is left out, not passed); else invalid with one error per finding."""
    judged, errors = 0, []
    for op in ops:
        if (op.process != NEMESIS or not isinstance(op.f, str) or not op.f.startswith("stop-")
                or not isinstance(op.value, dict) or "found" not in op.value):
            continue
        judged += 1
        fault = op.f.split("-", 1)[1]
        at = f"{op.f} at {op.time / 1e9:.1f} s" if op.time is not None else op.f
        errors += [{"type": "fault-finding", "fault": fault, "explanation": f"{at}: {found}"}
                   for found in op.value["found"]]
    if not judged:
        return None
    return {"checker": "fault-findings", "verdict": "invalid" if errors else "valid",
            "judged": judged, "errors": errors}


def _start_outcome(value: object) -> str:
    """verified (seen in force), unverified (seen not in force), unchecked (the fault has no
    check on the hosts), skipped (it did nothing, and said so)."""
    if not isinstance(value, dict):
        return "unchecked"
    if "skipped" in value:
        return "skipped"
    observed = value.get("observed")
    if not isinstance(observed, dict) or observed.get("ok") is None:
        return "unchecked"  # no check, or one that could not be made (nobody answered)
    return "verified" if observed["ok"] else "unverified"


def _short(seen: dict[Any, Any], limit: int = 300) -> str:
    text = ", ".join(f"{k} {v}" for k, v in seen.items())
    return text if len(text) <= limit else text[:limit] + "..."
