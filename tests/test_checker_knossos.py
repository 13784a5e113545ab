"""Every Knossos reference history gets its known verdict (see shared/data/knossos/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.checkers.linearizability import check
from reports.checkers.models import CASRegister, MultiRegister, Mutex
from reports.history import read_history

KNOSSOS = Path(__file__).parents[2] / "shared/data/knossos"
FILES = sorted(KNOSSOS.rglob("*.edn"))
MODELS = {
    "cas-register": CASRegister,
    "mutex": Mutex,
    "multi-register": lambda: MultiRegister({"x": 0, "y": 0}),  # the README's initial x=0 y=0
}


def test_reference_histories_are_present():
    # CI always has the Knossos corpus beside the repo; a missing corpus must fail, never skip.
    assert KNOSSOS.is_dir(), f"knossos reference histories missing at {KNOSSOS}"
    assert len(FILES) == 122  # the README's folders hold 122 .edn histories (plus one .html timeline)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(KNOSSOS)))
def test_known_verdict(path):
    model_dir, verdict_dir = path.relative_to(KNOSSOS).parts[:2]
    expected = {"good": "valid", "bad": "invalid"}[verdict_dir]
    result = check(read_history(path), MODELS[model_dir](), time_limit=60)
    assert result["verdict"] == expected
    if expected == "invalid":
        cx = result["keys"][0]["counterexample"]
        assert cx["paths"] and "blocked_op" in cx["paths"][0]
