"""The self-check's whole-stack simulation cells (harness.selfcheck.SIM_FULL_RECIPES): each
driver-level fault flag the whole-stack simulator catches gets a sim-full cell with the flag on,
long enough for the seeds tests/test_sim_stack.py measured, and a catch there counts."""

from __future__ import annotations

from dataclasses import fields

from harness.matrix import Outcome
from harness.selfcheck import (
    RECIPES,
    SIM_FULL_RECIPES,
    SIM_FULL_TIME_S,
    cells,
    classify,
    evidence,
    flags_of,
)
from harness.sim_cell import FULL_KIND
from node.faults import Faults
from tests.test_sim_stack import MUTANT_SEED_CAP, MUTANTS


def test_every_mutant_the_stack_catches_has_a_sim_full_recipe():
    assert set(SIM_FULL_RECIPES) == set(MUTANTS)
    assert set(SIM_FULL_RECIPES) <= {f.name for f in fields(Faults)} & set(RECIPES)
    # the measured cap of seeds fits the cell's time on 2 cores at 2.5 s of one core a seed
    assert SIM_FULL_TIME_S >= MUTANT_SEED_CAP * 2.5 / 2


def test_each_recipe_flag_gets_a_sim_full_cell_with_the_flag_on():
    for flag in SIM_FULL_RECIPES:
        mine = cells([flag])
        full = [c for c in mine if c.workload == FULL_KIND]
        assert [c.name for c in full] == [f"{flag}/{FULL_KIND}"]
        cell = full[0]
        assert cell.overrides["flags"] == {"unlock_unsafe_flags": True, flag: True}
        assert cell.max_time == SIM_FULL_TIME_S and cell.nemesis == ()
        assert mine[0] is RECIPES[flag][0]  # the chaos recipe still comes first
        assert flags_of(mine) == [flag]
    core_only = "fault_commit_prior_term_by_count"
    assert all(c.workload != FULL_KIND for c in cells([core_only]))


def test_a_sim_full_catch_counts_and_a_sim_full_miss_is_reported():
    flag = "fault_skip_dedup"
    chaos = Outcome(flag, 1, "valid")
    full = Outcome(f"{flag}/{FULL_KIND}", 1, "invalid", anomalies=[
        {"checker": "sim-full", "type": "invalid", "explanation": "seed 103: invalid"}])
    assert evidence(full) == ["sim-full: invalid"]
    found = classify(flag, [chaos, full])
    assert (found.status, found.caught, found.runs) == ("caught", 1, 1)
    missed = classify(flag, [chaos, Outcome(f"{flag}/{FULL_KIND}", 1, "unknown",
                                            why="1 of 40 seeds failed: seed 7: unknown")])
    assert missed.status == "missed" and f"{flag}/{FULL_KIND}: unknown" in missed.why
