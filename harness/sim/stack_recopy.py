"""The whole-stack simulator's `recopy` fault (a late swarm kind, harness.sim.swarm.LATE): an
operator re-seeds a replica by hand, as Kudu's `kudu remote_replica copy TABLET SRC DST` does
(ts.start_tablet_copy at DST, from SRC), and the engine's guards decide. Two modes:

- `running`: DST holds a RUNNING replica of the tablet, SRC is its leader. The operator says
  what DST holds (current_state RUNNING) and names no retained log (the tool has none). A
  running replica is copied over only when its leader's retained log shows it behind (the
  copy seed's guard against wiping a healthy replica), so the copy must be refused
  (copy.refused.not_behind). A copy that starts is a violation.
- `failed-source`: SRC's replica of the tablet is FAILED (files found damaged, a failing disk)
  and DST holds none. A source must not hand out files it does not trust: it refuses the
  session as it refuses any request to a FAILED replica (TABLET_NOT_RUNNING,
  tserver.request.refused_failed; the pin's own refusal, copy.pins.refused_failed, stands
  behind it), the copy fails and DST is left with nothing. A copy that installs while SRC's
  replica stayed FAILED throughout (SRC not restarted, so not repaired) is a violation.

- `follower-source`: SRC is a follower of the tablet, DST a server without a replica of it
  (none, or a tombstone). SRC's disk is made slow (fsyncs of 0.9 `slow` to `slow` s), another
  server X is added to the tablet (a config change the leader and the other follower commit
  without SRC), and the operator copies from SRC as soon as SRC has learned that the new config
  is committed while its own WAL does not yet hold the config's entry (`_aim`, up to AIM_S;
  the copy goes ahead when the window does not open). The source's pin then waits
  for the entry's sync (copy.pins.waited_for_config_entry) or, past its patience, refuses the
  session (copy.pins.config_entry_not_synced): the receiver's log must never lack the committed
  config it is sent. DST's replica is not a member: the masters delete it later, as Kudu's do
  a replica no config holds. A copy that leaves DST's replica FAILED is a violation.

The caller's term is the largest there is, as Kudu's tool sends, so the term guard never
decides.
"""

from __future__ import annotations

import asyncio
import random

from harness.sim.stack_masters import TSERVER_PORT
from node.tserver.tablet_manager import TabletState

MODES = ("running", "failed-source", "follower-source")
MAX_TERM = (1 << 63) - 1  # Kudu's tool: the caller's term never refuses the copy
PATIENCE_S = 20.0  # the operator waits this long for the copy's answer
# follower-source: SRC's slow fsyncs' upper bound, s (the lower is 0.9 of it): past the pin's
# two seconds of patience in some draws, so both of its answers are reached
FOLLOWER_SLOW_FSYNC_S = (0.2, 5.0)
AIM_S = 8.0  # follower-source: how long the operator waits for SRC's window (`_aim`)


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """[tablet, SRC, DST, mode, ...]: a failed-source copy where a test tablet has a FAILED
    replica on a server that is up (rare, and brief: the masters replace it within a few
    rounds), else a copy over a running follower from its leader or, as often, a copy from a
    follower to a server without the tablet ([..., X, slow])."""
    sim = chooser.sim
    impaired = chooser._impaired()
    up = [h for h in sorted(set(sim.servers) & set(sim.tservers))
          if h not in sim.down and _tablets(sim, h) is not None]
    leaders = chooser._test_tablets()
    failed = [(t, h) for t in sorted(leaders) for h in up
              if _tablets(sim, h).state(t) == TabletState.FAILED]
    if failed:
        tablet, src = rng.choice(failed)
        empty = [h for h in up if h not in impaired and _tablets(sim, h).state(tablet) is None]
        if empty:
            return "recopy", [tablet, src, rng.choice(empty), "failed-source"]
    running = [(t, leader, h) for t, (leader, _) in sorted(leaders.items()) for h in up
               if h != leader and h not in impaired and _running(sim, h, t)]
    if not running:
        return None, None
    tablet, leader, follower = rng.choice(running)
    if rng.random() < 0.5:
        return "recopy", [tablet, leader, follower, "running"]
    spare = [h for h in up if h not in impaired and _replica_absent(sim, h, tablet)]
    if len(spare) < 2 or follower in sim.disk_faults:  # its own slow disk is the fault's
        return "recopy", [tablet, leader, follower, "running"]
    x, target = rng.sample(spare, 2)
    slow = round(rng.uniform(*FOLLOWER_SLOW_FSYNC_S), 6)
    return "recopy", [tablet, follower, target, "follower-source", x, slow]


def _tablets(sim, host: str):
    """The host's tablet manager; None while its server is still starting (it has none yet)."""
    return getattr(sim.servers.get(host), "tablets", None)


def _replica_absent(sim, host: str, tablet: str) -> bool:
    """No replica of `tablet` on `host`, or only its tombstone: a copy may install one there."""
    return _tablets(sim, host).state(tablet) in (None, TabletState.TOMBSTONED)


def copy_target(sim, tablet: str, source: str) -> str | None:
    """The first tablet server up, other than `source`, that holds no replica of `tablet` or
    only its tombstone: where an operator's copy may install one."""
    return next((h for h in sim.tservers if h != source and h not in sim.down
                 and getattr(sim.servers.get(h), "uuid", None) is not None
                 and _tablets(sim, h) is not None and _replica_absent(sim, h, tablet)), None)


def _running(sim, host: str, tablet: str) -> bool:
    tablets = _tablets(sim, host)
    r = tablets.replica(tablet) if tablets is not None else None
    return r is not None and not r.failed


