"""Code probes (node.probes): every probe declared once with a description and placed once in
the engine, no probe placed undeclared; off they count nothing, on they count and a daemon's
probes file names each on its first hit; a test's coverage mark fails when its path was not
taken."""

from __future__ import annotations

import ast
import io
from collections import Counter
from pathlib import Path

import pytest

from node import probes

NODE = Path(__file__).resolve().parent.parent / "node"


def _catalog_keys(literal: str = "CATALOG") -> list[str]:
    tree = ast.parse((NODE / "probes.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == literal:
            return [k.value for k in node.value.keys]
    raise AssertionError(f"node/probes.py has no {literal} literal")


def _placed(call: str = "probe") -> Counter:
    """probe("name") (or alarm) calls in node/, by name; a call whose argument is not a
    literal is an error (the test could not tell what it places)."""
    out: Counter = Counter()
    for path in NODE.rglob("*.py"):
        if path.name == "probes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == call
                    or isinstance(node, ast.Call) and getattr(node.func, "attr", None) == call):
                arg = node.args[0] if node.args else None
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), \
                    f"{path}:{node.lineno}: {call}() takes a literal name"
                out[arg.value] += 1
    return out


def test_every_probe_is_declared_once_described_and_placed_once():
    keys = _catalog_keys()
    twice = [k for k, n in Counter(keys).items() if n > 1]
    assert not twice, f"declared twice: {twice}"
    placed = _placed()
    assert not [n for n, c in placed.items() if c > 1], "placed twice"
    assert set(placed) - set(keys) == set(), "placed but not declared"
    assert set(keys) - set(placed) == set(), "declared but never placed"
    assert all(probes.CATALOG[k].strip() and "\n" not in probes.CATALOG[k] for k in keys)
    assert len(keys) >= 80, len(keys)


def test_every_alarm_is_declared_once_apart_from_the_probes_and_raised_once():
    keys = _catalog_keys("ALARMS")
    assert keys and len(set(keys)) == len(keys) and not set(keys) & set(probes.CATALOG)
    raised = _placed("alarm")
    assert raised == Counter(dict.fromkeys(keys, 1)), raised


def test_an_alarm_is_counted_apart_from_the_probes_coverage():
    name, plain = next(iter(probes.ALARMS)), next(iter(probes.CATALOG))
    probes.alarm(name)  # off: nothing
    probes.enable()
    try:
        probes.alarm(name)
        probes.probe(plain)
        assert probes.alarms() == {name: 1} and probes.hits() == {plain: 1}
        assert probes.summarize([probes.hits()])["declared"] == len(probes.CATALOG)
    finally:
        probes.disable()
    assert probes.alarms() == {}


def test_off_a_probe_counts_nothing_and_on_it_counts_and_names_its_first_hit():
    name = next(iter(probes.CATALOG))
    probes.disable()
    probes.probe(name)
    assert probes.hits() == {}
    sink = io.StringIO()
    probes.enable(sink)
    try:
        for _ in range(3):
            probes.probe(name)
        assert probes.hits() == {name: 3} and sink.getvalue() == f"{name}\n"
    finally:
        probes.disable()


def test_a_coverage_mark_fails_when_its_path_was_not_taken_and_restores_the_state():
    a, b = list(probes.CATALOG)[:2]
    probes.enable()
    probes.probe(a)
    try:
        with probes.expect(a):
            probes.probe(a)
        with pytest.raises(AssertionError, match=f"probe {b} never fired"), probes.expect(b):
            probes.probe(a)
        with pytest.raises(KeyError, match="no such probe"), probes.expect("no.such.probe"):
            pass
        assert probes.hits() == {a: 1}  # the marks counted apart
        with probes.counting() as counted:  # a chaos run's client, in the harness's process
            probes.probe(b)
        assert counted == {b: 1} and probes.hits() == {a: 1}
    finally:
        probes.disable()
    with probes.counting() as counted:  # counts even where probes were off
        probes.probe(b)
    assert counted == {b: 1} and probes.hits() == {}


def test_a_run_dirs_probe_files_are_summarized_per_daemon_and_across_the_store(tmp_path):
    from reports.probes import across, fired, run_probes, write_client_probes

    a, b, c = list(probes.CATALOG)[:3]
    assert run_probes(tmp_path) is None  # another system's run: no probe files
    (tmp_path / "nodes" / "n1").mkdir(parents=True)
    (tmp_path / "nodes" / "n2").mkdir()
    (tmp_path / "nodes" / "n1" / "tserver.probes").write_text(f"{a}\n{b}\n")
    (tmp_path / "nodes" / "n1" / "master.probes").write_text(f"{a}\nno.longer.a.probe\n")
    (tmp_path / "nodes" / "n2" / "tserver.probes").write_text("")
    out = run_probes(tmp_path)
    assert out["hit"] == 2 and out["runs"] == {a: 2, b: 1} and c in out["never"]
    assert out["by_daemon"]["n1/tserver"] == sorted([a, b]) and out["by_daemon"]["n2/tserver"] == []
    assert fired({"probes": out}) == sorted([a, b]) and fired({}) == []
    write_client_probes(tmp_path, {})  # another system's client fires none: no file
    assert "client" not in run_probes(tmp_path)["by_daemon"]
    write_client_probes(tmp_path, {c: 3})  # Tessera's client, in the harness's process
    assert run_probes(tmp_path)["by_daemon"]["client"] == [c]
    assert run_probes(tmp_path)["runs"] == {a: 2, b: 1, c: 1}
    store = across([{"probes": out}, {"verdict": "valid"}, {"probes": {"runs": {c: 1}}}])
    assert store["hit"] == 3 and store["runs_with_probes"] == 2


