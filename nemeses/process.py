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

    def start(self, rng: random.Random) -> dict:
        self._hit = choose_targets(rng.choice(["one", self.targets]), self.hosts, rng)
        for h in self._hit:
            getattr(self.db, self.do)(h)
        self.active = True
        return {self.done_word: self._hit, "signal": self.signal}

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
