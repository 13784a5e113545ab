"""The whole-stack simulator's faults on the masters' own membership (harness.sim.stack), as an
operator runs Kudu's `master add` and `master remove` (node.tools.admin's join_master and
leave_master, which the CLI runs too):

- `masters`: a fourth master added on the spare host (started empty, joined through the leader:
  added as a non-voter, copied the catalog, promoted), or removed again, then stopped and wiped.
  Every second removal (`remove-cut`) happens while the spare is cut off from the other masters,
  so the entry that removes it never reaches it, and the cut holds CUT_HOLD_S longer: the
  leader forgets the silent member, and both ends' connections give up (what TCP still held
  is lost). Once the links are back the simulator waits, as an operator would, for the spare
  to say REMOVED before it stops it. A leader that stops telling a removed member once its
  removal commits leaves it campaigning in vain for ever (a clean-clone run once saw it): up,
  reachable from the leader master and not REMOVED after TOLD_WITHIN_S is a liveness violation.
  Every third add (`add-lost`) is the operator's second try: the first asked the leader master
  directly and its answer was lost (a timeout, a reset connection), so the add may have gone
  through, and the new master may have been copied the catalog by the time the tool runs
  again; the tool must find it a member and finish, not refuse it (which an operator answers
  by wiping it: tools.master_add.already_member). The add after the first removal
  (`add-deposed`) is such a second try too, but the first try's add commits while the spare
  is cut off from the leader master (so it stays empty, INITIALIZING), and then the leader is
  cut off from every other master for DEPOSED_HOLD_S while the tool runs again: it asks that
  leader, which still takes itself for the leader, and the leader must not answer "a member
  already" from a config it cannot confirm is the newest (master.membership.
  answer_not_confirmed); the tool asks again and the new leader answers. Every fourth removal (`remove-twice`) is
  run twice at once, as the operator's second `master remove` while the first still waits
  (timed out on their side) or two operators' runs: both find the spare a member, both ask
  the leader, and the one asked second must count the removal done
  (tools.master_remove.already_gone);
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

- `swap-book` (a bundled kind, harness.sim.swarm.BUNDLED): `master-swap` while one follower
  master's data-dir root fails its syncs (EIO), from before the spare is added until `fail_s`
  after the swap. That follower learns the new master's address in its reconcile loop and saves
  it in its peer book there (the root's only file the replicas do not write): the save fails
  (master.reconcile.round_failed) and a later round saves it again. Before the loop's guard
  (docs/decisions/re-replication.md) the OSError ended it, unread: a master that, once it led,
  never reconciled again.

Tablet servers learn the masters from heartbeat replies and must follow the committed config
(Invariants.check_master_lists). Each fault takes the StackSim it acts on.
"""

from __future__ import annotations

import asyncio
import errno
import random
from pathlib import Path

MASTER_PORT, TSERVER_PORT = 7051, 7050
SKIPPED = object()  # a nemesis event that did not apply
SWAP_LINGER_S = (0.5, 6.0)  # master-swap: from the removal to the removed master's stop
BOOK_FAIL_S = (1.0, 4.0)  # swap-book: how long past the swap the follower's root syncs still fail
STALE_ASK_EVERY_S = 0.5  # master-swap: the stale client's lookups at the removed master
# remove-cut: a removed master, up and reachable from the leader master this long (several
# election timeouts: it campaigns, the leader tells it), must report REMOVED; past GIVE_UP_S
# of faults that keep it from the leader, the wait ends with no verdict
TOLD_WITHIN_S, TOLD_GIVE_UP_S, TOLD_ASK_EVERY_S = 10.0, 30.0, 0.25
# remove-cut: the links stay cut this long after the removal commits, past the leader's
# check-quorum round, so the leader forgets the silent member and must tell it when it campaigns
CUT_HOLD_S = 5.0
# add-deposed: how long the leader master stays cut off from the spare, then from every master
DEPOSED_HOLD_S = 4.0


async def masters(sim, planned: list | None):
    """The `masters` fault: add the spare master, or remove it again (`leave_master`), then
    stop it and wipe its disk; every second removal is `remove-cut` (the module's docstring).
    `planned`: [op, host] to replay. Recorded as [op, host], with a third element saying why
    where a join or removal failed or the cut-off spare's wait ended without a verdict. A join
    that fails is undone (`add_spare`)."""
    from node.rpc import RpcError
    from node.tools.admin import AdminError, leave_master

    if planned is not None:
        op = planned[0]
    elif sim.spare not in sim.masters:
        op = ("add-lost" if sim.spare_removals % 3 == 2
              else "add-deposed" if sim.spare_removals % 3 == 1 else "add")
    else:
        op = ("remove-cut" if sim.spare_removals % 2
              else "remove-twice" if sim.spare_removals % 4 == 2 else "remove")
        sim.spare_removals += 1
    host = sim.spare
    if op.startswith("add") == (host in sim.masters):
        return SKIPPED  # a replay out of step with this run
    try:
        if op.startswith("add"):
            await add_spare(sim, lost=op != "add", deposed=op == "add-deposed")
        elif op == "remove":
            await leave_master(sim.client, sim.spare_uuid or f"{host}:{MASTER_PORT}",
                               missing_ok=True)
            drop_spare(sim)
        else:
            why = await (remove_twice if op == "remove-twice" else remove_cut_off)(sim, host)
            drop_spare(sim)
            if why is not None:
                return [op, host, why]
    except (AdminError, RpcError, TimeoutError, OSError) as e:
        return [op, host, f"failed: {e or type(e).__name__}"]
    return [op, host]


