"""The whole-stack simulator's `ddl` fault (a late swarm kind, harness.sim.swarm.LATE): the
application's DDL beside the workload: a table created, kept `keep` s, and dropped, as Kudu's
CreateTable and DeleteTable. A drop only marks the table's records deleted in the catalog; the
leader master's reconciler then deletes the replicas the tablet servers report
(master.reconcile.delete_deleted_tablet), also those of a server partitioned away at the drop,
when it reports again.

The `split` variant first cuts the leader master M off from the other masters (the tablet
servers and the client still reach it), for `cut` s, early in its check-quorum round (it then
leads longest, see `_leader_that_just_heard_its_peers`), and creates the table as soon as another
master leads, there (as a client that has found the new leader does): M has not noticed yet
that it is deposed (it steps down only after missing its quorum for an election timeout), and
until it does its reconciler hears the tablet servers report tablets its catalog has never
seen. It must leave them alone (master.catalog.unknown_tablet_kept): a master behind is not a
master that knows they were deleted.

The `ddl-retry` kind (its own late kind, recorded as ddl) loses a reply and puts another user's
call before the retry. `retry`: the drop lands, its caller hears nothing, another call
re-creates the name at once, and the first call retries its drop with the same token. The retry
is the same drop, which has been done: it must be answered ok and leave the new table alone (a
master that looked at the table before the token dropped the new one). `retry-create`: the
create lands unheard, another call drops the table, and the create is retried: it must be told
its table was dropped, not make it a second time.
"""

from __future__ import annotations

import asyncio

DDL_KEEP_S = (0.5, 6.0)  # from the creation to the drop
DDL_CUT_S = (3.0, 8.0)  # split: how long M stays cut off from the other masters
DDL_TABLETS = (1, 3)  # the new table's tablets
NEW_LEADER_WAIT_S = 6.0  # split: how long to wait for another master to lead
# split: the cut comes when the leader master's check-quorum round is this many ticks old
# (RaftConfig: 100 ms ticks, heartbeats every 5, a round of 15)
CUT_AT_TICKS = (6, 8)


def choose_ddl(rng, variant: str | None = None):
    """Value: [variant, tablets, keep, cut] (cut None but for split). `variant`: the
    `ddl-retry` kind's, else one drawn."""
    variant = variant or rng.choice(("drop", "drop", "split"))
    return "ddl", [variant, rng.randint(*DDL_TABLETS), round(rng.uniform(*DDL_KEEP_S), 3),
                   round(rng.uniform(*DDL_CUT_S), 3) if variant == "split" else None]


async def _leader_that_just_heard_its_peers(sim) -> str | None:
    """The leader master, once it is early in its check-quorum round, just past a heartbeat
    round's answers (CUT_AT_TICKS): cut then, it counts this round's answers and steps down
    only at the end of the next, so it leads for longest without its peers. Polled for up to
    two rounds; None if no master leads."""
    from harness.sim.stack_masters import leader_master
    from node.master.catalog import CATALOG

    for _ in range(60):
        host = leader_master(sim)
        if host is None:
            return None
        core = sim.servers[host].replicas[CATALOG].core
        if CUT_AT_TICKS[0] <= core.election_elapsed <= CUT_AT_TICKS[1]:
            return host
        await asyncio.sleep(0.05)
    return leader_master(sim)


async def ddl(sim, value: list):
    """Apply `value` (`choose_ddl`); recorded as [*value, table, where it was created, how the
    drop ended], or with "failed: ..." or "skipped: ..." where it stopped."""
    from harness.sim.stack_masters import MASTER_PORT, leader_master
    from node.protocol import CreateTable, TableLocations
    from node.rpc import ErrorCode, RpcError

    variant, tablets, keep, cut = value[:4]
    loop = asyncio.get_running_loop()
    table = f"ddl{round(loop.time() * 1000)}"
    where = None
    if variant == "retry-create":
        return [*value[:4], table, where, await _create_lost_and_retried_after_drop(
            sim, table, tablets)]
    try:
        if variant == "split":
            old = await _leader_that_just_heard_its_peers(sim)
            if old is None:
                return [*value[:4], "skipped: no leader master"]
            for other in sim.masters:
                if other != old:
                    sim._cut(old, other, cut)
            deadline = loop.time() + NEW_LEADER_WAIT_S
            while (where := leader_master(sim)) in (old, None) and loop.time() < deadline:
                await asyncio.sleep(0.05)
            if where in (old, None):
                return [*value[:4], "skipped: no other master led"]
            await sim.client.rpc.call((where, MASTER_PORT), "master.create_table",
                                      CreateTable(table, tablets, 3), TableLocations,
                                      to_uuid="", timeout=5.0)
        else:
            await sim.client.create_table(table, tablets, 3)
    except (RpcError, TimeoutError, OSError) as e:
        if isinstance(e, RpcError) and e.code == ErrorCode.ALREADY_EXISTS:
            # no one else creates this name: the client's own create, landed and then retried
            sim.violation = sim.violation or f"ddl: creating the new table {table}: {e}"
        return [*value[:4], table, where, f"failed: {e or type(e).__name__}"]
    await asyncio.sleep(keep)
    if variant == "retry":
        kept = await _drop_lost_and_retried_after_recreate(sim, table, tablets)
        if kept.startswith("skipped"):  # the table may exist: drop it, as retry-create does
            return [*value[:4], table, where, f"{kept} ({await _drop(sim, table)})"]
        if kept != "kept":
            return [*value[:4], table, where, kept]
    dropped = await _drop(sim, table)
    return [*value[:4], table, where, dropped]


