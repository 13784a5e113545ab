"""The whole-stack simulator's `copy-cut` fault (a late swarm kind, harness.sim.swarm.LATE): a tablet
copy interrupted part-way, as a real one is by the network or a crash.

The simulator's tablets are small and copy in a few round trips, so no other fault ever lands
inside one: a copy ran to its end or failed before it fetched anything, and the code that
resumes a fetch, gives up on a stalled one, or expires a source session whose receiver went away
was never run (probes copy.fetch.resumed, copy.fetch.stalled_gave_up,
copy.source.session_expired). This fault makes a copy and then hits it while it fetches: a
follower R of a test tablet (leader L) is tombstoned, as an operator or a failed disk leaves it,
so L copies the tablet back to R, over the L-R link slowed by `delay` s each way (a copy across a
loaded or distant link; it makes a fetch last long enough to be hit). Once the copy's source
holds R's session, `wait` s later:
- cut: every connection between R and the source is reset and the link stays down for `cut_s`
  (a link flap, or a stateful firewall between them losing its connection table and its
  routes for a while). R's fetch fails and is asked again; a short cut resumes it, a long one
  stalls it past the receiver's limit (R gives up, tombstones, and L copies anew) and leaves the
  source's session idle past its timeout. L's StartTabletCopy call fails too, so L asks again
  while R still copies, or once it runs on the copied files.
- crash: R's process dies mid-copy (its disk keeps what it synced): the source's session is
  never ended and expires; R's start-up finds the unfinished copy and tombstones it.
Seeds with this kind on run every server with copy timeouts of COPY_TIMEOUT_S
(`copy_options`): Kudu's 600 s idle timeout and our 60 s stall limit are for real tablets over
real minutes, and a seed lasts seconds; scaled down, as the seed's other periods are.
"""

from __future__ import annotations

import asyncio
import random

from harness.sim.loop import SYSTEM

MODES = ("cut", "cut", "crash")  # a cut twice as often: its short and long ends reach different code
COPY_TIMEOUT_S = 3.0  # the source's idle timeout and the receiver's stall limit, in these seeds
DELAY_S = (0.05, 0.3)  # the L-R link's extra one-way delay while the copy runs
CUT_S = (0.3, 6.0)  # how long the link stays down: either side of COPY_TIMEOUT_S
WAIT = (0.0, 2.0)  # from the session's start to the fault, in round trips of the slowed link
WATCH_S = 5.0  # how long to wait for the copy's session to appear at its source
POLL_S = 0.01


def copy_options(mix) -> dict:
    """The ServerOptions keywords of a mix with copy-cut on: shorter copy timeouts."""
    if "copy-cut" not in mix.kinds():
        return {}
    return {"tablet_copy_idle_timeout_sec": COPY_TIMEOUT_S,
            "tablet_copy_stall_limit_sec": COPY_TIMEOUT_S}


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """A test tablet with a live leader L, and one of its other voters R that is up and well.
    Value: [tablet, L, R, mode, delay, cut_s, wait] (hosts; wait in round trips)."""
    sim = chooser.sim
    leaders = chooser._test_tablets()
    if not leaders:
        return None, None
    tablet = rng.choice(sorted(leaders))
    host, r = leaders[tablet]
    by_uuid = {getattr(sim.servers.get(h), "uuid", None): h for h in sim.tservers}
    impaired = chooser._impaired()
    voters = sorted(by_uuid[m[0]] for m in r.status()["config"]
                    if m[1] == "VOTER" and m[0] != r.uuid and m[0] in by_uuid
                    and by_uuid[m[0]] not in impaired)
    if not voters:
        return None, None
    return "copy-cut", [tablet, host, rng.choice(voters), rng.choice(MODES),
                        round(rng.uniform(*DELAY_S), 3), round(rng.uniform(*CUT_S), 3),
                        round(rng.uniform(*WAIT), 3)]


async def copy_cut(sim, value: list) -> list:
    """Apply `value` (see `choose`); recorded as [*value, outcome] with the copy's source host
    once one was seen."""
    tablet, leader, r, mode, delay, cut_s, wait = value[:7]
    try:
        source = await copy_under_way(sim, tablet, leader, r, delay)
        if source.startswith("skipped"):
            return [*value[:7], source]
        await asyncio.sleep(wait * 2 * delay)
        if mode == "crash":
            if r in sim.down:
                return [*value[:7], source, "skipped: R is down"]
            sim._crash(r)
            return [*value[:7], source, "crashed"]
        reset = sim.net.reset_between(r, source)
        sim._cut(r, source, cut_s)
        return [*value[:7], source, f"reset {reset}"]
    finally:
        sim.loop.call_later(cut_s, _unslow, sim, leader, r, delay, context=SYSTEM)


async def copy_under_way(sim, tablet: str, leader: str, r: str, delay: float) -> str:
    """Slow the leader-R link by `delay`, tombstone R's replica of `tablet` so that its leader
    copies it back, and wait until a copy source holds R's session: that source's host, or
    "skipped: why". The caller ends the slowing (`_unslow`) whatever came of it."""
    server = sim.servers.get(r)
    if r in sim.down or leader in sim.down or getattr(server, "uuid", None) is None:
        return "skipped: a host is down"
    sim.net.slow(leader, r, delay)
    done = await sim._tombstone([tablet, None, None, r])
    if not isinstance(done, list) or len(done) > 4:
        return f"skipped: no tombstone ({done[-1] if isinstance(done, list) else 'R down'})"
    source = await _copy_source(sim, tablet, server.uuid)
    return "skipped: no copy seen" if source is None or source in sim.down else source


def holds_session(server, tablet: str, uuid: str) -> bool:
    """Whether `server`'s copy service holds a copy session of `tablet` for replica `uuid`."""
    sources = getattr(getattr(server, "copy_service", None), "sources", None)
    return sources is not None and any((s.tablet_id, s.requestor) == (tablet, uuid)
                                       for s in sources.sessions.values())


async def _copy_source(sim, tablet: str, uuid: str) -> str | None:
    """The host whose copy service holds a session of `uuid` for `tablet`, once one does
    (within WATCH_S)."""
    deadline = sim.loop.time() + WATCH_S
    while sim.loop.time() < deadline:
        for host in sim.tservers:
            if host not in sim.down and holds_session(sim.servers.get(host), tablet, uuid):
                return host
        await asyncio.sleep(POLL_S)
    return None


def _unslow(sim, a: str, b: str, delay: float) -> None:
    """End the slowing, unless another fault slowed the link since (or a heal ended it)."""
    if sim.net.slowed(a, b) == delay:
        sim.net.slow(a, b, 0.0)
