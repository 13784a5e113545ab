"""What a nemesis is: a fault that can be started with choices drawn in advance, stopped, and
finally healed; and the context it acts on.

The choices come from the run's plan (`nemeses.plan`), drawn from the seed before the run, so a
nemesis only does what it is told (Jepsen: the generator decides, the nemesis does). A choice
that depends on live cluster state is a rule in the plan (a `Target`), resolved when the fault
fires; `start` returns what was really done, which the history records.

`heal` must be safe to call at any time, twice, or after a crash of the harness, because it is
what leaves the cluster as it was.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nemeses.redundancy import Redundancy

TARGET_SPECS = ("one", "minority", "majority", "all")


def choose_targets(spec: str, hosts: list[str], rng: random.Random) -> list[str]:
    n = len(hosts)
    count = {"one": 1, "minority": max(1, (n - 1) // 2), "majority": n // 2 + 1, "all": n}.get(spec)
    if count is None:
        raise ValueError(f"unknown target spec {spec!r} (known: {', '.join(TARGET_SPECS)})")
    return sorted(rng.sample(hosts, count))


def draw_target(rng: random.Random, hosts: list[str], specs: tuple[str, ...]) -> dict:
    """A target rule for the plan: a host share (hosts chosen now), the leader master, or the
    leader of the test table's tablet in one hash bucket. Leader rules carry a fallback host,
    also drawn now, for when no leader is known at the time."""
    spec = rng.choice(specs)
    if spec == "leader-master":
        return {"rule": spec, "fallback": choose_targets("one", hosts, rng)}
    if spec == "tablet-leader":
        return {"rule": spec, "bucket": rng.randrange(1 << 16),
                "fallback": choose_targets("one", hosts, rng)}
    return {"rule": "hosts", "spec": spec, "hosts": choose_targets(spec, hosts, rng)}


@dataclass
class Context:
    """What nemeses act on: the DB adapter, the hosts and their SSH remotes, and the test
    table's tablet ids by hash bucket (filled in once the table exists)."""

    db: Any  # nemeses.system.Processes, and the protocols of what the system offers
    hosts: list = field(default_factory=list)  # harness.cluster.Host
    remotes: dict = field(default_factory=dict)  # host name -> harness.control.Remote
    tablets: dict[int, str] = field(default_factory=dict)
    # Whose clock the clock fault moves: "faketime" (each daemon's, through libfaketime: hosts
    # that share a kernel, such as netns hosts) or "kernel" (the host's own: VMs).
    clock_source: str = "faketime"
    # whose turn it is to take a replica from a group, and what damage took for good
    redundancy: Redundancy = field(default_factory=Redundancy)

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def tablet(self, bucket: int) -> str | None:
        """The tablet of a plan's bucket (any int: taken modulo the tablet count)."""
        if not self.tablets:
            return None
        return self.tablets[sorted(self.tablets)[bucket % len(self.tablets)]]

    def leader(self, rule: dict) -> str | None:
        """The host a leader rule names right now, or None."""
        if rule["rule"] == "leader-master":
            return self.db.leader_master()
        tablet = self.tablet(rule["bucket"])
        return self.db.tablet_leaders().get(tablet) if tablet else None

    def resolve(self, rule: dict) -> list[str]:
        """The hosts a target rule names now; a leader nobody knows falls back to its host."""
        if rule["rule"] == "hosts":
            return list(rule["hosts"])
        return [self.resolve_leader(rule)[0]]

    def resolve_leader(self, rule: dict) -> tuple[str, str]:
        """A leader rule's host now, and how it was found: "leader" when the system named one,
        "fallback" when nobody knew and the plan's host stood in (recorded as such)."""
        leader = self.leader(rule)
        return (leader, "leader") if leader else (rule["fallback"][0], "fallback")



def _nothing() -> None:
    pass


def held_off(why: str, quiet: bool = False, **extra: Any) -> dict:
    """A start's answer when another fault holds what it needs (the daemon it would kill, the
    replicas it would race) and it did nothing: skipped, and worth another try while its hold
    lasts (nemeses.schedule tries again until the plan's stop for it). A skip for any
    other reason (the system offers no such target) is plain `{"skipped": why}`.

    `quiet`: the start needs the other faults at rest all at once, not just one of them gone (a
    removal needs some group whose every member is up and answering). With many packages
    overlapping at random, such a moment seldom comes by itself, so the schedule holds the
    other packages' next starts back while this one tries again, up to its `settled()`."""
    return {"skipped": why, "held_off": True, **({"quiet": True} if quiet else {}), **extra}


@dataclass
class Nemesis:
    name: str = "nemesis"
    active: bool = False
    # A start that loses nothing by firing after its planned stop, its stop then following at
    # once (a leadership transfer, with nothing to stop; a removal, which its stop adds back
    # through a copy): held off, it is tried again up to the package's next start, not only
    # its stop (nemeses.schedule).
    fires_late: bool = False
    # Called from a start's thread once what it needed the other faults at rest for has been
    # taken (a removal's group found and reserved), before the slow part: the schedule then
    # lets the starts held back for it (quiet, `held_off`) go on. Set by nemeses.schedule.
    settled: Callable[[], None] = field(default_factory=lambda: _nothing, repr=False)

    def start(self, choice: dict) -> dict:
        raise NotImplementedError

    def stop(self) -> dict:
        raise NotImplementedError

    def heal(self) -> dict:
        return self.stop() if self.active else {}

    def daemon_env(self) -> dict[str, str]:
        """What every daemon must run with for this fault to reach it (set before they start)."""
        return {}

    def collect(self, host: str) -> str:
        """What the fault's helper on `host` logged (kept in the run's store), or ""."""
        return ""

    def teardown(self) -> None:
        """After the daemons are gone: remove any file the fault needed on the hosts."""
