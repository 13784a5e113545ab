"""The masters' check at the end of a run: once the faults are healed, the masters the harness
left running must answer, agree on one leader, and each hold exactly themselves as the masters'
config. A master removed during the run (the master-membership nemesis) still in a config, or a
member some master never learnt of, is a membership bug the history alone cannot show. The
harness polls (harness.systems.tessera.masters_check); this module holds the rules."""

from __future__ import annotations

from typing import Any


def compare(hosts: list[str], infos: dict[str, Any]) -> dict[str, Any]:
    """`hosts`: where the harness runs masters; `infos`: host -> its MasterInfo, for those that
    answered. Valid; invalid (they disagree); unknown (not all answered, or no leader yet)."""
    rows: dict[str, dict[str, Any]] = {h: {"answered": False} for h in sorted(hosts) if h not in infos}
    for h in sorted(infos):
        i = infos[h]
        rows[h] = {"uuid": i.uuid, "role": i.role, "term": i.term, "leader": i.leader,
                   "config": sorted(i.members)}
    result: dict[str, Any] = {"checker": "masters", "masters": dict(sorted(rows.items())), "errors": []}
    missing = sorted(set(hosts) - set(infos))
    if missing:
        return {**result, "verdict": "unknown", "reason": f"masters on {missing} did not answer"}
    want = {i.uuid for i in infos.values()}
    for h, r in sorted(rows.items()):
        extra, lacking = sorted(set(r["config"]) - want), sorted(want - set(r["config"]))
        if extra or lacking:
            why = "; ".join(x for x in (f"{extra} are not running masters" if extra else "",
                                        f"it lacks {lacking}" if lacking else "") if x)
            result["errors"].append({"type": "masters-config", "host": h, "config": r["config"],
                                     "explanation": f"the master on {h} holds the masters' "
                                                    f"config {r['config']}: {why}"})
    leaders = sorted({r["leader"] for r in rows.values() if r["leader"]})
    if len(leaders) > 1:
        result["errors"].append({"type": "masters-leader", "leaders": leaders,
                                 "explanation": f"the masters name different leaders: {leaders}"})
    if result["errors"]:
        return {**result, "verdict": "invalid"}
    if not leaders:
        return {**result, "verdict": "unknown", "reason": "no master knows a leader"}
    return {**result, "verdict": "valid"}
