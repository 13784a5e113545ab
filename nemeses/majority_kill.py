"""Kill the data daemons (Tessera: the tablet servers) of a majority of hosts at once, then restart them: every tablet loses
its quorum, and on restart each replica must recover its log and term from disk and elect a
leader that holds every committed entry."""

from __future__ import annotations

import random

from nemeses.base import choose_targets
from nemeses.process import Kill
from nemeses.registry import Package, register


def draw(rng: random.Random, hosts: list[str]) -> dict:
    return {"target": {"rule": "hosts", "spec": "majority",
                       "hosts": choose_targets("majority", hosts, rng)}}


register(Package("majority-kill", heal_rank=52, draw=draw, min_hosts=3, group="raft",
                 needs=frozenset({"leaders"}),
                 build=lambda ctx: Kill(name="majority-kill", ctx=ctx, daemon=ctx.db.data_daemon)))
