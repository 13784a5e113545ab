"""Leadership moved on purpose, as an operator moves it before restarting a server: the leader
of one replication group (a tablet's, or the masters') is told to hand over to a voter drawn in
advance (a graceful transfer) or to step down (the others elect after a timeout), then looked
at on its own server: still leading in the same term means the step-down was not in force.

A graceful transfer hands over inside one election timeout, with no lease left behind: the old
leader serves no lease read from the moment it asks (Kudu's and etcd's transfer), and the new
one has none until it commits in its term. A lease read served across the handover, or a write
acknowledged by the old leader after it, is what this brings the checkers.

The nemesis knows no system's API: a system that offers "transfers" gives
`step_down_leader(group, graceful, pick)`. Nothing to heal: each start is done when it returns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nemeses.base import Context, Nemesis, draw_target, held_off
from nemeses.registry import Package, register

GRACEFUL_SHARE = 0.7  # of starts a transfer to a named voter; the rest abrupt step-downs


def draw(rng: random.Random, hosts: list[str]) -> dict:
    return {"target": draw_target(rng, hosts, ("tablet-leader", "leader-master")),
            "graceful": rng.random() < GRACEFUL_SHARE, "pick": rng.randrange(1 << 16)}


@dataclass
class LeaderTransfer(Nemesis):
    ctx: Context = None
    name: str = "leader-transfer"
    fires_late: bool = True  # nothing to stop

    def start(self, choice: dict) -> dict:
        rule = choice["target"]
        tablet = None
        if rule["rule"] == "tablet-leader":
            tablet = self.ctx.tablet(rule["bucket"])
            if tablet is None:
                return held_off("the test table has no tablets yet")
        return self.ctx.db.step_down_leader(tablet, choice["graceful"], choice["pick"])

    def stop(self) -> dict:
        return {}


register(Package("leader-transfer", heal_rank=5, draw=draw, min_hosts=3, group="raft",
                 needs=frozenset({"transfers"}), build=lambda ctx: LeaderTransfer(ctx=ctx)))
