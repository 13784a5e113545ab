"""The whole-stack simulator's `unsafe` fault (a late swarm kind, harness.sim.swarm.LATE): an
operator's last resort, Kudu's unsafe_change_config, on a tablet whose majority is lost.

Two of a test tablet's three voters lose their servers (a power loss on both: the followers of
its leader S), and the operator, taking them for lost for good, after `wait` s first deletes
their replicas of the tablet (`tessera local-replica delete TABLET --keep-tombstone` on each
stopped server, node.tools.local_replica.delete_replica) once S has synced everything it
committed, then runs `tessera tablet unsafe-change-config TABLET --voters S --force`
(node.tools.admin.unsafe_change_config, as the CLI does), again every half second while S
refuses because it still leads (raft.unsafe_change.refused_leader: a leader steps down only
once it has missed its quorum for an election timeout), until S appends a config of itself
alone (raft.unsafe_change.appended), elects itself and commits. The operator then adds
replicas on two live servers (`tablet add-replica`), as the tablet is under-replicated, which
the masters do not repair by themselves while no member has failed.

Why it loses nothing here, where the tool may lose acknowledged writes in general: S is the
leader of the newest term among the tablet's replicas, all three running, at the moment the
other two lose power, so by Raft's Leader Completeness its log holds every committed entry
(it may step down and campaign after, but no one else can win, so no other entry commits);
nothing else runs while the operator works (the nemesis waits for this fault), and S has
synced everything it committed before the lost replicas are deleted. The entries of S's log
that never committed (writes whose clients timed out, uncertain) commit now: that is what an
uncertain write may do. The danger is the lost servers coming back: their two replicas of the
tablet are still a majority of the old config and could elect a leader of it beside S, and
commit a different entry at the index of S's forced config. So the operator deletes those
replicas BEFORE the first unsafe-change-config is sent, not after S is seen to have stepped
down (`tessera local-replica delete TABLET --keep-tombstone` on each stopped server,
node.tools.local_replica.delete_replica): tombstones that keep their votes, which the leader
of the new config never asks for anything. (Deleting only once S was seen not to lead, with the
tries before it meant to be refused, was wrong: S could step down between the look and the
call's arrival, so a try meant to be refused appended S's config, and the fault ended with the
lost replicas intact: the two came back, elected a leader of the old config and committed an
entry at the index of S's forced config.) The tool
refuses a replica whose WAL is corrupt (one the simulator damaged, already FAILED, may be among
the lost): the operator then deletes it whole, as Kudu's tool advises (`offline_delete`). If S never
syncs, the operator forces nothing, and the servers come back to the old config. Only with all
three voters' servers well and no other tablet server impaired, as the crash fault keeps at
most two down.
"""

from __future__ import annotations

import asyncio

UNSAFE_WAIT_S = (0.0, 2.0)  # from the power loss to the operator's first try
UNSAFE_PATIENCE_S = 8.0  # the operator's tries at S, every UNSAFE_RETRY_S, for up to this
UNSAFE_RETRY_S = 0.5
READD_PATIENCE_S = 10.0  # the operator's add-replica calls afterwards, for up to this


def choose_unsafe(sim, rng, impaired: set[str]):
    """A test tablet whose leader S (of the newest term among its replicas) has exactly
    three voters, its committed config its active one, each on a tablet server that is up and
    not impaired, while no tablet server is impaired. Value: [tablet, S, F1, F2, wait]."""
    from node.master.catalog import CATALOG

    if impaired & set(sim.tservers) or sim.disk_faults:
        return None, None
    by_uuid = {getattr(sim.servers.get(h), "uuid", None): h for h in sim.tservers}
    replicas: dict[str, list] = {}
    for host in sorted(set(sim.servers) & set(sim.tservers)):
        for tablet, r in sorted(getattr(sim.servers[host], "replicas", {}).items()):
            if tablet != CATALOG:
                replicas.setdefault(tablet, []).append((host, r))
    candidates = []
    for tablet, held in sorted(replicas.items()):
        leaders = [(h, r) for h, r in held if r.role.name == "LEADER" and not r.failed]
        if len(leaders) != 1 or any(r.term > leaders[0][1].term for _, r in held):
            continue
        host, r = leaders[0]
        status = r.status()
        members = status["config"]
        if (members != status["committed_config"] or len(members) != 3
                or any(m[1] != "VOTER" or by_uuid.get(m[0]) is None for m in members)):
            continue
        followers = sorted(by_uuid[m[0]] for m in members if m[0] != r.uuid)
        if len(followers) == 2 and host not in sim.flipped:
            candidates.append([tablet, host, *followers])
    if not candidates:
        return None, None
    return "unsafe", [*rng.choice(candidates), round(rng.uniform(*UNSAFE_WAIT_S), 3)]


