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
"""

from __future__ import annotations

import random

from harness.sim.stack_checks import DATA_DIR


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
