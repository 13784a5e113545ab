"""Administrative operations as faults, like Jepsen's etcd admin nemesis: maintenance an
operator runs while clients work (etcd: compaction to the current revision, defragmentation of a
member's backend). What they are is the system's (`admin()`, offered as "admin"); the nemesis
only says when and where. Nothing to heal: each is done when it returns.

Its own group, `--nemesis admin`: compaction removes the history the watch workload's final
watch must read from revision 1, so `--nemesis all` leaves it out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nemeses.base import Nemesis
from nemeses.registry import Package, register


@dataclass
class Admin(Nemesis):
    name: str = "admin"
    db: object = None  # harness.deployment.Deployment offering "admin"

    def start(self, choice: dict) -> dict:
        return self.db.admin(choice["host"], choice["pick"])

    def stop(self) -> dict:
        return {}


def draw_admin(rng: random.Random, hosts: list[str]) -> dict:
    return {"host": rng.choice(hosts), "pick": rng.randrange(1 << 16)}


register(Package("admin", heal_rank=5, draw=draw_admin, group="admin",
                 needs=frozenset({"admin"}), build=lambda ctx: Admin(db=ctx.db)))
