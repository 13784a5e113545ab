"""Every master cut off from the tablet servers of one or two hosts that run no master: on each
master's host, iptables drops what those hosts send to the master's RPC port. Those tablet
servers still reach each other, the masters' hosts' tablet servers and the clients; only their
heartbeats (and their tablets' reports) no longer reach the masters, as a firewall rule or a
switch between racks makes it.

What it reaches: the masters see those servers fall silent while they keep hearing the others,
so the silence counts, and the tablets those servers lead report nothing. A master that judged
a replica failed by its own view alone moved every tablet with a member there onto the servers
it heard, a copy each, while the tablets' leaders heard every member
(docs/decisions/re-replication.md; the simulator's `master-cut` fault is the same cut). Under
`--fast-failure-detection` a cut of a few seconds is past the masters' silence limit.

Each start is checked on the hosts: from every cut server, a TCP connect to every master's RPC
port must fail. A system without masters (Deployment.offers has no "masters") is refused it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from nemeses.base import Context, Nemesis
from nemeses.net import _ensure_chain, _remove_chain, observe_cuts
from nemeses.registry import Package, register

CHAIN = "TESSERA-MCUT"  # this package's own: no other package's heal lifts its cut


def draw(rng: random.Random, hosts: list[str]) -> dict:
    """How many of the hosts without a master (known when it fires), one or two, and a pick
    that breaks ties among them (MasterCut._choose)."""
    return {"pick": rng.randrange(1 << 16), "count": rng.choice((1, 2))}


@dataclass
class MasterCut(Nemesis):
    ctx: Context = None
    name: str = "master-cut"
    _masters: list[str] = field(default_factory=list)
    _cut: list[str] = field(default_factory=list)

    def start(self, choice: dict) -> dict:
        masters = [h.name for h in self.ctx.db.master_hosts]
        others = [n for n in self.ctx.names if n not in masters]
        if not others:
            return {"skipped": "every host runs a master: no tablet server to cut off alone"}
        cut, followed = self._choose(others, choice)
        addr = {h.name: h.address for h in self.ctx.hosts}
        port = str(self.ctx.db.RPC_PORTS["master"])
        for m in masters:
            r = self.ctx.remotes[m]
            _ensure_chain(r, CHAIN)
            for server in cut:
                r.run(["iptables", "-w", "-A", CHAIN, "-s", addr[server], "-p", "tcp",
                       "--dport", port, "-j", "DROP"])
        self._masters, self._cut, self.active = masters, cut, True
        return {"servers": cut, "masters": masters, "followed": followed,
                "observed": self._observe(addr, int(port))}

    def _choose(self, others: list[str], choice: dict) -> tuple[list[str], int]:
        """The servers to cut off, and how many tablets they hold a replica of whose leader
        the masters still hear (`followed`): only there can a master misjudge a member, since
        a tablet led from a cut server reports nothing. At most all but one of `others`, so
        that a server without a master still reports; the hosts holding the most such
        replicas first (leaders gather on some hosts), the plan's pick breaking ties. 0
        followed says the start could not reach a misjudgment, in its record."""
        count = min(choice["count"], max(1, len(others) - 1))
        leaders = self.ctx.db.tablet_leaders()  # tablet -> its leader's host
        held = {h: self.ctx.db.groups_on(h) or set() for h in others}

        def followed(cut: list[str]) -> int:
            return sum(1 for h in cut for t in held[h] if leaders.get(t) not in (None, *cut))
        first = choice["pick"] % len(others)
        ranked = sorted(others, key=lambda h: (-followed([h]), (others.index(h) - first)
                                               % len(others)))
        cut = sorted(ranked[:count])
        return cut, followed(cut)

    def _observe(self, addr: dict[str, str], port: int) -> dict:
        """From each cut server, a connect to each master's RPC port must fail."""
        masters = [addr[m] for m in self._masters]
        return observe_cuts(self.ctx.remotes, {s: masters for s in self._cut},
                            {a: n for n, a in addr.items()}, port)

    def stop(self) -> dict:
        for m in self._masters:
            _remove_chain(self.ctx.remotes[m], CHAIN)
        healed, self._masters, self._cut, self.active = self._cut, [], [], False
        return {"healed": healed}

    def heal(self) -> dict:
        for h in self.ctx.hosts:  # every host: a harness crash may have left rules behind
            _remove_chain(self.ctx.remotes[h.name], CHAIN)
        self._masters, self._cut, self.active = [], [], False
        return {"healed": self.ctx.names}


register(Package("master-cut", heal_rank=11, draw=draw, min_hosts=4,
                 needs=frozenset({"masters", "leaders"}), build=lambda ctx: MasterCut(ctx=ctx)))
