"""The whole-stack simulator's `config-race` fault: a follower's committed config saved behind
its Ready while the next Ready saves a newer one with a new term, awaited
(node.replica.metadata_saves).

The spawned save first runs at the driver's next yield, and a follower's driver yields in every
Ready that writes entries. So the awaited save must come from messages that arrived while F
wrote the newer config's entry, that carry no new entry, and that still tell F a commit past
its unacknowledged write (only an append the leader sends again can) and a new term. No mix of
the existing kinds reached that (replica.cmeta.older_config_not_saved never fired: membership,
transfer, delay and slow disks, with fsync up to 100 ms); this fault steers each step. On the
quietest test tablet (the append sent again must bring F nothing new, so the leader's log must
not grow meanwhile), with leader L and voters F and G, a tablet server X that holds none of it
is added: ADD_NON_VOTER (C1), then L's PROMOTE once X has caught up (C2).
- L-F is cut from the start: F holds C1's entry only once C2 exists, and learns C1's commit
  only with the append that brings C2;
- as L sends C2, L's disk turns slow for the sync of it (C2 commits only once L's own write is
  durable), L-F heals, and F's answers to L come `answer_s` late (past a heartbeat interval);
- as L sends F C2's entry (with C1's commit), F's disk turns slow (`slow_s`) and L's well:
  F writes C2 for seconds, C1 to be saved behind that write; L's sync of C2 ends, L commits it,
  and F's answer to a heartbeat from before reaches L a heartbeat interval after the append,
  so L sends it again (Progress.heartbeat_answered), now with C2's commit;
- once that append waits in F's inbox, F's disk is well again and L hands its leadership to G:
  G's vote request (a new term) reaches F behind it while F still writes; G's first append as
  leader, a new entry whose write would let the spawned save run first, waits (F-G cut) until
  F's write ends.
F's write ends; its driver saves C1 behind, then at once takes the next Ready: the new term
and C2, saved awaited before the task saving C1 first ran. Before the fix that task then wrote
C1 over C2 on disk (the `config saved` check, harness.sim.stack_checks, fails on that), and F,
believing C2 saved, let a snapshot pass C2's entry: the fault writes to the tablet until F's
log is compacted past C2 and restarts F, which then ran with C1 (the `config kept` check).
"""

from __future__ import annotations

import asyncio
import random

from harness.sim.stack_checks import _replica
from harness.sim.stack_watch import until

SLOW_FSYNC_S = (6.0, 8.0)  # F's fsyncs, from half of it to it: C2's write outlasts the resend
# F's answers to L late by this: past a heartbeat interval (0.5 s), within a vote lease (L's
# next messages to F wait for them: one consensus call in flight a peer, node.server.daemon)
ANSWER_S = (0.7, 0.9)
# L's sync of C2, which its commit waits for, from answer_s + [0] to 2 * answer_s - [1] s:
# C2 commits after L sends it to F (F's answer, answer_s late, lets it) and before L sends it
# again (on an answer to a heartbeat, as late, a heartbeat interval after that)
LEADER_SYNC_S = (0.2, 0.2)
WAIT_S = 20.0  # at most this long for each step (X's copy and catch-up before C2)
HOLD_S = 10.0  # at most this long G's appends to F wait (F-G cut)
SNAPSHOT_WAIT_S = 10.0  # at most this long for F's log to be compacted past C2
WATCH_S = 0.005


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """A test tablet's leader L, two of its other voters F and G, and a tablet server X up that
    holds no replica of it. Value: [tablet, L, F, G, X, slow_s, answer_s]."""
    # the quietest: the append L sends again must bring F no new entry (whose write would let
    # the spawned save run first), so L's log must not grow meanwhile
    leaders = chooser._test_tablets()
    if not leaders:
        return None, None
    fewest = min(r.core.log.last_index() for _, r in leaders.values())
    tablet = rng.choice(sorted(t for t, (_, r) in leaders.items()
                               if r.core.log.last_index() == fewest))
    host, replica = leaders[tablet]
    impaired = chooser._impaired()
    voters = [h for h in chooser.other_voters(replica) if h not in impaired]
    if len(voters) < 2:
        return None, None
    f, g = rng.sample(voters, 2)
    members = {u for u, _ in replica.status()["config"]}
    spare = [h for h in chooser.sim.tservers if h not in impaired and h in chooser.sim.servers
             and getattr(chooser.sim.servers[h], "uuid", None) not in members | {None}]
    if not spare or {host, f} & set(chooser.sim.disk_faults):
        return None, None
    return "config-race", [tablet, host, f, g, rng.choice(spare),
                           round(rng.uniform(*SLOW_FSYNC_S), 3), round(rng.uniform(*ANSWER_S), 3)]


