"""The whole-stack simulator's `reprovision` fault (a late swarm kind, harness.sim.swarm.LATE): a
tablet server's host re-provisioned, as an operator replacing a dead disk or re-imaging a machine
does. The server stops (a power loss), its disk is replaced by an empty one, and it starts again
at the same address: it formats a fresh data directory, so it has a new uuid and no replicas.

Its old uuid stays a member of its tablets' configs until the leaders evict it and the masters
re-replicate (a silent member, FAILED_AFTER_S): until then peers, the masters and the client
still send to the old uuid at that address and are refused (rpc.server.wrong_uuid), and the
masters hold two servers at one address. What the invariants remember of the host's old
replicas goes (`Invariants.forget`, as for the spare master): its new replicas are other ones.
Once a seed, and counted with flips and damage (MAX_FLIPS: a server's data lost or damaged on a
majority of a tablet's replicas loses data in any replicated system).
"""

from __future__ import annotations

import random


def reprovision(sim, value: list, faults) -> list:
    """`value`: [host] as drawn; recorded as [host, old uuid or None]. `faults`: the new disk's
    SimFaults (those of a disk without an injected fault)."""
    from harness.sim.disk import SimDisk

    host = value[0]
    old = getattr(sim.servers.get(host), "uuid", None)
    if host not in sim.down:
        sim._crash(host)
    sim.invariants.forget(host)
    sim.disk_faults.pop(host, None)
    sim.start_failures.pop(host, None)  # a failure to start before this is history
    rng = random.Random(f"reprovision/{sim.cfg.seed}/{host}")  # the run's stream untouched
    sim.disks[host] = SimDisk(random.Random(rng.getrandbits(64)), faults)
    sim.reprovisioned.add(host)
    sim._boot(host)
    return [host, old]
