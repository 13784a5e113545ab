"""Membership changes back to back, without waiting for a config to settle, racing leader kills:
each round removes a replica of one tablet and at once adds it back, while the tablet's leader or
the replica itself is killed in between (and restarted right after). `nemeses.membership` waits
for a settled config before each change; this one exists to hit the windows that waiting hides
(a change proposed while another is pending, a leader dying with a config entry uncommitted).
The master's compare-and-set guard may refuse a change: that refusal is recorded, not retried.
Stop restarts whatever is down and adds the replica back, retrying until it is a member.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from nemeses.base import Context, Nemesis, held_off
from nemeses.registry import Package, register

RACES = ("kill-leader", "kill-member", "none")


def draw(rng: random.Random, hosts: list[str]) -> dict:
    rounds = rng.randint(2, 4)
    return {"bucket": rng.randrange(1 << 16), "member": rng.randrange(1 << 16),
            "races": [rng.choice(RACES) for _ in range(rounds)]}


@dataclass
class MembershipRace(Nemesis):
    ctx: Context = None
    name: str = "membership-race"
    _victim: tuple = ()  # (tablet, uuid, host) to add back on stop
    _down: set = field(default_factory=set)

    def _view(self, tablet: str | None):
        return self.ctx.db.replica_groups().view(tablet) if tablet else None

    def _once(self, tablet: str, op: str, uuid: str) -> str:
        return self.ctx.db.replica_groups().change_once(tablet, op, uuid, timeout=3.0)

    def start(self, choice: dict) -> dict:
        tablet = self.ctx.tablet(choice["bucket"])
        view = self._view(tablet)
        leader, hosts = (view.leader, view.hosts) if view else (None, {})
        known = sorted(u for u in (view.members if view else {}) if u in hosts)  # answered
        if not known:
            # every replica killed or paused by other packages: until they stop
            return held_off(f"no running replica of tablet {tablet} reports its config")
        uuid = known[choice["member"] % len(known)]
        self._victim, self.active = (tablet, uuid, hosts[uuid]), True
        rounds = []
        for race in choice["races"]:
            done = {"remove": self._once(tablet, "remove", uuid), "race": race}
            victim = leader if race == "kill-leader" else hosts[uuid] if race == "kill-member" else None
            holder = victim and self.ctx.db.claim(victim, "tserver", self.name)
            if holder:  # another fault holds it killed or paused: not ours to kill or restart
                done["not_killed"], done["held_by"] = victim, holder
            elif victim:
                self.ctx.db.kill(victim, "tserver")
                self._down.add(victim)
                done["killed"] = victim
            done["add"] = self._once(tablet, "add", uuid)
            self._restart()
            rounds.append(done)
            leader = (view := self._view(tablet)) and view.leader
        return {"tablet": tablet, "replica": hosts[uuid], "rounds": rounds}

    def _restart(self) -> None:
        while self._down:
            host = self._down.pop()
            self.ctx.db.give_back(host, "tserver", self.name)

    def stop(self) -> dict:
        self._restart()
        if not self._victim:  # the start was skipped
            return {}
        tablet, uuid, host = self._victim
        self.ctx.db.replica_groups().change(tablet, "add", uuid)  # an existing member is done
        self._victim, self.active = (), False
        return {"member": host, "tablet": tablet}


register(Package("membership-race", heal_rank=62, draw=draw, min_hosts=3, group="raft",
                 needs=frozenset({"tablets"}),
                 build=lambda ctx: MembershipRace(ctx=ctx)))
