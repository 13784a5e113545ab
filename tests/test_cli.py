"""The `tessera` entry point: help that tells the truth, clear errors for bad input, and Jepsen's
exit codes for the verdict commands (0 valid, 1 invalid, 2 unknown, 254 bad arguments,
255 crashed)."""

import json
import subprocess
import sys

import pytest

from harness import chaos
from harness.cli import COMMANDS, main
from node.exit_codes import verdict_exit
from reports.checkers.verdict import merge_verdicts
from reports.history import Op
from workloads.base import Checker


def test_help_lists_every_registered_command():
    out = subprocess.run([sys.executable, "-m", "harness.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for name in COMMANDS:
        assert name in out.stdout


def test_unknown_command_is_a_clear_error(capsys):
    assert main(["no-such-command"]) == 254
    assert "unknown command 'no-such-command'" in capsys.readouterr().err


def test_no_command_prints_usage_and_fails(capsys):
    assert main([]) == 254
    assert "usage: tessera" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["--no-such-option"])
    assert e.value.code == 254


def test_every_registered_command_module_imports():
    import importlib

    for module, _ in COMMANDS.values():
        mod = importlib.import_module(module)
        assert callable(mod.configure) and callable(mod.run)


@pytest.mark.parametrize("verdicts, code", [
    (["valid"], 0), (["valid", "valid"], 0), (["invalid"], 1), (["valid", "unknown", "invalid"], 1),
    (["unknown"], 2), (["valid", "unknown"], 2), (["valid", "bogus"], 2),
])
def test_verdicts_map_to_jepsen_exit_codes(verdicts, code):
    assert verdict_exit(merge_verdicts(verdicts)) == code


@pytest.mark.parametrize("argv", [
    ["test", "--time-limit", "soon"],
    ["test", "--no-such-option"],
    ["test", "--provider", "cloud"],
    ["analyze", "--bogus"],
    ["check"],  # no history
    ["check", "h.jsonl", "--model", "nonesuch"],
])
def test_argparse_usage_errors_of_verdict_commands_exit_254(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 254
    assert "error:" in capsys.readouterr().err


def _command_lines() -> list[list[str]]:
    """Every command, and every verb of the commands that have verbs, to the deepest level."""
    import argparse
    import importlib

    from harness.cli import COMMANDS, BadArgsParser

    def verbs(parser: argparse.ArgumentParser, path: list[str]) -> list[list[str]]:
        out = [path]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for verb, sub in action.choices.items():
                    out += verbs(sub, [*path, verb])
        return out
    lines = []
    for name, (module, _) in COMMANDS.items():
        parser = BadArgsParser(prog=f"tessera {name}")
        importlib.import_module(module).configure(parser)
        lines += verbs(parser, [name])
    return lines


def test_every_command_and_verb_exits_254_on_a_bad_option_without_a_traceback(capsys):
    """One exit-code table for every command (node.exit_codes): a usage error is 254 in the
    engine's commands as in the verdict commands, at every level of verbs."""
    lines = _command_lines()
    assert ["kv", "get"] in lines and ["local-replica", "cmeta", "print"] in lines
    assert len(lines) > 30
    for argv in lines:
        with pytest.raises(SystemExit) as e:
            main([*argv, "--no-such-option"])
        err = capsys.readouterr().err
        assert e.value.code == 254, (argv, e.value.code, err)
        assert "error:" in err and "Traceback" not in err, (argv, err)


def test_test_validation_errors_exit_254_before_touching_a_host(capsys, tmp_path):
    assert main(["test", "--workload", "nope", "--store", str(tmp_path)]) == 254
    captured = capsys.readouterr()
    assert "unknown workload 'nope'" in captured.err and captured.out == ""
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv, message", [
    (["--flag", "nosuch=1"], "unknown key 'nosuch'"),
    (["--flag", "log_force_fsync_all=maybe"], "log_force_fsync_all takes true or false"),
    (["--flag", "raft_heartbeat_interval_ms=55"], "must be a multiple of 100"),
    (["--flag", "data_dir=/x"], "--flag data_dir: set by the harness for each host"),
    (["--flag", "rpc_encryption=disabled"], "--rpc-encryption cannot be disabled"),
    (["--flag", "fault_ack_before_fsync=true"], "unlock"),
    (["--hosts-file", "/nonexistent.toml"], "/nonexistent.toml"),
    (["--hosts-file", "h.toml", "--provider", "vagrant"], "it cannot go with --provider vagrant"),
])
def test_bad_daemon_flags_and_host_lists_exit_254_before_any_work(argv, message, capsys,
                                                                   tmp_path, monkeypatch):
    """Bad flags are found before a wheel is built or a host touched, for `test` and
    `test-all` alike (both check flags through the system's `check_flags`)."""
    def touched(*_a, **_k):
        raise AssertionError("a run was started")
    monkeypatch.setattr(chaos, "run_test", touched)
    assert main(["test", "--store", str(tmp_path), *argv]) == 254
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())
    if argv[0] == "--flag":
        assert main(["test-all", "--store", str(tmp_path), *argv]) == 254
        assert message in capsys.readouterr().err


