"""Network faults on the receiving host: partitions and random loss (iptables), bandwidth caps
(tc tbf), and delay (an NFQUEUE rule feeding nemeses.delay, since this kernel has no netem).

Every rule a package adds lives in chains of its own, jumped to from INPUT: the partition
package's TESSERA-PART, leader-isolate's, kill-after-heal's and copy-race's their own (each
builds a `Partition` with its chain), the packet package's TESSERA-LOSS and TESSERA-DELAY. So a
stop flushes exactly what its package added: one package's heal never lifts another's cut while
the history still shows it in force, and nothing an operator put there is touched.

Order matters. A packet that the delay daemon accepts leaves the INPUT chain (an NFQUEUE
verdict ends the chain's traversal), so a DROP placed after the NFQUEUE rule never sees it: the
delay would switch partitions off. Dropping chains (partitions, loss) are therefore inserted at
the top of INPUT and the delay chain appended at its end, whichever starts first.

Only traffic between test hosts is affected: the control machine (the bridge address) keeps
reaching every host, as a Jepsen control node does. Each start is checked on the hosts right
after it (`nemeses.observe`): a cut pair must not connect, the delay daemon must be alive, the
rules and the qdisc must be there.
"""

from __future__ import annotations

import json
import random
import shlex
from dataclasses import dataclass, field

from harness import pidfile
from harness.cluster import ClusterError, Host
from harness.control import Remote
from nemeses import observe
from nemeses.base import Context, Nemesis, choose_targets
from nemeses.registry import Package, register

PART_CHAIN, LOSS_CHAIN, DELAY_CHAIN = "TESSERA-PART", "TESSERA-LOSS", "TESSERA-DELAY"
DELAY_QUEUE = 7
DELAY_PID = "/var/lib/tessera/delay.pid"
DELAY_LOG = "/var/lib/tessera/delay.log"
HOST_PYTHON = "/opt/tessera/venv/bin/python"
PACKET_MODES = ("loss", "delay", "bandwidth")
SHAPES = ("halves", "random-halves", "isolated", "leader-isolated", "bridge", "majorities-ring")


