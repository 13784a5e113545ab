"""Isolate a tablet leader; then, instead of healing, cut off the leader elected meanwhile, so
the old leader, now lagging, sits in the majority side with up-to-date peers. Raft's election
restriction must keep the lagging node from winning with its stale log: if it could, entries the
new leader committed would be lost."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from nemeses.base import Context, Nemesis, draw_target
from nemeses.net import Partition, isolate
from nemeses.registry import Package, register


def draw(rng: random.Random, hosts: list[str]) -> dict:
    return {"target": draw_target(rng, hosts, ("tablet-leader",)),
            "hold_s": round(rng.uniform(1, 4), 2)}  # the favouring partition's length


@dataclass
class LeaderIsolate(Nemesis):
    ctx: Context = None
    part: Partition = None
    name: str = "leader-isolate"
    _choice: dict = field(default_factory=dict)
    _old: str = ""

    def start(self, choice: dict) -> dict:
        self._old, resolved = self.ctx.resolve_leader(choice["target"])
        self._choice = choice
        self.part.cut(isolate(self._old, self.ctx.names))
        self.active = True
        return {"isolated": self._old, "resolved": resolved,
                "tablet": self.ctx.tablet(choice["target"]["bucket"]),
                "observed": self.part.observe_cut()}

    def stop(self) -> dict:
        if not self.active:  # the start failed
            return self.heal()
        self.part.stop()
        new = self.ctx.leader(self._choice["target"])
        done = {"healed": self.ctx.names, "lagging": self._old}
        if new and new != self._old:
            self.part.cut(isolate(new, self.ctx.names))
            time.sleep(self._choice["hold_s"])
            self.part.stop()
            done.update({"then_isolated": new, "held_s": self._choice["hold_s"]})
        self.active = False
        return done

    def heal(self) -> dict:
        self.active = False
        return self.part.heal()


register(Package("leader-isolate", heal_rank=12, draw=draw, min_hosts=3, group="raft",
                 needs=frozenset({"leaders"}),
                 build=lambda ctx: LeaderIsolate(ctx=ctx, part=Partition(
                     hosts=ctx.hosts, remotes=ctx.remotes, ctx=ctx, chain="TESSERA-LISO"))))