def _fake_run(tmp_path, outcome):
    """A stand-in for `chaos.run_test`: makes a run directory, then returns `outcome` or raises it."""
    def fake(spec, plan, made, **facts):
        run_dir = tmp_path / "register" / "20260101T000000"
        run_dir.mkdir(parents=True)
        (run_dir / "test.json").write_text(json.dumps({"workload": "register"}))
        (run_dir / "outcome.json").write_text(json.dumps({"status": "running"}))
        made(run_dir)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    return fake


@pytest.mark.parametrize("verdict, code", [("valid", 0), ("invalid", 1), ("unknown", 2)])
def test_test_exits_with_its_verdict_and_prints_the_run(monkeypatch, capsys, tmp_path, verdict, code):
    monkeypatch.setattr(chaos, "run_test", _fake_run(tmp_path, verdict))
    assert main(["test", "--store", str(tmp_path)]) == code
    assert capsys.readouterr().out.splitlines()[-1] == str(tmp_path / "register" / "20260101T000000")


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_crashed_test_exits_255_prints_its_run_and_marks_it(monkeypatch, capsys, tmp_path, error):
    monkeypatch.setattr(chaos, "run_test", _fake_run(tmp_path, error))
    assert main(["test", "--store", str(tmp_path)]) == 255
    run_dir = tmp_path / "register" / "20260101T000000"
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == str(run_dir) and "crashed" in captured.err
    outcome = json.loads((run_dir / "outcome.json").read_text())
    assert outcome["status"] == "crashed" and type(error).__name__ in outcome["error"]
    assert json.loads((run_dir / "test.json").read_text()) == {"workload": "register"}  # the plan


def test_a_test_that_crashed_before_making_a_run_prints_none(monkeypatch, capsys, tmp_path):
    from harness.cluster import ClusterError

    def unreachable(spec, plan, made, **facts):
        raise ClusterError("n1: unreachable over SSH")

    monkeypatch.setattr(chaos, "run_test", unreachable)
    assert main(["test", "--store", str(tmp_path)]) == 255
    captured = capsys.readouterr()
    assert captured.out == "" and "unreachable over SSH" in captured.err


def test_analyze_bad_paths_exit_254_and_a_crash_255(monkeypatch, capsys, tmp_path):
    assert main(["analyze", str(tmp_path / "missing")]) == 254
    assert main(["analyze", str(tmp_path)]) == 254  # a directory with no runs in it
    assert "no runs under" in capsys.readouterr().err
    (tmp_path / "register" / "20260101T000000").mkdir(parents=True)
    (tmp_path / "register" / "20260101T000000" / "test.json").write_text("{}")

    def broken(*args, **kwargs):
        raise RuntimeError("the JVM went away")

    monkeypatch.setattr("reports.spark.job.analyze", broken)
    assert main(["analyze", str(tmp_path)]) == 255
    assert "the JVM went away" in capsys.readouterr().err


class _Schedule:
    def summary(self):
        return {"counts": {}, "fired": {}, "never_fired": []}


def _register_ops(cas_ok: bool) -> list[Op]:
    """Reads, writes and cas on one register, linearizable either way; the cas always fails
    unless `cas_ok`."""
    ops, t = [], 0
    for i in range(5):
        for f, inv, out, typ in (("write", i, i, "ok"), ("read", None, i, "ok"),
                                 ("cas", [i, i + 1] if cas_ok else [99, 1], None, "ok" if cas_ok else "fail")):
            ops.append(Op(len(ops), "invoke", 0, f, inv, key="r", time=t))
            ops.append(Op(len(ops), typ, 0, f, out if typ == "ok" and f == "read" else inv, key="r", time=t + 1))
            t += 2
    return ops


def test_test_verdict_includes_stats_an_f_that_never_succeeded_is_invalid():
    test = {"final": {"ops": []}}
    never = chaos._results(_register_ops(cas_ok=False), Checker("cas-register"), test, _Schedule())
    assert never["check"]["verdict"] == "valid"  # the model checker alone would pass it
    assert never["verdict"] == "invalid" and never["stats"]["never_ok"] == ["cas"]
    some = chaos._results(_register_ops(cas_ok=True), Checker("cas-register"), test, _Schedule())
    assert some["verdict"] == "valid" and some["stats"]["never_ok"] == []


