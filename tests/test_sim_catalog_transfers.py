"""Recorded seeds of the whole-stack simulator under a mix heavy in leader transfers of the
masters' catalog, where the leadership often moves to a master just added.

- A tablet server cut off while the spare master was added kept the master list it had; once
  back, the spare led the catalog, and the masters it heartbeats were all followers. Followers
  answered nothing of the masters, so it never heard of the spare. Followers now answer with
  their committed config too (tserver.masters.adopted_without_leader)."""

from __future__ import annotations

from harness.sim.stack import StackConfig, StackSim
from harness.sim.swarm import parse_mix

TRANSFERS = ("transfer:10,crash:3,restart:4,partition:3,isolate:2,masters:2,ddl:3,power:2,"
             "skew:2,heal:1;every=0.1-0.4;reads=linearizable")


def _run(seed: int, out):
    workload = "register" if seed % 2 == 0 else "list-append"
    return StackSim(StackConfig(seed=seed, workload=workload, seconds=20.0,
                                mix=parse_mix(TRANSFERS)), out).run()


def test_a_tablet_server_learns_a_master_added_while_it_was_cut_off(tmp_path):
    result = _run(41, tmp_path)
    assert result.ok(), (result.violation, result.verdict)
    assert result.probes.get("tserver.masters.adopted_without_leader", 0) >= 1

