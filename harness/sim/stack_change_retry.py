"""The whole-stack simulator's `change-retry` fault (a late kind, harness.sim.swarm.LATE): a
replica change through the leader master whose reply is lost, then retried as the client retries
it. A follower of one tablet is removed and then added back; each change is sent once with its
reply discarded (it lands, its caller never hears so), then again marked as a retry
(`ReplicaChange.retry`, what `TesseraClient.change_replica` sends after an attempt that may have
landed). The master waits for the tablet's leader to commit, longer than a client attempt, so
this is what a user's call meets whenever a commit is slow. The retry must be answered with the
committed config as asked; a refusal that the config already is as asked, or that a change is
pending, is the client raising for its own change: a violation.

A step that fails (the faults around it) ends the fault there. A follower then left removed is
not added back here: the tablet is one replica short, which the leader master's reconciler
repairs as it does for a lost server, and a re-add from here would race that repair.
"""

from __future__ import annotations

import asyncio

from node.consensus.confchange import ALREADY_MEMBER, CHANGE_PENDING, NOT_MEMBER

CALL_TIMEOUT_S = 10.0  # each of the four calls
# Refusals a retry of a change that landed must never get: the change itself, seen as made or
# still pending.
OWN_CHANGE_REFUSALS = (ALREADY_MEMBER, NOT_MEMBER, CHANGE_PENDING)


def choose(rng):
    """Value: [pick]: which tablet and which of its followers, resolved when the fault runs
    (the tablets and their leaders are known only then)."""
    return "change-retry", [round(rng.random(), 6)]


async def change_retry(sim, value: list):
    """Apply `value` (`choose`); recorded as [pick, tablet, follower, outcome of each change]."""
    import msgspec

    from node.protocol import ConfigState, ReplicaChange
    from node.rpc import ErrorCode, RpcError

    pick = value[0]
    try:
        locs = await asyncio.wait_for(sim.client.locations("test", refresh=True), CALL_TIMEOUT_S)
    except (RpcError, TimeoutError, OSError) as e:
        return [pick, f"skipped: locations: {e or type(e).__name__}"]
    tablets = sorted(locs.tablets, key=lambda t: t.tablet_id)
    t = tablets[int(pick * len(tablets))]
    leader = t.leader
    followers = sorted(p.uuid for p in t.replicas if p.uuid != leader)
    if len(t.replicas) < 3 or not followers:
        return [pick, t.tablet_id, None, ["skipped: fewer than 3 replicas"]]
    uuid = followers[int(pick * 1000) % len(followers)]
    outcomes: list[str] = []
    for op in ("remove", "add"):
        req = ReplicaChange(t.tablet_id, op, uuid)
        try:  # it lands; the reply is lost
            await asyncio.wait_for(sim.client.master_call("master.change_replica", req,
                                                          ConfigState), CALL_TIMEOUT_S)
        except (RpcError, TimeoutError, OSError) as e:
            outcomes.append(f"skipped: {op}: {e or type(e).__name__}")
            break
        try:
            config = await asyncio.wait_for(sim.client.master_call(
                "master.change_replica", msgspec.structs.replace(req, retry=True), ConfigState),
                CALL_TIMEOUT_S)
        except (RpcError, TimeoutError, OSError) as e:
            if (isinstance(e, RpcError) and e.code == ErrorCode.ILLEGAL_STATE
                    and any(r in e.message for r in OWN_CHANGE_REFUSALS)):
                sim.violation = sim.violation or (
                    f"change-retry: the retry of a {op} of {uuid} on {t.tablet_id} that landed "
                    f"was refused: {e}")
            outcomes.append(f"failed: {op} retried: {e or type(e).__name__}")
            break
        if any(m[0] == uuid for m in config.members) != (op == "add"):
            sim.violation = sim.violation or (
                f"change-retry: the retry of a {op} of {uuid} on {t.tablet_id} was answered "
                f"with a config not as asked: {config.members}")
        outcomes.append(op)
    return [pick, t.tablet_id, uuid, outcomes]