async def recopy(sim, value: list) -> list:
    """Apply `value` (`choose`); recorded as [*value, outcome]; a copy the mode forbids sets
    the run's violation."""
    tablet, src, dst, mode = value[:4]
    chosen = value[:6] if mode == "follower-source" else value[:4]
    hosts = (src, dst, value[4]) if mode == "follower-source" else (src, dst)
    servers = {h: sim.servers.get(h) for h in hosts}
    if any(h in sim.down or getattr(s, "uuid", None) is None or _tablets(sim, h) is None
           for h, s in servers.items()) or not _as_chosen(sim, mode, chosen):
        return [*chosen, "skipped: not as chosen"]
    src_server, dst_server = servers[src], servers[dst]
    slowed = False
    if mode == "follower-source":
        slowed = await _commit_past(sim, chosen, servers[value[4]].uuid)
        if slowed is None:
            return [*chosen, "skipped: the config change failed"]
        await _aim(src_server.replicas.get(tablet))
    try:
        outcome = await operator_copy(sim, tablet, src, dst, mode)
    finally:
        if slowed and sim.disk_faults.get(src) == "slow":
            sim._clear_disk_fault(src)
    failed = TabletState.FAILED
    still_failed = sim.servers.get(src) is src_server and _tablets(sim, src).state(tablet) == failed
    if outcome == "copied" and (mode == "running" or (mode == "failed-source" and still_failed)):
        sim.violation = sim.violation or (
            f"recopy: an operator's copy of {tablet} from {src} to {dst} ({mode}) was carried "
            "out: " + ("a running replica no leader found behind was copied over"
                       if mode == "running" else "a FAILED replica's files were copied"))
    if (outcome == "copied" and mode == "follower-source" and sim.servers.get(dst) is dst_server
            and _tablets(sim, dst).state(tablet) == failed):
        sim.violation = sim.violation or (
            f"recopy: a copy of {tablet} from the follower {src} to {dst} installed a replica "
            "that failed to open")
    return [*chosen, outcome]


async def operator_copy(sim, tablet: str, src: str, dst: str, why: str) -> str:
    """`kudu remote_replica copy TABLET SRC DST`: ts.start_tablet_copy at DST naming SRC, with
    what DST holds and the largest term. "copied", "refused: CODE" or "no answer: ..."; a
    refusal no guard gave (REMOTE_ERROR: a handler raised) sets the run's violation, naming
    `why` the copy was made."""
    from node.protocol import Peer, StartTabletCopy, TabletCopyResult
    from node.rpc import ErrorCode, RpcError

    dst_server = sim.servers[dst]
    state = dst_server.tablets.state(tablet)
    req = StartTabletCopy(tablet, Peer(sim.servers[src].uuid, src, TSERVER_PORT), MAX_TERM,
                          current_state="MISSING" if state is None else state.value)
    try:
        await asyncio.wait_for(sim.client.rpc.call(
            (dst, TSERVER_PORT), "ts.start_tablet_copy", req, TabletCopyResult,
            to_uuid=dst_server.uuid, timeout=PATIENCE_S), PATIENCE_S)
        return "copied"
    except RpcError as e:
        if e.code == ErrorCode.REMOTE_ERROR:  # no guard answered: a handler raised
            sim.violation = sim.violation or (
                f"recopy: an operator's copy of {tablet} from {src} to {dst} ({why}) failed "
                f"on an error no guard handled: {e}")
        return f"refused: {e.code.name}"
    except (TimeoutError, OSError) as e:
        return f"no answer: {type(e).__name__}"


def _as_chosen(sim, mode: str, chosen: list) -> bool:
    """The hosts are still as `choose` saw them."""
    tablet, src, dst = chosen[:3]
    tablets = _tablets(sim, src).state(tablet), _tablets(sim, dst).state(tablet)
    if mode == "running":
        return _running(sim, dst, tablet)
    if mode == "failed-source":
        return tablets == (TabletState.FAILED, None)
    return (_running(sim, src, tablet) and _replica_absent(sim, dst, tablet)
            and _replica_absent(sim, chosen[4], tablet))


async def _aim(replica) -> None:
    """Wait (up to AIM_S) until SRC has taken the new config for committed while its WAL's
    synced end is still before the config's entry: SRC steps an append carrying a commit index
    only between two of its syncs, so the window opens a sync after the change commits. The
    simulator looks inside SRC to aim, as the torn fault aims inside a sync."""
    for _ in range(int(AIM_S / 0.01)):
        if replica is None or replica.failed:
            return
        if replica.core.committed_config.opid_index > replica.core.log.stable:
            return
        await asyncio.sleep(0.01)


async def _commit_past(sim, chosen: list, x_uuid: str) -> bool | None:
    """Slow SRC's disk (unless another disk fault holds it) and add X to the tablet, so the
    config's entry commits while SRC still syncs it. Whether SRC was slowed here; None if the
    change failed (SRC's disk restored)."""
    from node.rpc import RpcError

    tablet, src, slow = chosen[0], chosen[1], chosen[5]
    slowed = src not in sim.disk_faults
    if slowed:
        sim._set_disk_fault(src, "slow", [src, "slow", round(slow * 0.9, 6), slow])
    try:
        await asyncio.wait_for(sim.client.change_replica(tablet, "add", x_uuid), 5.0)
    except (RpcError, TimeoutError, OSError):
        if slowed:
            sim._clear_disk_fault(src)
        return None
    return slowed