def test_a_bad_hosts_file_is_a_bad_argument(capsys, tmp_path):
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[[host]]\naddress = "10.0.0.1"\nkey = "/no/such/key"\n')
    assert main(["test", "--provider", "hosts", "--hosts-file", str(hosts),
                 "--store", str(tmp_path / "s")]) == 254
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "s").exists()


def test_inline_nodes_are_checked_before_any_ssh(capsys, tmp_path):
    """`--nodes` as Jepsen's CLI: each bad list is one clear line and exit 254."""
    key = tmp_path / "id"
    key.write_text("k")
    for argv, words in [(["--nodes", "a,b", "--hosts-file", str(key)], "not several"),
                        (["--nodes", "127.0.0.1:ssh"], "is not HOST or HOST:PORT"),
                        (["--nodes", "no-such-host.invalid"], "cannot resolve"),
                        (["--nodes", "127.0.0.1,127.0.0.1"], "listed twice"),
                        (["--nodes", "127.0.0.1", "--ssh-private-key", str(tmp_path / "x")],
                         "does not exist"),
                        (["--username", "u"], "go with --nodes"),
                        (["--nodes", "127.0.0.1", "--provider", "vagrant"], "cannot go with")]:
        assert main(["test", *argv, "--store", str(tmp_path)]) == 254, argv
        assert words in capsys.readouterr().err, argv
    import argparse

    from harness.chaos_cli import configure, spec_from_args
    p = argparse.ArgumentParser()
    configure(p)
    spec = spec_from_args(p.parse_args(["--nodes", "127.0.0.1, 127.0.0.2:2222", "--username", "u",
                                        "--ssh-private-key", str(key)]))
    assert (spec.provider, spec.inline_nodes, spec.username) == ("hosts", ["127.0.0.1", "127.0.0.2:2222"], "u")
    from harness.cluster.hostsfile import from_nodes
    hosts = from_nodes(spec.inline_nodes, spec.username, spec.ssh_private_key)
    assert [(h.name, h.address, h.port, h.user, h.key_file) for h in hosts] == [
        ("n1", "127.0.0.1", 22, "u", str(key)), ("n2", "127.0.0.2", 2222, "u", str(key))]


def test_nodes_file_is_jepsens_one_host_a_line(capsys, tmp_path):
    """Jepsen's --nodes-file, and a netns host count named as one."""
    import argparse

    from harness.chaos_cli import configure, spec_from_args

    listed = tmp_path / "nodes"
    listed.write_text("# the test hosts\n127.0.0.1\n\n127.0.0.2:2222  # the second\n")
    p = argparse.ArgumentParser()
    configure(p)
    spec = spec_from_args(p.parse_args(["--nodes-file", str(listed)]))
    assert (spec.provider, spec.inline_nodes) == ("hosts", ["127.0.0.1", "127.0.0.2:2222"])
    assert spec_from_args(p.parse_args(["--netns-hosts", "3"])).hosts == 3
    empty = tmp_path / "empty"
    empty.write_text("# nobody\n")
    for argv, words in [(["--nodes-file", str(empty)], "lists no hosts"),
                        (["--nodes-file", str(tmp_path / "missing")], "No such file"),
                        (["--nodes-file", str(listed), "--nodes", "a"], "not several")]:
        assert main(["test", *argv, "--store", str(tmp_path / "s")]) == 254, argv
        assert words in capsys.readouterr().err, argv


def test_no_help_text_names_the_projects_internals(capsys):
    """`--help` speaks to users, not of module paths, design-seed numbers,
    issue numbers or the repository's docs."""
    import re

    internal = re.compile(r"(harness\.\w+|reports\.\w+|node\.\w+|nemeses\.\w+|workloads\.\w+|"
                          r"seed 0\d|seed's last|issue \d+|docs/\S+|\w+\.py\b)")
    for argv in _command_lines():
        with pytest.raises(SystemExit) as e:
            main([*argv, "--help"])
        assert e.value.code == 0
        found = [line for line in capsys.readouterr().out.splitlines() if internal.search(line)]
        assert not found, (argv, found)


def test_a_master_address_that_resolves_to_nothing_is_a_bad_argument_at_once(capsys):
    """`kv --masters nonsense get k` once waited out its 10 s timeout, then
    exited 1 as if the cluster had failed."""
    for argv in (["kv", "--masters", "nonsense.invalid", "get", "k"],
                 ["cluster", "ksck", "--masters", "nonsense.invalid"],
                 ["master", "list", "--masters", "nonsense.invalid"]):
        assert main(argv) == 254, argv
        assert "cannot resolve 'nonsense.invalid'" in capsys.readouterr().err