def grudge(shape: str, hosts: list[str], rng: random.Random, leader: str | None = None) -> dict:
    """host -> sorted hosts whose packets it drops (Jepsen's grudges)."""
    n = len(hosts)
    if shape == "halves":
        return _split(hosts[: n // 2], hosts[n // 2:])
    if shape == "random-halves":
        shuffled = rng.sample(hosts, n)
        return _split(shuffled[: n // 2], shuffled[n // 2:])
    if shape in ("isolated", "leader-isolated"):
        lone = leader if shape == "leader-isolated" and leader in hosts else rng.choice(hosts)
        return _split([lone], [h for h in hosts if h != lone])
    if shape == "bridge":  # two halves that only the middle node talks to
        shuffled = rng.sample(hosts, n)
        mid = n // 2
        left, bridge, right = shuffled[:mid], shuffled[mid], shuffled[mid + 1:]
        g = _split(left, right)
        g[bridge] = []
        return g
    if shape == "majorities-ring":  # each sees a majority; no two see the same one
        ring, m = rng.sample(hosts, n), n // 2 + 1
        back = (m - 1) // 2  # a window of m ring neighbours around each node
        return {h: sorted(set(hosts) - {ring[(i + d) % n] for d in range(-back, m - back)})
                for i, h in enumerate(ring)}
    raise ValueError(f"unknown partition shape {shape!r} (known: {', '.join(SHAPES)})")


def isolate(lone: str, hosts: list[str]) -> dict:
    """The grudge that cuts one host off from all the others."""
    return _split([lone], [h for h in hosts if h != lone])


def _split(a: list[str], b: list[str]) -> dict:
    g = {h: sorted(b) for h in a}
    g.update({h: sorted(a) for h in b})
    return g


def _ensure_chain(r: Remote, chain: str, last: bool = False) -> None:
    """The chain, jumped to from INPUT: first (a dropping chain) or `last` (the delay's)."""
    where = "-A INPUT" if last else "-I INPUT 1"
    r.sh(f"iptables -w -N {chain} 2>/dev/null; iptables -w -C INPUT -j {chain} 2>/dev/null || "
         f"iptables -w {where} -j {chain}")


def _rules(r: Remote, chain: str) -> int:
    """How many rules `chain` holds on the host (-1: no such chain)."""
    res = observe.ask(r, f"iptables -w -S {chain}")
    if res.exit_status != 0:
        return -1
    return sum(1 for line in res.stdout.splitlines() if line.startswith("-A "))


def _remove_chain(r: Remote, chain: str) -> None:
    r.sh(f"iptables -w -F {chain} 2>/dev/null; iptables -w -D INPUT -j {chain} 2>/dev/null; "
         f"iptables -w -X {chain} 2>/dev/null; true")


def draw_partition(rng: random.Random, hosts: list[str], shapes: tuple = SHAPES) -> dict:
    """A shape and its grudge, drawn for the plan; an isolated leader is a rule resolved when
    the fault fires (the leader master then, or a host drawn now if none is known)."""
    shape = rng.choice(shapes)
    if shape == "leader-isolated":
        return {"shape": shape, "target": {"rule": "leader-master",
                                           "fallback": [rng.choice(hosts)]}}
    return {"shape": shape, "drops": grudge(shape, hosts, rng)}


@dataclass
class Partition(Nemesis):
    hosts: list[Host] = field(default_factory=list)
    remotes: dict[str, Remote] = field(default_factory=dict)
    ctx: Context | None = None  # resolves leader rules
    name: str = "partition"
    chain: str = PART_CHAIN  # this package's own: a stop heals only its own cuts
    _cut: dict = field(default_factory=dict)

    def start(self, choice: dict) -> dict:
        shape, leader = choice["shape"], None
        if "target" in choice:
            leader, how = self.ctx.resolve_leader(choice["target"])
            self.cut(isolate(leader, [h.name for h in self.hosts]))
        else:
            self.cut(choice["drops"])
        return {"shape": shape, "drops": self._cut,
                **({"leader" if how == "leader" else "fallback": leader} if leader else {}),
                "observed": self.observe_cut()}

    def cut(self, drops: dict) -> None:
        """Install a grudge: host -> the hosts whose packets it drops."""
        addr = {h.name: h.address for h in self.hosts}
        self._cut = drops
        for host, srcs in drops.items():
            r = self.remotes[host]
            _ensure_chain(r, self.chain)
            for src in srcs:
                r.run(["iptables", "-w", "-A", self.chain, "-s", addr[src], "-j", "DROP"])
        self.active = True

    def observe_cut(self) -> dict:
        """Each cut pair tried from its sender: a TCP connect to the receiver's sshd must fail
        (`observe_cuts`); the check is of this package's cut alone."""
        addr = {h.name: h.address for h in self.hosts}
        senders: dict[str, list[str]] = {}
        for receiver, srcs in self._cut.items():
            for src in srcs:
                senders.setdefault(src, []).append(addr[receiver])
        return observe_cuts(self.remotes, senders, {a: n for n, a in addr.items()})

    def stop(self) -> dict:
        for h in self.hosts:
            _remove_chain(self.remotes[h.name], self.chain)
        self._cut, self.active = {}, False
        return {"healed": [h.name for h in self.hosts]}

    def heal(self) -> dict:
        return self.stop()  # always: a harness crash may have left rules behind


def observe_cuts(remotes: dict[str, Remote], senders: dict[str, list[str]],
                 name_of: dict[str, str], port: int = observe.PROBE_PORT) -> dict:
    """A start's observation of cut links: from each sender (host name), a TCP connect to
    each of its addresses on `port` must fail. Pairs that connected are named, and so are
    those no look answered for (the sender's SSH channel was lost twice: observe.ask), which
    leave the cut unchecked, not unverified. `name_of`: address -> host name."""
    seen = observe.each(sorted(senders),
                        lambda s: observe.reachable(remotes[s], senders[s], port))
    pairs = {state: sorted([s, name_of[a]] for s, probes in seen.items()
                           for a, is_open in probes.items() if is_open is state)
             for state in (True, None)}
    connected, unanswered = pairs[True], pairs[None]
    ok = False if connected else None if unanswered else True
    return observe.observation(ok, cut_pairs=sum(len(v) for v in senders.values()),
                               connected=connected,
                               **({"unanswered": unanswered} if unanswered else {}))


@dataclass
class PacketFaults(Nemesis):
    """Random loss of packets from other test hosts, delay of them, or a bandwidth cap on the
    host's link."""

    hosts: list[Host] = field(default_factory=list)
    remotes: dict[str, Remote] = field(default_factory=dict)
    loss: float = 0.2
    rate: str = "1mbit"
    delay_ms: float = 50.0
    jitter_ms: float = 10.0
    name: str = "packet"
    _targets: list[str] = field(default_factory=list)
    _devices: dict[str, str] = field(default_factory=dict)  # host -> its test interface

    def start(self, choice: dict) -> dict:
        self._targets, mode = list(choice["targets"]), choice["mode"]
        peers = [h.address for h in self.hosts]
        for name in self._targets:
            r = self.remotes[name]
            if mode == "loss":
                _ensure_chain(r, LOSS_CHAIN)
                for src in peers:
                    r.run(["iptables", "-w", "-A", LOSS_CHAIN, "-s", src, "-m", "statistic",
                           "--mode", "random", "--probability", f"{self.loss:g}", "-j", "DROP"])
            elif mode == "delay":
                # the daemon first, so no packet waits on a queue nobody reads
                daemon = (f"{HOST_PYTHON} -m nemeses.delay --queue {DELAY_QUEUE} "
                          f"--delay-ms {self.delay_ms:g} --jitter-ms {self.jitter_ms:g}")
                # its pid file is waited for, not a fixed while: on a loaded host the shell
                # that writes it may not have run yet, and the check would see no daemon
                r.sh(f"{pidfile.remove(DELAY_PID)}; "
                     f"setsid sh -c {shlex.quote(f'{pidfile.record(DELAY_PID)}; exec {daemon}')} "
                     f"</dev/null >>{DELAY_LOG} 2>&1 & "
                     f"for i in $(seq 500); do [ -s {DELAY_PID} ] && break; sleep 0.02; done; "
                     f"sleep 0.3")
                _ensure_chain(r, DELAY_CHAIN, last=True)  # after every dropping chain
                for src in peers:
                    r.run(["iptables", "-w", "-A", DELAY_CHAIN, "-s", src, "-p", "tcp", "-j",
                           "NFQUEUE", "--queue-num", str(DELAY_QUEUE), "--queue-bypass"])
            else:
                dev = self._device(name)
                r.run(["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", self.rate,
                       "burst", "32kbit", "latency", "400ms"])
        self.active = True
        detail = {"loss": {"loss": self.loss}, "bandwidth": {"rate": self.rate},
                  "delay": {"delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms}}[mode]
        return {"mode": mode, "targets": self._targets, **detail,
                "observed": self._observe(mode, len(peers))}

    def _observe(self, mode: str, peers: int) -> dict:
        """On each target: loss, its rules; delay, its rules and a live daemon (the rule's
        --queue-bypass would let packets through a dead one unseen); bandwidth, the tbf qdisc."""
        def look(host: str) -> str | None:  # what is wrong on the host, or None
            r = self.remotes[host]
            if mode == "bandwidth":
                qdisc = r.run(["tc", "qdisc", "show", "dev", self._device(host)]).stdout
                return None if " tbf " in f" {qdisc} " else f"no tbf qdisc: {qdisc.strip()!r}"
            chain = LOSS_CHAIN if mode == "loss" else DELAY_CHAIN
            if (n := _rules(r, chain)) != peers:
                return f"{chain} holds {n} rules, not {peers}"
            if mode == "delay":
                state = observe.process_states(r, [DELAY_PID])[DELAY_PID]
                if state in ("gone", "no-pid-file", "Z", "unknown"):
                    return f"the delay daemon is not running ({state})"
            return None
        wrong = {h: why for h, why in observe.each(self._targets, look).items() if why}
        return observe.observation(not wrong, hosts=self._targets, **({"wrong": wrong} if wrong else {}))

    def stop(self) -> dict:
        for h in self.hosts:
            r = self.remotes[h.name]
            _remove_chain(r, LOSS_CHAIN)
            _remove_chain(r, DELAY_CHAIN)  # rules first: then the daemon releases what it holds
            # SIGTERM releases the held packets; wait for that, then SIGKILL as a last resort
            r.sh(f"if {pidfile.live(DELAY_PID)}; then kill $p 2>/dev/null; "
                 f"for i in $(seq 100); do {pidfile.live(DELAY_PID)} || break; sleep 0.05; done; "
                 f"{pidfile.signal(DELAY_PID, '9')}; fi; {pidfile.remove(DELAY_PID)}; "
                 f"tc qdisc del dev {self._device(h.name)} root 2>/dev/null; true")
        healed, self._targets, self.active = self._targets, [], False
        return {"healed": healed}

    def heal(self) -> dict:
        return self.stop()

    def _device(self, host: str) -> str:
        """The interface carrying the host's test address, asked of the host once: eth0 in a
        netns host, but a Vagrant box's is eth1 or enp0s8, and its eth0 is management."""
        if host not in self._devices:
            h = next(h for h in self.hosts if h.name == host)
            listing = self.remotes[host].run(["ip", "-j", "addr"]).stdout
            self._devices[host] = interface_with(listing, h.address, host)
        return self._devices[host]

    def collect(self, host: str) -> str:
        """The delay daemon's log on `host` (what a dead daemon said), for the run's store."""
        return self.remotes[host].sh(f"cat {DELAY_LOG} 2>/dev/null", check=False).stdout

    def teardown(self) -> None:
        for h in self.hosts:
            self.remotes[h.name].run(["rm", "-f", DELAY_LOG])


def interface_with(ip_json: str, address: str, host: str = "") -> str:
    """The interface that holds `address`, from `ip -j addr` output."""
    for link in json.loads(ip_json):
        if any(a.get("local") == address for a in link.get("addr_info", [])):
            return link["ifname"]
    raise ClusterError(f"{host or 'host'}: no interface holds {address} (ip -j addr)")


def draw_packet(rng: random.Random, hosts: list[str], modes: tuple = PACKET_MODES) -> dict:
    return {"targets": choose_targets(rng.choice(["one", "minority", "all"]), hosts, rng),
            "mode": rng.choice(modes)}


register(Package("partition", heal_rank=10, draw=draw_partition, needs=frozenset({"leaders"}),
                 build=lambda ctx: Partition(hosts=ctx.hosts, remotes=ctx.remotes, ctx=ctx)))
register(Package("packet", heal_rank=20, draw=draw_packet,
                 build=lambda ctx: PacketFaults(hosts=ctx.hosts, remotes=ctx.remotes)))
