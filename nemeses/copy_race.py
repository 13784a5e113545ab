"""A tablet copy racing an election, on real hosts: the whole-stack simulator's copy-race fault
(harness.sim.stack) as a nemesis package. For one tablet with leader L and two other voters F and
R: cut the link between L and F (iptables drops, both ways; both still reach every other host),
and a moment later tombstone R's replica (ts.delete_tablet, as a failed disk or an operator
leaves a voter that is still in the config). L then copies the tablet to R while F, cut off
from L, campaigns and asks R, voting from its tombstone, for its vote; the copy's end races
F's election and L's deposition, and with lease reads R's tombstone races L's lease.

Three engine bugs were once found there that no fault reached before: a finished copy counted
as the receiver's acknowledgement, a tombstone voting inside the vote lease, and a delete
racing the copy's install. Stop heals the cut; the copy completes on its own (the leader copies a
tombstoned voter back by itself), so nothing else needs undoing.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from nemeses.base import Context, Nemesis, held_off
from nemeses.net import Partition
from nemeses.registry import Package, register


def draw(rng: random.Random, hosts: list[str]) -> dict:
    return {"bucket": rng.randrange(1 << 16), "pick": rng.randrange(1 << 16),
            "after_s": round(rng.uniform(0.0, 2.0), 2)}  # from the cut to R's tombstone


@dataclass
class CopyRace(Nemesis):
    ctx: Context = None
    part: Partition = None
    name: str = "copy-race"

    def start(self, choice: dict) -> dict:
        groups = self.ctx.db.replica_groups()
        tablet = self.ctx.tablet(choice["bucket"])
        view = groups.view(tablet) if tablet else None
        leader = view.leader if view else None
        others = view.voters_but_leader() if leader else []
        if leader is None or len(others) < 2:
            # the kills and partitions of other packages leave it so until they stop: quiet,
            # so their next starts wait while the group settles (nemeses.base.held_off)
            return held_off(f"tablet {tablet} has no leader with two other voters that answer",
                            quiet=True)
        self.settled()  # the group is found: the others' starts may go on
        i = choice["pick"] % len(others)
        follower, receiver = others[i], others[(i + 1) % len(others)]
        self.part.cut({leader: [follower], follower: [leader]})
        self.active = True
        time.sleep(choice["after_s"])
        deleted = groups.tombstone(receiver, tablet)
        return {"tablet": tablet, "leader": leader, "cut_from": follower,
                "tombstoned": receiver, "after_s": choice["after_s"],
                "delete": "ok" if deleted else "no answer or refused",
                "observed": self.part.observe_cut()}

    def stop(self) -> dict:
        self.active = False
        return self.part.stop()

    def heal(self) -> dict:
        self.active = False
        return self.part.heal()


register(Package("copy-race", heal_rank=14, draw=draw, min_hosts=3, group="raft",
                 needs=frozenset({"leaders", "tablets"}),
                 build=lambda ctx: CopyRace(ctx=ctx, part=Partition(
                     hosts=ctx.hosts, remotes=ctx.remotes, ctx=ctx, chain="TESSERA-CRACE"))))
