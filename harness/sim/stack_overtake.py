"""The whole-stack simulator's `overtake` fault: an answer that overtakes a request sent before
it on another connection, around a leader that serves reads from its lease.

Raft's answers ride back on their asker's connection (a VoteResponse is the reply to the
candidate's call), its requests on the sender's own; each connection is one flow, and flows
between two hosts may take different paths (SimNetwork.delay_flow). On a test tablet whose
leader L serves lease reads (any test tablet if none does), with voters F and R:
- L is cut from F and R, so both leave their vote leases and campaign;
- as R's vote request to F enters R's own connection, that flow slows by `req_s`;
- as F, still in the old term, sends R a pre-vote while R is a candidate, R's answers to F (on
  F's connection) slow by less, so that R's refusal, carrying R's new term, comes after L's next
  round reaches F and before R's vote request; L-F heals at that moment, and F acknowledges L;
- L-R stays cut and the flows slow `more_s` longer (a heal ends all of it sooner).

This is the shape of the review's late-answer bug (docs/decisions/late-answers-in-a-lease.md):
F, inside the vote lease it owes L, took the refusal's term, which cleared its leader and with
it the withholding, and granted R's vote request, while L still served reads on F's
acknowledgement. The simulator's network had kept everything between two hosts in one order
(a link's delay is the same for all its connections), and 80 seeds of a swarm mix that reached
the late answer passed on the code before the fix.
"""

from __future__ import annotations

import asyncio
import random

from harness.sim.loop import SYSTEM
from harness.sim.stack_checks import _replica
from node.consensus import Role, VoteRequest

CUT_S = (3.0, 6.0)  # at most, L cut from F: past a vote lease and an election timeout
MORE_S = (1.0, 4.0)  # L-R stays cut this much longer, R's flows slow as long
# R's requests to F late by req_s, its answers by ans_s: the answer comes after L's next round
# (a heartbeat period, 0.5 s) reaches F, and the request after the answer, within a lease
REQ_S = (1.0, 1.4)
ANS_S = (0.55, 0.9)
MARGIN_S = 0.05  # the answer's lead on the request it must overtake
WATCH_S = 0.05  # how often the fault looks whether its race has come


def choose(chooser, rng: random.Random) -> tuple[str | None, object]:
    """A test tablet's leader L (one serving lease reads if any does) and two other voters F
    and R, all up. Value: [tablet, L, F, R, req_s, cut_s, more_s, pick]: `pick` places R's
    answers' delay within what the race allows when it comes (see `overtake`)."""
    picked = chooser.pick_leader(rng, leasing=True)
    if picked is None:
        return None, None
    tablet, host, replica = picked
    voters = [h for h in chooser.other_voters(replica) if h not in chooser._impaired()]
    if len(voters) < 2:
        return None, None
    f, r = rng.sample(voters, 2)
    return "overtake", [tablet, host, f, r, round(rng.uniform(*REQ_S), 3),
                        round(rng.uniform(*CUT_S), 3), round(rng.uniform(*MORE_S), 3),
                        round(rng.random(), 3)]


async def overtake(sim, value: list) -> list:
    """Apply `value` (see `choose` and the module's note). The flows slow as the messages
    enter them (StackSim.send_hooks): R's own connection to F as R's vote request for the
    tablet is queued, so R's pre-vote before it went at once; F's connection, for R's answers,
    as F's pre-vote to R is queued while R is a candidate of a higher term, by `ans_s` within
    ANS_S and short enough (MARGIN_S) to come before R's vote request; L-F heals then. Recorded
    as [*value, ans_s, or why L-F healed without it: "cut_s", "late" (R's request due too
    soon for an answer to come between)]."""
    tablet, leader, f, r, req_s, cut_s, more_s, pick = value[:8]
    sim._cut(leader, f, cut_s)
    sim._cut(leader, r, cut_s + more_s)
    uuid = {h: getattr(sim.servers.get(h), "uuid", None) for h in (f, r)}
    state: dict = {}  # "due": when R's vote request reaches F; "outcome"
    slowed: dict = {}  # (src, dst, opener) -> the delay this fault gave that flow

    def slow(opener: str, seconds: float) -> None:
        sim.net.delay_flow(r, f, opener, seconds)
        slowed[(r, f, opener)] = seconds

    def watch(host: str, tab: str, to_uuid: str, messages: list) -> None:
        if tab != tablet or "outcome" in state or not sim.net.is_cut(leader, f):
            return  # one race a fault, while L-F is cut
        votes = [m for m in messages if type(m) is VoteRequest]
        if host == r and to_uuid == uuid[f] and "due" not in state and any(
                not m.pre_vote for m in votes):
            slow(r, req_s)
            state["due"] = sim.loop.time() + req_s
        elif host == f and to_uuid == uuid[r] and "due" in state and any(
                m.pre_vote for m in votes):
            rr = _replica(sim.servers.get(r), tablet)
            if rr is None or rr.core.role is not Role.CANDIDATE or votes[0].term > rr.core.term:
                return
            room = min(ANS_S[1], state["due"] - sim.loop.time() - MARGIN_S)
            if room < ANS_S[0]:
                state["outcome"] = "late"
                return
            ans_s = round(ANS_S[0] + pick * (room - ANS_S[0]), 3)
            slow(f, ans_s)
            sim.net.uncut(leader, f)
            state["outcome"] = ans_s

    def end() -> None:
        if watch in sim.send_hooks:
            sim.send_hooks.remove(watch)
        # only the delays this fault gave, and only while they are still its own: another
        # overtake on the same two hosts may have slowed a flow since, and ends it itself
        for key, seconds in slowed.items():
            if sim.net.flow_delayed(*key) == seconds:
                sim.net.delay_flow(*key, 0.0)

    sim.send_hooks.append(watch)
    sim.loop.call_later(cut_s + more_s, end, context=SYSTEM)
    until = sim.loop.time() + cut_s
    while sim.loop.time() < until and "outcome" not in state:
        await asyncio.sleep(WATCH_S)
    if "outcome" in state:  # the race is run: free the nemesis once it can have ended
        await asyncio.sleep(max(0.0, min(until, state["due"] + MARGIN_S) - sim.loop.time()))
    return [*value[:8], state.get("outcome", "cut_s")]