async def remove_twice(sim, host: str) -> str | None:
    """`remove-twice`: two `leave_master` runs for the spare on `host` at once. None if both
    counted it removed; what the other answered if one did and the other refused; the first
    refusal raised if neither did."""
    from node.rpc import RpcError
    from node.tools.admin import AdminError, leave_master

    target = sim.spare_uuid or f"{host}:{MASTER_PORT}"
    tries = await asyncio.gather(*(leave_master(sim.client, target) for _ in range(2)),
                                 return_exceptions=True)
    refused = [t for t in tries if isinstance(t, BaseException)]
    for e in refused:
        if not isinstance(e, (AdminError, RpcError, TimeoutError, OSError)):
            raise e  # the tool's own failure, not a refusal: the seed's crash
    if len(refused) == 2:
        raise refused[0]
    return f"the other run: {refused[0]}"[:200] if refused else None


async def remove_cut_off(sim, host: str) -> str | None:
    """`remove-cut`: remove the spare on `host` while its links to the other masters are cut,
    keep them cut CUT_HOLD_S past the commit (the leader forgets a silent member), reset the
    connections on them (both kernels gave up: what they held is lost), restore them, and wait
    for the spare to say REMOVED (`wait_told_of_removal`, whose result this returns). Links a
    `cut` fault had cut already stay cut."""
    from node.tools.admin import leave_master

    others = [m for m in sim.masters if m != host and not sim.net.is_cut(host, m)]
    for m in others:
        sim.net.cut(host, m)
    try:
        await leave_master(sim.client, sim.spare_uuid or f"{host}:{MASTER_PORT}")
        await asyncio.sleep(CUT_HOLD_S)
    finally:
        for m in others:
            sim.net.reset_between(host, m)
            sim.net.uncut(host, m)
    return await wait_told_of_removal(sim, host)


async def wait_told_of_removal(sim, host: str) -> str | None:
    """Wait until the master on `host`, just removed, says REMOVED to `master.info` (what an
    operator's `tessera master list` shows), or INITIALIZING (it was never copied the catalog:
    a failed add whose undoing failed left it up, never a member). None once it does. Sets a liveness violation if
    it stays up and reachable from the leader master for TOLD_WITHIN_S without doing so;
    returns why the wait ended without a verdict if faults kept it from the leader for
    TOLD_GIVE_UP_S."""
    from node.protocol import Empty, MasterInfo
    from node.rpc import RpcError

    loop = asyncio.get_running_loop()
    start = healthy_since = loop.time()
    role = "no answer"
    while True:
        try:
            info = await sim.client.rpc.call((host, MASTER_PORT), "master.info", Empty(),
                                             MasterInfo, to_uuid="", timeout=1.0)
            role = info.role
        except (RpcError, TimeoutError, OSError) as e:
            role = _error_name(e)
        if role in ("REMOVED", "INITIALIZING"):
            return None  # told; or it never held the catalog (an add undone), nothing to tell
        now, leader = loop.time(), leader_master(sim)
        if (host in sim.down or host in sim.start_failures or leader is None
                or not sim.net.reachable(host, leader)):
            healthy_since = now
        elif now - healthy_since >= TOLD_WITHIN_S:
            sim.violation = sim.violation or (
                f"liveness: master {host}, removed while cut off, still answers {role} "
                f"{now - start:.1f} s later, the last {TOLD_WITHIN_S:g} s up and reachable from "
                f"the leader master {leader}: it never learned of its removal")
            return f"not told: {role}"
        if now - start >= TOLD_GIVE_UP_S:
            return f"not told within {TOLD_GIVE_UP_S:g} s, kept from the leader: {role}"
        await asyncio.sleep(TOLD_ASK_EVERY_S)


