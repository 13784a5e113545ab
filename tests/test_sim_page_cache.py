"""A failing disk's page cache under the whole-stack simulator. After an fsync fails with EIO,
Linux marks the pages it could not write clean and keeps them: a process killed with its
machine up (the `kill` fault) restarts reading batches that were never durable, and only a
later power loss shows whether it trusted them. The nemesis aims a kill at a server whose
failed syncs left such pages, mends the disk before the restart half the time, and aims a
crash or power loss at a server that started on them; a replica failing on corrupt files
where no fault touched them is a violation. Both directions are held here: the engine's
bootstrap (which writes the recovered tail again and syncs it) passes, and the bootstrap
before it (a footer after the tail it read) fails, on a scripted schedule and on a seed of
the random nemesis."""

from __future__ import annotations

from pathlib import Path

from wal_mutants import trust_the_cached_tail

from harness.sim.stack import StackConfig, StackSim
from harness.sim.swarm import parse_mix

TS1, TS2 = "10.77.0.111", "10.77.0.112"
SCHEDULE = ((10.0, "disk", [TS1, "eio", 0.3]), (11.0, "kill", TS1), (11.2, "disk-clear", [TS1]),
            (11.5, "restart", TS1), (14.0, "power", [TS1, TS2]), (14.5, "restart", TS1),
            (14.6, "restart", TS2))
KILLS_ON_FAILING_DISKS = "kill:8,disk:8,restart:6,power:6,heal:1,transfer:2;every=0.5-2;fsync=10"


def _scripted(out: Path):
    return StackSim(StackConfig(seed=0, seconds=20.0, schedule=SCHEDULE), out).run()


def _random(out: Path):
    return StackSim(StackConfig(seed=53, workload="list-append", seconds=40.0,
                                mix=parse_mix(KILLS_ON_FAILING_DISKS)), out).run()


def test_a_restart_on_pages_failed_syncs_dropped_then_a_power_loss_reads_back(monkeypatch, tmp_path):
    fixed = _scripted(tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    assert {"replica.failed.while_running", "wal.recover.unfinished_segment_closed"} <= set(fixed.probes)
    trust_the_cached_tail(monkeypatch)
    before = _scripted(tmp_path / "before")
    assert (before.violation or "").startswith("corruption on an undamaged disk: tablet "), before.violation
    assert "WalCorruption" in before.violation


def test_the_random_nemesis_reaches_a_restart_on_dropped_pages(monkeypatch, tmp_path):
    fixed = _random(tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    trust_the_cached_tail(monkeypatch)
    before = _random(tmp_path / "before")
    assert (before.violation or "").startswith("corruption on an undamaged disk: tablet "), before.violation