def _config_entries(m) -> list[int]:
    return [e.index for e in getattr(m, "entries", ()) if e.type.name == "CONFIG_CHANGE"]


def _inbox(r) -> list:
    """The messages waiting in `r`'s inbox (handed in while its driver writes)."""
    return [m for item in list(r._inbox._items)
            for m in (getattr(item.run, "__defaults__", None) or (None,))[:1]]


def _queued(r, term: int, commit: int) -> bool:
    """An append of `term` waits in `r`'s inbox with a commit at `commit` or past and no entry
    past `r`'s log (nothing new to write)."""
    from node.consensus import AppendEntries

    last = r.core.log.last_index()
    return any(type(m) is AppendEntries and m.term == term and m.commit >= commit
               and m.prev_index + len(m.entries) <= last for m in _inbox(r))


async def config_race(sim, value: list) -> list:
    """Apply `value` (see `choose` and the module's note). Recorded as [*value, outcome]:
    "raced" (the resent append and the vote request reached F while it wrote C2), or the step
    it did not get past."""
    from node.consensus import AppendEntries, VoteRequest

    tablet, leader, f, g, x, slow_s, answer_s = value[:7]
    if {leader, f, g, x} & sim.down or {leader, f} & set(sim.disk_faults):
        return [*value[:7], "skipped: a host is down, or L's or F's disk has a fault"]
    leader_sync = (round(answer_s + LEADER_SYNC_S[0], 6), round(2 * answer_s - LEADER_SYNC_S[1], 6))
    uuid = {h: getattr(sim.servers.get(h), "uuid", None) for h in (leader, f, g, x)}
    state: dict = {}
    cuts: set[tuple[str, str]] = set()

    def cut(a: str, b: str) -> None:
        sim.net.cut(a, b)
        cuts.add((a, b))

    def uncut(a: str, b: str) -> None:
        sim.net.uncut(a, b)
        cuts.discard((a, b))

    def late_from(h: str, seconds: float) -> None:  # what h sends L: replies, and its calls
        for opener in (leader, h):
            sim.net.delay_flow(h, leader, opener, seconds)

    def watch(host: str, tab: str, to_uuid: str, messages: list) -> None:
        if tab != tablet:
            return
        if host == leader and "c2" not in state:
            if "c1" not in state:
                state["c1"] = min((i for m in messages for i in _config_entries(m)), default=None)
                if state["c1"] is None:
                    del state["c1"]
                return
            later = [i for m in messages for i in _config_entries(m) if i > state["c1"]]
            if later:  # L sends C2: L's own write of it, which the commit waits for, is slow
                state["c2"] = min(later)
                sim._set_disk_fault(leader, "slow", [leader, "slow", *leader_sync])
                state["slowed"] = {leader}
                uncut(leader, f)
                late_from(f, answer_s)
        elif host == leader and to_uuid == uuid[f] and "sent" not in state:
            m = next((m for m in messages if state["c2"] in _config_entries(m)), None)
            if m is None:
                return
            if m.commit >= state["c2"]:
                state["sent"] = "committed first"
                return
            sim._set_disk_fault(f, "slow", [f, "slow", round(slow_s / 2, 6), slow_s])
            state["slowed"].add(f)
            sim._clear_disk_fault(leader)  # the sync of C2 under way keeps its time
            state.update(sent=sim.loop.time(), term=m.term)
        elif host == g and to_uuid == uuid[f] and "voted" in state and "held" not in state:
            rf = _replica(sim.servers.get(f), tablet)
            if rf is not None and rf.core.log.stable < state["c2"] and any(
                    type(m) is AppendEntries and m.term > state["term"] for m in messages):
                cut(g, f)  # F still writes C2: G's append waits
                state["held"] = sim.loop.time()

    cut(leader, f)
    sim.send_hooks.append(watch)
    change = asyncio.ensure_future(asyncio.wait_for(
        sim.client.change_replica(tablet, "add", uuid[x]), WAIT_S))
    outcome = "raced"
    try:
        if not await until(sim, lambda: "c2" in state, WAIT_S, WATCH_S):
            outcome = "no C2" if "c1" in state else "no C1"
        elif not await until(sim, lambda: "sent" in state, WAIT_S, WATCH_S):
            outcome = "C2 not sent to F"
        elif state["sent"] == "committed first":
            outcome = "C2 committed before F had it"
        else:
            def resent() -> bool:
                rf = _replica(sim.servers.get(f), tablet)
                return rf is None or rf.core.log.stable >= state["c2"] or _queued(
                    rf, state["term"], state["c2"])

            await until(sim, resent, WAIT_S, WATCH_S)
            # F's write has long been syncing: its disk well again, the saves after it are quick
            if sim.disk_faults.get(f) == "slow":
                sim._clear_disk_fault(f)
            rf = _replica(sim.servers.get(f), tablet)
            if rf is None or rf.core.log.stable >= state["c2"]:
                outcome = "F wrote C2 before the resend"
            else:
                await asyncio.sleep(0.002)  # the vote request comes behind it
                state["voted"] = True
                moved = await sim._transfer([leader, tablet, uuid[g]])
                if not (isinstance(moved, list) and len(moved) == 3):
                    outcome = f"transfer: {moved[3] if isinstance(moved, list) else 'skipped'}"
                seen: dict = {}

                def written() -> bool:  # what waits in F's inbox as its write ends
                    r = _replica(sim.servers.get(f), tablet)
                    if r is None or r.core.log.stable >= state["c2"]:
                        return True
                    newer = [m for m in _inbox(r) if getattr(m, "term", 0) > state["term"]]
                    seen["vote"] = any(type(m) is VoteRequest for m in newer)
                    seen["append"] = any(type(m) is AppendEntries for m in newer)
                    return False

                await until(sim, written, HOLD_S, WATCH_S)
                if outcome == "raced" and not seen.get("vote"):
                    outcome = "the vote request came after F's write"
                elif outcome == "raced" and seen.get("append"):
                    outcome = "G's append came before F's write ended"
                await asyncio.sleep(0.05)  # the Ready after F's write, and its saves, run
        await asyncio.gather(change, return_exceptions=True)
    finally:
        sim.send_hooks.remove(watch)
        for a, b in list(cuts):
            uncut(a, b)
        late_from(f, 0.0)
        for h in (leader, f):  # a disk this fault slowed, if still slow
            if sim.disk_faults.get(h) == "slow" and h in state.get("slowed", ()):
                sim._clear_disk_fault(h)
    if outcome == "raced":
        outcome = await _restart_past(sim, f, tablet, state["c2"], outcome)
    return [*value[:7], outcome]


