"""`tessera test-all`: the budget split, the summary and its exit code, and the self-check's
classification, on a fake runner and clock; then one short real matrix on the netns cluster."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import msgspec
import pytest
from netns_run import tessera

from harness.matrix import (
    NOT_RUN,
    SOAK_MARGIN_S,
    Cell,
    Outcome,
    earlier_overheads,
    exit_code,
    outcome_from_run,
    overhead_estimate,
    probe_yields,
    run_matrix,
    summary,
    table,
    time_limit_for,
    weights_for,
)
from harness.matrix_cli import base_spec, cells_from_args, configure, earlier_matrices, run
from harness.selfcheck import RECIPES, classify
from harness.selfcheck import exit_code as selfcheck_exit
from harness.spec import FAST_FAILURE_DETECTION, TestSpec
from node.faults import Faults


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def fake_runner(clock: FakeClock, overhead: float, verdicts: dict[str, str] | None = None):
    """Each run takes its time limit plus `overhead` seconds of the fake clock."""
    calls = []

    def execute(cell: Cell, limit: float, attempt: int) -> Outcome:
        calls.append((cell.name, limit, attempt))
        clock.t += limit + overhead
        return Outcome(cell.name, attempt, (verdicts or {}).get(cell.name, "valid"), limit,
                       f"store/x/{len(calls)}", ok_ops=10, seconds=limit + overhead)

    return execute, calls


CELLS = [Cell(f"c{i}", "register", ("kill",)) for i in range(4)]


def test_time_limit_shares_what_is_left_after_the_overheads():
    assert time_limit_for(300, [40, 40, 40, 40]) == 35.0
    assert time_limit_for(300, [60, 20, 20, 20]) == 45.0  # the same share, whatever its overhead
    assert time_limit_for(100, [40, 40, 40, 40]) == 10.0  # share negative, but min + overhead fits
    assert time_limit_for(49, [40, 40, 40, 40]) is None


def test_time_above_the_minimums_goes_by_weight_and_equal_weights_are_the_even_split():
    assert time_limit_for(300, [40] * 4, weights=[1, 1, 1, 1]) == 35.0
    # 300 - 160 overhead - 40 of minimums = 100 free: 3/5 of it to the first
    assert time_limit_for(300, [40] * 4, weights=[3, 1, 0.5, 0.5]) == 70.0
    assert time_limit_for(300, [40] * 4, weights=[0.5, 3, 1, 0.5]) == 20.0
    assert time_limit_for(100, [40] * 4, weights=[9, 1, 1, 1]) == 10.0  # no free time: the min


def _run(cell: str, limit: float, probes: list[str], verdict: str = "valid",
         seconds: float | None = None) -> dict:
    return {"cell": cell, "time_limit": limit, "probes": probes, "verdict": verdict,
            "seconds": seconds if seconds is not None else limit}


def test_probe_yield_counts_what_no_other_cell_reached_per_second_from_the_newest_matrix():
    newest = {"runs": [_run("sim-full", 20, ["a", "b", "c"]),
                       _run("register", 5, ["a", "d"], seconds=10),  # per second it costs
                       _run("set", 10, ["a"]), _run("bank", 0, [], NOT_RUN)]}
    older = {"runs": [_run("sim-full", 10, ["x"]), _run("bank", 10, ["a", "y", "z"]),
                      _run("list-append", 10, ["a"])]}
    assert probe_yields([newest, older]) == {
        "sim-full": 0.15,  # b, c of its own, + 1, over 20 s
        "register": 0.2, "set": 0.1,  # d; nothing of its own: (0 + 1) / 10
        "bank": 0.3, "list-append": 0.1}  # not run in the newest: from the older one
    cells = [Cell("sim-full", "sim-full", ()), Cell("new", "register", ("kill",))]
    assert weights_for(cells, {"sim-full": 0.3}) == {"sim-full": 0.3, "new": 0.3}
    assert weights_for(cells, {}) == {"sim-full": 1.0, "new": 1.0}


def test_earlier_yields_read_the_store_skipping_this_run_other_dbs_and_broken_files(tmp_path):
    def put(name: str, summary) -> None:
        d = tmp_path / "test-all" / name
        d.mkdir(parents=True)
        (d / "summary.json").write_text(summary if isinstance(summary, str)
                                        else json.dumps(summary))

    put("20260101T000000", {"mode": "matrix", "db": "tessera",
                            "runs": [_run("sim", 10, ["a", "b"]), _run("set", 10, [])]})
    put("20260102T000000", {"mode": "self-check", "db": "tessera",
                            "runs": [_run("sim", 10, [])]})
    put("20260103T000000", {"mode": "matrix", "db": "etcd", "runs": [_run("sim", 10, [])]})
    put("20260104T000000", "{not json")
    put("20260105T000000", {"mode": "matrix", "db": "tessera", "runs": [_run("sim", 1, [])]})
    this = tmp_path / "test-all" / "20260105T000000"
    earlier = earlier_matrices(tmp_path, "tessera", this)
    assert probe_yields(earlier) == {"sim": 0.3, "set": 0.1}
    assert earlier_matrices(tmp_path / "none", "tessera", this) == []


def test_earlier_overheads_come_from_the_newest_run_not_a_matrix_first_unless_alone():
    newest = {"runs": [_run("sim", 10, [], seconds=12), _run("register", 10, [], seconds=70),
                       _run("set", 10, [], NOT_RUN)]}
    older = {"runs": [_run("set", 10, [], seconds=95), _run("bank", 10, [], seconds=50),
                      _run("register", 10, [], seconds=30)]}
    # sim ran first only (it installed nothing, but nothing else measured it)
    assert earlier_overheads([newest, older]) == {"sim": 2.0, "register": 60.0, "set": 85.0,
                                                  "bank": 40.0}
    cell = Cell("register", "register", ("all",))
    assert overhead_estimate(cell, [], 20, {"register": 60.0}) == 60.0
    assert overhead_estimate(cell, [(cell, Outcome("register", 1, "valid", 10, seconds=15)),
                                    (cell, Outcome("register", 2, "valid", 10, seconds=25))],
                             20, {"register": 60.0}) == 15.0  # measured here: that counts


def test_overhead_is_estimated_from_runs_with_the_same_faults():
    lazy, raft = Cell("a", "register", ("all",)), Cell("b", "register", ("raft",))
    first = (lazy, Outcome("a", 1, "valid", 10, seconds=80))  # installed the wheels: 70 s
    assert overhead_estimate(lazy, [], 40) == 40
    assert overhead_estimate(lazy, [first], 40) == 70
    assert overhead_estimate(raft, [first], 40) == 40
    done = [first, (raft, Outcome("b", 1, "valid", 10, seconds=15)),
            (lazy, Outcome("a", 2, "valid", 10, seconds=45)),
            (lazy, Outcome("a", 3, "invalid", 10, seconds=42)), (lazy, Outcome("a", 4, NOT_RUN))]
    assert overhead_estimate(lazy, done, 40) == 35  # the first run's install no longer counts
    assert overhead_estimate(raft, done, 40) == 5


@pytest.mark.parametrize("weights", [None, {"c0": 0.1, "c1": 5.0, "c2": 0.1, "c3": 1.0}])
@pytest.mark.parametrize("budget,overhead", [(300, 30), (300, 50), (120, 20), (1000, 10)])
def test_matrix_never_exceeds_its_budget_when_the_overhead_is_as_estimated(budget, overhead,
                                                                           weights):
    clock = FakeClock()
    execute, calls = fake_runner(clock, overhead)
    out = run_matrix(CELLS, 2, execute, budget, 0.0, clock, log=lambda _: None,
                     default_overhead=overhead, weights=weights)
    assert clock.t <= budget
    if weights:  # highest yield first
        assert [c for c, _, _ in calls][:2] == ["c1", "c3"]
    if weights and budget == 1000:  # room for all: the high-yield cell's runs get the most
        limits = {c: limit for c, limit, _ in calls}
        assert limits["c1"] > limits["c3"] > limits["c0"] >= 10
    assert len(out) == 8 and all(limit >= 10 for _, limit, _ in calls)
    ran = [o for o in out if o.verdict != NOT_RUN]
    assert [o.verdict for o in out] == ["valid"] * len(ran) + [NOT_RUN] * (8 - len(ran))
    # round-robin: every cell runs once before any runs twice
    first = [c for c, _, _ in calls][:4]
    assert len(set(first)) == len(first)
    if not weights:  # in the declared order
        assert first == ["c0", "c1", "c2", "c3"][: len(calls)]


def test_an_underestimated_overhead_overshoots_by_at_most_one_runs_error():
    clock = FakeClock()
    execute, calls = fake_runner(clock, 60)
    run_matrix(CELLS, 1, execute, 300, 0.0, clock, log=lambda _: None, default_overhead=30)
    assert calls[0][1] == 45.0  # 300 / 4 - 30
    assert clock.t <= 300 + (60 - 30)


def test_each_run_gets_the_same_share_whatever_its_cells_overhead():
    clock = FakeClock()
    calls = []

    def execute(cell: Cell, limit: float, attempt: int) -> Outcome:
        overhead = 50 if cell.nemesis == ("all",) else 10
        calls.append(limit)
        clock.t += limit + overhead
        return Outcome(cell.name, attempt, "valid", limit, seconds=limit + overhead)

    cells = [Cell(f"{w}/{n}", w, (n,)) for w in ("register", "set", "bank") for n in ("all", "raft")]
    out = run_matrix(cells, 1, execute, 400, 0.0, clock, log=lambda _: None, default_overhead=50)
    assert all(o.verdict == "valid" for o in out) and clock.t <= 400
    assert max(calls[2:]) - min(calls[2:]) < 1  # once both kinds were measured
    assert clock.t > 400 - 10  # and the budget is used, not left idle


def test_a_soaking_cell_runs_once_beside_the_others_for_the_whole_budget_and_takes_no_share():
    """Cell.soak (the whole-stack simulator in a matrix): started first, on its own thread, for
    the budget less SOAK_MARGIN_S, once whatever --test-count says; the other runs split the
    budget as if it were not there, and its outcome comes last."""
    clock = FakeClock()
    execute, calls = fake_runner(clock, 30)
    soaked = []

    def run(cell: Cell, limit: float, attempt: int) -> Outcome:
        if not cell.soak:
            return execute(cell, limit, attempt)
        soaked.append((limit, attempt))
        return Outcome(cell.name, attempt, "valid", limit, ok_ops=123)

    cells = [*CELLS[:2], Cell("sim-full", "sim-full", (), soak=True)]
    lines = []
    out = run_matrix(cells, 2, run, 300, 0.0, clock, log=lines.append, default_overhead=30)
    assert soaked == [(300 - SOAK_MARGIN_S, 1)]
    assert calls[0][1] == 300 / 4 - 30  # four runs of two cells share the budget, as without it
    assert [o.cell for o in out] == ["c0", "c1", "c0", "c1", "sim-full"] and out[-1].ok_ops == 123
    assert any("soaking the CPU" in line for line in lines)


@pytest.mark.slow
def test_the_soaking_simulator_runs_in_a_process_of_its_own_at_idle_priority(tmp_path):
    """harness.sim_cell.run_idle: real seeds of the whole-stack simulator, run by a spawned
    process at SCHED_IDLE, their outcome handed back."""
    from harness.sim_cell import FULL_KIND, run_idle

    cell = Cell(FULL_KIND, FULL_KIND, (), {"seconds": 2.0}, soak=True)  # short seeds
    o = run_idle(cell, 4.0, 1, 7, {}, tmp_path / "soak")
    assert o.verdict == "valid" and o.seeds >= 1, (o.verdict, o.why)  # a seed always finishes
    assert (tmp_path / "soak" / "results.json").exists()


def test_cells_that_cannot_fit_are_not_run_and_say_why():
    clock = FakeClock()
    clock.t = 250.0  # cluster start-up ate most of the budget
    execute, calls = fake_runner(clock, 30)
    lines = []
    out = run_matrix(CELLS, 1, execute, 300, 0.0, clock, log=lines.append, default_overhead=30)
    assert len(calls) == 1 and calls[0][1] == 10.0
    assert [o.verdict for o in out] == ["valid", NOT_RUN, NOT_RUN, NOT_RUN]
    assert "budget left" in out[1].why and any("not run" in line for line in lines)
    assert exit_code(out) == 2  # never reported as passed


@pytest.mark.parametrize("verdicts,code", [
    (["valid", "valid"], 0), (["valid", "invalid", "unknown"], 1), (["valid", "unknown"], 2),
    (["valid", NOT_RUN], 2), (["invalid", NOT_RUN], 1)])
def test_exit_code(verdicts, code):
    assert exit_code([Outcome("c", 1, v) for v in verdicts]) == code


def results(verdict: str, found: list[dict], counts: dict | None = None) -> dict:
    """A results.json as harness.chaos writes it."""
    return {"verdict": verdict, "counts": counts or {"read:ok": 5, "write:ok": 3, "write:fail": 2},
            "check": {"verdict": verdict, "results": [
                {"checker": c, "verdict": "invalid", "anomalies": [a]} for c, a in found]},
            "stats": {"verdict": "valid", "never_ok": [], "counts": {}}}


def test_outcome_reads_verdict_ok_ops_and_the_failing_checker():
    cell = Cell("set/all", "set", ("kill",))
    o = outcome_from_run(cell, 1, 20.0, "store/set/1", results("invalid", [
        ("set", {"type": "lost", "explanation": "3 acknowledged adds\nnever read"}),
        ("convergence", {"type": "divergent", "explanation": "n1 and n2 differ"})]), 31.0)
    assert (o.verdict, o.ok_ops, o.overhead) == ("invalid", 8, 11.0)
    assert o.why == "set: lost; convergence: divergent — 3 acknowledged adds never read"
    crashed = outcome_from_run(cell, 1, 20.0, "store/set/2", None, 5.0, "ClusterError: ssh")
    assert crashed.verdict == "unknown" and crashed.why == "crashed: ClusterError: ssh"


def test_table_and_summary_name_every_run_and_its_limit():
    out = [Outcome("register/all", 1, "valid", 35.0, "store/register/1", 900, 70.0),
           Outcome("set/raft", 1, "invalid", 35.0, "store/set/1", 500, 70.0, why="set: lost"),
           Outcome("bank/all", 1, NOT_RUN, why="no time")]
    text = table(out).splitlines()
    assert len(text) == 4 and "35s" in text[1] and "set: lost" in text[2] and NOT_RUN in text[3]
    s = summary(out, 300, 290.5, exit_code(out), mode="matrix")
    assert s["counts"] == {"valid": 1, "invalid": 1, "unknown": 0, NOT_RUN: 1}
    assert s["exit"] == 1 and s["runs"][2]["verdict"] == NOT_RUN and s["mode"] == "matrix"
    json.dumps(s)


def test_cell_spec_sets_the_run_and_merges_flags():
    base = TestSpec(flags={"log_force_fsync_all": True}, wheelhouse="w", rate=100.0)
    plain = Cell("register/kill", "register", ("kill",)).spec(base, 40.0, 7)
    assert (plain.workload, plain.nemesis, plain.time_limit, plain.seed) == ("register", ["kill"], 40.0, 7)
    assert plain.nemesis_interval == 10.0 and plain.wheelhouse == "w"
    assert Cell("c", "set", ()).spec(base, 14.0, 1).nemesis_interval == 3.5
    recipe = RECIPES["fault_skip_dedup"][0].spec(base, 60.0, 1)
    assert recipe.flags == {"log_force_fsync_all": True, "unlock_unsafe_flags": True,
                            "fault_skip_dedup": True}
    assert recipe.rate == RECIPES["fault_skip_dedup"][0].overrides["rate"]


def test_every_fault_flag_has_a_recipe_that_turns_it_on():
    assert set(RECIPES) == {f for f in Faults.__dataclass_fields__}
    for flag, (cell, why) in RECIPES.items():
        assert cell.name == flag and cell.overrides["flags"][flag] is True and why


def anomaly(checker, type_):
    return {"checker": checker, "type": type_, "explanation": ""}


def test_self_check_counts_only_consistency_and_safety_anomalies():
    flag = "fault_skip_dedup"
    dup = Outcome(flag, 1, "invalid", anomalies=[anomaly("set", "duplicated"),
                                                  anomaly("stats", "never-ok")])
    stats_only = Outcome(flag, 2, "invalid", anomalies=[anomaly("stats", "never-ok")], why="stats")
    no_start = Outcome(flag, 3, "invalid", anomalies=[anomaly("logs", "start-failure")])
    valid = Outcome(flag, 4, "valid")
    assert classify(flag, [dup]).status == "caught"
    assert classify(flag, [dup]).evidence == ["set: duplicated"]
    for miss in (stats_only, no_start, valid, Outcome(flag, 1, "unknown")):
        assert classify(flag, [miss]).status == "missed"
    mixed = classify(flag, [dup, valid, Outcome("other", 1, "invalid", anomalies=[anomaly("set", "lost")])])
    assert (mixed.status, mixed.caught, mixed.runs) == ("flaky", 1, 2)
    assert classify(flag, [Outcome(flag, 1, NOT_RUN)]).status == NOT_RUN


def test_self_check_exits_zero_only_when_every_flag_was_caught():
    caught = classify("a", [Outcome("a", 1, "invalid", anomalies=[anomaly("convergence", "divergent")])])
    missed = classify("b", [Outcome("b", 1, "valid")])
    assert selfcheck_exit([caught]) == 0
    assert selfcheck_exit([caught, missed]) == 1
    assert selfcheck_exit([caught, classify("c", [])]) == 1
    assert selfcheck_exit([]) == 1


def test_bad_arguments_exit_254():
    for argv in (["--workloads", "nope"], ["--nemeses", "nope"], ["--time-budget", "0"],
                 ["--self-check", "--fault-flags", "fault_nope"], ["--test-count", "x"]):
        p = subprocess.run([sys.executable, "-m", "harness.cli", "test-all", *argv],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 254, (argv, p.stderr)


# -- --db: every cell against one system ---------------------------------------------------------

def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    configure(p)
    return p.parse_args(list(argv))


def test_db_etcd_runs_its_own_workloads_under_the_faults_it_offers():
    from harness.systems.etcd.deployment import EtcdDB
    from nemeses.registry import packages, select

    cells = cells_from_args(_args("--db", "etcd"))
    assert [c.name for c in cells] == [f"{w}/all" for w in EtcdDB.workloads]
    offered = tuple(select("all", EtcdDB.offers))
    assert offered and all(c.nemesis == offered and c.overrides == {} for c in cells)
    known = packages()
    assert all(known[n].needs <= EtcdDB.offers for c in cells for n in c.nemesis)
    raft = cells_from_args(_args("--db", "etcd", "--workloads", "set", "--nemeses", "raft"))
    assert raft[0].nemesis == tuple(select("raft", EtcdDB.offers))


def test_a_group_that_keeps_no_fault_for_the_system_is_refused():
    from harness.matrix_cli import _faults

    assert _faults("masters", "tessera", frozenset({"masters"})) == ("master-membership",)
    with pytest.raises(ValueError, match="no fault of the group masters applies .*--db etcd"):
        _faults("masters", "etcd", frozenset())
    assert _faults("none", "etcd", frozenset()) == ()  # a baseline without faults is asked for


@pytest.mark.parametrize("argv,says", [
    (["--workloads", "sim"], "--workloads sim is a cell of Tessera's simulator: not for --db etcd"),
    (["--workloads", "sim-full,register"], "--workloads sim-full is a cell of Tessera's simulator"),
    (["--nemeses", "all,raft@lease"], "--nemeses raft@lease sets Tessera's read-mode flag: not"),
    (["--self-check"], "--self-check turns on Tessera's engine fault flags: not for --db etcd"),
    (["--workloads", "bank"], "--db etcd runs the workloads register, set,"),
])
def test_db_etcd_refuses_what_only_tessera_has(argv, says):
    with pytest.raises(ValueError) as e:
        cells_from_args(_args("--db", "etcd", *argv))
    assert says in str(e.value)


def test_an_unknown_db_is_refused():
    with pytest.raises(SystemExit):
        _args("--db", "nope")
    with pytest.raises(ValueError, match="unknown --db 'nope'"):
        cells_from_args(argparse.Namespace(**{**vars(_args()), "db": "nope"}))
    p = subprocess.run([sys.executable, "-m", "harness.cli", "test-all", "--db", "nope"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 254 and "invalid choice: 'nope'" in p.stderr


def test_every_cell_runs_against_the_db_with_its_flags_and_none_of_tesseras(tmp_path):
    base = base_spec(_args("--db", "etcd", "--flag", "serializable=true"), tmp_path)
    assert base.db == "etcd" and base.daemon_flags() == {"serializable": True}
    assert not base.fast_failure_detection  # Tessera's daemon flags: etcd would not start
    spec = cells_from_args(_args("--db", "etcd", "--workloads", "watch"))[0].spec(base, 30.0, 1)
    assert (spec.db, spec.workload, spec.flags) == ("etcd", "watch", {"serializable": True})
    tessera = base_spec(_args("--flag", "log_force_fsync_all=false"), tmp_path)
    assert tessera.db == "tessera" and tessera.fast_failure_detection
    assert tessera.daemon_flags() == {**FAST_FAILURE_DETECTION, "log_force_fsync_all": False}
    assert not base_spec(_args("--no-fast-failure-detection"), tmp_path).fast_failure_detection
    with pytest.raises(ValueError, match="serializable= takes true or false"):
        base_spec(_args("--db", "etcd", "--flag", "serializable=maybe"), tmp_path)


def _sim_cell_writes(monkeypatch, base, cell, tmp_path) -> str:
    """The --writes the matrix's runner hands the sim-full cell `cell` (its run stubbed)."""
    import harness.sim_cell
    from harness.matrix_cli import _runner

    seen = {}

    def full_cell(cell, time_limit, attempt, seed, flags, out, writes="own"):
        seen["writes"] = writes
        return Outcome(cell.name, attempt, "valid")

    monkeypatch.setattr(harness.sim_cell, "run_full_cell", full_cell)
    monkeypatch.setattr(harness.sim_cell, "run_idle", full_cell)  # the soaking cell's way
    _runner(base, 1, tmp_path)(cell, 1.0, 1)
    return seen["writes"]


