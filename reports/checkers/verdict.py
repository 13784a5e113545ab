"""How verdicts are made: the one place that turns checker results into a verdict.

Every command that judges (`tessera test`, `tessera check`, the matrix and its simulator cells,
`tessera replay`, the whole-stack simulator, `tessera analyze`) goes through these functions,
so a run gets the same verdict whoever judges it. The rules are Jepsen's:

- **merge**: invalid beats unknown beats valid (`merge_verdicts`); a verdict nobody recognises
  is unknown, never valid, since a string no checker should write proves nothing;
- **one history**: the results of the checkers run over it, except that an advisory check
  (one that only says more when it can) never makes the history unknown (`merge_results`);
- **one run**: the history's check composed with the run's other checks (convergence, the
  masters' agreement, the node logs, whether the faults were in force: `with_run_checks`) and
  with Jepsen's stats checker, so a run in which some kind of op never succeeded is invalid
  (`run_verdict`);
- **a run that cannot be judged** (the harness did not finish it, its record is unreadable)
  is unknown whatever its partial history shows (`analysis_verdict`).

`judge` does the whole of a run's judgement from its history, as results.json holds it, and
`split_run_checks` takes it apart again for the report, which shows the history's own checks
and the run's other checks in two places.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol

from reports.checkers.stats import stats
from reports.history import NEMESIS, Op

VERDICTS = ("valid", "invalid", "unknown")


class HistoryChecker(Protocol):
    """What `judge` needs of a workload's checker (workloads.base.Checker implements it)."""

    model: str

    def check(self, ops: list[Op], **overrides: Any) -> dict[str, Any]: ...


def merge_verdicts(verdicts: Iterable[str]) -> str:
    """Jepsen's merge: any invalid makes the whole invalid; else any unknown, or any verdict
    that is not one of VERDICTS, makes it unknown; else (all valid, or none) valid."""
    vs = set(verdicts)
    if "invalid" in vs:
        return "invalid"
    return "unknown" if vs - {"valid"} else "valid"


def merge_results(results: Iterable[dict[str, Any]]) -> str:
    """One history's verdict from its checkers' results. An advisory result that could not
    decide is left out: it adds evidence when it can, and its silence is not doubt."""
    return merge_verdicts(r["verdict"] for r in results
                          if not (r.get("advisory") and r["verdict"] == "unknown"))


def with_run_checks(check: dict[str, Any], extra: list[dict[str, Any]]) -> dict[str, Any]:
    """The history's check result with the run's other checks (replica convergence, node logs)
    among its results, marked as checks of the whole run (scope "run"), and in its verdict."""
    return {**check,
            "results": list(check.get("results", [])) + [{**r, "scope": "run"} for r in extra],
            "verdict": merge_verdicts([check["verdict"], *(r["verdict"] for r in extra)])}


def run_verdict(check: dict[str, Any], st: dict[str, Any] | None) -> str:
    """The checks' verdict composed with the stats checker's, as Jepsen's `compose` does: a run
    in which some f never succeeded is invalid, since a workload that made no progress proves
    nothing. No stats at all (no history) is unknown."""
    return merge_verdicts([check["verdict"], st["verdict"] if st else "unknown"])


def analysis_verdict(check: dict[str, Any], st: dict[str, Any] | None, problem: str | None) -> str:
    """`run_verdict`, unless `problem` says why the run cannot be judged: then unknown."""
    return "unknown" if problem else run_verdict(check, st)


def judge(ops: list[Op], checker: HistoryChecker, extra: Iterable[dict[str, Any]] = (),
          starvation_by_design: bool = False, **overrides: Any) -> dict[str, Any]:
    """A history's verdict: the workload's checker composed with `extra` checks and the stats
    checker, as results.json holds it. A history the checker cannot read is unknown with the
    reason, never a verdict either way.

    `starvation_by_design`: the run's faults may keep the cluster unavailable for all of it on
    purpose (a simulator's swarm mix: a power loss every 0.2 s), and availability is judged
    after the heal instead; then a run whose checks all passed but in which some f never
    succeeded is valid, the starved fs kept as `unavailable`. Chaos runs keep Jepsen's rule."""
    client_ops = [o for o in ops if o.process != NEMESIS]
    counts = Counter(f"{o.f}:{o.type}" for o in client_ops if o.type != "invoke")
    try:
        check = checker.check(client_ops, **overrides)
    except Exception as e:
        check = {"verdict": "unknown", "results": [], "error": f"{type(e).__name__}: {e}"}
    history_verdict = check["verdict"]
    check = with_run_checks(check, list(extra))
    st = stats(client_ops)
    judged = {"verdict": run_verdict(check, st), "checker": checker.model, "check": check,
              "history_verdict": history_verdict,
              "stats": {k: st[k] for k in ("verdict", "never_ok", "counts")},
              "counts": dict(counts)}
    if starvation_by_design and judged["verdict"] == "invalid" and check["verdict"] == "valid":
        judged["verdict"], judged["unavailable"] = "valid", st["never_ok"]
    return judged


def split_run_checks(results: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`judge`'s check split back into the history's own and the run's other checks (the ones
    `with_run_checks` marked with scope "run"), for the report."""
    check = results["check"]
    own = [r for r in check.get("results", []) if r.get("scope") != "run"]
    extra = [r for r in check.get("results", []) if r.get("scope") == "run"]
    return {**check, "model": results.get("checker"), "results": own,
            "verdict": results.get("history_verdict", check["verdict"])}, extra
