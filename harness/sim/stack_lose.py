"""The whole-stack simulator's `lose` fault (a bundled kind, harness.sim.swarm): a file of a
running server (a tablet server's, or a master's, whose catalog is a replica too) loses its
name, as a file system check that moves it to lost+found or an operator's stray rm does, and
the server runs on.

Every other fault that takes a file (the damage fault's `delete`) takes it while the server
is down, so the file's absence is first met by bootstrap, which every such seed judges. A
running server meets it elsewhere: log GC deleting a segment that is gone, a tablet copy
pinning or reading one, a delete tombstoning a replica whose superblock is gone. Each must
answer with a refusal or a FAILED replica, never an error no guard handled (the checks fail a
seed on a handler failure) nor a replica that runs on from a hole at its next start.

Any file of the server's data directory whose name is at rest may go, but the newest segment
of each WAL: its loss takes entries the replica acknowledged with nothing left on its disk to
say so (the log simply ends earlier), which no engine can see, and two such replicas of one
tablet would lose what a majority acknowledged. The server counts as damaged (`sim.flipped`),
within the seed's MAX_FLIPS, as for the damage fault.

`lose-snapshot` (bundled too) aims the loss: a test tablet's leader L loses its newest
snapshot, then a voter R of the tablet is tombstoned in place, so L copies the tablet to R at
once. L's log was collected up to the lost snapshot, and the snapshot a copy pins is the newest
left on the disk, an older one or none: the WAL then starts after it, and the copy must be
refused (copy.pins.wal_starts_after_snapshot), never sent as a log with a hole. The file losing
its name at random met a copy that way in no seed: a tablet's snapshot is one file of dozens.
"""

from __future__ import annotations

import random

from harness.sim.stack_checks import DATA_DIR
from harness.sim.stack_masters import SKIPPED


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """[host, random bits]: a server up and not yet damaged (the caller keeps within
    MAX_FLIPS); a master only while no master is impaired (as the flip fault's), since a master
    whose instance file went may never start again."""
    sim = chooser.sim
    impaired = chooser._impaired()
    fresh = [h for h in sim.masters + sim.tservers
             if h not in sim.down | sim.flipped | sim.reprovisioned and h != sim.spare
             and (h in sim.tservers or not impaired & set(sim.masters))]
    if not fresh:
        return None, None
    return "lose", [rng.choice(fresh), rng.getrandbits(32)]


async def lose(sim, value: list) -> list:
    """Apply `value`; recorded as [host, bits, the path lost], or why not."""
    host = value[0]
    if host in sim.down or host not in sim.disks:
        return [*value[:2], "skipped: down"]
    disk = sim.disks[host]
    files = losable(disk)
    if not files:
        return [*value[:2], "skipped: no file at rest"]
    path = files[value[1] % len(files)]
    disk.lose_live(path)
    sim.flipped.add(host)
    return [*value[:2], path]


def losable(disk) -> list[str]:
    """The files of the data directory the fault may take: all whose name is at rest but the
    newest segment of each WAL directory (whether its own name is at rest or not)."""
    from node.wal.segment import parse_segment_name

    files = disk.losable(DATA_DIR)
    newest = set()
    for directory in {p.rsplit("/", 1)[0] for p in files}:
        segs = [(s, n) for n in disk.listdir(directory) if (s := parse_segment_name(n)) is not None]
        if segs:
            newest.add(f"{directory}/{max(segs)[1]}")
    return [p for p in files if p not in newest]


def choose_snapshot(chooser, rng: random.Random) -> tuple[str | None, object]:
    """[L, tablet, R]: a test tablet whose leader L is undamaged and holds a snapshot at rest,
    and another voter R of it (the caller keeps within MAX_FLIPS)."""
    sim = chooser.sim
    leaders = {t: (h, r) for t, (h, r) in chooser._test_tablets().items()
               if h not in sim.flipped and r.snapshots.indexes()}
    if not leaders:
        return None, None
    tablet = rng.choice(sorted(leaders))
    host, replica = leaders[tablet]
    voters = chooser.other_voters(replica)
    if not voters:
        return None, None
    return "lose-snapshot", [host, tablet, rng.choice(voters)]


async def lose_snapshot(sim, value: list) -> list:
    """Apply `value`: L's newest snapshot of the tablet loses its name, then R is tombstoned.
    Recorded as [L, tablet, R, the path lost, what the tombstone did], or why not."""
    host, tablet, r = value[:3]
    replica = getattr(sim.servers.get(host), "replicas", {}).get(tablet)
    if host in sim.down or replica is None or replica.role.name != "LEADER":
        return [*value[:3], "skipped: L is down or no longer leads"]
    indexes = replica.snapshots.indexes()
    if not indexes:
        return [*value[:3], "skipped: no snapshot"]
    path = str(replica.snapshots.path_for(indexes[-1]))
    sim.disks[host].lose_live(path)
    sim.flipped.add(host)
    done = await sim._tombstone([tablet, None, None, r])
    if done is SKIPPED:
        return [*value[:3], path, "skipped: R is down"]
    return [*value[:3], path, done[4] if len(done) > 4 else "tombstoned"]  # or why it failed
