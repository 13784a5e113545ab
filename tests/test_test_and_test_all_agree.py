"""`tessera test` and `tessera test-all` mean the same thing by the same flag: the
fault set `--nemesis`, failure detection and its default, the hosts. A user who moves a run from
one command to the other gets the run they had."""

import argparse

import pytest

from harness import chaos_cli, matrix_cli
from harness.spec import FAST_FAILURE_DETECTION


def _parse(configure, argv):
    p = argparse.ArgumentParser()
    configure(p)
    return p.parse_args(argv)


def test_spec(argv):
    return chaos_cli.spec_from_args(_parse(chaos_cli.configure, argv))


def test_all_spec(argv, tmp_path):
    """The spec of test-all's one cell for `argv`, as its runner would start it."""
    one_cell = [] if "--nemesis" in argv else ["--nemesis", "kill"]
    args = _parse(matrix_cli.configure, ["--workloads", "register", *one_cell, *argv])
    (cell,) = matrix_cli.cells_from_args(args)
    return cell, cell.spec(matrix_cli.base_spec(args, tmp_path), 30.0, 1)


test_spec.__test__ = test_all_spec.__test__ = False  # helpers, whatever their names


@pytest.mark.parametrize("nemesis", ["kill,partition", "all", "raft,kill", "none", "masters"])
def test_nemesis_is_one_fault_set_in_both(nemesis, tmp_path):
    cell, spec = test_all_spec(["--nemesis", nemesis], tmp_path)
    assert list(cell.nemesis) == test_spec(["--nemesis", nemesis]).nemesis
    assert spec.nemesis == test_spec(["--nemesis", nemesis]).nemesis


def test_nemesis_and_nemeses_do_not_go_together(capsys):
    with pytest.raises(SystemExit):
        _parse(matrix_cli.configure, ["--nemesis", "kill", "--nemeses", "kill,partition"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("argv, fast", [
    ([], True), (["--fast-failure-detection"], True), (["--no-fast-failure-detection"], False)])
def test_failure_detection_has_one_default_and_one_meaning(argv, fast, tmp_path):
    _, spec = test_all_spec(argv, tmp_path)
    assert spec.fast_failure_detection is test_spec(argv).fast_failure_detection is fast
    assert (spec.daemon_flags() == FAST_FAILURE_DETECTION) is fast


def test_another_system_keeps_its_own_detection_unless_tesseras_is_asked_for(tmp_path):
    argv = ["--db", "etcd"]
    assert not test_spec(argv).fast_failure_detection
    assert not test_all_spec(argv, tmp_path)[1].fast_failure_detection
    for spec_of in (test_spec, lambda a: test_all_spec(a, tmp_path)):
        with pytest.raises(ValueError, match="does not take"):
            spec_of([*argv, "--fast-failure-detection"])


@pytest.mark.parametrize("argv", [
    ["--netns-hosts", "3"], ["--nodes", "10.77.0.11,10.77.0.12,10.77.0.13"],
    ["--nodes", "10.77.0.11,10.77.0.12:2222", "--username", "admin"]])
def test_host_options_become_the_same_spec_fields(argv, tmp_path):
    _, spec = test_all_spec(argv, tmp_path)
    one = test_spec(argv)
    assert (spec.provider, spec.hosts, spec.inline_nodes, spec.username) == \
        (one.provider, one.hosts, one.inline_nodes, one.username)


def test_every_cell_is_checked_as_tessera_test_checks_a_run_before_the_cluster_comes_up(
        capsys, tmp_path, monkeypatch):
    """One check for both (harness.validate): a cell `tessera test` would refuse makes the whole
    matrix a bad-arguments exit before any namespace or wheel is made."""
    from harness.cli import main
    from harness.cluster import netns

    monkeypatch.setattr(netns.NetnsCluster, "up", lambda *a, **k: pytest.fail("cluster up"))
    argv = ["test-all", "--db", "etcd", "--workloads", "watch,set", "--nemesis", "admin",
            "--store", str(tmp_path)]
    assert main(argv) == 254
    assert "cell watch/admin: --workload watch cannot go with --nemesis admin" in \
        capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv", [[], ["--time-scale", "10"], ["--time-scale", "3", "--op-timeout", "7"]])
def test_timing_options_become_the_same_spec_fields(argv, tmp_path):
    """A matrix on slow hosts (VMs under TCG) scales as one run does: the op timeout, the
    clients' attempts and the daemons' timing flags."""
    _, spec = test_all_spec(argv, tmp_path)
    one = test_spec(argv)
    assert (spec.op_timeout, spec.time_scale) == (one.op_timeout, one.time_scale)
    assert spec.daemon_flags() == one.daemon_flags()
    if argv:
        assert spec.time_scale == float(argv[1]) and spec.op_timeout == (
            float(argv[3]) if len(argv) > 2 else 5.0 * float(argv[1]))


def test_a_time_scale_out_of_range_is_refused_by_both(capsys, tmp_path, monkeypatch):
    from harness.cli import main
    from harness.cluster import netns

    monkeypatch.setattr(netns.NetnsCluster, "up", lambda *a, **k: pytest.fail("cluster up"))
    for cmd in (["test"], ["test-all", "--workloads", "register", "--nemesis", "kill"]):
        assert main([*cmd, "--time-scale", "0.5", "--store", str(tmp_path)]) == 254
        assert "--time-scale must be between 1 and 100" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
