"""The whole-stack simulator's `lose` fault (harness.sim.stack_lose): files of a running tablet
server lose their names, and the paths that read or delete them while it runs must refuse or
fail the replica, never raise an error no guard handles. Recorded seeds of the lost-files bundle
replay what it found."""

from __future__ import annotations

import errno
import os
import random

import pytest

from harness.sim.disk import SimDisk
from harness.sim.stack import StackConfig, StackSim
from harness.sim.stack_lose import losable
from harness.sim.swarm import BUNDLED, FIFTH_BUNDLES, bundle_of, parse_mix, swarm_mix

LOST_FILES = FIFTH_BUNDLES["lost-files"]


def test_lose_is_drawn_only_in_its_bundle():
    assert "lose" in BUNDLED
    drew = [s for s in range(3000) if "lose" in swarm_mix(s).kinds()]
    assert drew and drew == [s for s in range(3000) if bundle_of(s) == "lost-files"]


def test_the_newest_segment_of_each_wal_is_never_lost():
    """Its loss takes acknowledged entries with nothing on the disk to say so."""
    disk = SimDisk(random.Random(0))
    for d in ("/data", "/data/wals", "/data/wals/t", "/data/tablet-meta"):
        disk.mkdir(d)
    for path in ("/data/wals/t/wal-000000001", "/data/wals/t/wal-000000002",
                 "/data/tablet-meta/t"):
        fd = disk.open(path, create=True)
        disk.pwritev(fd, [b"x"], 0)
        disk.fsync(fd)
    for d in ("/data", "/data/wals", "/data/wals/t", "/data/tablet-meta"):
        disk.fsync_dir(d)
    assert losable(disk) == ["/data/tablet-meta/t", "/data/wals/t/wal-000000001"]
    disk.open("/data/wals/t/wal-000000003", create=True)  # a newer one, its name unsynced
    assert losable(disk) == ["/data/tablet-meta/t", "/data/wals/t/wal-000000001",
                             "/data/wals/t/wal-000000002"]


def test_a_master_may_lose_a_file_while_no_master_is_impaired():
    from types import SimpleNamespace

    from harness.sim.stack_lose import choose

    sim = SimpleNamespace(masters=["m1", "m2"], tservers=["t1"], down=set(), flipped=set(),
                          reprovisioned=set(), spare="m3")
    chooser = SimpleNamespace(sim=sim, _impaired=lambda: sim.down | (sim.flipped & {"m1", "m2"}))
    drawn = {choose(chooser, random.Random(i))[1][0] for i in range(60)}
    assert drawn == {"m1", "m2", "t1"}
    sim.flipped.add("m1")  # one master damaged: no other may be
    assert {choose(chooser, random.Random(i))[1][0] for i in range(60)} == {"t1"}


def _run(tmp_path, seed: int, workload: str, *names: str):
    sim = StackSim(StackConfig(seed=seed, workload=workload, seconds=15.0,
                               mix=parse_mix(LOST_FILES)), tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    for name in names:
        assert result.probes.get(name, 0) >= 1, name
    return [e[2] for e in sim.events if e[1] == "lose"]


@pytest.mark.parametrize("seed, workload, probe, lost", [
    # a delete (the masters evicting a replica) of one whose superblock went: FAILED and
    # ILLEGAL_STATE, where the FileNotFoundError was a handler failure (REMOTE_ERROR)
    (41, "list-append", "tablet.tombstone.write_failed", "/data/tablet-meta/"),
    # log GC meeting a segment that went: taken as deleted, where each GC failed again on it
    (32, "register", "wal.gc.segment_already_gone", "/data/wals/"),
    # a copy from a leader whose superblock went: refused, and the leader fails, so the
    # masters replace it rather than every copy its followers need being refused
    (62, "register", "copy.source.superblock_unreadable", "/data/tablet-meta/"),
    # a segment gone in the middle of a log: its next start refuses the gap
    (1, "list-append", "wal.recover.sequence_gap_refused", "/data/wals/"),
])
def test_a_lost_file_is_met_by_a_refusal_or_a_failed_replica(tmp_path, seed, workload, probe,
                                                             lost):
    events = _run(tmp_path, seed, workload, probe)
    assert any(len(v) == 3 and v[2].startswith(lost) for v in events), events


def test_a_background_step_failing_on_a_lost_file_fails_the_seed(tmp_path, monkeypatch):
    """Log GC as it was: a doomed segment already gone raised, which the snapshot task only
    logged, so GC failed on it at every later snapshot and the log was never collected, while
    every seed passed. The checks now fail a seed whose replica's background work raised an
    error no disk fault explains (Replica.unexpected): the GC seed above, on that code."""
    from node.wal.log import Log

    real_gc = Log.gc

    def gc_as_before(self):
        missing = [s.path for s in self._closed if not self._disk.exists(s.path)]
        if missing:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), missing[0])
        return real_gc(self)

    monkeypatch.setattr(Log, "gc", gc_as_before)
    result = StackSim(StackConfig(seed=32, workload="register", seconds=15.0,
                                  mix=parse_mix(LOST_FILES)), tmp_path).run()
    assert "background failure" in (result.violation or ""), result.violation
    assert "FileNotFoundError" in result.violation


def test_a_copy_begun_on_a_source_whose_superblock_went_fails_the_seed_on_the_old_code(
        tmp_path, monkeypatch):
    """The session's superblock read as it was (no guard): the lost-files seed that reaches
    the path fails on the FileNotFoundError the copy's begin handed the RPC layer."""
    import asyncio

    from node.tablet.superblock import Superblock
    from node.tserver import copy_source

    async def unguarded(r):
        return await asyncio.to_thread(Superblock.load, r.paths.superblock, r.paths.disk)

    monkeypatch.setattr(copy_source, "_superblock", unguarded)
    result = StackSim(StackConfig(seed=62, workload="register", seconds=15.0,
                                  mix=parse_mix(LOST_FILES)), tmp_path).run()
    assert "handler failed" in (result.violation or ""), result.violation
    assert "ts.begin_copy_session" in result.violation
