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

The caller's term is the largest there is, as Kudu's tool sends, so the term guard never
decides.
"""

from __future__ import annotations

import asyncio
import random

from harness.sim.stack_masters import TSERVER_PORT
from node.tserver.tablet_manager import TabletState

MODES = ("running", "failed-source")
MAX_TERM = (1 << 63) - 1  # Kudu's tool: the caller's term never refuses the copy
PATIENCE_S = 20.0  # the operator waits this long for the copy's answer


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """[tablet, SRC, DST, mode]: a failed-source copy where a test tablet has a FAILED replica
    on a server that is up (rare, and brief: the masters replace it within a few rounds), else
    a copy from a tablet's leader over a running follower."""
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
    tablet, leader, dst = rng.choice(running)
    return "recopy", [tablet, leader, dst, "running"]


def _tablets(sim, host: str):
    """The host's tablet manager; None while its server is still starting (it has none yet)."""
    return getattr(sim.servers.get(host), "tablets", None)


def _running(sim, host: str, tablet: str) -> bool:
    tablets = _tablets(sim, host)
    r = tablets.replica(tablet) if tablets is not None else None
    return r is not None and not r.failed


async def recopy(sim, value: list) -> list:
    """Apply `value` (`choose`); recorded as [*value, outcome]; a copy the mode forbids sets
    the run's violation."""
    from node.protocol import Peer, StartTabletCopy, TabletCopyResult
    from node.rpc import RpcError

    tablet, src, dst, mode = value[:4]
    servers = {h: sim.servers.get(h) for h in (src, dst)}
    if any(h in sim.down or getattr(s, "uuid", None) is None for h, s in servers.items()):
        return [*value[:4], "skipped: not as chosen"]
    src_server, dst_server = servers[src], servers[dst]
    failed = TabletState.FAILED
    if _tablets(sim, src) is None or _tablets(sim, dst) is None or (
            mode == "running" and not _running(sim, dst, tablet)) or (
            mode == "failed-source" and (src_server.tablets.state(tablet) != failed
                                         or dst_server.tablets.state(tablet) is not None)):
        return [*value[:4], "skipped: not as chosen"]
    req = StartTabletCopy(tablet, Peer(src_server.uuid, src, TSERVER_PORT), MAX_TERM,
                          current_state="RUNNING" if mode == "running" else "MISSING")
    try:
        await asyncio.wait_for(sim.client.rpc.call(
            (dst, TSERVER_PORT), "ts.start_tablet_copy", req, TabletCopyResult,
            to_uuid=dst_server.uuid, timeout=PATIENCE_S), PATIENCE_S)
        outcome = "copied"
    except RpcError as e:
        outcome = f"refused: {e.code.name}"
    except (TimeoutError, OSError) as e:
        outcome = f"no answer: {type(e).__name__}"
    still_failed = sim.servers.get(src) is src_server and _tablets(sim, src).state(tablet) == failed
    if outcome == "copied" and (mode == "running" or still_failed):
        sim.violation = sim.violation or (
            f"recopy: an operator's copy of {tablet} from {src} to {dst} ({mode}) was carried "
            "out: " + ("a running replica no leader found behind was copied over"
                       if mode == "running" else "a FAILED replica's files were copied"))
    return [*value[:4], outcome]
