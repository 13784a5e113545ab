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

from wal_mutants import trust_the_cached_footer, trust_the_cached_tail

from harness.sim.stack import StackConfig, StackSim
from harness.sim.swarm import parse_mix
from node.tablet.cmeta import ConsensusMetadata

TS1, TS2 = "10.77.0.111", "10.77.0.112"
SCHEDULE = ((10.0, "disk", [TS1, "eio", 0.3]), (11.0, "kill", TS1), (11.2, "disk-clear", [TS1]),
            (11.5, "restart", TS1), (14.0, "power", [TS1, TS2]), (14.5, "restart", TS1),
            (14.6, "restart", TS2))
KILLS_ON_FAILING_DISKS = "kill:8,disk:8,restart:6,power:6,heal:1,transfer:2;every=0.5-2;fsync=10"
# elections on failing disks: faults every few tenths of a second under a light load, so a
# voter's replicas still run (their WAL syncs are rare) when a transfer asks for its vote
ELECTIONS_ON_FAILING_DISKS = ("disk:8,transfer:8,kill:8,restart:6,heal:1;every=0.1-0.4;"
                              "reads=linearizable;load=2x10")


def _scripted(out: Path):
    return StackSim(StackConfig(seed=0, seconds=20.0, schedule=SCHEDULE), out).run()


def _random(out: Path):
    return StackSim(StackConfig(seed=93, workload="list-append", seconds=40.0,
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


def _elections_both_ways(seed: int, workload: str, seconds: float, tmp_path, take_out_the_fix):
    """The seed on ELECTIONS_ON_FAILING_DISKS: valid on the engine as it is (asserted), then
    its result with the fix taken out (`take_out_the_fix()`)."""
    def run(out: Path):
        return StackSim(StackConfig(seed=seed, workload=workload, seconds=seconds,
                                    mix=parse_mix(ELECTIONS_ON_FAILING_DISKS)), out).run()

    fixed = run(tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    take_out_the_fix()
    return run(tmp_path / "before")


def _trust_the_cached_record(monkeypatch) -> None:
    """The replica's open before it saved its consensus metadata again: it acts on a record
    that may live in the page cache only (a save whose directory sync failed)."""
    monkeypatch.setattr(ConsensusMetadata, "open",
                        classmethod(lambda cls, path, *disk: cls.load(path, *disk)))


def test_a_term_read_back_from_the_cache_is_caught_before_any_power_loss(monkeypatch, tmp_path):
    """A voter on a failing disk saves a new term while its directory syncs fail, is killed and
    restarts on the record its cache holds. Opened without saving it again, the replica answers
    in a term a power loss would take back: the durability check (a message's term and vote
    on disk before it is sent) names it, with no power loss needed."""
    before = _elections_both_ways(94, "register", 20.0, tmp_path,
                                  lambda: _trust_the_cached_record(monkeypatch))
    assert (before.violation or "").startswith("durability before answer: tablet "), before.violation
    assert "sent HeartbeatResponse in term 2" in before.violation, before.violation


def test_a_footer_whose_sync_failed_is_caught_by_the_random_nemesis(monkeypatch, tmp_path):
    """A clean close's footer sync fails with EIO on a dying tablet server; restarted with its
    cache, bootstrap read the footer, trusted it and began the next segment; the footer never
    reached the disk, and the replica later refused its own log (an older segment without a
    footer) on a disk no fault had damaged. Found by the swarm ensemble; this mix reaches it
    rarely (one seed of 1,300 searched since appends stopped being resent at every read
    round, one of 150 before). The bootstrap that writes the newest segment again first
    passes."""
    before = _elections_both_ways(1056, "register", 40.0, tmp_path,
                                  lambda: trust_the_cached_footer(monkeypatch))
    assert (before.violation or "").startswith("corruption on an undamaged disk: tablet "), before.violation
    assert "no footer but is not the newest segment" in before.violation
