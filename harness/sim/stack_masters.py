"""The whole-stack simulator's faults on the masters' own membership (harness.sim.stack), as an
operator runs Kudu's `master add` and `master remove` (node.tools.admin's join_master and
leave_master, which the CLI runs too):

- `masters`: a fourth master added on the spare host (started empty, joined through the leader:
  added as a non-voter, copied the catalog, promoted), or removed again, then stopped and wiped;
- `master-swap` (a late swarm kind, harness.sim.swarm.LATE): Kudu's master migration, the other
  way round from `masters`: the spare added if it is not a member yet, then the LEADER master
  removed. Removing the leader hands leadership over first (master.membership.
  leader_hands_over): the tool is told NOT_LEADER with the successor and asks it again. The
  successor may lead before it has learned the address of the master just added (it learns it
  from its peers every reconcile round), so it sends the tablet servers no master list
  (master.heartbeat.masters_not_learned). The removed master is stopped only `linger` s later,
  as an operator gets to it, and meanwhile a client started with the old master list (the
  removed one first) asks it for the test table: it refuses (master.removed.refused). Then it
  is stopped and its disk wiped, and its host is the spare: a later add brings it back as a
  new master (another uuid, an empty disk), as an operator re-imaging a machine does.

Tablet servers learn the masters from heartbeat replies and must follow the committed config
(Invariants.check_master_lists). Each fault takes the StackSim it acts on.
"""

from __future__ import annotations

import asyncio
import random

MASTER_PORT, TSERVER_PORT = 7051, 7050
SKIPPED = object()  # a nemesis event that did not apply
SWAP_LINGER_S = (0.5, 6.0)  # master-swap: from the removal to the removed master's stop
STALE_ASK_EVERY_S = 0.5  # master-swap: the stale client's lookups at the removed master


async def masters(sim, planned: list | None):
    """The `masters` fault: add the spare master, or remove it again (`leave_master`), then
    stop it and wipe its disk. `planned`: [op, host] to replay. A join that fails leaves the
    spare stopped and wiped; the error is recorded."""
    from node.rpc import RpcError
    from node.tools.admin import AdminError, leave_master

    op = planned[0] if planned is not None else (
        "remove" if sim.spare in sim.masters else "add")
    host = sim.spare
    if (op == "add") == (host in sim.masters):
        return SKIPPED  # a replay out of step with this run
    try:
        if op == "add":
            await add_spare(sim)
        else:
            await leave_master(sim.client, sim.spare_uuid or f"{host}:{MASTER_PORT}")
            drop_spare(sim)
    except (AdminError, RpcError, TimeoutError, OSError) as e:
        if op == "add":
            drop_spare(sim)
        return [op, host, f"failed: {e or type(e).__name__}"]
    return [op, host]


async def add_spare(sim) -> None:
    """Start a master with an empty disk on the spare host and join it (`join_master`);
    raises what the join raised (the caller drops the spare again)."""
    from harness.sim.disk import SimDisk
    from harness.sim.stack_damage import baseline_faults
    from node.rpc import RpcError
    from node.tools.admin import AdminError, join_master

    host = sim.spare
    sim.disks[host] = SimDisk(random.Random(sim._spare_disks.getrandbits(64)),
                              baseline_faults(sim.cfg.mix))
    sim.skew_s[host] = 0.0
    sim.masters.append(host)
    sim._boot(host)
    sim.spare_uuid = None
    for _ in range(60):  # until it serves master.info
        try:
            info = await join_master(sim.client, (host, MASTER_PORT), timeout=30.0)
            sim.spare_uuid = info.uuid
            return
        except RpcError as e:
            if e.code.name != "NETWORK":
                raise
        await asyncio.sleep(0.5)
    raise AdminError("the new master never answered")


def drop_spare(sim) -> None:
    """Stop the spare master and forget it: a new master there later is another replica
    (another uuid, an empty disk), so what the invariants remember of this one goes too."""
    host = sim.spare
    if host not in sim.down:
        sim._crash(host)
    sim.down.discard(host)
    sim.masters.remove(host)
    sim.spare_uuid = None
    sim.invariants.forget(host)
    sim.disk_faults.pop(host, None)


def leader_master(sim) -> str | None:
    """The host of the master leading the catalog in the highest term, as the simulator sees
    the servers; None if none does."""
    from node.master.catalog import CATALOG

    leaders = [(r.term, h) for h in sim.masters if (s := sim.servers.get(h)) is not None
               and (r := getattr(s, "replicas", {}).get(CATALOG)) is not None
               and r.role.name == "LEADER" and not r.failed]
    return max(leaders)[1] if leaders else None


async def master_swap(sim, value: list):
    """`value`: [linger_s] as drawn; recorded as [linger_s, the host added or None, the
    removed leader's host, its uuid, how the stale client's lookups there ended], or with
    "skipped: ..." or "failed: ..." where it stopped. Only while every master is well (no
    master down, with a disk fault or a flipped bit): one master fewer must still leave a
    majority that works."""
    from node.protocol import TableLocations, TableName
    from node.rpc import RpcError
    from node.tools.admin import AdminError, leave_master

    linger = value[0]
    if any(h in sim.down or h in sim.disk_faults or h in sim.flipped for h in sim.masters):
        return [linger, "skipped: a master is impaired"]
    added = None
    if sim.spare not in sim.masters:
        joined = await masters(sim, ["add"])
        if len(joined) > 2:
            return [linger, *joined]
        added = sim.spare
    host = leader_master(sim)
    if host is None:
        return [linger, added, "skipped: no leader master"]
    uuid = sim.servers[host].uuid
    try:
        await leave_master(sim.client, uuid)
    except (AdminError, RpcError, TimeoutError, OSError) as e:
        return [linger, added, host, uuid, f"failed: {e or type(e).__name__}"]
    # the removed master runs on until the operator stops it; a client configured with the
    # old master list asks it first, as any such client's first lookup does
    answers: list[str] = []
    loop = asyncio.get_running_loop()
    until = loop.time() + linger
    while loop.time() < until and host not in sim.down:
        try:
            await sim.client.rpc.call((host, MASTER_PORT), "master.table_locations",
                                      TableName("test"), TableLocations, to_uuid="", timeout=1.0)
            answers.append("answered")
        except (RpcError, TimeoutError, OSError) as e:
            answers.append(getattr(getattr(e, "code", None), "name", type(e).__name__))
        await asyncio.sleep(STALE_ASK_EVERY_S)
    sim.spare, sim.spare_uuid = host, uuid
    drop_spare(sim)
    return [linger, added, host, uuid, sorted(set(answers))]