@pytest.mark.parametrize("before, after", [
    (["kv", "--masters", "h:1", "--table", "t", "--timeout", "3", "get", "k"],
     ["kv", "get", "k", "--masters", "h:1", "--table", "t", "--timeout", "3"]),
    (["table", "--masters", "h:1", "list"], ["table", "list", "--masters", "h:1"]),
    (["tablet", "--masters", "h:1", "leader-step-down", "T"],
     ["tablet", "leader-step-down", "T", "--masters", "h:1"]),
])
def test_connection_options_mean_the_same_before_and_after_the_verb(before, after):
    """`kv get k --masters X` was once refused while `master list --masters X`
    was taken; either place now works, and a value before the verb is kept."""
    import importlib

    from harness.cli import BadArgsParser

    def parse(argv):
        p = BadArgsParser()
        importlib.import_module(COMMANDS[argv[0]][0]).configure(p)
        return vars(p.parse_args(argv[1:]))

    assert parse(before) == parse(after)
    assert parse(before)["masters"] == "h:1"
    assert parse(["kv", "get", "k"])["table"] == "kv"


def test_a_verbs_help_is_its_own(capsys):
    """`local-cluster up --help` once printed the parent's help, options of
    other verbs among them."""
    for argv, own, other in ((["local-cluster", "up"], "--num-tservers", None),
                             (["local-cluster", "down"], "stop every daemon", "--num-tservers"),
                             (["cluster", "status"], "--provider", None)):
        with pytest.raises(SystemExit) as e:
            main([*argv, "--help"])
        out = capsys.readouterr().out
        assert e.value.code == 0 and out.startswith(f"usage: tessera {' '.join(argv)}"), out
        assert own in out and (other is None or other not in out), out


def test_bare_sim_runs_with_a_default_seed_count():
    from harness.cli import BadArgsParser
    from harness.sim import cli as sim_cli

    p = BadArgsParser()
    sim_cli.configure(p)
    assert p.parse_args([]).seeds == 100


def test_test_count_runs_the_test_again_with_the_next_seed_until_one_is_not_valid(monkeypatch,
                                                                                   capsys,
                                                                                   tmp_path):
    """Jepsen's --test-count, on `tessera test` as on `test-all`: the two take the same flags."""
    seeds = []
    codes = {7: 0, 8: 0, 9: 1, 10: 0}  # the run with seed 9 is invalid

    def execute(spec, **_):
        seeds.append(spec.seed)
        return codes[spec.seed]
    monkeypatch.setattr(chaos, "execute", execute)
    assert main(["test", "--store", str(tmp_path), "--seed", "7", "--test-count", "2"]) == 0
    assert seeds == [7, 8]
    seeds.clear()
    assert main(["test", "--store", str(tmp_path), "--seed", "7", "--test-count", "5"]) == 1
    assert seeds == [7, 8, 9]  # the third was invalid: no fourth
    assert main(["test", "--store", str(tmp_path), "--test-count", "0"]) == 254
    assert "--test-count must be at least 1" in capsys.readouterr().err


def test_every_positional_argument_says_what_it_is():
    """A positional argument without help shows in `--help` as a bare name, unexplained."""
    import argparse
    import importlib

    from harness.cli import COMMANDS, BadArgsParser

    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for verb, sub in action.choices.items():
                    walk(sub, [*path, verb])
            elif not action.option_strings and not action.help:
                missing.append(f"{' '.join(path)} {action.dest}")
    for name, (module, _) in COMMANDS.items():
        parser = BadArgsParser(prog=name)
        importlib.import_module(module).configure(parser)
        walk(parser, [name])
    assert not missing, missing


def test_test_all_takes_the_host_options_as_test_does(capsys, tmp_path):
    """One definition of where a test runs, for `test` and `test-all`."""
    import argparse

    from harness.matrix_cli import base_spec
    from harness.matrix_cli import configure as configure_all

    listed = tmp_path / "nodes"
    listed.write_text("127.0.0.1\n127.0.0.2\n127.0.0.3\n")
    p = argparse.ArgumentParser()
    configure_all(p)
    base = base_spec(p.parse_args(["--nodes-file", str(listed), "--username", "u"]), tmp_path)
    assert (base.provider, base.inline_nodes, base.username) == (
        "hosts", ["127.0.0.1", "127.0.0.2", "127.0.0.3"], "u")
    for argv, words in [(["--nodes-file", str(tmp_path / "missing")], "No such file"),
                        (["--nodes", "127.0.0.1", "--provider", "vagrant"], "cannot go with"),
                        (["--username", "u"], "go with --nodes")]:
        assert main(["test-all", "--store", str(tmp_path / "s"), *argv]) == 254, argv
        assert words in capsys.readouterr().err, argv


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """`tessera probes | head -1`: the reader has gone when the listing is written; the command
    ends with 141 (as a shell reports SIGPIPE) and no traceback."""
    import os

    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first line is written
    try:
        p = subprocess.run([sys.executable, "-m", "harness.cli", "probes"], stdout=w,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 141 and "Traceback" not in p.stderr, p.stderr
