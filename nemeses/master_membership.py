"""The masters' own membership, changed while the test runs (Kudu's `master add` / `master
remove`): every start and every stop moves one step along 3 -> 4 -> 5 -> 4 -> 3 -> ...
A step up starts a master with an empty data dir on a host that has none and adds it (it is
copied the catalog and promoted); a step down removes the master added last, then stops it and
wipes its data. Tablet servers and clients follow the new set from heartbeats and locations,
which is what this exercises: a catalog whose voters change under chaos must not lose a table,
a location or a leader, and the history must stay valid. The final heal shrinks back to the
masters the run began with.
"""

from __future__ import annotations

from dataclasses import dataclass

from nemeses.base import Nemesis
from nemeses.membership import Refused
from nemeses.registry import Package, register

MAX_MASTERS = 5


@dataclass
class MasterMembership(Nemesis):
    name: str = "master-membership"
    db: object = None  # harness.systems.tessera.deployment.TesseraDB
    growing: bool = True

    def start(self, choice: dict) -> dict:
        return self.step(choice.get("pick", 0))

    def stop(self) -> dict:
        return self.step(0)

    def step(self, pick: int) -> dict:
        masters = {h.name for h in self.db.master_hosts}
        free = [h.name for h in self.db.hosts if h.name not in masters]
        if not free or len(masters) >= MAX_MASTERS:
            self.growing = False
        if not self.db.added_masters:
            self.growing = True
        if self.growing and free:
            host = free[pick % len(free)]
            uuid = self.db.add_master(host)
            self.active = True
            return {"added": host, "uuid": uuid, "masters": len(masters) + 1}
        if not self.db.added_masters:
            return {"skipped": "no host without a master"}
        host = self.db.added_masters[-1]
        try:
            uuid = self.db.remove_master(host)
        except Refused as e:  # refusing is right: the step is tried again at the next one
            return {"skipped": f"the masters refused to remove {host}'s master now: {e}"}
        self.active = bool(self.db.added_masters)
        return {"removed": host, "uuid": uuid, "masters": len(masters) - 1}

    def heal(self) -> dict:
        removed = []
        while self.db.added_masters:
            host = self.db.added_masters[-1]
            self.db.remove_master(host)
            removed.append(host)
        self.active, self.growing = False, True
        return {"removed": removed, "masters": len(self.db.master_hosts)} if removed else {}


register(Package("master-membership", heal_rank=65, group="masters", min_hosts=4,
                 needs=frozenset({"masters"}),
                 draw=lambda rng, hosts: {"pick": rng.randrange(1 << 16)},
                 build=lambda ctx: MasterMembership(db=ctx.db)))
