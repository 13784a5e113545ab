"""Kill the data daemons (Tessera: the tablet servers) of a majority of hosts at once, then restart them: every tablet loses
its quorum, and on restart each replica must recover its log and term from disk and elect a
leader that holds every committed entry.

`all-kill` crashes every host's data daemon in the same moment (SIGKILL to all in parallel, as
a rack losing power kills processes, though the disks keep what reached the OS): Jepsen's
coordinated crash, after which a cluster must come back from its own disks alone, with no
survivor to copy from (Galera's finding: commits lost when every node crashed in quick
succession). In the raft group beside majority-kill: the whole cluster comes back from disk."""

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


def draw_all(rng: random.Random, hosts: list[str]) -> dict:
    return {"target": {"rule": "hosts", "spec": "all", "hosts": choose_targets("all", hosts, rng)}}


register(Package("all-kill", heal_rank=53, draw=draw_all, group="raft",
                 build=lambda ctx: Kill(name="all-kill", ctx=ctx, daemon=ctx.db.data_daemon,
                                        at_once=True)))