def test_every_cell_gets_writes_and_a_bad_one_is_refused_before_the_cluster_comes_up(
        tmp_path, monkeypatch):
    """test-all --writes: every chaos cell's run writes so (its spec, hence test.json), the
    sim-full cell's seeds too; checked per cell as tessera test checks it."""
    from harness.matrix_cli import check_cells

    args = _args("--writes", "session-manual", "--workloads", "sim-full,register,list-append",
                 "--nemeses", "kill")
    base = base_spec(args, tmp_path)
    cells = cells_from_args(args)
    check_cells(cells, base)
    chaos = [c for c in cells if c.workload != "sim-full"]
    assert chaos and all(c.spec(base, 30.0, 1).writes == "session-manual" for c in chaos)
    assert base_spec(_args(), tmp_path).writes == "drawn"
    assert cells[0].workload == "sim-full"
    assert _sim_cell_writes(monkeypatch, base, cells[0], tmp_path) == "session-manual"
    etcd = _args("--db", "etcd", "--writes", "shared")
    with pytest.raises(ValueError, match="--writes shared groups Tessera's client writes"):
        check_cells(cells_from_args(etcd), base_spec(etcd, tmp_path))
    with pytest.raises(SystemExit):
        _args("--writes", "coalesce")
    p = subprocess.run([sys.executable, "-m", "harness.cli", "test-all", "--writes", "bogus"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 254 and "invalid choice: 'bogus'" in p.stderr


def test_by_default_each_chaos_run_draws_its_write_mode_from_its_seed(tmp_path, monkeypatch):
    """The nightly matrix meets every client write mode: test-all's default draws one per run
    from the run's seed (the same seed, the same mode: a replay runs it again), for Tessera;
    another system's runs write as they always do; the sim-full cell leaves it to the swarm."""
    from harness.matrix_cli import check_cells
    from workloads.base import WRITE_MODES

    args = _args("--workloads", "sim-full,register,list-append", "--nemeses", "kill")
    base = base_spec(args, tmp_path)
    cells = cells_from_args(args)
    check_cells(cells, base)
    register = next(c for c in cells if c.workload == "register")
    drawn = [register.spec(base, 30.0, seed).writes for seed in range(40)]
    assert set(drawn) == set(WRITE_MODES)
    assert drawn == [register.spec(base, 30.0, seed).writes for seed in range(40)]
    etcd = _args("--db", "etcd", "--workloads", "register", "--nemeses", "kill")
    etcd_base = base_spec(etcd, tmp_path)
    assert {c.spec(etcd_base, 30.0, s).writes for c in cells_from_args(etcd)
            for s in range(20)} == {"own"}
    assert cells[0].workload == "sim-full"
    assert _sim_cell_writes(monkeypatch, base, cells[0], tmp_path) == "own"
    assert base_spec(_args("--self-check"), tmp_path).writes == "own"  # as its recipes were measured


def test_each_register_run_draws_its_values_and_whether_the_workers_reuse_their_buffers(
        tmp_path):
    """A user's application may hand the client a buffer it reuses: the nightly matrix draws,
    per run and from its seed, Tessera's register values small, zero-padded, or zero-padded in
    reused buffers, and every drawn run passes `tessera test`'s own checks; the workloads
    without sized values, and another system's runs, draw none."""
    from harness.matrix import VALUE_DRAWS
    from harness.matrix_cli import check_cells
    from harness.validate import check

    args = _args("--workloads", "register,list-append", "--nemeses", "kill")
    base = base_spec(args, tmp_path)
    cells = cells_from_args(args)
    check_cells(cells, base)
    register, append = (next(c for c in cells if c.workload == w) for w in ("register", "list-append"))
    runs = [register.spec(base, 30.0, seed) for seed in range(30)]
    assert [r.workload_options for r in runs] == [register.spec(base, 30.0, s).workload_options
                                                  for s in range(30)]
    drawn = [{k: v for k, v in r.workload_options.items()
              if k not in ("session_ops", "fresh_clients")} for r in runs]
    assert all(d in VALUE_DRAWS for d in drawn) and all(d in drawn for d in VALUE_DRAWS)
    for r in runs:
        check(msgspec.structs.replace(r, wheelhouse=None))
        assert r.make_workload().value_buffers == r.workload_options.get("value_buffers", False)
    assert all("value_sizes" not in append.spec(base, 30.0, s).workload_options for s in range(20))
    etcd = _args("--db", "etcd", "--workloads", "register", "--nemeses", "kill")
    etcd_base = base_spec(etcd, tmp_path)
    assert all(c.spec(etcd_base, 30.0, s).workload_options == {} for c in cells_from_args(etcd)
               for s in range(20))


def test_a_mariadb_matrix_draws_each_runs_topology_and_isolation_and_judges_by_its_claim(
        tmp_path):
    """What a MariaDB user sets (topology, isolation, the durability of a commit and of the
    binlog) the nightly matrix draws per run from its seed, each run's transactional history
    judged by the model its own draw claims; a --flag
    given to test-all is kept for every run; bank draws only the levels whose reads see a
    snapshot; Tessera's runs draw no flag."""
    from harness.matrix_cli import check_cells
    from harness.systems.mariadb.deployment import TOPOLOGIES

    args = _args("--db", "mariadb", "--nemeses", "kill")
    base = base_spec(args, tmp_path)
    cells = cells_from_args(args)
    check_cells(cells, base)
    by_name = {c.workload: c for c in cells}
    runs = [by_name["list-append"].spec(base, 30.0, seed) for seed in range(60)]
    assert {r.flags["topology"] for r in runs} == set(TOPOLOGIES)
    assert {r.flags["innodb_flush_log_at_trx_commit"] for r in runs} == {0, 1, 2}
    assert {r.flags["sync_binlog"] for r in runs} == {0, 1}
    assert {r.flags["isolation"] for r in runs} == {"read-uncommitted", "read-committed",
                                                    "repeatable-read", "serializable"}
    for r in runs:
        claim = ("snapshot-isolation" if r.flags["topology"] == "galera"
                 and r.flags["isolation"] in ("repeatable-read", "serializable")
                 else r.flags["isolation"])
        assert r.workload_options == {"consistency_model": claim}
    assert runs == [by_name["list-append"].spec(base, 30.0, seed) for seed in range(60)]
    assert {by_name["bank"].spec(base, 30.0, s).flags["isolation"] for s in range(40)} == {
        "repeatable-read", "serializable"}
    assert {by_name["rw-register"].spec(base, 30.0, s).workload_options["consistency_model"]
            for s in range(40)} >= {"read-committed", "repeatable-read", "snapshot-isolation"}
    given = base_spec(_args("--db", "mariadb", "--flag", "topology=galera"), tmp_path)
    galera = [by_name["list-append"].spec(given, 30.0, s) for s in range(20)]
    assert {r.flags["topology"] for r in galera} == {"galera"}
    assert len({r.flags["isolation"] for r in galera}) > 1
    tessera = base_spec(_args("--nemeses", "kill"), tmp_path)
    assert all(c.spec(tessera, 30.0, 3).flags == tessera.flags for c in cells_from_args(
        _args("--nemeses", "kill")) if c.workload not in ("sim", "sim-full"))


def test_bad_db_arguments_exit_254_before_the_cluster_comes_up(tmp_path, monkeypatch, capsys):
    import harness.cluster.netns
    import harness.wheelhouse

    def never(*a, **k):
        raise AssertionError("the arguments were bad: no cluster, no wheels")

    monkeypatch.setattr(harness.cluster.netns, "NetnsCluster", never)
    monkeypatch.setattr(harness.wheelhouse, "build_wheelhouse", never)
    for argv, says in ((["--flag", "serializable=maybe"], "serializable= takes true or false"),
                       (["--nemeses", "raft@lease"], "Tessera's read-mode flag"),
                       (["--self-check"], "--self-check turns on Tessera's engine fault flags")):
        assert run(_args("--db", "etcd", "--store", str(tmp_path), *argv)) == 254, argv
        assert says in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nor a summary directory


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.netns
def test_test_all_runs_two_cells_and_writes_the_summary(env, tmp_path):
    budget = 60  # two cells of 10 s each (the least a cell is given) beside their overheads
    store = tmp_path / "store"
    # The five hosts first, outside the budget: a test before this one may leave the shared
    # cluster with three (the MariaDB tests), and rebuilding it inside test-all took 18 s of the
    # 60 on the slow host kind, so the second cell did not fit (exit 2). The budget counts the
    # bring-up for a user, as it should; this test is about the cells and the summary.
    up = tessera("cluster", "up", env=env)
    assert up.returncode == 0, up.stderr[-2000:]
    p = subprocess.run([sys.executable, "-m", "harness.cli", "test-all", "--workloads",
                        "register,set", "--nemeses", "kill", "--time-budget", str(budget),
                        "--seed", "5", "--store", str(store)],
                       capture_output=True, text=True, env=env, timeout=400,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-3000:]
    path = p.stdout.strip().splitlines()[-1]
    s = json.loads(open(path).read())
    assert [r["cell"] for r in s["runs"]] == ["register/kill", "set/kill"]
    assert all(r["verdict"] == "valid" and r["ok_ops"] > 100 and r["time_limit"] >= 10
               for r in s["runs"]), s["runs"]
    assert s["exit"] == 0 and s["seconds"] <= budget + 60
    for r in s["runs"]:
        assert json.loads(open(os.path.join(r["run_dir"], "test.json")).read())["cell"] == r["cell"]
    assert "time limit" in p.stderr and "register/kill" in p.stdout


def test_store_index_lists_test_all_summaries(tmp_path):
    from harness.store import new_run_dir, write_json
    from reports.html.index import render_index

    out = [Outcome("c", 1, "valid", 20.0), Outcome("d", 1, NOT_RUN)]
    d = new_run_dir(tmp_path, "test-all", link=False)
    write_json(d / "summary.json", summary(out, 300, 280, exit_code(out), mode="self-check",
                                           findings=[{"flag": "fault_x", "status": "missed"}]))
    assert not (tmp_path / "latest").exists()  # `latest` stays a run
    html = render_index(tmp_path, []).read_text()
    assert "Test matrices" in html and "fault_x: missed" in html
    assert f'href="test-all/{d.name}/summary.json"' in html


# -- a cell never takes the matrix down --------------------------------------------------------

VOTE_TWICE = "fault_vote_twice_in_term"


def cells_with_a_failing_sim(tmp_path, flags: dict, crash: set[str]):
    """execute(cell, limit, attempt) for run_cells: the whole-stack simulator cell runs for
    real from seed 101 (a replica votes twice there and FAILs on its guard before the test
    table is writable), 1 s whatever its share, on one worker: the cell stops at its deadline
    once a seed has finished, and with two workers seed 102 could finish first on a loaded
    machine and be the only seed judged; the cells named in `crash` raise; any other cell is a
    fake valid run."""
    from unittest import mock

    from harness.sim_cell import FULL_KIND, run_full_cell

    ran = []

    def execute(cell: Cell, limit: float, attempt: int) -> Outcome:
        ran.append(cell.name)
        if cell.workload == FULL_KIND:
            with mock.patch("os.cpu_count", return_value=1):  # the cell's workers
                return run_full_cell(cell, 1.0, attempt, 101, flags, tmp_path / "sim-full")
        if cell.name in crash:
            raise RuntimeError("the cell's own bug")
        return Outcome(cell.name, attempt, "valid", limit, f"store/{cell.name}", ok_ops=10,
                       seconds=1.0)

    return execute, ran


def test_a_cell_whose_replica_failed_its_vote_guard_is_invalid_and_the_matrix_goes_on(
        tmp_path, capsys):
    import time

    from harness.matrix_cli import run_cells
    from harness.sim_cell import FULL_KIND

    flags = {"unlock_unsafe_flags": True, VOTE_TWICE: True}
    cells = [Cell("register/kill", "register", ("kill",)), Cell(FULL_KIND, FULL_KIND, ()),
             Cell("set/kill", "set", ("kill",)), Cell("bank/kill", "bank", ("kill",))]
    execute, ran = cells_with_a_failing_sim(tmp_path, flags, {"set/kill"})
    code = run_cells(cells, 1, execute, 600, time.monotonic(), tmp_path,
                     {"mode": "matrix", "first_seed": 101})
    assert code == 1
    assert ran == [c.name for c in cells]  # every cell ran, after the failing ones too
    s = json.loads((tmp_path / "summary.json").read_text())
    assert [r["verdict"] for r in s["runs"]] == ["valid", "invalid", "unknown", "valid"]
    assert s["exit"] == 1 and s["counts"]["invalid"] == 1
    sim, crash = s["runs"][1], s["runs"][2]
    assert "seed 101: safety guard: tablet " in sim["why"], sim
    assert "FAILED: SafetyError: term 1: already voted for '" in sim["why"]
    assert sim["anomalies"][0]["type"] == "safety-guard"
    assert crash["why"].startswith("crashed: RuntimeError: the cell's own bug (at test_matrix.py:")
    out = capsys.readouterr().out
    assert "already voted for" in out and out.strip().endswith("summary.json")
    assert "by any cell" in out  # the simulator's daemons carry the engine's probes


def test_a_matrix_of_a_system_without_code_probes_lists_none_of_the_engines(tmp_path, capsys):
    """Tessera's probes say nothing of another system's code: a MariaDB or etcd matrix must not
    print 245 engine probes as never reached."""
    import time

    from harness.matrix_cli import run_cells

    def execute(cell, limit, attempt):
        return Outcome(cell.name, attempt, "valid", limit, f"store/{cell.name}", ok_ops=10,
                       seconds=1.0)

    code = run_cells([Cell("list-append/kill", "list-append", ("kill",))], 1, execute, 600,
                     time.monotonic(), tmp_path, {"mode": "matrix", "db": "mariadb",
                                                  "first_seed": 1})
    out = capsys.readouterr().out
    assert code == 0 and "no cell's daemons reported any" in out
    assert "never:" not in out and "by any cell" not in out


def test_the_self_check_judges_every_flag_when_some_of_its_cells_crash(tmp_path):
    import time

    from harness.matrix_cli import run_cells
    from harness.selfcheck import cells as selfcheck_cells

    by_count = "fault_commit_prior_term_by_count"  # a chaos recipe and a core simulator cell
    cells = selfcheck_cells([VOTE_TWICE, by_count])
    assert [c.name for c in cells] == [VOTE_TWICE, f"{VOTE_TWICE}/sim", f"{VOTE_TWICE}/sim-full",
                                       by_count, f"{by_count}/sim"]
    execute, ran = cells_with_a_failing_sim(tmp_path, {}, {VOTE_TWICE, by_count})
    code = run_cells(cells, 1, execute, 600, time.monotonic(), tmp_path,
                     {"mode": "self-check", "first_seed": 101})
    s = json.loads((tmp_path / "summary.json").read_text())
    assert ran == [c.name for c in cells]
    vote, count = s["findings"]
    assert vote["status"] == "caught" and vote["evidence"] == ["sim-full: safety-guard"]
    assert f"{VOTE_TWICE}: unknown (crashed: RuntimeError: the cell's own bug" in vote["why"]
    assert count["status"] == "missed" and "crashed: RuntimeError" in count["why"]
    assert code == 1 and s["exit"] == 1  # a flag missed


def test_each_chaos_run_draws_its_client_and_pacing_from_its_seed(tmp_path):
    """test-all's defaults draw per run how the workers reach the system (Jepsen's workers
    bound to nodes, or an application's client that goes to the leader and that its callers
    share) and how the op starts are spread (evenly, or in bursts), among what the system's
    client has; an explicit flag holds for every run; the self-check keeps the node-bound,
    evenly paced runs its recipes were measured on; etcd's client is node-bound only."""
    from harness.matrix import DRAWN, run_client

    base = base_spec(_args(), tmp_path)
    assert (base.client, base.pacing) == (DRAWN, DRAWN)
    cell = cells_from_args(_args("--workloads", "list-append"))[0]
    specs = [cell.spec(base, 30.0, s) for s in range(30)]
    assert {(s.client, s.pacing) for s in specs} == {
        (c, p) for c in ("node-bound", "smart") for p in ("even", "bursts")}
    fixed = base_spec(_args("--client", "smart", "--pacing", "bursts"), tmp_path)
    assert {(cell.spec(fixed, 30.0, s).client, cell.spec(fixed, 30.0, s).pacing)
            for s in range(10)} == {("smart", "bursts")}
    check = base_spec(_args("--self-check"), tmp_path)
    assert (check.client, check.pacing) == ("node-bound", "even")
    etcd = base_spec(_args("--db", "etcd"), tmp_path)
    assert {run_client(etcd, s) for s in range(20)} == {"node-bound"}


def test_each_batching_session_run_draws_whether_its_workers_renew_their_sessions(tmp_path):
    """A program may open a session per unit of work and close it while its other callers
    still apply: the nightly matrix draws, per run of a batching session mode, whether its
    workers close and replace their shared session every N writes (Workload.session_ops);
    other write modes draw none, and every drawn run passes `tessera test`'s own checks."""
    from harness.matrix import FRESH_CLIENTS, SESSION_OPS
    from harness.validate import check
    from workloads.base import SESSION_MODES

    args = _args("--workloads", "register,list-append", "--nemeses", "kill")
    base = base_spec(args, tmp_path)
    runs = [c.spec(base, 30.0, seed) for c in cells_from_args(args)
            if c.workload in ("register", "list-append") for seed in range(60)]
    batching = [r for r in runs if r.writes in SESSION_MODES]
    fresh = [r for r in batching if r.workload_options.get("fresh_clients")]
    assert {r.workload_options["session_ops"] for r in fresh} == set(FRESH_CLIENTS) - {None}
    assert {r.workload_options.get("session_ops") for r in batching if r not in fresh} == set(
        SESSION_OPS)
    assert all("session_ops" not in r.workload_options and "fresh_clients" not in
               r.workload_options for r in runs if r not in batching)
    for r in batching:
        check(msgspec.structs.replace(r, wheelhouse=None))
        workload = r.make_workload()
        assert workload.session_ops == r.workload_options.get("session_ops", 0)
        assert workload.fresh_clients == (r in fresh)
