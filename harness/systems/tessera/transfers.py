"""Tessera's leaders for the leader-transfer nemesis (nemeses.leader_transfer): an operator's
`tessera tablet leader-step-down` or `tessera master leader-step-down` (Kudu's LeaderStepDown,
`consensus.leader_step_down`), graceful to a named voter or abrupt, asked of whoever leads the
group now, then looked at on that leader's own server: a step-down whose leader still leads in
the same term was not in force.

A graceful transfer that the engine abandons (its target did not campaign within an election
timeout: cut off by another fault, or behind) leaves the leader leading on, as Raft's
leadership transfer is designed to: that start is skipped with the reason, not counted as a
fault that ran. An abrupt step-down always takes effect at once (RaftCore.step_down), so a
leader still leading in its term after one is a fault not in force, which makes the run unknown.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from nemeses.base import held_off
from nemeses.observe import observation, watch

# How long the old leader's own server is watched for the step-down to show: a transfer's
# target campaigns at once when it is caught up, and the engine abandons the transfer after an
# election timeout (1.5 s by Kudu's defaults); twice that and some, times the run's time scale.
WATCH_S = 5.0
# Answers that say the call came too late or was refused for the group's state, not that the
# harness spoke wrongly: leadership moved between the look and the call, a change in flight,
# the leader cut off by another fault.
REFUSED = ("NOT_LEADER", "ILLEGAL_STATE", "TABLET_NOT_RUNNING", "TABLET_NOT_FOUND", "NETWORK",
           "DEADLINE_EXCEEDED", "SHUTTING_DOWN", "SERVER_BUSY")


@dataclass(frozen=True)
class Leadership:
    """Who leads a group as its leader's server reports it: the host, the daemon, the leader's
    uuid, its term and the other voters."""

    host: str
    daemon: str
    uuid: str
    term: int
    others: list[str]


def step_down_leader(db, tablet: str | None, graceful: bool, pick: int) -> dict:
    """Make the leader of `tablet` (None: the masters' catalog) step down, handing over to a
    voter drawn by `pick` when `graceful`; what was done and what its server showed after."""
    from node.master.catalog import CATALOG

    group = tablet or CATALOG
    leader = _leader(db, tablet)
    # No leader, or one that refused for the group's state: another fault (a kill, an
    # isolation) has the group electing now. Held off, so the schedule asks again while the
    # start's turn lasts, as it does for every start another fault stands in the way of.
    # Quiet: among seven Raft-shaped packages killing and cutting at random, the drawn tablet
    # seldom has a leader while they are in force, and transfers fired in half the matrix's
    # cells; their next starts wait while it elects one (nemeses.base.held_off).
    if leader is None:
        return held_off(f"no server reports leading {group}", quiet=True)
    rng = random.Random(pick)
    to = rng.choice(leader.others) if graceful and leader.others else None
    done = {"group": group, "leader": leader.host, "term": leader.term, "to": to}
    error = _call(db, leader, group, to)
    if error is not None:
        return held_off(f"the leader refused: {error}", **done)
    role, term = _watch(db, leader, group)
    seen = {"host": leader.host, "role": role, "term": term}
    if role is None:
        return {**done, "observed": observation(None, **seen, why="its server did not answer")}
    stepped = role != "LEADER" or term > leader.term
    if not stepped and to is not None:
        return {**done, **seen, "skipped": f"the transfer to {to} was abandoned: the leader "
                                           f"leads on in term {term}"}
    return {**done, "observed": observation(stepped, **seen)}


def _leader(db, tablet: str | None) -> Leadership | None:
    """The group's leader in the highest term any server reports, or None."""
    from node.protocol import MasterInfo, ServerStatus

    if tablet is None:
        infos = db.ask_each(db.master_hosts, "master", "master.info", MasterInfo)
        leaders = [(i.term, h, i.uuid, [p.uuid for p in i.masters if p.uuid != i.uuid])
                   for h, i in infos.items() if i.role == "LEADER"]
        daemon = "master"
    else:
        statuses = db.ask_each(db.hosts, "tserver", "ts.status", ServerStatus)
        leaders = [(t.term, h, st.uuid, [u for u, kind in t.config
                                         if kind == "VOTER" and u != st.uuid])
                   for h, st in statuses.items() for t in st.tablets
                   if t.tablet_id == tablet and t.state == "RUNNING" and t.role == "LEADER"]
        daemon = "tserver"
    if not leaders:
        return None
    term, host, uuid, others = max(leaders)
    return Leadership(host, daemon, uuid, term, sorted(others))


def _call(db, leader: Leadership, group: str, to: str | None) -> str | None:
    """consensus.leader_step_down on the leader, as the operator; None when it answered, else
    its refusal. Any other error (the harness spoke wrongly: an unknown method, a body that
    does not fit, credentials refused) is raised: the start failed, loudly."""
    from node.protocol import Ack, LeaderStepDown
    from node.rpc import RpcClient, RpcError

    h = next(h for h in db.hosts if h.name == leader.host)
    port = db.RPC_PORTS[leader.daemon]

    async def call() -> str | None:
        rpc = RpcClient(connect_timeout=1.0, tls=db.tls())
        try:
            await rpc.call((h.address, port), "consensus.leader_step_down",
                           LeaderStepDown(group, to), Ack, to_uuid=leader.uuid,
                           timeout=5.0 * db.time_scale)
            return None
        except RpcError as e:
            if e.code.name not in REFUSED:
                raise
            return str(e)
        finally:
            await rpc.close()

    return asyncio.run(call())


def _watch(db, leader: Leadership, group: str) -> tuple[str | None, int]:
    """The old leader's role and term in `group` once it stepped down, or as they stand after
    WATCH_S; (None, 0) if its server never answered."""
    from node.protocol import MasterInfo, ServerStatus

    h = [h for h in db.hosts if h.name == leader.host]
    seen: list[tuple[str | None, int]] = [(None, 0)]

    def look() -> tuple[str | None, int]:
        if leader.daemon == "master":
            info = db.ask_each(h, "master", "master.info", MasterInfo).get(leader.host)
            now = (info.role, info.term) if info is not None else None
        else:
            st = db.ask_each(h, "tserver", "ts.status", ServerStatus).get(leader.host)
            t = next((t for t in st.tablets if t.tablet_id == group), None) if st else None
            now = (t.role or t.state, t.term) if t is not None else None
        seen[0] = now or seen[0]  # a look nobody answered keeps the last answer
        return seen[0]

    return watch(look, lambda s: s[0] is not None and (s[0] != "LEADER" or s[1] > leader.term),
                 WATCH_S * db.time_scale)