async def _drop(sim, table: str) -> str:
    """Drop `table`: "dropped", or how its last try failed."""
    from node.client import new_ddl_token
    from node.rpc import RpcError

    dropped = "failed"
    token = new_ddl_token()  # each try is the same drop: one that landed is answered ok
    for _ in range(3):  # a drop refused by a master that has not heard of the table yet
        try:
            await sim.client.delete_table(table, token)
            dropped = "dropped"
            break
        except (RpcError, TimeoutError, OSError) as e:
            dropped = f"failed: {e or type(e).__name__}"
            await asyncio.sleep(1.0)
    return dropped


async def _drop_lost_and_retried_after_recreate(sim, table: str, tablets: int) -> str:
    """The `retry` variant's drop of `table` (see the module's docstring): "kept" when the
    re-created table outlived the retried drop, "skipped: ..." when a step failed (the faults
    around it), and a violation set when the retry dropped the new table."""
    from node.client import new_ddl_token
    from node.protocol import Ack, DropTable
    from node.rpc import ErrorCode, RpcError

    token = new_ddl_token()
    try:  # the drop lands; its caller never hears so (the reply is lost)
        await sim.client.master_call("master.delete_table", DropTable(table, token), Ack)
    except (RpcError, TimeoutError, OSError) as e:  # may land later: it could drop the new one
        return f"skipped: the first drop: {e or type(e).__name__}"
    try:  # another user's create of the same name
        await sim.client.create_table(table, tablets, 3)
    except (RpcError, TimeoutError, OSError) as e:
        return f"skipped: the re-create: {e or type(e).__name__}"
    try:  # the first caller retries its drop: the same drop, answered as done
        await sim.client.delete_table(table, token)
        tables = await sim.client.list_tables()
    except (RpcError, TimeoutError, OSError) as e:
        if isinstance(e, RpcError) and e.code == ErrorCode.NOT_FOUND:
            sim.violation = sim.violation or (
                f"ddl: a drop retried after {table} was re-created answered NOT_FOUND: {e}")
        return f"skipped: the retried drop: {e or type(e).__name__}"
    if table not in tables:
        sim.violation = sim.violation or (
            f"ddl: a drop retried after {table} was re-created dropped the new table")
        return "failed: the new table dropped"
    return "kept"


async def _create_lost_and_retried_after_drop(sim, table: str, tablets: int) -> str:
    """The `retry-create` variant (see the module's docstring): "refused" when the retried
    create was told its table was dropped, "skipped: ..." when a step failed (the faults
    around it); a violation set when the retry made the table again, which is then dropped."""
    from node.client import new_ddl_token
    from node.protocol import CreateTable, TableLocations
    from node.rpc import ErrorCode, RpcError

    token = new_ddl_token()
    try:  # the create lands; its caller never hears so (the reply is lost)
        await sim.client.master_call("master.create_table", CreateTable(table, tablets, 3, token),
                                     TableLocations)
    except (RpcError, TimeoutError, OSError) as e:  # may land later: then it is not dropped
        return f"skipped: the first create: {e or type(e).__name__} ({await _drop(sim, table)})"
    try:  # another user's drop of the table
        await sim.client.delete_table(table)
    except (RpcError, TimeoutError, OSError) as e:
        return f"skipped: the other drop: {e or type(e).__name__} ({await _drop(sim, table)})"
    try:  # the first caller retries its create: the same create, which has been done
        await sim.client.create_table(table, tablets, 3, token=token)
    except (RpcError, TimeoutError, OSError) as e:
        if isinstance(e, RpcError) and e.code == ErrorCode.NOT_FOUND and "dropped since" in e.message:
            return "refused"
        return f"skipped: the retried create: {e or type(e).__name__} ({await _drop(sim, table)})"
    sim.violation = sim.violation or (
        f"ddl: a create retried after {table} was dropped made it again")
    return f"failed: made again ({await _drop(sim, table)})"