def test_an_alarm_a_runs_client_raised_makes_the_run_invalid_and_is_no_probe(tmp_path):
    from reports.probes import CLIENT_FILE, check_alarms, run_probes, write_client_probes

    a, alarm = next(iter(probes.CATALOG)), next(iter(probes.ALARMS))
    assert check_alarms(tmp_path) is None  # another system's run: nothing to read
    (tmp_path / "nodes" / "n1").mkdir(parents=True)
    (tmp_path / "nodes" / "n1" / "tserver.probes").write_text(f"{a}\n")
    assert check_alarms(tmp_path)["verdict"] == "valid"
    write_client_probes(tmp_path, {a: 1, alarm: 2})
    assert (tmp_path / CLIENT_FILE).read_text().split() == sorted([a, alarm])
    out = check_alarms(tmp_path)
    assert out["verdict"] == "invalid" and [e["where"] for e in out["errors"]] == ["client"]
    assert probes.ALARMS[alarm] in out["errors"][0]["explanation"]
    assert run_probes(tmp_path)["hit"] == 1  # not a probe: no part of the coverage


def test_probes_of_a_matrix_read_the_chaos_runs_its_summary_names(tmp_path, capsys):
    """`tessera probes --runs store/test-all/<time>`: a matrix keeps its chaos runs in the store
    beside it (store/<workload>/<time>), not under its own directory, and only its simulator
    cells' results under it; the chaos runs' probes were left out (a matrix read 226 of the
    232 probes its own summary counted). The runs its summary.json names are read too, each
    once."""
    import argparse
    import json

    from reports import probes_cli

    a, b, c = list(probes.CATALOG)[:3]
    matrix = tmp_path / "store" / "test-all" / "T1"
    chaos = tmp_path / "store" / "register" / "T2"
    for d in (matrix / "sim-1", chaos):
        d.mkdir(parents=True)
    (matrix / "sim-1" / "results.json").write_text(json.dumps({"probes": {"runs": {a: 1}}}))
    (chaos / "results.json").write_text(json.dumps({"probes": {"runs": {b: 1, c: 1}}}))
    (matrix / "summary.json").write_text(json.dumps({"runs": [
        {"cell": "sim", "run_dir": "store/test-all/T1/sim-1"},
        {"cell": "register/all", "run_dir": "store/register/T2"},
        {"cell": "set/all", "run_dir": None}]}))
    code = probes_cli.run(argparse.Namespace(runs=[matrix], json=True))
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["runs_with_probes"] == 2 and out["runs"] == {a: 1, b: 1, c: 1}


def test_probes_of_a_summary_near_the_root_naming_what_is_not_there_is_no_traceback(tmp_path, capsys):
    """A summary.json one level under the directory given (a summary copied out of its store,
    or another tool's file of that name) whose runs are not there: nothing read, exit 0."""
    import argparse
    import json

    from reports import probes_cli

    (tmp_path / "summary.json").write_text(json.dumps({"runs": [{"run_dir": "store/a/T"},
                                                                {"run_dir": "/no/such/run"}]}))
    assert probes_cli._named_runs(tmp_path / "summary.json") == []
    assert probes_cli.run(argparse.Namespace(runs=[tmp_path], json=True)) == 0
    assert json.loads(capsys.readouterr().out)["runs_with_probes"] == 0


def test_the_matrix_summary_says_which_probes_no_cell_fired():
    from harness.matrix import Outcome, summary

    a, b = list(probes.CATALOG)[:2]
    out = summary([Outcome("x", 1, "valid", probes=[a]), Outcome("y", 1, "valid", probes=[a, b])],
                  300, 10, 0)
    assert out["probes"]["runs"] == {a: 2, b: 1}
    assert out["probes"]["hit"] == 2 and len(out["probes"]["never"]) == len(probes.CATALOG) - 2
    assert probes.line(out["probes"]).startswith(f"probes: 2 of {len(probes.CATALOG)} hit")


def test_the_core_simulator_counts_each_seeds_probes():
    from harness.sim.runner import run_seeds

    summary = run_seeds(2, steps=300)
    assert len(summary.probes) == 2 and all(p.get("raft.election.won") for p in summary.probes)
    assert set().union(*summary.probes) <= set(probes.CATALOG)
    assert probes.hits() == {}  # off again after the seeds


@pytest.mark.slow
def test_the_whole_stack_simulator_stops_at_the_first_seed_that_fires_the_probe_asked(tmp_path):
    import json
    import subprocess
    import sys

    def sim(*argv):
        return subprocess.run([sys.executable, "-m", "harness.cli", "sim", "--stack", "full",
                               "--seconds", "5", "--jobs", "1", "--out", str(tmp_path), "--json",
                               *argv], capture_output=True, text=True, timeout=300)

    out = sim("--seeds", "5", "--until-probe", "raft.election.won")
    summary = json.loads(out.stdout.splitlines()[-1])
    assert out.returncode == 0, out.stderr[-2000:]
    assert summary["seeds"] == 1 and summary["until_probe"] == {"probe": "raft.election.won",
                                                                "seed": 0}
    assert "probe raft.election.won fired" in out.stderr and "replay: tessera sim" in out.stderr
    assert summary["probes"]["hit"] > 10 and summary["probes"]["declared"] == len(probes.CATALOG)
    bad = sim("--seeds", "1", "--until-probe", "no.such.probe")
    assert bad.returncode == 254 and "no probe 'no.such.probe'" in bad.stderr
