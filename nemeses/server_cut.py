"""One host's tablet server cut off from every other host's tablet server: on each other host,
iptables drops what the cut host sends to the tablet server's RPC port, and on the cut host what
the others send to it. The masters still hear the cut server (its heartbeats go to the
masters' port) and the clients still reach every server, as a switch between racks or a
firewall rule on the servers' port makes it. A master on another host cannot call the cut
server either (they share the host's address), which only delays what the masters would
delete there.

What it reaches: the leaders of the cut server's replicas on other hosts stop hearing them,
and a leader on the cut host loses its followers, who elect another. A member its leader has
not heard past follower_unavailable_considered_failed_sec is replaced while the masters hear
its server and it reports the replica running (docs/decisions/re-replication.md; the
simulator's `server-cut` fault is the same cut). Before, no such member was replaced, and
each tablet with a member there ran on two voters for as long as the cut lasted. Under
`--fast-failure-detection` a cut of ten seconds is twice the silence limit.

Each start is checked on the hosts: a TCP connect from the cut host to every other host's
tablet server port must fail, and from every other host to the cut host's. A cut that lasted
the silence limit and GRACE_S more is judged at its stop: every tablet that had a voter on the
cut server when it began must have committed a newer config by then (a replacement under
way). The tablets that did not are the stop's `found`, which makes the run invalid
(reports.checkers.faults.check_fault_findings).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from nemeses.base import Context, Nemesis
from nemeses.net import _ensure_chain, _remove_chain, observe_cuts
from nemeses.registry import Package, register

CHAIN = "TESSERA-SCUT"  # this package's own: no other package's heal lifts its cut
# Past the silence limit: an election (if the cut server led), the new leader's own count of
# the limit, its report on a heartbeat, a reconcile round and the change's commit.
GRACE_S = 10.0


def draw(rng: random.Random, hosts: list[str]) -> dict:
    """A pick that breaks ties among the hosts (ServerCut._choose)."""
    return {"pick": rng.randrange(1 << 16)}


@dataclass
class ServerCut(Nemesis):
    ctx: Context = None
    name: str = "server-cut"
    _cut: str | None = None
    _began: float = 0.0
    _before: dict = field(default_factory=dict)  # tablet -> committed config index at the start

    def start(self, choice: dict) -> dict:
        host, followed = self._choose(choice)
        addr = {h.name: h.address for h in self.ctx.hosts}
        others = [n for n in self.ctx.names if n != host]
        port = str(self.ctx.db.RPC_PORTS["tserver"])
        for other in others:  # what the cut host sends to the others' servers
            r = self.ctx.remotes[other]
            _ensure_chain(r, CHAIN)
            r.run(["iptables", "-w", "-A", CHAIN, "-s", addr[host], "-p", "tcp", "--dport", port,
                   "-j", "DROP"])
        r = self.ctx.remotes[host]  # and what they send to its server
        _ensure_chain(r, CHAIN)
        for other in others:
            r.run(["iptables", "-w", "-A", CHAIN, "-s", addr[other], "-p", "tcp",
                   "--dport", port, "-j", "DROP"])
        self._cut, self.active, self._began = host, True, time.monotonic()
        uuids, configs = self.ctx.db.committed_configs()
        self._before = {t: index for t, (index, voters) in configs.items()
                        if uuids.get(host) in voters}
        senders = {host: [addr[o] for o in others], **{o: [addr[host]] for o in others}}
        return {"server": host, "followed": followed,
                "observed": observe_cuts(self.ctx.remotes, senders,
                                         {a: n for n, a in addr.items()}, int(port))}

    def _choose(self, choice: dict) -> tuple[str, int]:
        """The host to cut off, and how many of its replicas are led from another host
        (`followed`): those are the members a leader stops hearing while the masters hear
        their server. The host holding the most first, the plan's pick breaking ties."""
        names = list(self.ctx.names)
        leaders = self.ctx.db.tablet_leaders()  # tablet -> its leader's host

        def followed(h: str) -> int:
            return sum(1 for t in self.ctx.db.groups_on(h) or () if leaders.get(t) not in (None, h))
        first = choice["pick"] % len(names)
        counts = {h: followed(h) for h in names}
        host = min(names, key=lambda h: (-counts[h], (names.index(h) - first) % len(names)))
        return host, counts[host]

    def stop(self) -> dict:
        judged = self._judge()
        for h in self.ctx.names:
            _remove_chain(self.ctx.remotes[h], CHAIN)
        healed, self._cut, self.active = self._cut, None, False
        return {"healed": healed, **judged}

    def _judge(self) -> dict:
        """Before the cut is lifted: if it lasted the silence limit and GRACE_S, the tablets
        that had a voter on the cut server and have committed no newer config since (`found`,
        with `judged_after_s`); else only how long it lasted."""
        if self._cut is None:  # the start failed: nothing was cut
            return {}
        lasted = round(time.monotonic() - self._began, 1)
        limit = float(self.ctx.db.flags.get("follower_unavailable_considered_failed_sec", 300))
        if lasted < limit + GRACE_S:
            return {"lasted_s": lasted}
        _, configs = self.ctx.db.committed_configs()
        kept = sorted(t for t, index in self._before.items()
                      if configs.get(t, (index,))[0] <= index)
        found = [f"tablet {t} kept its voter on {self._cut}, cut off from the other tablet "
                 f"servers for {lasted:g} s while the masters heard it, with no replacement "
                 "under way" for t in kept]
        return {"lasted_s": lasted, "judged_after_s": limit + GRACE_S, "found": found}

    def heal(self) -> dict:
        for h in self.ctx.names:  # every host: a harness crash may have left rules behind
            _remove_chain(self.ctx.remotes[h], CHAIN)
        self._cut, self.active = None, False
        return {"healed": self.ctx.names}


register(Package("server-cut", heal_rank=11, draw=draw, min_hosts=4, group="raft",
                 needs=frozenset({"masters", "leaders"}), build=lambda ctx: ServerCut(ctx=ctx)))
