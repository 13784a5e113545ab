"""The client's deliberate bugs (node.client.faults) against the nightly configuration: each
makes one of the whole-stack simulator's default seeds (`tessera sim --stack full`, swarm mixes,
60 virtual seconds, the write mode the seed draws) fail, and the same seed passes on the
fixed client. The seeds are the first of 0-39 that caught each (docs/decisions.md)."""

from __future__ import annotations

import json

import pytest

from node.client import faults
from node.sim.stack import StackConfig, StackSim
from node.sim.swarm import swarm_mix

pytestmark = pytest.mark.slow

WORKLOADS = ("register", "list-append")  # tessera sim's default: by seed parity


def default_seed(seed: int, out):
    """Seed `seed` exactly as `tessera sim --stack full` runs it by default."""
    return StackSim(StackConfig(seed=seed, workload=WORKLOADS[seed % 2], mix=swarm_mix(seed)),
                    out).run()


@pytest.mark.parametrize("fault,seed,anomaly", [
    ("misroute", 8, "wrong-reply"),
    ("reuse-slot", 32, "wrong-reply"),
    ("drop-error", 38, "linearizability"),
    ("new-seqs", 21, "duplicate-elements"),
])
def test_each_client_fault_fails_a_default_seed_that_the_fixed_client_passes(
        tmp_path, monkeypatch, fault, seed, anomaly):
    fixed = default_seed(seed, tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    assert swarm_mix(seed).writes != "own"  # the seed draws a mode that batches writes
    monkeypatch.setattr(faults, "FAULTS", faults.parse(fault))
    broken = default_seed(seed, tmp_path / "broken")
    assert broken.verdict == "invalid", (broken.verdict, broken.violation)
    assert anomaly in json.dumps(broken.results["check"], default=str), broken.results["check"]


def test_an_unknown_client_fault_is_one_line_and_exit_254():
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import node.client"], capture_output=True,
                         text=True, timeout=60,
                         env={**os.environ, faults.ENV: "misroute,bogus"})
    assert out.returncode == 254 and out.stderr.count("\n") == 1
    assert "unknown client fault bogus" in out.stderr and "misroute" in out.stderr
