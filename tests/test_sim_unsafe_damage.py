"""The `unsafe` fault's operator (harness.sim.stack_unsafe) on a lost replica whose files the
simulator damaged: the offline delete tool refuses to tombstone it (a corrupt WAL hides the last
logged op a tombstone keeps), as Kudu's does, and the operator deletes it whole, as Kudu's tool
then advises (--clean_unsafe). Damage the simulator did not make is raised, never deleted."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from harness.sim import stack_unsafe
from harness.sim.stack import StackConfig, StackSim
from harness.sim.swarm import swarm_mix
from node.wal.errors import WalCorruption

TABLET = "a2078eaed065-0001"


def _sim(flipped: set[str]):
    return SimpleNamespace(disks={"h": object()}, flipped=flipped,
                           must_fail={"h": (TABLET, "a WAL segment cut")}, flip_outcomes={})


def _tool(calls: list):
    def delete_replica(data_dir, tablet, keep_tombstone, disk):
        calls.append(keep_tombstone)
        if keep_tombstone:
            raise WalCorruption(f"/data/wals/{tablet}/wal-000000001", 3016,
                                "segment has no footer but is not the newest segment")
        return "every file removed"
    return delete_replica


def test_a_replica_the_simulator_damaged_is_deleted_whole_once_the_tool_refuses_it(monkeypatch):
    calls: list = []
    monkeypatch.setattr("node.tools.local_replica.delete_replica", _tool(calls))
    sim = _sim({"h"})
    done = stack_unsafe.offline_delete(sim, TABLET, "h")
    assert calls == [True, False]
    assert "refused (WalCorruption" in done and done.endswith("every file removed")
    assert sim.must_fail == {}  # the tool's refusal detected the damage
    assert "WalCorruption" in sim.flip_outcomes["h"]


def test_a_corruption_the_simulator_did_not_make_is_raised(monkeypatch):
    calls: list = []
    monkeypatch.setattr("node.tools.local_replica.delete_replica", _tool(calls))
    sim = _sim(set())
    with pytest.raises(WalCorruption):
        stack_unsafe.offline_delete(sim, TABLET, "h")
    assert calls == [True] and sim.flip_outcomes == {}


def test_seed_55_copy_shrink_then_unsafe_on_the_damaged_replica(tmp_path):
    """Seed 55 (swarm, list-append): copy-shrink cut a finished WAL segment of tablet 0001 on
    its leader, whose replica came back FAILED; the unsafe fault then took that server's
    replica for lost and ran the offline delete tool on it, whose WalCorruption escaped into
    the simulation (the seed ended unknown at 17.7 virtual s). Now the operator deletes it
    whole, and the seed is judged."""
    # its mix as drawn before seeds drew an external consistency mode (it draws
    # client-propagated now, whose writes answer sooner: another schedule) and the copy-behind
    # fault (it draws that too now: another schedule); since the thirteenth bundle stream the
    # seed runs the config-race bundle, so its own draws are asked for
    mix = swarm_mix(55, bundled=False)
    mix = dataclasses.replace(mix, consistency="commit-wait",
                              weights=tuple((k, w) for k, w in mix.weights if k != "copy-behind"))
    sim = StackSim(StackConfig(seed=55, workload="list-append", seconds=60.0, mix=mix), tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict, result.results.get("error"))
    (value,) = [e[2] for e in sim.events if e[1] == "unsafe"]
    assert value[0] == TABLET and any("refused (WalCorruption" in t for t in value[5]), value
    assert value[5][-1] == "appended", value