async def add_spare(sim, lost: bool = False, deposed: bool = False) -> None:
    """Start a master with an empty disk on the spare host and join it (`join_master`; with
    `lost`, after a first try whose answer is ignored, as if lost: `add_unanswered`; with
    `deposed`, that try made with the spare cut off from the leader master, and the tool
    run again with the leader cut off from the other masters: `depose_leader`). A
    join that fails is undone as an operator undoes a failed `master add`, which may have gone
    through: the spare leaves the config if it is a member, then is stopped and wiped. If even
    that removal fails, the spare stays up and a member, for the next `masters` fault to
    remove: stopping a master the config counts on would leave the masters a voter short.
    Raises what the join raised (AdminError naming both, if the undoing failed too)."""
    from node.rpc import RpcError
    from node.tools.admin import AdminError, join_master, started_master

    addr = (boot_spare(sim), MASTER_PORT)
    try:
        sim.spare_uuid = (await started_master(sim.client, addr, wait=30.0)).uuid
    except (RpcError, TimeoutError, OSError):
        drop_spare(sim)  # it never answered, so it was never asked to join
        raise
    try:
        leader = leader_master(sim) if deposed else None
        if leader is not None:
            cut_for(sim, leader, [sim.spare], DEPOSED_HOLD_S)
        if lost:
            await add_unanswered(sim, sim.spare_uuid, addr)
        if leader is not None:
            cut_for(sim, leader, [m for m in sim.masters if m not in (leader, sim.spare)],
                    DEPOSED_HOLD_S)
        await join_master(sim.client, addr, timeout=30.0)
    except (AdminError, RpcError, TimeoutError, OSError) as e:
        try:
            await undo_add(sim)
        except (AdminError, RpcError, TimeoutError, OSError) as undo:
            raise AdminError(f"{e or type(e).__name__}; still a member, not undone: "
                             f"{undo or type(undo).__name__}") from e
        raise


async def add_unanswered(sim, uuid: str, addr: tuple[str, int]) -> None:
    """The operator tool's first try at adding the master at `addr`: asked of the leader
    master directly, its answer (or error) never read, as when the tool timed out or its
    connection was reset. No leader now: nothing was asked."""
    from node.protocol import AddMaster, ConfigState, Peer
    from node.rpc import RpcError

    leader = leader_master(sim)
    if leader is None:
        return
    try:
        await sim.client.rpc.call((leader, MASTER_PORT), "master.add_master",
                                  AddMaster(Peer(uuid, *addr)), ConfigState, to_uuid="",
                                  timeout=sim.client.timeout)
    except (RpcError, TimeoutError, OSError):
        pass  # lost either way


def cut_for(sim, host: str, others: list[str], hold_s: float) -> None:
    """Cut the links between `host` and each of `others` for `hold_s`; links cut already are
    left as they are (another fault's to restore)."""
    from harness.sim.loop import SYSTEM

    links = [m for m in others if not sim.net.is_cut(host, m)]
    for m in links:
        sim.net.cut(host, m)
    sim.loop.call_later(hold_s, lambda: [sim.net.uncut(host, m) for m in links], context=SYSTEM)


def boot_spare(sim) -> str:
    """Start a master on the spare host, with a new empty disk; the host."""
    from harness.sim.disk import SimDisk

    host = sim.spare
    sim.disks[host] = SimDisk(random.Random(sim._spare_disks.getrandbits(64)),
                              sim.disk_defaults())
    sim.skew_s[host] = 0.0
    sim.masters.append(host)
    sim._boot(host)
    return host


async def undo_add(sim) -> None:
    """The spare's failed join undone: out of the config if it made it in, then stopped and
    wiped; raises (the spare kept) if the removal fails."""
    from node.tools.admin import leave_master

    await leave_master(sim.client, sim.spare_uuid, missing_ok=True)
    drop_spare(sim)


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
            answers.append(_error_name(e))
        await asyncio.sleep(STALE_ASK_EVERY_S)
    sim.spare, sim.spare_uuid = host, uuid
    drop_spare(sim)
    return [linger, added, host, uuid, sorted(set(answers))]


def _error_name(e: BaseException) -> str:
    """How a call to a master ended without an answer: its RPC error code, or the exception."""
    return getattr(getattr(e, "code", None), "name", type(e).__name__)


async def swap_book(sim, value: list):
    """The `swap-book` fault (the module's docstring). `value`: [linger_s, fail_s] as drawn;
    recorded as [the follower whose root failed, fail_s, what `master_swap` recorded], or with
    "skipped: ..." where it did not apply."""
    linger, fail_s = value
    leader = leader_master(sim)
    followers = sorted(h for h in sim.masters if h != leader and h in sim.servers
                       and h not in sim.down)
    if leader is None or not followers:
        return ["skipped: no leader master with a follower up", fail_s]
    host = followers[0]
    failing = fail_root_syncs(sim, host)
    try:
        swapped = await master_swap(sim, [linger])
        await asyncio.sleep(fail_s)
    finally:
        failing[0] = False
    return [host, fail_s, swapped]


def fail_root_syncs(sim, host: str) -> list[bool]:
    """From now on `host`'s disk fails (EIO) the sync of its data dir's root: the peer book's
    directory, and none the replicas write (their WALs and consensus metadata are in
    subdirectories). Set the returned flag's [0] False to heal it. Only this disk incarnation:
    a restarted server's disk syncs again."""
    disk, root = sim.disks[host], Path(sim.servers[host].data_dir)
    real_fsync_dir = disk.fsync_dir
    failing = [True]

    def fsync_dir(path):
        if failing[0] and Path(path) == root:
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync_dir(path)
    disk.fsync_dir = fsync_dir
    return failing
