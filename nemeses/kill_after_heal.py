"""Partition a tablet leader away, and right after the partition heals kill that tablet's leader
(often the one elected meanwhile), while the old leader is still catching up; restart it after a
moment. Entries committed just before the kill must survive the election that follows."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from nemeses.base import Context, Nemesis, draw_target
from nemeses.net import Partition, isolate
from nemeses.registry import Package, register


def draw(rng: random.Random, hosts: list[str]) -> dict:
    return {"target": draw_target(rng, hosts, ("tablet-leader",)),
            "down_s": round(rng.uniform(0.5, 3), 2)}


@dataclass
class KillAfterHeal(Nemesis):
    ctx: Context = None
    part: Partition = None
    name: str = "kill-after-heal"
    _choice: dict = field(default_factory=dict)
    _killed: list[str] = field(default_factory=list)

    def start(self, choice: dict) -> dict:
        leader, resolved = self.ctx.resolve_leader(choice["target"])
        self._choice = choice
        self.part.cut(isolate(leader, self.ctx.names))
        self.active = True
        return {"isolated": leader, "resolved": resolved,
                "tablet": self.ctx.tablet(choice["target"]["bucket"]),
                "observed": self.part.observe_cut()}

    def stop(self) -> dict:
        if not self.active:  # the start failed
            return self.heal()
        self.part.stop()
        db = self.ctx.db
        (leader,) = self.ctx.resolve(self._choice["target"])
        if holder := db.claim(leader, db.data_daemon, self.name):
            self.active = False  # another fault holds it killed or paused: not ours to kill
            return {"healed": self.ctx.names, "not_killed": leader, "held_by": holder}
        self._killed = [leader]
        db.kill(leader, db.data_daemon)
        time.sleep(self._choice["down_s"])
        return {"healed": self.ctx.names, "killed": leader, **self._restart()}

    def _restart(self) -> dict:
        restarted, self._killed = self._killed, []
        for h in restarted:
            self.ctx.db.give_back(h, self.ctx.db.data_daemon, self.name)
        self.active = False
        return {"restarted": restarted}

    def heal(self) -> dict:
        self.part.heal()
        return self._restart()


register(Package("kill-after-heal", heal_rank=14, draw=draw, min_hosts=3, group="raft",
                 needs=frozenset({"leaders"}),
                 build=lambda ctx: KillAfterHeal(ctx=ctx, part=Partition(
                     hosts=ctx.hosts, remotes=ctx.remotes, ctx=ctx, chain="TESSERA-KAH"))))
