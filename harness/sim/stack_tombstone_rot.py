"""The whole-stack simulator's `tombstone-rot` fault: a tombstone that is still a voter, whose
consensus metadata a bit flip has made unreadable, while its tablet elects
(harness.sim.stack_faults draws it: tablet, leader L, voters F and R, and `after`).

R's replica is tombstoned in place (ts.delete_tablet, as a failed disk or an operator leaves a
voter); R then loses power, one bit of the tombstone's consensus metadata flips, and R reboots.
A tombstone keeps its metadata to vote with (node.tserver.copy.tombstone); one that does not
read knows neither its term nor its vote, so it must answer no vote request at all
(tombstone.vote.refused_corrupt_metadata), and every copy L sends it is refused, since the
copy's merge cannot keep votes it cannot read (copy.refused.votes_lost). `after` s later L
crashes, so F campaigns, asking R too; L is left to the mix's restarts. Before this fault only
READY replicas' metadata was ever damaged, and no seed reached a tombstone's vote on metadata
that does not read.
"""

from __future__ import annotations

import asyncio

from harness.sim import stack_damage
from harness.sim.stack_masters import SKIPPED

AFTER_S = (0.5, 3.0)  # from R's reboot to L's crash


async def tombstone_rot(sim, value: list):
    """Tombstone R, then power loss on R, a flipped bit in its tablet's consensus metadata,
    the reboot; `after` s later crash L. Recorded with the flip: [..., path, offset, bit]."""
    tablet, leader, _, r, _, _, _, after = value[:8]
    if r in sim.down or leader in sim.down:
        return [*value[:8], "skipped: a host is down"]
    done = await sim._tombstone(value)
    if done is SKIPPED or len(done) > 8:
        return [*value[:8], f"skipped: no tombstone ({'R down' if done is SKIPPED else done[-1]})"]
    flip = stack_damage.flip_cmeta(sim, r, tablet)
    if flip is None:
        return [*value[:8], "skipped: no consensus metadata on R"]
    await asyncio.sleep(after)
    if leader not in sim.down:
        sim._crash(leader)
    return [*done, *flip]
