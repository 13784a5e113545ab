"""The whole-stack simulator's `maintenance` fault (a late swarm kind, harness.sim.swarm.LATE): an
operator works on a tablet server in Kudu's maintenance mode, and its disk fails meanwhile.

The operator puts tablet server T in maintenance (`kudu tserver state enter_maintenance`;
here master.tserver_state, through the client, as the CLI would): the masters replace none of
T's replicas while it lasts (master.rereplication.maintenance_deferred), where they replace a
FAILED one within a reconcile round otherwise. Then T's disk fails every fsync (a failing
drive, the reason the operator is there), so T's replicas fail as they write
(replica.failed.while_running) and stay members of their configs; in `restart` mode T is
also restarted on the failing disk, so they come back FAILED at their open. The tablets' leaders
run on and, with a small snapshot interval (swarm SNAPSHOTS), compact their logs past what T's
replicas hold: the leader asks for a copy to T (copy.trigger.sent), which a FAILED replica
refuses (copy.refused.failed_replica) and one that failed while running takes, tombstoned first
(copy.over_failed_running_replica). After `for_s` s the disk is replaced (the disk fault
cleared, T rebooted) and T leaves maintenance.
"""

from __future__ import annotations

import asyncio
import random

MODES = ("running", "restart")  # T's replicas fail as they run, or at the open of a restart
FOR_S = (4.0, 12.0)  # how long T is off the network
FAILING_S = 4.0  # then how long it runs on its failing disk before the disk is replaced
CALL_PATIENCE_S = 5.0  # each of the operator's master calls, tried for up to this


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """A tablet server T, up and well, holding a follower of a test tablet, while no disk
    fails anywhere. Value: [T, mode, for_s]."""
    sim = chooser.sim
    if any(m != "slow" for m in sim.disk_faults.values()):
        return None, None
    impaired = chooser._impaired()
    leaders = {h for h, _ in chooser._test_tablets().values()}
    held = [h for h in sorted(set(sim.servers) & set(sim.tservers))
            if h not in impaired and h not in sim.disk_faults and h not in leaders
            and getattr(sim.servers[h], "replicas", None)]
    if not held:
        return None, None
    return "maintenance", [rng.choice(held), rng.choice(MODES), round(rng.uniform(*FOR_S), 3)]


async def maintenance(sim, value: list) -> list:
    """Apply `value` (`choose`); recorded as [*value, outcome]."""
    host, mode, for_s = value[:3]
    uuid = getattr(sim.servers.get(host), "uuid", None)
    if host in sim.down or host in sim.disk_faults or uuid is None:
        return [*value[:3], "skipped: not as chosen"]
    if not await _state(sim, uuid, True):
        return [*value[:3], "skipped: maintenance refused"]
    sim.net.isolate(host)  # the operator takes T off the network for the work
    await asyncio.sleep(for_s)
    sim._set_disk_fault(host, "eio", [host, "eio", 1.0])
    if mode == "restart":
        if host not in sim.down:
            sim._crash(host)
        sim._boot(host)
    sim.net.heal()  # T back on the network, its disk failing now
    await asyncio.sleep(FAILING_S)
    sim._clear_disk_fault(host)  # a new disk: T rebooted (unless a heal did it already)
    left = await _state(sim, uuid, False)
    return [*value[:3], "left" if left else "still in maintenance"]


async def _state(sim, uuid: str, maintenance: bool) -> bool:
    """The operator's call, retried every half second for CALL_PATIENCE_S; whether it took."""
    from node.rpc import RpcError

    deadline = sim.loop.time() + CALL_PATIENCE_S
    while sim.loop.time() < deadline:
        try:
            await asyncio.wait_for(sim.client.tserver_state(uuid, maintenance), CALL_PATIENCE_S)
            return True
        except (RpcError, TimeoutError, OSError):
            await asyncio.sleep(0.5)
    return False
