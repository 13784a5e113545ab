"""One module makes verdicts (reports.checkers.verdict): its rules, and that no other module of
the project merges checker results on its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from reports.checkers.verdict import (
    analysis_verdict,
    judge,
    merge_results,
    merge_verdicts,
    split_run_checks,
    with_run_checks,
)
from reports.history import Op

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("node", "harness", "nemeses", "workloads", "reports", "bench")
HOME = ROOT / "reports" / "checkers" / "verdict.py"


@pytest.mark.parametrize("verdicts, merged", [
    ([], "valid"), (["valid"], "valid"), (["valid", "unknown"], "unknown"),
    (["unknown", "invalid", "valid"], "invalid"), (["valid", "bogus"], "unknown"),
    (["bogus", "invalid"], "invalid"),
])
def test_invalid_beats_unknown_beats_valid_and_nothing_else_is_valid(verdicts, merged):
    assert merge_verdicts(verdicts) == merged


def test_an_advisory_check_that_cannot_decide_leaves_the_verdict_alone():
    sure = {"checker": "a", "verdict": "valid"}
    shy = {"checker": "b", "verdict": "unknown", "advisory": True}
    assert merge_results([sure, shy]) == "valid"
    assert merge_results([sure, {**shy, "verdict": "invalid"}]) == "invalid"  # it found something
    assert merge_results([sure, {**shy, "advisory": False}]) == "unknown"


def _history(*completions: tuple[str, str]) -> list[Op]:
    ops, t = [], 0
    for i, (f, kind) in enumerate(completions):
        ops.append(Op(process=i, type="invoke", f=f, value=None, time=t, index=2 * i))
        ops.append(Op(process=i, type=kind, f=f, value=None, time=t + 1, index=2 * i + 1))
        t += 2
    return ops


class _Checker:
    model = "stub"

    def __init__(self, verdict: str | Exception):
        self.verdict = verdict

    def check(self, ops, **overrides):
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return {"verdict": self.verdict, "results": [{"checker": "stub", "verdict": self.verdict}]}


def test_a_run_is_its_history_composed_with_its_other_checks_and_the_stats_checker():
    ops = _history(("read", "ok"), ("write", "ok"))
    assert judge(ops, _Checker("valid"))["verdict"] == "valid"
    logs = {"checker": "logs", "verdict": "invalid"}
    judged = judge(ops, _Checker("valid"), [logs])
    assert judged["verdict"] == "invalid" and judged["history_verdict"] == "valid"
    check, extra = split_run_checks(judged)  # what the report shows, in its two places
    assert check["verdict"] == "valid" and [r["checker"] for r in check["results"]] == ["stub"]
    assert extra == [{**logs, "scope": "run"}]


def test_no_progress_is_invalid_unless_the_faults_starve_the_run_by_design():
    ops = _history(("read", "ok"), ("write", "fail"))  # no write ever succeeded
    assert judge(ops, _Checker("valid"))["verdict"] == "invalid"
    starved = judge(ops, _Checker("valid"), starvation_by_design=True)
    assert starved["verdict"] == "valid" and starved["unavailable"] == ["write"]
    # a check that found something stays invalid whatever the design
    assert judge(ops, _Checker("invalid"), starvation_by_design=True)["verdict"] == "invalid"


def test_a_checker_that_crashes_makes_the_run_unknown_with_the_reason():
    judged = judge(_history(("read", "ok")), _Checker(ValueError("bad history")))
    assert judged["verdict"] == "unknown"
    assert judged["check"]["error"] == "ValueError: bad history"


def test_a_run_that_cannot_be_judged_is_unknown_whatever_its_checks_say():
    check = with_run_checks({"verdict": "valid", "results": []}, [])
    st = {"verdict": "valid"}
    assert analysis_verdict(check, st, None) == "valid"
    assert analysis_verdict(check, st, "the test did not complete (crashed)") == "unknown"
    assert analysis_verdict(check, None, None) == "unknown"  # no history, no stats


# --- nobody else merges -------------------------------------------------------------------


def merges_outside(root: Path = ROOT, home: Path = HOME) -> list[str]:
    """Where a module other than the verdict module merges verdicts itself: a test like
    `"invalid" in verdicts` (the heart of every merge), or a function of its own named like
    one of the verdict module's merges. (`judge` is not among them: each checker judges its
    own history from its own anomalies, which is no merge.)"""
    own = {n.name for n in ast.parse(home.read_text()).body
           if isinstance(n, ast.FunctionDef) and n.name != "judge"}
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path == home:
                continue
            where = path.relative_to(root)
            for n in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(n, ast.Compare) and isinstance(n.left, ast.Constant)
                        and n.left.value in ("invalid", "unknown")
                        and any(isinstance(op, ast.In | ast.NotIn) for op in n.ops)):
                    found.append(f"{where}:{n.lineno}: tests {n.left.value!r} in a collection")
                elif isinstance(n, ast.FunctionDef) and n.name in own:
                    found.append(f"{where}:{n.lineno}: defines {n.name}")
    return found


def test_no_other_module_merges_checker_results():
    found = merges_outside()
    assert not found, "\n".join(found)


def test_a_planted_merge_is_found(tmp_path):
    home = tmp_path / "reports" / "checkers" / "verdict.py"
    home.parent.mkdir(parents=True)
    home.write_text("def merge_verdicts(vs):\n    return 'invalid' if 'invalid' in vs else 'valid'\n")
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "cell.py").write_text(
        "def verdict(rs):\n    return 'invalid' if 'invalid' in {r.v for r in rs} else 'valid'\n")
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "judge.py").write_text("def merge_verdicts(a):\n    return a\n")
    assert merges_outside(tmp_path, home) == [
        "node/judge.py:1: defines merge_verdicts",
        "harness/cell.py:2: tests 'invalid' in a collection",
    ]