async def _restart_past(sim, host: str, tablet: str, index: int, outcome: str) -> str:
    """Write to `tablet` until `host`'s replica of it has compacted its log past `index` (a
    snapshot covers the config entry there), or SNAPSHOT_WAIT_S; then `host` loses power and
    restarts. The writes are the nemesis client's own, to keys of this fault's (never in a
    workload's history): a quiet tablet's log would never pass the entry."""
    def past() -> bool:
        r = _replica(sim.servers.get(host), tablet)
        return r is None or r.core.log.offset >= index

    deadline = sim.loop.time() + SNAPSHOT_WAIT_S
    try:
        locs = await asyncio.wait_for(sim.client.locations("test"), 2.0)
        t = next(t for t in locs.tablets if t.tablet_id == tablet)
        keys = [k for k in (f"config-race/{i}" for i in range(2000)) if t.partition.contains(k)]
        table = sim.client.table("test")
        i = 0
        while keys and not past() and sim.loop.time() < deadline:
            await asyncio.wait_for(table.write(keys[i % len(keys)], i), 2.0)
            i += 1
    except Exception as e:  # noqa: BLE001 -- unavailable, refused: recorded, F restarts anyway
        outcome = f"{outcome}; writes failed: {type(e).__name__}"
    if not past():
        outcome = f"{outcome}; log not compacted past C2"
    if host not in sim.down:
        sim._crash(host)
        sim._boot(host)
    return outcome
