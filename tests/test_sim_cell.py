"""The matrix's simulation cell (harness.sim_cell) and `tessera sim --fault`: the real simulator
on the real core, with and without a deliberate core bug, and how the matrix and the self-check
place and judge such cells."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

from harness.matrix import Cell, Outcome, run_matrix
from harness.matrix_cli import cells_from_args, configure
from harness.selfcheck import cells as selfcheck_cells
from harness.selfcheck import classify, flags_of
from harness.sim.cli import core_options_for
from harness.sim.cluster import Simulation
from harness.sim.steer import OFFSET
from harness.sim.swarm import bundle_of
from harness.sim_cell import FULL_KIND, KIND, run_cell, run_full_cell
from harness.spec import TestSpec

FIGURE_8 = "fault_commit_prior_term_by_count"


def test_correct_core_gives_a_valid_cell_with_its_seed_count(tmp_path):
    o = run_cell(Cell(KIND, KIND, ()), 2.0, 1, 0, {}, tmp_path / "sim")
    r = json.loads((tmp_path / "sim" / "results.json").read_text())
    assert o.verdict == r["verdict"] == "valid" and o.anomalies == []
    assert o.seeds == r["summary"]["seeds"] > 0 and r["summary"]["violations"] == 0
    assert o.ok_ops == 0  # the core simulator runs no client: seeds, not ops
    assert r["core_options"] == {} and not (tmp_path / "sim" / "replay.txt").exists()


def test_a_core_fault_flag_runs_in_the_simulated_cores_and_is_caught_with_a_replay(tmp_path):
    flags = {"unlock_unsafe_flags": True, FIGURE_8: True, "raft_heartbeat_interval_ms": 100}
    # From seed 30: the flag's first failing seed is 33, a few ms of simulation away, where
    # from seed 0 a machine loaded by the suite's other lanes could spend the 3 s before it
    o = run_cell(Cell(KIND, KIND, ()), 3.0, 1, 30, flags, tmp_path / "sim")
    assert o.verdict == "invalid", o
    assert {a["checker"] for a in o.anomalies} == {"sim"}
    for a in o.anomalies:  # the type is the invariant the explanation names
        assert a["type"] == a["explanation"].split(": ", 1)[1].split(":")[0].replace(" ", "-")
    r = json.loads((tmp_path / "sim" / "results.json").read_text())
    assert r["core_options"] == {"commit_prior_term_by_count": True} and r["faults"] == [FIGURE_8]
    first = r["anomalies"][0]
    assert f"--fault {FIGURE_8}" in first["replay"] and first["replay"] in o.why
    assert first["replay"] in (tmp_path / "sim" / "replay.txt").read_text()
    # the replay command's seed fails again, and only with the flag
    again = Simulation(first["seed"], core_options=core_options_for([FIGURE_8])).run()
    assert again.violation == first["explanation"].split(": ", 1)[1]
    assert Simulation(first["seed"]).run().violation is None


def test_sim_cli_refuses_flags_outside_the_core():
    p = subprocess.run([sys.executable, "-m", "harness.cli", "sim", "--seeds", "1", "--fault",
                        "fault_skip_dedup"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 254 and "outside the Raft core" in p.stderr
    assert core_options_for(["fault_vote_skip_log_check"]) == {"vote_skip_log_check": True}


def _args(*argv):
    p = argparse.ArgumentParser()
    configure(p)
    return p.parse_args(list(argv))


def test_default_matrix_starts_with_the_sim_cells_and_self_check_adds_sim_cells_for_core_flags():
    cells = cells_from_args(_args())
    assert cells[:2] == [Cell(KIND, KIND, (), max_time=20.0, overhead=1.0),
                         Cell(FULL_KIND, FULL_KIND, (), overhead=1.0, soak=True)]
    assert [c.name for c in cells].count(KIND) == 1 and len(cells) == 12
    register = cells_from_args(_args("--workloads", "register"))
    assert [c.name for c in register] == ["register/all", "register/raft@lease"]
    # the Raft group, copy-race among it, runs with lease reads; the classic group does not
    assert "copy-race" in register[1].nemesis and "copy-race" not in register[0].nemesis
    assert register[1].overrides == {"flags": {"read-mode": "lease"}} and register[0].overrides == {}
    spec = register[1].spec(TestSpec(flags={"x": 1}), 30.0, 7)
    assert spec.flags == {"x": 1, "read-mode": "lease"}
    plain = cells_from_args(_args("--workloads", "register", "--nemeses", "kill+copy-race"))
    assert [(c.name, c.nemesis, c.overrides) for c in plain] == [
        ("register/kill+copy-race", ("kill", "copy-race"), {})]
    names = [c.name for c in selfcheck_cells([FIGURE_8, "fault_skip_dedup"])]
    assert names == [FIGURE_8, f"{FIGURE_8}/sim", "fault_skip_dedup", "fault_skip_dedup/sim-full"]
    assert flags_of(selfcheck_cells([FIGURE_8, "fault_skip_dedup"])) == [FIGURE_8, "fault_skip_dedup"]
    # the core simulator does not check reads; the whole-stack one runs the client and checkers
    assert [c.name for c in selfcheck_cells(["fault_read_without_leadership"])] == [
        "fault_read_without_leadership", "fault_read_without_leadership/sim-full"]
    sim = selfcheck_cells([FIGURE_8])[1]
    assert sim.workload == KIND and sim.max_time and sim.overrides["flags"][FIGURE_8] is True


def test_a_cells_max_time_caps_its_limit_and_leaves_the_rest_to_the_others():
    t = [0.0]
    limits = {}

    def execute(cell, limit, attempt):
        limits[cell.name] = limit
        t[0] += limit + 1
        return Outcome(cell.name, attempt, "valid", limit, seconds=limit + 1)

    cells = [Cell("s", KIND, (), max_time=20.0, overhead=1.0), Cell("a", "register", ("kill",))]
    run_matrix(cells, 1, execute, 200.0, 0.0, clock=lambda: t[0], log=lambda m: None,
               default_overhead=10.0)
    assert limits["s"] == 20.0 and limits["a"] > 150


def test_a_flag_is_caught_in_an_attempt_when_any_of_its_cells_catches_it():
    sim = Outcome(f"{FIGURE_8}/sim", 1, "invalid",
                  anomalies=[{"checker": "sim", "type": "commit-durability", "explanation": "x"}])
    chaos = Outcome(FIGURE_8, 1, "valid")
    f = classify(FIGURE_8, [chaos, sim])
    assert (f.status, f.caught, f.runs, f.evidence) == ("caught", 1, 1, ["sim: commit-durability"])
    assert f"{FIGURE_8}: valid" in f.why  # the chaos run's miss is still reported
    second = classify(FIGURE_8, [chaos, sim, Outcome(FIGURE_8, 2, "valid"),
                                 Outcome(f"{FIGURE_8}/sim", 2, "valid")])
    assert (second.status, second.caught, second.runs) == ("flaky", 1, 2)


def test_whole_stack_cell_runs_seeds_until_its_limit_and_names_a_failing_seed(tmp_path):
    o = run_full_cell(Cell(FULL_KIND, FULL_KIND, ()), 4.0, 1, 100, {}, tmp_path / "ok")
    assert o.verdict == "valid" and o.seeds >= 1 and o.seconds < 60
    r = json.loads((tmp_path / "ok" / "results.json").read_text())
    assert r["seeds"] == o.seeds and r["ok_ops"] == o.ok_ops > 0 and r["anomalies"] == []
    assert all(row["seeds"] >= 1 and "missed" in row for row in r["bundles"].values())
    # a steered seed (harness.sim.steer) runs a bundle, numbered apart from the cell's own
    assert all(s >= 100 + OFFSET and bundle_of(s) for s in r["steered"]), r["steered"]
    # seed 100 with acknowledgement before fsync fails (tests/test_sim_stack.py)
    flags = {"unlock_unsafe_flags": True, "fault_ack_before_fsync": True}
    # 60 virtual seconds, as measured there, though the cell has 1 s: its first seed still counts
    bad = run_full_cell(Cell(FULL_KIND, FULL_KIND, (), {"seconds": 60.0}), 1.0, 1, 100, flags,
                        tmp_path / "bad")
    assert bad.verdict == "invalid", bad
    # the seed that failed first is named: 100, or 101 when the cell's second worker finished
    # it first (a loaded machine; seen in a clean-clone run)
    named = re.search(r"replay: tessera sim --stack full --seeds 1 --seed (\d+)", bad.why)
    assert named and int(named.group(1)) >= 100, bad.why
    assert "--fault fault_ack_before_fsync" in bad.why
    assert (tmp_path / "bad" / f"seed-{named.group(1)}" / "history.jsonl").exists()
