"""etcd's leaders for the leader-transfer nemesis (nemeses.leader_transfer): etcd's MoveLeader
(`etcdctl move-leader`), asked of the leader, to a member drawn by the start's `pick`, then
looked at on the old leader: it names another leader, or a later term. etcd has no step-down
without a successor, so an abrupt draw moves leadership too.

As an operator would, a transfer first waits for a settled leader (a majority of the members
name it in one term, and it names itself) and draws the successor among the members that follow
it now. A leader in mid-election, cut off by a partition, or killed under the call cannot hand
over, and etcd's MoveLeader then only waits out its deadline: it returns once the named member
leads, never on an abandoned transfer. Such an attempt (a refusal, a deadline, a lost answer
with the leader leading on or gone) is tried again with a fresh look, as an operator retries
`move-leader`, while the start's budget lasts; the start is skipped, with every attempt's
reason, only when none took. A transfer etcd acknowledged whose old leader still leads in its
term is a fault not in force: that is never retried away.
"""

from __future__ import annotations

import random
import time

from harness.systems.etcd.api import GROUP, EtcdError
from nemeses.observe import observation, watch

# How long one start may spend, times the run's time scale: an election after a kill or a
# partition takes a few election timeouts (1 s each), and MoveLeader's deadline is etcdctl's
# default command timeout.
BUDGET_S = 20.0
SETTLE_S = 10.0
CALL_S = 5.0
WATCH_S = 5.0


def settled_leader(statuses: dict[str, dict], members: int
                   ) -> tuple[str, str, int, list[str]] | None:
    """From the members' statuses (host -> maintenance status): the leader a majority of
    `members` name in one term, answering itself as leader in that term, as (its host, its
    member id, the term, the member ids of the others that follow it now, sorted); None when
    no leader has a majority so. A learner is never a successor."""
    ids = {st["header"]["member_id"]: host for host, st in statuses.items()}
    votes: dict[tuple[str, int], list[str]] = {}
    for st in statuses.values():
        if st.get("leader") not in (None, "0"):
            votes.setdefault((st["leader"], int(st.get("raftTerm", 0))), []).append(
                st["header"]["member_id"])
    for (leader, term), named_by in sorted(votes.items(), key=lambda kv: -kv[0][1]):
        if leader in ids and leader in named_by and len(named_by) > members // 2:
            followers = sorted(m for m in named_by if m != leader
                               and not statuses[ids[m]].get("isLearner"))
            return ids[leader], leader, term, followers
    return None


def step_down_leader(db, pick: int) -> dict:
    """Move `db`'s leadership to a follower drawn by `pick`, retried while BUDGET_S lasts;
    what was done and what the old leader showed after (with the reasons earlier attempts were
    given up under "tries")."""
    rng = random.Random(pick)
    deadline = time.monotonic() + BUDGET_S * db.time_scale
    tries: list[str] = []
    while True:
        done = _attempt(db, rng, deadline)
        if "skipped" not in done:
            return {**done, "tries": tries} if tries else done
        tries.append(done.pop("skipped"))
        if time.monotonic() >= deadline:
            return {**done, "skipped": "no transfer took: " + "; ".join(tries)}


def _attempt(db, rng: random.Random, deadline: float) -> dict:
    scale = db.time_scale
    settled = watch(lambda: settled_leader(db.statuses(timeout=2.0 * scale),
                                           len(db.hosts) - len(db.removed)),
                    lambda s: s is not None and bool(s[3]),
                    max(0.0, min(SETTLE_S * scale, deadline - time.monotonic())), period=0.5)
    if settled is None or not settled[3]:
        return {"skipped": "no leader that a majority of members follow"}
    leader, me, term, followers = settled
    to = rng.choice(followers)
    done = {"group": GROUP, "leader": leader, "term": term, "to": to}
    lost = None
    try:
        db.ask(db.host(leader), "/v3/maintenance/transfer-leadership", {"targetID": to},
               timeout=CALL_S * scale)
    except (ValueError, EtcdError) as e:  # etcd's own refusal: nothing was moved
        return {**done, "skipped": f"the leader refused: {type(e).__name__}: {e}"}
    except OSError as e:  # no answer: its deadline passed, or the connection closed under it
        lost = f"{type(e).__name__}: {e}"

    def moved(st: dict | None) -> bool:
        return st is not None and (st.get("leader") != me or int(st["raftTerm"]) > term)

    st = watch(lambda: db._post(db.host(leader), "/v3/maintenance/status", {}), moved,
               WATCH_S * scale)
    if lost is not None:  # it may have moved all the same: the old leader says
        if st is None:
            return {**done, "skipped": f"no answer ({lost}) and the leader answered nothing "
                                       "after"}
        if not moved(st):
            return {**done, "skipped": f"no answer ({lost}) and the leader still leads"}
        done["answer_lost"] = lost
    if st is None:
        return {**done, "observed": observation(None, host=leader, why="it did not answer")}
    return {**done, "observed": observation(moved(st), host=leader, leader=st.get("leader"),
                                            term=int(st["raftTerm"]))}
