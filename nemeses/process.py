"""Process faults: crash (SIGKILL, restarted on stop) and pause (SIGSTOP, SIGCONT on stop)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from nemeses.base import Context, Nemesis, draw_target
from nemeses.registry import Package, register


def draw_process(rng: random.Random, hosts: list[str], share: str = "minority") -> dict:
    """A host share, or a primary: the leader master's host or a tablet leader's."""
    return {"target": draw_target(rng, hosts, ("one", share, "leader-master", "tablet-leader"))}


@dataclass
class _ProcessFault(Nemesis):
    """Signal both daemons of the target hosts; undo it on stop."""

    ctx: Context = None
    daemon: str | None = None  # None: every daemon of the host
    _hit: list[str] = field(default_factory=list)
    # set by each fault: what to do, and the words its history values use
    do, undo, done_word, undone_word, signal = "", "", "", "", ""

    def start(self, choice: dict) -> dict:
        rule = choice["target"]
        self._hit = self.ctx.resolve(rule)
        for h in self._hit:
            getattr(self.ctx.db, self.do)(h, self.daemon)
        self.active = True
        return {self.done_word: self._hit, "targets": rule.get("spec", rule["rule"]),
                "signal": self.signal}

    def stop(self) -> dict:
        for h in self._hit:
            getattr(self.ctx.db, self.undo)(h, self.daemon)
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


register(Package("pause", heal_rank=40, draw=draw_process, needs=frozenset({"leaders"}),
                 build=lambda ctx: Pause(ctx=ctx)))
register(Package("kill", heal_rank=50, draw=draw_process, needs=frozenset({"leaders"}),
                 build=lambda ctx: Kill(ctx=ctx)))
