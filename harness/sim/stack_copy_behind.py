"""The whole-stack simulator's `copy-behind` fault: a follower tombstoned while its leader
writes behind on a slow disk, copied back from the leader's synced WAL, and the leader crashing
(harness.sim.stack_faults draws it: tablet, leader L, voters F and R, L's fsync time, F's cut,
and `after`).

L's disk is slowed; once L's own write of the tablet runs behind its Ready (node.replica.
wal_writes: F and R hold, and may commit, entries L's WAL has not synced), R is tombstoned, its
tombstone keeping the last OpId it logged, past L's synced end. L copies the tablet back to R
from what its WAL has synced: the receiver must refuse a copy ending behind the tombstone's last
OpId (copy.refused.behind_tombstone), or R votes for logs without entries it acknowledged.
`after` s later L crashes, losing what it had not synced, and restarts, with F cut from L and R.

L keeps heartbeating while its writes run behind (any number of them, node.replica.wal_writes),
so it hears R's refusals and copies while its WAL still lags what R logged. Until writes behind
could pile up, a busy L awaited its second write and sent nothing until its syncs ended; the
quiet-copy-behind bundle (harness.sim.swarm), the fault on a light load, was the only way in.

`superblock-behind` is the same race with R's superblock lost at rest instead of a tombstone:
R loses power, its superblock's name goes (a file system check, a stray rm) while its
consensus metadata and WAL stay, and it reboots without the tablet. L, told the tablet is not
found, copies it to R from its synced WAL, behind what R logged and acknowledged. No tombstone
keeps R's last OpId then: only R's own log, still on its disk, says it. A third of the time
R's consensus metadata goes too, and every copy must be refused (copy.refused.log_without_metadata):
R may have voted in a term its fresh metadata would not remember. Another third, a bit of R's
newest WAL segment flips at rest too, so its log does not read
(copy.prepare.lost_superblocks_log_unreadable): nothing says what R acknowledged, and while R
is a voter no copy may install (copy.refused.last_op_unknown_voter).

`failed-behind` is the same race with R's replica FAILED while it runs and then deleted, in
place of a tombstone: R's disk fails its syncs for a moment (a transient EIO; R is not
rebooted), R's replica of the tablet fails on it (replica.failed.while_running), and a
DeleteTablet without a config index, as an operator's or a failed disk's, forgets it and leaves
its files (TabletManager._forget_failed). L, told the tablet is not found, copies it to R from
its synced WAL, behind what R acknowledged before it failed. Only what R knew in memory when it
was forgotten says that (copy.prepare.forgotten_replicas_last_op): its files prove no last OpId.
"""

from __future__ import annotations

import asyncio
import functools

from harness.sim import stack_damage
from harness.sim.loop import SYSTEM
from harness.sim.stack_checks import DATA_DIR, _replica
from harness.sim.stack_masters import SKIPPED
from harness.sim.stack_watch import until

# How long the fault waits for L's write to run behind: on a quiet tablet the next write may be
# a second or more away; on a busy one it is at once.
WAIT_S = 4.0


async def copy_behind(sim, value: list):
    """Slow L's disk, tombstone R once L writes behind, and `after` s past that crash L (its
    disk well again) and restart it, with F cut from L and R."""
    return await _behind(sim, value, sim._tombstone)


async def superblock_behind(sim, value: list):
    """copy-behind with R's superblock lost across a power loss in place of its tombstone."""
    return await _behind(sim, value, functools.partial(_lose_superblock, sim))


async def failed_behind(sim, value: list):
    """copy-behind with R's replica failed while running and deleted in place of its tombstone."""
    return await _behind(sim, value, functools.partial(_fail_and_forget, sim))


async def _fail_and_forget(sim, value: list):
    """R's disk fails every sync until R's replica of the tablet is FAILED (up to WAIT_S), then
    works again without a reboot; the FAILED replica is deleted (forgotten, its files left)."""
    tablet, r = value[0], value[3]
    if r in sim.down or r in sim.disk_faults:
        return SKIPPED
    sim._set_disk_fault(r, "eio", [r, "eio", 1.0])
    failed = await until(sim, lambda: getattr(_replica(sim.servers.get(r), tablet), "failed", None),
                         WAIT_S)
    if failed:
        await asyncio.sleep(0.01)  # a step for the failure to settle before the disk heals
    sim._clear_disk_fault(r, reboot=False)
    if not failed:
        return "skipped: R's replica did not fail"
    return await sim._tombstone(value)


async def _lose_superblock(sim, value: list):
    """R loses power, its superblock of the tablet loses its name (with `value[6]` "cmeta",
    its consensus metadata too: the votes it cast are gone, and no copy may merge fresh
    metadata over the log it left; with "wal", a bit of its newest WAL segment flips: its log
    does not read), and R reboots."""
    from node.tablet.paths import TabletPaths

    tablet, r = value[0], value[3]
    if r in sim.down:
        return SKIPPED
    sim._crash(r)
    flip = stack_damage.flip_wal_batch_at_rest(sim, r, tablet) if value[6] == "wal" else None
    paths = TabletPaths(DATA_DIR, tablet)
    for path in (paths.superblock, *([paths.consensus_meta] if value[6] == "cmeta" else [])):
        if sim.disks[r].exists(path):
            sim.disks[r].lose_at_rest(path)
    if value[6] == "cmeta":
        # R is out of its tablet for good, refusing every copy: a damaged server, as a flip's,
        # whose tablets a second fault may leave without a majority (the liveness check)
        sim.flipped.add(r)
    sim._boot(r)
    return [*value[:8], *(flip or [])]


async def _behind(sim, value: list, take_r):
    """The race, R taken by `take_r` (a tombstone, a lost superblock) once L writes behind."""
    tablet, leader, f, r, slow, cut_s, _, after = value[:8]
    if leader in sim.disk_faults or leader in sim.down:
        return [*value[:8], "skipped: L's disk has a fault or L is down"]
    sim._set_disk_fault(leader, "slow", [leader, "slow", round(slow / 2, 6), slow])
    await asyncio.sleep(0.3)  # writes pile up behind L's sync: F and R commit them
    await until_writing_behind(sim, leader, tablet)
    done = await take_r(value)
    if done is SKIPPED or isinstance(done, str):
        sim._clear_disk_fault(leader)
        return [*value[:8], "skipped: R is down" if done is SKIPPED else done]
    await asyncio.sleep(after)
    sim._clear_disk_fault(leader)
    if leader not in sim.down:
        sim._crash(leader, lose_unsynced=True)
        sim._cut(f, leader, cut_s)
        sim._cut(f, r, cut_s)
        sim.loop.call_later(0.2, sim._boot_if_down, leader, context=SYSTEM)
    return done


async def until_writing_behind(sim, host: str, tablet: str) -> None:
    """Wait, up to WAIT_S, until `host`'s replica of `tablet` has a write of its own running
    behind: entries its followers hold that its WAL has not synced."""
    def behind() -> bool:
        replica = _replica(sim.servers.get(host), tablet)
        return replica is None or replica.writes.behind

    await until(sim, behind, WAIT_S)
