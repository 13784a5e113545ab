"""The whole-stack simulator's `copy-delete` fault (a bundled kind, harness.sim.swarm.BUNDLED): a
replica deleted while a tablet copy onto it is under way, three ways an operator or the
masters do it.

The copy's target R is a follower of a test tablet tombstoned so that its leader L copies the
tablet back over a slowed link (harness.sim.stack_copy_cut.copy_under_way); once the copy's
source holds R's session, `wait` round trips later:
- delete: a plain DeleteTablet reaches R (`tessera tablet delete-replica`, or a master's
  eviction without a config index). The copy is aborted and whatever it wrote goes; L's
  StartTabletCopy call, still waiting on it, is told the copy was aborted by a delete
  (copy.aborted_by_delete), and L copies anew later;
- delete-cas: the masters' eviction, which carries the config index it decided on (Kudu's
  cas_config_opid_index_less_or_equal): refused while the copy installs a config R does not
  know yet (tablet.delete.cas_refused_while_copying), and the copy runs on;
- offline: R's process dies mid-copy, and the operator runs `tessera local-replica delete
  TABLET --keep-tombstone` on the stopped server before it comes back: the files are an
  unfinished copy's, which the tool tombstones as start-up would, keeping the tombstone's last
  OpId for its votes (tools.delete.unfinished_copy_tombstoned).
No seed reached any of the three before (the copy-cut kind hits a copy with network faults and
crashes only). Each fault takes the StackSim it acts on.
"""

from __future__ import annotations

import asyncio
import random

from harness.sim import stack_copy_cut
from harness.sim.loop import SYSTEM

MODES = ("delete", "delete-cas", "offline")


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """As copy-cut's choice (a test tablet's leader L, a voter R of it up and well), then how
    R's replica is deleted. Value: [tablet, L, R, mode, delay, wait] (hosts; wait in round
    trips of the slowed link)."""
    kind, value = stack_copy_cut.choose(chooser, rng)
    if kind is None:
        return None, None
    tablet, leader, r, _, delay, _, wait = value
    return "copy-delete", [tablet, leader, r, rng.choice(MODES), delay, wait]


async def copy_delete(sim, value: list) -> list:
    """Apply `value` (see `choose`); recorded as [*value, source, outcome], or [*value, why
    skipped]."""
    tablet, leader, r, mode, delay, wait = value[:6]
    try:
        source = await stack_copy_cut.copy_under_way(sim, tablet, leader, r, delay)
        if source.startswith("skipped"):
            return [*value[:6], source]
        await asyncio.sleep(wait * 2 * delay)
        if r in sim.down:
            return [*value[:6], source, "skipped: R is down"]
        if mode == "offline":
            return [*value[:6], source, _offline_delete(sim, tablet, r)]
        cas = _leader_config_index(sim, leader, tablet) if mode == "delete-cas" else None
        done = await sim._tombstone([tablet, None, None, r], cas)
        outcome = ("skipped: R stopped" if not isinstance(done, list)
                   else done[-1][:200] if len(done) > 4 else "deleted")
        return [*value[:6], source, outcome]
    finally:
        sim.loop.call_later(0.0, stack_copy_cut._unslow, sim, leader, r, delay, context=SYSTEM)


def _leader_config_index(sim, leader: str, tablet: str) -> int:
    """The committed config index L holds for `tablet`, what the masters' eviction would carry
    (0 when L no longer runs it: a copy under way refuses any index alike)."""
    replica = getattr(sim.servers.get(leader), "replicas", {}).get(tablet)
    return replica.committed_config_index if replica is not None else 0


def _offline_delete(sim, tablet: str, host: str) -> str:
    """Crash `host` (its disk keeps a seeded prefix of what it had not synced), then the
    operator's offline delete with --keep-tombstone on it (stack_unsafe._delete, which deletes
    a replica the simulator damaged whole); the restart fault brings the server back."""
    from harness.sim.stack_unsafe import offline_delete

    sim._crash(host)
    instead = offline_delete(sim, tablet, host)
    return f"crashed, then: {instead}" if instead else "crashed, then deleted offline"
