"""Kudu's two external consistency modes under clock faults on the netns cluster: real daemons
whose clocks libfaketime skews (up to about two minutes), the register workload over four
tablets through Tessera's client as users run it. Each mode must be valid with the checks that
judge it (timestamps per key, and each process's own order, `client-order`).

A client that drops the propagated timestamp (the drop-propagated mutant, node.client.faults)
is caught only when two of one process's successive writes land on leaders whose clocks
disagree the wrong way. With the workload's default of 200 ops a key, a process moves to
another key (and maybe another tablet) rarely, and a 20 s run caught it at 1 of 4 seeds; with
a fresh key every 4 ops, at 4 of 4 (seeds 3-6), while the fixed client stays valid on the same
command. The client-propagated runs here hop keys so."""

from __future__ import annotations

import json
import os

import pytest
from netns_run import tessera

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.netns]


# A fresh key every 4 ops: a process's successive writes often go to different tablets' leaders
KEY_HOPPING = ("--workload-option", "ops_per_key=4")


def _tserver_probes(run_dir: str) -> set[str]:
    """The probes the run's tablet servers fired (a master's catalog writes commit-wait in
    either mode, and under clock faults they may have to wait)."""
    fired: set[str] = set()
    for host in os.listdir(os.path.join(run_dir, "nodes")):
        path = os.path.join(run_dir, "nodes", host, "tserver.probes")
        if os.path.exists(path):
            fired.update(open(path).read().split())
    return fired


def _run(env, tmp_path, mode, seed, *flags):
    out = tessera("test", "--db", "tessera", "--workload", "register", "--netns-hosts", "5",
                  "--time-limit", "20", "--nemesis", "clock", "--nemesis-interval", "4",
                  "--external-consistency", mode, "--seed", str(seed), *flags,
                  "--store", str(tmp_path / "store"), env=env, timeout=600)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.load(open(os.path.join(run_dir, "results.json")))
    test = json.load(open(os.path.join(run_dir, "test.json")))
    by = {r["checker"]: r for r in results["check"]["results"]}
    return out.returncode, results, by, test, run_dir


def test_both_modes_keep_their_promises_under_clock_faults(env, tmp_path):
    for mode in ("client-propagated", "commit-wait"):
        # commit-wait under a 20 ms clock bound: its writes always wait then (a write's
        # replication outlasts the 1 ms default on a slow host), so the probes show the mode
        bound = ("--flag", "clock_max_error_us=20000") if mode == "commit-wait" else KEY_HOPPING
        code, results, by, test, run_dir = _run(env, tmp_path, mode, 3, *bound)
        assert code == 0, (mode, {k: v["verdict"] for k, v in by.items()})
        assert test["external_consistency"] == mode
        assert results["nemesis"]["fired"].get("clock", 0) >= 1
        # a floor that shows each of the clients ordered successive writes, not a throughput
        # figure: a loaded host made 75 writes in one of these 20 s runs
        assert by["client-order"]["writes"] >= 20 and by["timestamps"]["verdict"] == "valid"
        probes = _tserver_probes(run_dir)
        if mode == "client-propagated":  # answered without commit-wait
            assert "replica.write.client_propagated" in probes
            assert "replica.commit_wait.waited" not in probes
        else:
            assert "replica.commit_wait.waited" in probes


def test_a_client_that_drops_the_propagated_timestamp_is_caught_under_clock_faults(env, tmp_path):
    """The same command as the valid client-propagated run above, with the mutant: a later write
    of one process gets a timestamp below its earlier one, and client-order says so."""
    mutant = dict(env, TESSERA_CLIENT_FAULTS="drop-propagated")
    code, results, by, _, _ = _run(mutant, tmp_path, "client-propagated", 3, *KEY_HOPPING)
    assert code == 1, {k: v["verdict"] for k, v in by.items()}
    assert by["client-order"]["verdict"] == "invalid", by["client-order"]
    assert results["nemesis"]["fired"].get("clock", 0) >= 1
