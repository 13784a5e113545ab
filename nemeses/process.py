"""Process faults: crash (SIGKILL, restarted on stop) and pause (SIGSTOP, SIGCONT on stop)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from harness.db import DB
from nemeses.base import Nemesis, choose_targets


@dataclass
class _ProcessFault(Nemesis):
    """Signal both daemons of one host or a `targets` share of them; undo it on stop."""

    db: DB = None
    hosts: list[str] = field(default_factory=list)
    targets: str = "minority"
    _hit: list[str] = field(default_factory=list)
    # set by each fault: what to do, and the words its history values use
    do, undo, done_word, undone_word, signal = "", "", "", "", ""

    def _choose(self, rng: random.Random) -> tuple[str, list[str]]:
        """A host share, or the primaries: the leader master's host or a tablet leader's."""
        spec = rng.choice(["one", self.targets, "leader-master", "tablet-leader"])
        if spec == "leader-master":
            leader = self.db.leader_master()
            if leader:
                return spec, [leader]
        elif spec == "tablet-leader":
            leaders = self.db.tablet_leaders()
            if leaders:
                return spec, [leaders[rng.choice(sorted(leaders))]]
        else:
            return spec, choose_targets(spec, self.hosts, rng)
        return "one", choose_targets("one", self.hosts, rng)  # no leader known right now

    def start(self, rng: random.Random) -> dict:
        spec, self._hit = self._choose(rng)
        for h in self._hit:
            getattr(self.db, self.do)(h)
        self.active = True
        return {self.done_word: self._hit, "targets": spec, "signal": self.signal}

    def stop(self) -> dict:
        for h in self._hit:
            getattr(self.db, self.undo)(h)
        undone, self._hit, self.active = self._hit, [], False
        return {self.undone_word: undone}


@dataclass
class Kill(_ProcessFault):
    name: str = "kill"
    do, undo, done_word, undone_word, signal = "kill", "start", "killed", "restarted", "SIGKILL"


@dataclass
class Pause(_ProcessFault):
    name: str = "pause"
    do, undo, done_word, undone_word, signal = "pause", "resume", "paused", "resumed", "SIGSTOP"
