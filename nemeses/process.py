"""Process faults: crash (SIGKILL, restarted on stop) and pause (SIGSTOP, SIGCONT on stop)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from harness.db import DB
from nemeses.base import Nemesis, choose_targets


@dataclass
class Kill(Nemesis):
    db: DB = None
    hosts: list[str] = field(default_factory=list)
    targets: str = "minority"
    name: str = "kill"
    _victims: list[str] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict:
        self._victims = choose_targets(rng.choice(["one", self.targets]), self.hosts, rng)
        for h in self._victims:
            self.db.kill(h)
        self.active = True
        return {"killed": self._victims, "signal": "SIGKILL"}

    def stop(self) -> dict:
        for h in self._victims:
            self.db.start(h)
        restarted, self._victims, self.active = self._victims, [], False
        return {"restarted": restarted}


@dataclass
class Pause(Nemesis):
    db: DB = None
    hosts: list[str] = field(default_factory=list)
    targets: str = "minority"
    name: str = "pause"
    _paused: list[str] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict:
        self._paused = choose_targets(rng.choice(["one", self.targets]), self.hosts, rng)
        for h in self._paused:
            self.db.pause(h)
        self.active = True
        return {"paused": self._paused, "signal": "SIGSTOP"}

    def stop(self) -> dict:
        for h in self._paused:
            self.db.resume(h)
        resumed, self._paused, self.active = self._paused, [], False
        return {"resumed": resumed, "signal": "SIGCONT"}
