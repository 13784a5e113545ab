"""Membership changes back to back, without waiting for a config to settle, racing leader kills:
each round removes a replica of one tablet and at once adds it back, while the tablet's leader or
the replica itself is killed in between (and restarted right after). `nemeses.membership` waits
for a settled config before each change; this one exists to hit the windows that waiting hides
(a change proposed while another is pending, a leader dying with a config entry uncommitted).
The master's compare-and-set guard may refuse a change: that refusal is recorded, not retried.
Stop restarts whatever is down and adds the replica back, retrying until it is a member.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from harness.tessera_members import TabletMembers, change_replica
from nemeses.base import Context, Nemesis
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

    def _tablet(self, tablet: str) -> tuple[str | None, list[str], dict[str, str]]:
        """The tablet's leader host, its committed members (uuids), and uuid -> host."""
        from node.protocol import ServerStatus

        statuses = self.ctx.db.ask_each(self.ctx.hosts, "tserver", "ts.status", ServerStatus)
        hosts = {st.uuid: h for h, st in statuses.items()}
        reports = [(h, t) for h, st in statuses.items() for t in st.tablets
                   if t.tablet_id == tablet and t.state == "RUNNING"]
        if not reports:
            return None, [], hosts
        h, newest = max(reports, key=lambda r: (r[1].term, r[1].role == "LEADER"))
        leader = h if newest.role == "LEADER" else None
        return leader, sorted(u for u, _ in newest.committed_config), hosts

    def _once(self, tablet: str, op: str, uuid: str) -> str:
        from node.rpc import RpcError

        try:
            asyncio.run(change_replica(self.ctx.db, tablet, op, uuid, timeout=3.0))
            return "ok"
        except RpcError as e:
            return f"refused: {e}"

    def start(self, choice: dict) -> dict:
        tablet = self.ctx.tablet(choice["bucket"])
        leader, members, hosts = self._tablet(tablet) if tablet else (None, [], {})
        known = [u for u in members if u in hosts]  # on a server that answered
        if not known:
            return {"skipped": f"no running replica of tablet {tablet} reports its config"}
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
            leader = self._tablet(tablet)[0]
        return {"tablet": tablet, "replica": hosts[uuid], "rounds": rounds}

    def _restart(self) -> None:
        while self._down:
            host = self._down.pop()
            self.ctx.db.release(host, "tserver", self.name)
            self.ctx.db.start(host, "tserver")

    def stop(self) -> dict:
        self._restart()
        if not self._victim:  # the start was skipped
            return {}
        tablet, uuid, host = self._victim
        TabletMembers(self.ctx.db).change(tablet, "add", uuid)  # an existing member is done
        self._victim, self.active = (), False
        return {"member": host, "tablet": tablet}


register(Package("membership-race", heal_rank=62, draw=draw, min_hosts=3, group="raft",
                 needs=frozenset({"tablets"}),
                 build=lambda ctx: MembershipRace(ctx=ctx)))
