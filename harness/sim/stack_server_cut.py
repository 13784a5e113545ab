"""The whole-stack simulator's `server-cut` fault: one tablet server cut off from every other
tablet server for 16-24 s, while the masters and the client still reach it (a partition inside
the data plane: a switch between racks, a firewall rule on the servers' RPC port). The leaders
of its replicas on other servers stop hearing them; the masters hear the server throughout.

What it finds: a member its tablet's leader cannot reach was never replaced while the masters
heard its server, so each tablet with a member there ran on two voters for as long as the cut
lasted, one more failure from unavailable. Kudu's leader reports such a peer failed once it has
been silent to it for follower_unavailable_considered_failed_sec, and the master replaces it.

`judge` is its check, armed at each cut. In a run whose faults are only these cuts (and
restarts and heals, which have nothing to restart; a heal ends a cut sooner), if the cut is
still whole JUDGE_AFTER_S after it began, every tablet that had a voter on the cut server then
must have committed a newer config by then: a replacement under way. In a run with other
faults a tablet may lack the quorum to change, and the check says nothing."""

from __future__ import annotations

import random

from harness.sim.loop import SYSTEM
from harness.sim.stack_replication import newest_configs

CUT_S = (16.0, 24.0)  # past JUDGE_AFTER_S
# The silence limit (FAILED_AFTER_S, 5 s) counted by a leader elected after the cut (an
# election first, if the cut server led), then the leader's report on its next heartbeat, a
# reconcile round and the change's commit: 15 s leaves several seconds to spare.
JUDGE_AFTER_S = 15.0
ONLY = frozenset(("server-cut", "restart", "heal"))  # the runs `judge` judges


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """A running tablet server to cut off from the others, and for how long; none while an
    earlier cut is in force (two cut servers may hold two members of a tablet, which then
    cannot change its config). Value: [server, seconds]."""
    sim = chooser.sim
    up = [h for h in sim.tservers if h not in sim.down]
    if len(up) < 4 or any(_whole_cut(sim, h) for h in sim.tservers):
        return None, None
    return "server-cut", [rng.choice(up), round(rng.uniform(*CUT_S), 3)]


async def server_cut(sim, value: list) -> list:
    """Cut `value`'s server's link to every other tablet server for its seconds, and arm the
    check when the run is judged (`judge`)."""
    host, seconds = value
    for other in sim.tservers:
        if other != host:
            sim._cut(host, other, seconds)
    if "server-cut" in sim.cfg.mix.kinds() and set(sim.cfg.mix.kinds()) <= ONLY:
        uuid = getattr(sim.servers.get(host), "uuid", None)
        tablets = {tid for s in sim.servers.values() for tid in getattr(s, "replicas", {})}
        before = {tid: index for tid, (index, voters) in newest_configs(sim.servers, tablets).items()
                  if uuid in voters}
        sim.loop.call_later(JUDGE_AFTER_S, judge, sim, host, before, context=SYSTEM)
    return value


def judge(sim, host: str, before: dict[str, int]) -> None:
    """If `host` is still cut off from every other tablet server, each tablet of `before`
    (tablet -> its newest committed config's index when the cut began) must have a newer one."""
    if not _whole_cut(sim, host) or sim.violation is not None:
        return
    now = newest_configs(sim.servers, set(before))
    kept = sorted(tid for tid, index in before.items() if now.get(tid, (index,))[0] <= index)
    if kept:
        sim.violation = (
            f"server-cut: {len(kept)} tablet(s) kept a member on {host}, cut off from every "
            f"other tablet server for {JUDGE_AFTER_S:g} s while the masters heard it, with no "
            f"replacement under way: {kept}")


def _whole_cut(sim, host: str) -> bool:
    """Whether `host` is cut off from every other tablet server."""
    return all(sim.net.is_cut(host, other) for other in sim.tservers if other != host)