async def unsafe_change(sim, value: list):
    """Apply `value` (`choose_unsafe`); recorded as the value, what the operator's tries were
    answered ("refused: leads", "appended", ...), and the replicas added after, or with
    "skipped: ..." where the tablet no longer stood as chosen (a replay out of step)."""
    from node.rpc import RpcError
    from node.tools.admin import AdminError, unsafe_change_config

    tablet, s, f1, f2, wait = value[:5]
    r = getattr(sim.servers.get(s), "replicas", {}).get(tablet)
    if (r is None or r.role.name != "LEADER" or {s, f1, f2} & sim.down
            or any(f not in sim.servers for f in (f1, f2))):
        return [*value[:5], "skipped: not as chosen"]
    survivor = r.uuid
    for host in (f1, f2):  # the majority's servers lose power, for good as far as anyone knows
        sim._crash(host)
    await asyncio.sleep(wait)
    loop = asyncio.get_running_loop()
    deadline, tries, deleted = loop.time() + UNSAFE_PATIENCE_S, [], False
    while loop.time() < deadline and s not in sim.down:
        r = sim.servers[s].replicas.get(tablet)
        if not deleted and r is not None and r.core.log.stable >= r.commit_index:
            # before anything is forced, so before the servers could run again: their
            # replicas of the tablet deleted, whether or not S still leads (a try meant to be
            # refused may reach S just after it stepped down, and be appended)
            for host in (f1, f2):
                refused = offline_delete(sim, tablet, host)
                if refused:
                    tries.append(refused)
            deleted = True
        if not deleted:
            tries.append("waiting for S to sync")
            await asyncio.sleep(UNSAFE_RETRY_S)
            continue
        try:  # refused while S leads
            await unsafe_change_config(sim.client, tablet, [survivor])
            tries.append("appended")
            break
        except (AdminError, RpcError, TimeoutError, OSError) as e:
            tries.append(_why(e))
        await asyncio.sleep(UNSAFE_RETRY_S)
    added = await _readd(sim, tablet, survivor) if tries and tries[-1] == "appended" else []
    return [*value[:5], _runs(tries), added]


def offline_delete(sim, tablet: str, host: str) -> str | None:
    """The operator's `tessera local-replica delete TABLET --keep-tombstone` on the stopped
    `host`; None when done, or what was done instead. The tool refuses a replica whose files
    are damaged (a corrupt WAL hides the last logged op the tombstone would keep): Kudu's tool
    then tells its operator to delete the replica with --clean_unsafe, and on a host whose disk
    the simulator damaged (sim.flipped: a flip, a file cut, lost or misplaced) this one does,
    every file gone, its votes too. That loses nothing here: the replica is of the old config
    only, whose other members are S, alone in the new config, and a replica that never
    campaigns (a tombstone, or deleted too); a replica with no files neither votes nor
    campaigns. The refusal detected the damage, as a FAILED replica would have: a judgement
    still due for it (stack_checks `_check_damage`) is met. On any other host the refusal is
    raised: damage the simulator did not make is the engine's, never deleted unseen."""
    from harness.sim.stack_checks import DATA_DIR
    from node.errors import CorruptionError
    from node.tools.local_replica import delete_replica

    disk = sim.disks[host]
    try:
        delete_replica(DATA_DIR, tablet, True, disk)
        return None
    except CorruptionError as e:
        if host not in sim.flipped:
            raise
        why = f"{type(e).__name__}: {e}"
    delete_replica(DATA_DIR, tablet, False, disk)
    if sim.must_fail.get(host, (None,))[0] == tablet:
        del sim.must_fail[host]
    sim.flip_outcomes.setdefault(host, f"the offline delete tool refused {tablet}: {why}"[:500])
    return f"delete --keep-tombstone on {host} refused ({why[:160]}): every file removed"


async def _readd(sim, tablet: str, survivor: str) -> list[str]:
    """The operator brings the tablet back to three replicas: `tablet add-replica` on live
    tablet servers outside its config, one at a time, each tried until it is accepted (a
    config change waits for the one before it to commit) or READD_PATIENCE_S is over."""
    from node.rpc import RpcError

    loop = asyncio.get_running_loop()
    deadline, added = loop.time() + READD_PATIENCE_S, []
    spares = [getattr(sim.servers.get(h), "uuid", None) for h in sim.tservers
              if h not in sim.down and h in sim.servers]
    spares = [u for u in spares if u is not None and u != survivor]
    for uuid in spares[:2]:
        while loop.time() < deadline:
            try:
                await asyncio.wait_for(sim.client.change_replica(tablet, "add", uuid), 5.0)
                added.append(uuid)
                break
            except (RpcError, TimeoutError, OSError):
                await asyncio.sleep(UNSAFE_RETRY_S)
    return added


def _why(e: Exception) -> str:
    text = str(e) or type(e).__name__
    return "refused: leads" if "leads" in text else f"failed: {text[:120]}"


def _runs(tries: list[str]) -> list[str]:
    """`tries` with each run of the same answer said once, counted: ["refused: leads x4", ...]."""
    out: list[list] = []
    for t in tries:
        if out and out[-1][0] == t:
            out[-1][1] += 1
        else:
            out.append([t, 1])
    return [t if n == 1 else f"{t} x{n}" for t, n in out]
